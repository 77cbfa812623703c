"""Errors of suites and replay: one base, :class:`SuiteError`, under :class:`MemtapError`."""

from __future__ import annotations

from dataclasses import dataclass

from memtap.errors import MemtapError

__all__ = ["Problem", "ReplayError", "SuiteError", "SuiteInvalid"]


class SuiteError(MemtapError):
    """A suite, an importer's input or a replay cannot be used."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a suite: where (file and line), which episode, which field, what."""

    where: str
    message: str
    episode: str | None = None
    field: str | None = None

    def __str__(self) -> str:
        parts = [self.where]
        if self.episode is not None:
            parts.append(f"episode {self.episode}")
        if self.field:
            parts.append(self.field)
        return ": ".join(parts) + ": " + self.message


class SuiteInvalid(SuiteError):
    """A suite (or an importer's input) with problems; every problem is listed."""

    def __init__(self, source: str, problems: list[Problem], *, limit: int = 50) -> None:
        self.source = source
        self.problems = problems
        shown = "\n".join(f"  {problem}" for problem in problems[:limit])
        more = f"\n  ... and {len(problems) - limit} more" if len(problems) > limit else ""
        noun = "problem" if len(problems) == 1 else "problems"
        super().__init__(f"{source} has {len(problems)} {noun}:\n{shown}{more}")


class ReplayError(SuiteError):
    """A replay cannot start or continue (a target that cannot be reached, a run that cannot resume)."""
