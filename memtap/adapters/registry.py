"""Which memory backend a process runs: ``memtap.backend`` in the config file.

``builtin`` is memtap's embedded store, opened here. ``mcp:NAME`` is the server NAME of
the config's ``mcpServers``, wrapped by the upstream MCP proxy: the runtime starts it with
the other upstreams and uses its profile's write and search (see
:class:`memtap.adapters.upstream_backend.UpstreamMemoryBackend`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from memtap.adapters.base import MemoryBackend
from memtap.adapters.builtin import BuiltinBackend
from memtap.config import ConfigFile
from memtap.errors import ConfigError

__all__ = ["BACKENDS", "BackendFactory", "open_backend"]

# kind -> factory(name, config, db path, durable); ``builtin`` takes no name.
BackendFactory = Callable[[str, ConfigFile, Path, bool], MemoryBackend]
BACKENDS: dict[str, BackendFactory] = {
    "builtin": lambda _name, _config, db, durable: BuiltinBackend(db, durable=durable)
}


def open_backend(config: ConfigFile, db: Path, *, durable: bool = False) -> MemoryBackend:
    """The configured backend over ``db``; ``durable``: its commits are synced to disk (the builtin
    backend commits each write's event with it, so it follows ``--durable`` too)."""
    spec = config.memtap.backend
    kind, _, name = spec.partition(":")
    factory = BACKENDS.get(kind)
    if factory is None:
        _unavailable(spec, kind, name)
    return factory(name, config, db, durable)


def _unavailable(spec: str, kind: str, name: str) -> NoReturn:
    if kind == "mcp":
        raise ConfigError(f"memtap.backend {spec!r} names no server in mcpServers")
    raise ConfigError(f"unknown memtap.backend {spec!r}; use builtin or mcp:NAME")
