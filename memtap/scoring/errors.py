"""Errors of scoring: one base, :class:`ScoringError`, under :class:`MemtapError`."""

from __future__ import annotations

from memtap.errors import MemtapError

__all__ = ["ScoringError", "ScoringStrict"]


class ScoringError(MemtapError):
    """A run cannot be scored (no such run, no gold stored, a matcher that cannot be used)."""


class ScoringStrict(ScoringError):
    """``--strict`` scoring of a run with problems (a changed suite, failed episodes, missing answers)."""
