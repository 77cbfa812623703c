"""The effect deriver (tap) for a wrapped server whose profile memtap can read the state of.

- ``server-memory`` (the reference server): :class:`~memtap.adapters.memory_server.GraphTap`
  (its JSON Lines file, or ``open_nodes``);
- ``memory-libsql``: :class:`~memtap.adapters.libsql_server.LibsqlTap` (its libSQL file);
- ``memory-keeper``: :class:`~memtap.adapters.keeper_server.KeeperTap` (its SQLite database).

A server whose store memtap cannot locate (a remote libSQL URL, an HTTP upstream) gets no
tap: its calls are recorded, with no effects rather than claimed ones.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from memtap.adapters.tap_call import Answered
    from memtap.adapters.upstream import Upstream
    from memtap.trace.calls import CallRecord
    from memtap.trace.models import Context, MemoryEffect, Op

__all__ = ["EffectTap", "tap_for"]


class EffectTap(Protocol):
    """What every tap offers the forwarding proxy (``proxy/forward.py``)."""

    @property
    def method(self) -> str:  # how it reads the server's state, for --explain
        ...

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        meta: dict[str, Any] | None,
        context: Context,
        record: CallRecord | None,
        answered: Answered | None = None,
    ) -> tuple[dict[str, Any], list[MemoryEffect], Op | None]: ...


log = logging.getLogger("memtap.upstream")


def _environment(upstream: Upstream) -> dict[str, str] | None:
    """The environment the upstream's process gets (its own ``env`` entries included)."""
    from memtap.adapters.upstream import child_environment
    from memtap.config import StdioServerConfig

    if not isinstance(upstream.config, StdioServerConfig):
        return None
    return child_environment(upstream.config, inherit=upstream.inherit_env)


def tap_for(upstream: Upstream) -> EffectTap | None:
    """A new tap for ``upstream``'s profile, or None."""
    profile = upstream.profile.name if upstream.profile is not None else None
    if profile == "server-memory":
        from memtap.adapters.memory_server import GraphTap

        return GraphTap(upstream)
    if profile == "memory-libsql":
        from memtap.adapters.libsql_server import LibsqlTap, libsql_file_for

        path = libsql_file_for(upstream.config, _environment(upstream))
        if path is not None:
            return LibsqlTap(upstream, path)
    elif profile == "memory-keeper":
        from memtap.adapters.keeper_server import KeeperTap, keeper_file_for

        path = keeper_file_for(upstream.config, _environment(upstream))
        if path is not None:
            return KeeperTap(upstream, path)
    else:
        return None
    log.warning(
        "upstream %s: its store cannot be read (not a local file); no effects are derived", upstream.name
    )
    return None
