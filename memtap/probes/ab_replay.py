"""A/B replay of recorded traffic: recorded writes, updates and deletes re-issued on a target.

An episode frozen from a trace (:mod:`memtap.probes.from_trace`) holds the recorded writes as
turns; an update or delete names the source backend's item (``source_id``), and a write lists
the source items it created (``source_items``). Playing such an episode, the driver hands each
turn to :class:`RecordedPlayer`, which keeps, for the episode attempt, a map from source item
ids to the target's item ids created from the same recorded write:

- a write is the target's write of the turn's content; every source item it created maps to
  every target item the replayed write created (mem0 may store one write as several facts);
- an update is the target's update of the one mapped item (a target that split the write into
  several items cannot be told which one: skipped, and why); the map follows the new id;
- a delete deletes every mapped item and drops the mapping;
- an update or delete whose source item maps to nothing (its write was outside the selection,
  failed on the target, or stored nothing there) is skipped, and why;
- a call the target refuses is recorded as failed with the target's error; the run goes on.

Each outcome is one row of ``run_writes`` (status ``done``, ``skipped`` or ``failed``, the
source and target item ids, the call's time), which ``memtap compare --writes`` reads with the
run's events. Targets that replay updates and deletes implement :class:`RecordedWrites` (the
``builtin``, ``mem0`` and ``mcp`` targets); on any other target a recorded write is played as an
ordinary turn and its updates and deletes are skipped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from memtap.probes.runs import RunStore
from memtap.probes.schema import Episode, Turn
from memtap.probes.targets.base import EpisodeScope, Target, TargetError, TurnCall

__all__ = ["RecordedPlayer", "RecordedWrites", "WriteOutcome", "ab_summary", "is_recorded"]


@dataclass
class WriteOutcome:
    """What the target did with one recorded call: ``ok`` with the target items it touched (created
    by a write, the item's id after an update, deleted), or refused with the target's ``error``;
    ``skipped`` when the target cannot make such a call at all (and why)."""

    ok: bool
    items: list[str] = field(default_factory=list)
    ms: float = 0.0
    error: str | None = None
    skipped: str | None = None


@runtime_checkable
class RecordedWrites(Protocol):
    """A target that replays recorded writes, updates and deletes, each in the turn's context."""

    async def write_recorded(self, scope: EpisodeScope, turn: TurnCall) -> WriteOutcome: ...

    async def update_recorded(self, scope: EpisodeScope, turn: TurnCall, item: str) -> WriteOutcome: ...

    async def delete_recorded(self, scope: EpisodeScope, turn: TurnCall, item: str) -> WriteOutcome: ...


def is_recorded(episode: Episode) -> bool:
    """Whether ``episode`` was frozen from a trace (its turns are recorded calls)."""
    return "from_trace" in episode.metadata


class RecordedPlayer:
    """One episode attempt's recorded calls, and its map from source to target item ids."""

    def __init__(self, target: Target, store: RunStore, scope: EpisodeScope) -> None:
        self.target, self.store, self.scope = target, store, scope
        self.ids: dict[str, list[str]] = {}

    async def play(self, turn: Turn, call: TurnCall) -> None:
        meta: dict[str, Any] = turn.metadata
        tool = str(meta.get("recorded_tool") or "memory_add")
        call = replace(call, session=str(meta.get("recorded_session") or call.session))
        named = meta.get("source_id", meta.get("updates"))  # "updates": suites frozen before deletes
        source = [str(named)] if named is not None else [str(i) for i in meta.get("source_items", [])]
        outcome = await self._play(tool, call, source)
        if outcome.skipped is not None:
            status, why = "skipped", outcome.skipped
        elif outcome.ok:
            status, why = "done", None
        else:
            status, why = "failed", outcome.error or "the target refused the call"
        self.store.record_write(
            self.scope.run, self.scope.episode, self.scope.attempt, turn_id=turn.turn_id,
            recorded_event=meta.get("recorded_event"), tool=tool, status=status, why=why,
            source_items=source, target_items=outcome.items, ms=outcome.ms if status != "skipped" else None,
        )  # fmt: skip

    async def _play(self, tool: str, call: TurnCall, source: list[str]) -> WriteOutcome:
        target = self.target
        if not isinstance(target, RecordedWrites):
            if tool != "memory_add":
                return WriteOutcome(False, skipped=f"target {target.name} replays no recorded {tool}")
            started = time.perf_counter()
            try:
                await target.ingest_turn(self.scope, call)
            except TargetError as exc:
                return WriteOutcome(False, ms=_since(started), error=str(exc))
            return WriteOutcome(True, ms=_since(started))
        if tool == "memory_add":
            outcome = await target.write_recorded(self.scope, call)
            if outcome.ok:
                for item in source:
                    self.ids[item] = list(outcome.items)
            return outcome
        if len(source) != 1:
            return WriteOutcome(False, skipped=f"the recorded {tool} names no source item")
        [item] = source
        mapped = self.ids.get(item)
        if not mapped:
            return WriteOutcome(
                False,
                skipped=f"source item {item} has no item on the target (its write was not in the selection, "
                "failed there, or stored nothing)",
            )
        if tool == "memory_update":
            if len(mapped) > 1:
                return WriteOutcome(
                    False, skipped=f"the target stored source item {item} as {len(mapped)} items; "
                    "a recorded update names one",
                )  # fmt: skip
            outcome = await target.update_recorded(self.scope, call, mapped[0])
            if outcome.ok:
                self.ids[item] = list(outcome.items) or mapped
            return outcome
        total = WriteOutcome(True)
        for one in mapped:
            outcome = await target.delete_recorded(self.scope, call, one)
            total.ms += outcome.ms
            if outcome.skipped is not None:
                return outcome
            if outcome.ok:
                total.items.append(one)
            else:
                total.ok, total.error = False, outcome.error
        if total.ok:
            del self.ids[item]
        else:
            self.ids[item] = [i for i in mapped if i not in total.items]
        return total


def _since(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def ab_summary(store: RunStore, run_id: str) -> dict[str, Any]:
    """For a run of recorded traffic: its recorded writes by status, and the probes the target
    refused; empty for a run of a suite."""
    writes = store.write_counts(run_id)
    if not writes:
        return {}
    refused = store.conn.execute(
        "SELECT count(*) FROM run_probes WHERE run_id = ? AND status = 'failed'", [run_id]
    ).fetchone()[0]
    return {
        "recorded_writes": {k: writes.get(k, 0) for k in ("done", "skipped", "failed")},
        "probes_refused": refused,
    }
