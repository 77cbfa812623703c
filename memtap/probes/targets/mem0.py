"""``mem0:CONFIG``: mem0 behind memtap's own MCP front door, as the ``builtin`` target plays it.

CONFIG is a memtap config file whose ``memtap.backend`` is ``mem0`` (with mem0's own config
under ``memtap.mem0``). The replay starts ``memtap serve --config CONFIG`` on the run's
database and plays turns and probes through it exactly as :mod:`memtap.probes.targets.builtin`
does; each turn is one mem0 ``add``, so with ``memtap.mem0_infer`` (the default) mem0's LLM
extracts the facts it stores, and the trace records one effect per stored fact.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memtap.config import load_config
from memtap.errors import ConfigError
from memtap.probes.targets.builtin import BuiltinTarget

__all__ = ["Mem0Target"]


class Mem0Target(BuiltinTarget):
    name = "mem0"
    pipelined = False  # mem0's duplicate detection depends on the adds before: one at a time

    def __init__(self, spec: str, db: Path) -> None:
        named = spec.split(":", 1)[1] if ":" in spec else ""
        if not named:  # Path("") is ".", which would be read as the config
            raise ConfigError("--target mem0:CONFIG needs a memtap config file whose memtap.backend is mem0")
        path = Path(named)
        config = load_config(path)
        if config.memtap.backend != "mem0":
            raise ConfigError(f"{path}: memtap.backend is {config.memtap.backend!r}; mem0:CONFIG needs mem0")
        self.config_path = path.resolve()
        self.infer = config.memtap.mem0_infer
        super().__init__(db, serve_args=("--config", str(self.config_path)))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "target": "mem0", "config": str(self.config_path), "infer": self.infer}
