"""Which memory backend a process runs: ``memtap.backend`` in the config file.

``builtin`` is memtap's embedded store, opened here. ``mcp:NAME`` is the server NAME of
the config's ``mcpServers``, wrapped by the upstream MCP proxy: the runtime starts it with
the other upstreams and uses its profile's write and search (see
:class:`memtap.adapters.upstream_backend.UpstreamMemoryBackend`). ``mem0`` is the mem0ai
library configured by ``memtap.mem0`` (:mod:`memtap.adapters.mem0_backend`), its files
beside the database unless that config places them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from memtap.adapters.base import MemoryBackend
from memtap.adapters.builtin import BuiltinBackend
from memtap.config import ConfigFile, resolve_secret
from memtap.errors import ConfigError

__all__ = ["BACKENDS", "BackendFactory", "open_backend"]

# kind -> factory(name, config, db path, durable); ``builtin`` takes no name.
BackendFactory = Callable[[str, ConfigFile, Path, bool], MemoryBackend]


def _mem0(_name: str, config: ConfigFile, db: Path, _durable: bool) -> MemoryBackend:
    from memtap.adapters.mem0_backend import Mem0Backend, mem0_config

    models = {}
    for entry in config.model_list:
        params = entry.litellm_params.model_dump(exclude_none=True)
        if params.get("api_key"):
            params["api_key"] = resolve_secret(params["api_key"], f"model_list {entry.model_name} api_key")
        models[entry.model_name] = params
    data_dir = db.parent / f"{db.name}.mem0"
    data_dir.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MEM0_DIR", str(data_dir))
    settings = mem0_config(config.memtap.mem0, models, data_dir)
    return Mem0Backend(settings, infer=config.memtap.mem0_infer)


BACKENDS: dict[str, BackendFactory] = {
    "builtin": lambda _name, _config, db, durable: BuiltinBackend(db, durable=durable),
    "mem0": _mem0,
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
    raise ConfigError(f"unknown memtap.backend {spec!r}; use builtin, mem0 or mcp:NAME")
