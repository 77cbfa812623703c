"""Settings and the service stack of one memtap process: recorder, backend, service."""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from memtap.adapters.base import MemoryBackend
from memtap.adapters.registry import open_backend
from memtap.auth import ApiKeyAuthenticator, Authentication, Authenticator, LocalAuthenticator, Policy
from memtap.config import ConfigFile, McpServerConfig, parse_api_keys
from memtap.errors import ConfigError
from memtap.findings.live import start_live_findings
from memtap.limits import DEFAULT_LIMITS, Limits, install
from memtap.proxy.policy import GateMode
from memtap.proxy.replay_clock import ReplayClock
from memtap.proxy.service import DEFAULT_MAX_CONTENT_BYTES, MemoryService
from memtap.trace.privacy import ContentPolicy, PolicyName, TracePrivacy, secrets_of
from memtap.trace.writer import Recorder

if TYPE_CHECKING:
    from memtap.adapters.pool import UpstreamPool

__all__ = ["Runtime", "Settings", "default_db_path", "is_loopback", "parse_api_keys"]

log = logging.getLogger("memtap.auth")


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
    # Who may touch which memory (grants, delegation, upstreams); see docs/authorization.md.
    policy: Policy = field(default_factory=Policy)
    # Context fields the operator pinned, by principal (a principal's config ``namespace``).
    pinned: dict[str, dict[str, str]] = field(default_factory=dict)
    # Offer the context fields (namespace, session, ...) in the model-facing tool schemas.
    context_args: bool = False
    # Authenticators tried after the API keys (a JWT verifier, say).
    authenticators: list[Authenticator] = field(default_factory=list)
    max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES
    # Caps on client input other than content (memtap.limits; docs/limits.md).
    limits: Limits = DEFAULT_LIMITS
    console_spans: bool = False
    # Batch trace writes for this long (not in durable mode); see Recorder.
    record_linger_s: float = 0.01
    # The recorder's linger grows up to this while calls come fast (bounded latency to disk).
    record_max_linger_s: float = 0.05
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

    @property
    def authenticated(self) -> bool:
        """Whether callers must present credentials (keys or another authenticator)."""
        return bool(self.api_keys or self.authenticators)

    def authentication(self) -> Authentication:
        """The authenticators of this process: credentials when any are configured, else the
        keyless single-user mode (every caller ``local``)."""
        if not self.authenticated:
            return Authentication([LocalAuthenticator(self.default_principal)])
        found: list[Authenticator] = list(self.authenticators)
        if self.api_keys:
            found.insert(0, ApiKeyAuthenticator(self.api_keys, self.pinned))
        return Authentication(found)

    def check_bind(self, host: str) -> None:
        """A memory proxy is never opened to a network by accident."""
        if not is_loopback(host) and not self.authenticated:
            raise ConfigError(
                f"refusing to bind {host}: memory would be open to the network without authentication; "
                "configure API keys (--api-key KEY=PRINCIPAL or MEMTAP_API_KEYS) or bind 127.0.0.1"
            )


class Runtime:
    """The recorder, backend and service of one process, opened and closed together."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        install(settings.limits)  # the caps are per process; the front doors read them
        self.recorder = Recorder(
            settings.db,
            durable=settings.durable,
            linger_s=settings.record_linger_s,
            max_linger_s=settings.record_max_linger_s,
        )
        self.recorder.privacy = settings.privacy()
        self.recorder.start()
        self.findings = start_live_findings(settings.db, settings.config.memtap.findings, self.recorder)
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
                self.backend = open_backend(settings.config, settings.db, durable=settings.durable)
        except Exception:
            self.recorder.close()
            if self.findings is not None:
                self.findings.close()
            raise
        self.authentication = settings.authentication()
        for warning in self.grant_warnings():
            log.warning("%s", warning)
        self.clock = ReplayClock()
        self.service = MemoryService(
            self.backend,
            self.recorder,
            gate=settings.gate,
            max_content_bytes=settings.max_content_bytes,
            policy=settings.policy,
            context_args=settings.context_args,
            clock=self.clock.attribute,
        )

    def grant_warnings(self) -> list[str]:
        """A warning naming each configured grant pattern that matches no namespace the
        database has seen (none when it has seen none yet: nothing to compare with)."""
        if not self.settings.policy.principals:
            return []
        try:
            with contextlib.closing(sqlite3.connect(f"file:{self.settings.db}?mode=ro", uri=True)) as db:
                rows = db.execute(
                    "SELECT DISTINCT namespace FROM events WHERE namespace IS NOT NULL"
                ).fetchall()
        except sqlite3.Error:
            return []
        namespaces = [row[0] for row in rows]
        return self.settings.policy.unmatched(namespaces) if namespaces else []

    @property
    def forwarding(self) -> bool:
        """``memtap proxy``: the MCP front doors serve the wrapped servers' own tools. Otherwise
        they serve memtap's memory tools (over a wrapped server when the backend is ``mcp:NAME``)."""
        return bool(self.settings.upstreams)

    async def aclose(self) -> None:
        """Close the backend, then the recorder (which writes what is still queued), then live
        findings, whatever fails."""
        try:
            await self.backend.close()
        finally:
            try:
                self.recorder.close()
            finally:
                if self.findings is not None:
                    self.findings.close()
