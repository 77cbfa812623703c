"""Generators of suites, deterministic from a seed and needing no LLM: one module per kind."""

from __future__ import annotations

import importlib

from memtap.errors import ConfigError
from memtap.probes.schema import Episode

__all__ = ["KINDS", "generate", "generate_canary"]

KINDS = ("paradigms", "permission", "abstention", "lifecycle")
"""The generators of ``episodes`` episodes; ``canary`` (one episode of N users) is :func:`generate_canary`."""


def generate(kind: str, *, seed: int, episodes: int) -> list[Episode]:
    """``episodes`` episodes of ``kind``; the same seed always gives the same suite."""
    if kind == "canary":
        return generate_canary(seed)
    if kind not in KINDS:
        raise ConfigError(f"unknown generator {kind!r}; choose one of: {', '.join(KINDS)}, canary")
    if episodes < 1:
        raise ConfigError("--episodes must be at least 1")
    module = importlib.import_module(f"memtap.probes.generators.{kind}")
    return [Episode.model_validate(data) for data in module.generate(seed, episodes)]


def generate_canary(
    seed: int,
    *,
    users: int = 8,
    writes: int = 2000,
    updates: int = 200,
    searches: int = 200,
    canaries: int = 3,
    shared_namespace: bool = False,
) -> list[Episode]:
    """The isolation canary suite (one episode; see ``generators/canary.py``)."""
    from memtap.probes.generators.canary import generate_canary as make

    if users < 2:
        raise ConfigError("--users must be at least 2: the canary probes each user for the others' canaries")
    if canaries < 1:
        raise ConfigError("--canaries must be at least 1")
    if writes < users * canaries:
        raise ConfigError(
            f"--writes {writes} is too few: each of the {users} users writes its {canaries} canaries, "
            f"so at least {users * canaries} writes"
        )
    if updates < 0 or searches < 0:
        raise ConfigError("--updates and --searches cannot be negative")
    made = make(
        seed,
        users=users,
        writes=writes,
        updates=updates,
        searches=searches,
        canaries=canaries,
        shared_namespace=shared_namespace,
    )
    return [Episode.model_validate(data) for data in made]
