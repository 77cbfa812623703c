"""The access policy gate: who may be told which retrieved memory.

In ``observe`` mode (the default) nothing is withheld; the gate's verdict is
recorded on the event, so leaks are visible in the trace. In ``enforce`` mode
items whose tags deny the requester are removed from the result before the
agent sees them, and the event says which were withheld.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from memtap.trace.models import MemoryEffect

__all__ = ["GateDecision", "GateMode", "gate_retrieval"]


class GateMode(StrEnum):
    OBSERVE = "observe"
    ENFORCE = "enforce"


@dataclass
class GateDecision:
    mode: GateMode
    requester: str
    denied: list[str] = field(default_factory=list)

    @property
    def withheld(self) -> set[str]:
        return set(self.denied) if self.mode == GateMode.ENFORCE else set()

    def summary(self) -> str:
        if not self.denied:
            return f"{self.mode.value}:allow"
        verb = "withheld" if self.mode == GateMode.ENFORCE else "would-deny"
        return f"{self.mode.value}:{verb}={','.join(self.denied)}"


def gate_retrieval(mode: GateMode, requester: str, effects: list[MemoryEffect]) -> GateDecision:
    """Judge each retrieved item against its access tags; untagged items are allowed."""
    denied = [
        eff.item_id for eff in effects if eff.tags_after is not None and not eff.tags_after.permits(requester)
    ]
    return GateDecision(mode, requester, denied)
