"""Generators of suites, deterministic from a seed and needing no LLM: one module per kind."""

from __future__ import annotations

import importlib

from memtap.errors import ConfigError
from memtap.probes.schema import Episode

__all__ = ["KINDS", "generate"]

KINDS = ("paradigms", "permission", "abstention", "lifecycle")


def generate(kind: str, *, seed: int, episodes: int) -> list[Episode]:
    """``episodes`` episodes of ``kind``; the same seed always gives the same suite."""
    if kind not in KINDS:
        raise ConfigError(f"unknown generator {kind!r}; choose one of: {', '.join(KINDS)}")
    if episodes < 1:
        raise ConfigError("--episodes must be at least 1")
    module = importlib.import_module(f"memtap.probes.generators.{kind}")
    return [Episode.model_validate(data) for data in module.generate(seed, episodes)]
