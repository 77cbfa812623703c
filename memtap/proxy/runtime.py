"""Settings and the service stack of one memtap process: recorder, backend, service."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from memtap.adapters.base import MemoryBackend
from memtap.adapters.registry import open_backend
from memtap.config import ConfigFile, McpServerConfig, parse_api_keys
from memtap.errors import ConfigError
from memtap.proxy.policy import GateMode
from memtap.proxy.service import DEFAULT_MAX_CONTENT_BYTES, MemoryService
from memtap.trace.privacy import ContentPolicy, PolicyName, TracePrivacy, secrets_of
from memtap.trace.writer import Recorder

if TYPE_CHECKING:
    from memtap.adapters.pool import UpstreamPool

__all__ = ["Runtime", "Settings", "default_db_path", "is_loopback", "parse_api_keys"]


def default_db_path() -> Path:
    """``$MEMTAP_DB``, else ``~/.memtap/memtap.db``."""
    env = os.environ.get("MEMTAP_DB")
    return Path(env) if env else Path.home() / ".memtap" / "memtap.db"


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
    # Batch trace writes for this long (not in durable mode); see Recorder.
    record_linger_s: float = 0.01
    # The config file (--config): chat upstreams (model_list) and memtap's own section.
    config: ConfigFile = field(default_factory=ConfigFile)
    # memtap proxy: the MCP servers to wrap (empty: serve the builtin memory tools).
    upstreams: dict[str, McpServerConfig] = field(default_factory=dict)
    upstream_eager: bool = True
    upstream_timeout: float | None = None
    upstream_inherit_env: bool = False
    # --content-policy PATTERN=POLICY rules; they come before the config's memtap.content_policy.
    content_policy: list[tuple[str, PolicyName]] = field(default_factory=list)

    def privacy(self) -> TracePrivacy:
        """The content policy (command-line rules first, then the config's) and every configured secret."""
        rules = [*self.content_policy, *self.config.memtap.content_policy.items()]
        return TracePrivacy(
            ContentPolicy(rules), secrets_of(self.config, self.api_keys, self.upstreams.values())
        )

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
        self.recorder = Recorder(settings.db, durable=settings.durable, linger_s=settings.record_linger_s)
        self.recorder.privacy = settings.privacy()
        self.recorder.start()
        self.upstreams: UpstreamPool | None = None
        servers = dict(settings.upstreams)
        kind, _, wrapped = settings.config.memtap.backend.partition(":")
        if kind == "mcp" and wrapped not in servers:
            # The memory backend is a server of the config's mcpServers: wrap it too.
            servers[wrapped] = settings.config.mcp_servers[wrapped]
        try:
            if servers:
                from memtap.adapters.pool import UpstreamPool, status_dir

                self.upstreams = UpstreamPool(
                    servers,
                    self.recorder,
                    eager=settings.upstream_eager,
                    timeout=settings.upstream_timeout,
                    inherit_env=settings.upstream_inherit_env,
                    status_file=status_dir(settings.db) / f"{os.getpid()}.json",
                    db=settings.db,
                    principal=settings.default_principal,
                )
            if kind == "mcp":
                assert self.upstreams is not None
                self.backend: MemoryBackend = self.upstreams.memory_backend(wrapped)
            else:
                self.backend = open_backend(settings.config, settings.db)
        except Exception:
            self.recorder.close()
            raise
        self.service = MemoryService(
            self.backend, self.recorder, gate=settings.gate, max_content_bytes=settings.max_content_bytes
        )

    @property
    def forwarding(self) -> bool:
        """``memtap proxy``: the MCP front doors serve the wrapped servers' own tools. Otherwise
        they serve memtap's memory tools (over a wrapped server when the backend is ``mcp:NAME``)."""
        return bool(self.settings.upstreams)

    async def aclose(self) -> None:
        await self.backend.close()
        self.recorder.close()
