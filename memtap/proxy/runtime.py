"""Settings and the service stack of one memtap process: recorder, backend, service."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from memtap.adapters.builtin import BuiltinBackend
from memtap.config import McpServerConfig
from memtap.errors import ConfigError
from memtap.proxy.policy import GateMode
from memtap.proxy.service import DEFAULT_MAX_CONTENT_BYTES, MemoryService
from memtap.trace.writer import Recorder

if TYPE_CHECKING:
    from memtap.adapters.pool import UpstreamPool

__all__ = ["Runtime", "Settings", "default_db_path", "is_loopback", "parse_api_keys"]


def default_db_path() -> Path:
    """``$MEMTAP_DB``, else ``~/.memtap/memtap.db``."""
    env = os.environ.get("MEMTAP_DB")
    return Path(env) if env else Path.home() / ".memtap" / "memtap.db"


def parse_api_keys(values: list[str] | tuple[str, ...]) -> dict[str, str]:
    """``KEY=PRINCIPAL`` pairs (from options or comma-separated ``MEMTAP_API_KEYS``)."""
    keys: dict[str, str] = {}
    for raw in values:
        for pair in raw.split(","):
            pair = pair.strip()
            if not pair:
                continue
            key, sep, principal = pair.partition("=")
            if not sep or not key.strip() or not principal.strip():
                raise ConfigError(
                    f"API key entries look like KEY=PRINCIPAL; got {pair[:4]}… without a principal"
                )
            keys[key.strip()] = principal.strip()
    return keys


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class Settings:
    db: Path = field(default_factory=default_db_path)
    durable: bool = False
    api_keys: dict[str, str] = field(default_factory=dict)
    default_principal: str = "local"
    gate: GateMode = GateMode.OBSERVE
    max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES
    console_spans: bool = False
    # memtap proxy: the MCP servers to wrap (empty: serve the builtin memory tools).
    upstreams: dict[str, McpServerConfig] = field(default_factory=dict)
    upstream_eager: bool = True
    upstream_timeout: float | None = None
    upstream_inherit_env: bool = False

    def check_bind(self, host: str) -> None:
        """A memory proxy is never opened to a network by accident."""
        if not is_loopback(host) and not self.api_keys:
            raise ConfigError(
                f"refusing to bind {host}: memory would be open to the network without authentication; "
                "configure API keys (--api-key KEY=PRINCIPAL or MEMTAP_API_KEYS) or bind 127.0.0.1"
            )


class Runtime:
    """The recorder, backend and service of one process, opened and closed together."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.recorder = Recorder(settings.db, durable=settings.durable)
        self.recorder.start()
        try:
            self.backend = BuiltinBackend(settings.db)
        except Exception:
            self.recorder.close()
            raise
        self.service = MemoryService(
            self.backend, self.recorder, gate=settings.gate, max_content_bytes=settings.max_content_bytes
        )
        self.upstreams: UpstreamPool | None = None
        if settings.upstreams:
            from memtap.adapters.pool import UpstreamPool, status_dir

            self.upstreams = UpstreamPool(
                settings.upstreams,
                self.recorder,
                eager=settings.upstream_eager,
                timeout=settings.upstream_timeout,
                inherit_env=settings.upstream_inherit_env,
                status_file=status_dir(settings.db) / f"{os.getpid()}.json",
                db=settings.db,
                principal=settings.default_principal,
            )

    async def aclose(self) -> None:
        await self.backend.close()
        self.recorder.close()
