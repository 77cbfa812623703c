"""The access policy gate: who may be told which retrieved memory.

In ``observe`` mode (the default) nothing is withheld; the gate's verdict is
recorded on the event, so leaks are visible in the trace. In ``enforce`` mode
items whose tags deny the requester are removed from the result before the
agent sees them (searches and lists), or the read is refused (get, history),
and the event says which were withheld.

The requester is whoever the caller says the answer will be shown to (default:
the caller's principal). The gate trusts the caller on that; it guards against an
agent disclosing to the wrong person, not against a caller lying about who asks.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from memtap.trace.models import AccessTags, MemoryEffect

__all__ = ["GateDecision", "GateMode", "gate_retrieval", "gate_stored", "judge"]


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


def judge(mode: GateMode, requester: str, items: Iterable[tuple[str, AccessTags | None]]) -> GateDecision:
    """Judge each (item id, tags) about to be disclosed; untagged items are allowed."""
    denied = [item_id for item_id, tags in items if tags is not None and not tags.permits(requester)]
    return GateDecision(mode, requester, denied)


def gate_retrieval(mode: GateMode, requester: str, effects: list[MemoryEffect]) -> GateDecision:
    """Judge each retrieved item of a search against its access tags."""
    return judge(mode, requester, ((eff.item_id, eff.tags_after) for eff in effects))


def gate_stored(mode: GateMode, requester: str, memories: Iterable[dict[str, Any]]) -> GateDecision:
    """Judge memories as a backend returned them (``id`` and ``tags`` keys) before they are read."""
    return judge(
        mode,
        requester,
        ((m["id"], AccessTags.model_validate(m["tags"]) if m.get("tags") else None) for m in memories),
    )
