"""Replay targets: one module per kind of agent stack (see ``base.py`` for the protocol)."""

from __future__ import annotations

from pathlib import Path

from memtap.errors import ConfigError
from memtap.probes.targets.base import Target

__all__ = ["make_target"]


def make_target(spec: str, *, db: Path, server_url: str | None = None, gate: str | None = None) -> Target:
    """The target a ``--target`` names: ``builtin``, ``mem0:CONFIG``, ``mcp:CONFIG[:NAME]`` or ``openai:URL``.
    ``gate`` (observe or enforce) is passed to the ``memtap serve`` the builtin target starts."""
    kind = spec.split(":", 1)[0]
    if gate is not None and (spec != "builtin" or server_url is not None):
        raise ConfigError(
            "--gate applies to the memtap serve the builtin target starts; a server given by --server or "
            "behind another target keeps its own gate"
        )
    if spec == "builtin":
        from memtap.probes.targets.builtin import BuiltinTarget

        return BuiltinTarget(db, url=server_url, gate=gate)
    if server_url is not None:
        raise ConfigError("--server applies to the builtin target only")
    if kind == "mcp":
        from memtap.probes.targets.mcp_canary import McpCanaryTarget

        return McpCanaryTarget(spec, db)
    if kind == "mem0":
        from memtap.probes.targets.mem0 import Mem0Target

        return Mem0Target(spec, db)
    if kind == "openai":
        from memtap.probes.targets.openai_canary import OpenAICanaryTarget

        return OpenAICanaryTarget(spec, db)
    raise ConfigError(f"unknown target {spec!r}; use builtin, mem0:CONFIG, mcp:CONFIG[:NAME] or openai:URL")
