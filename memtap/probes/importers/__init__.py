"""Importers of published benchmarks: one module per benchmark, each ``records`` + ``convert``."""

from __future__ import annotations

import importlib
from pathlib import Path

from memtap.errors import ConfigError
from memtap.probes.importers._common import ImportResult, convert_all

__all__ = ["KINDS", "import_file"]

KINDS = ("memprobe", "dyadmem", "locomo", "longmemeval", "memarena")


def import_file(kind: str, path: str | Path, *, skip_malformed: bool = False) -> ImportResult:
    """Convert a benchmark's file (MemArena: its release folder) into validated episodes."""
    if kind not in KINDS:
        raise ConfigError(f"unknown benchmark {kind!r}; choose one of: {', '.join(KINDS)}")
    module = importlib.import_module(f"memtap.probes.importers.{kind}")
    path = Path(path)
    return convert_all(str(path), module.records(path), module.convert, skip_malformed=skip_malformed)
