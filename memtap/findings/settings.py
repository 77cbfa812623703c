"""``memtap.findings`` in the config file: live detection, canaries, and what to notify."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, HttpUrl, field_validator

from memtap.findings.access import Canary

__all__ = ["CanaryEntry", "FindingsSettings"]


class CanaryEntry(BaseModel):
    """A planted secret; ``owners`` (namespaces or requesters) may see it. Without owners, the
    namespaces it is written to own it."""

    model_config = ConfigDict(extra="forbid")

    value: str = Field(min_length=6, description="the planted string (at least 6 characters)")
    owners: list[str] = Field(default_factory=list)


class FindingsSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    live: bool = Field(default=True, description="run the detectors as events are recorded")
    canaries: list[CanaryEntry | str] = Field(default_factory=list)
    command: list[str] | None = Field(
        default=None,
        description="run for each new finding at or above notify_severity; the finding as JSON on stdin",
    )
    webhook: HttpUrl | None = Field(default=None, description="POST each new finding (JSON) here")
    notify_severity: Literal["info", "low", "medium", "high", "critical"] = "high"
    notify_timeout_s: float = Field(default=5.0, gt=0, le=60)

    @field_validator("canaries")
    @classmethod
    def _canary_strings(cls, value: list[CanaryEntry | str]) -> list[CanaryEntry | str]:
        for index, entry in enumerate(value):
            if isinstance(entry, str) and len(entry) < 6:
                raise ValueError(f"canaries[{index}]: a canary must be at least 6 characters, got {entry!r}")
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and (not value or not value[0]):
            raise ValueError("command: give the program and its arguments as a non-empty list")
        return value

    def canary_list(self) -> list[Canary]:
        out = []
        for entry in self.canaries:
            if isinstance(entry, str):
                out.append(Canary(entry))
            else:
                out.append(Canary(entry.value, set(entry.owners), configured=bool(entry.owners)))
        return out
