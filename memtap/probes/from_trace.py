"""Recorded memory traffic frozen into a ``memtap-suite/1`` suite, for replay against another backend.

A selection of a trace database (a run, a namespace, a time window) becomes one episode per
namespace: every recorded write through memtap's memory tools (``memory_add``, and the new
content of ``memory_update``) is a turn, in recorded order, in its recorded session, with its
recorded turn, role and speaker (the principal); every recorded retrieval (``memory_search``) is
a probe asking its query, by its recorded requester, at its time. There is no gold: a replay
of the suite is compared with the recorded run (``memtap compare``), not scored against truth.

Updates and deletes are turns too, marked in their metadata (``recorded_tool``, and
``source_id``: the source backend's item they name); a write's turn lists the items it created
(``source_items``). The replay (``memtap replay``, see :mod:`memtap.probes.ab_replay`) maps each
source item to the target's items created from the same recorded write, and updates or deletes
those. A session is cut where the recorded traffic left it (another session's call or a
retrieval came between): the parts are sessions ``NAME``, ``NAME#2``, ... of the suite, each turn
keeping its recorded session in ``recorded_session``, so writes and retrievals replay in recorded
order. What the suite cannot carry is counted, not dropped silently: failed calls (not
replayed), updates without new content.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from memtap.errors import ConfigError
from memtap.probes.schema import FORMAT, Episode
from memtap.trace.models import TraceEvent
from memtap.trace.store import TraceStore

__all__ = ["TraceSelection", "episodes_from_trace", "select_events"]

WRITE_TOOLS = {"memory_add": "add", "memory_update": "update"}
TURN_ROLES = {"user", "assistant", "tool", "third_party", "system"}


@dataclass
class TraceSelection:
    """Which recorded traffic to freeze, and what the suite format could not carry."""

    db: Path
    run: str | None = None
    namespace: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    not_carried: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        parts = [f"{self.db}"]
        for name, value in (("run", self.run), ("namespace", self.namespace)):
            if value is not None:
                parts.append(f"{name} {value!r}")
        if self.since is not None:
            parts.append(f"since {self.since.isoformat()}")
        if self.until is not None:
            parts.append(f"until {self.until.isoformat()}")
        return ", ".join(parts)


def select_events(selection: TraceSelection) -> list[TraceEvent]:
    """The selection's memory-tool events, in recorded order; a ConfigError when there are none."""
    if not selection.db.exists():
        raise ConfigError(f"--from-trace {selection.db}: no such database")
    store = TraceStore(selection.db)
    try:
        events = store.list_events(run=selection.run, namespace=selection.namespace)
    finally:
        store.close()
    chosen = [
        e
        for e in events
        if e.tool in (*WRITE_TOOLS, "memory_search", "memory_delete")
        and (selection.since is None or e.started_at >= selection.since)
        and (selection.until is None or e.started_at <= selection.until)
    ]
    if not chosen:
        raise ConfigError(f"--from-trace selection holds no memory events ({selection.describe()})")
    return chosen


def _created(event: TraceEvent) -> list[str]:
    """The source items a recorded write created (its ``add`` effects; else the id it answered)."""
    added = [e.item_id for e in event.effects if e.kind.value == "add"]
    if added:
        return added
    found = event.result.get("id") if isinstance(event.result, dict) else None
    return [str(found)] if found is not None else []


def _turn_of(event: TraceEvent, n: int) -> dict[str, Any]:
    args = event.arguments
    role = event.context.role.value if event.context.role is not None else "user"
    metadata: dict[str, Any] = {"recorded_event": event.id, "recorded_tool": event.tool}
    if event.context.turn is not None:
        metadata["recorded_turn"] = event.context.turn
    if event.context.session is not None:
        metadata["recorded_session"] = event.context.session
    if event.tool in ("memory_update", "memory_delete"):
        metadata["source_id"] = str(args.get("id"))
    else:
        metadata["source_items"] = _created(event)
    return {
        "turn_id": f"t{n:05d}",
        "role": role if role in TURN_ROLES else "user",
        "speaker": event.context.principal or event.context.namespace,
        "content": "" if event.tool == "memory_delete" else str(args.get("content") or ""),
        "time": event.started_at.isoformat(),
        "metadata": metadata,
    }


def episodes_from_trace(
    selection: TraceSelection, events: Iterable[TraceEvent] | None = None
) -> list[Episode]:
    """One episode per namespace of the selection (see the module's docstring)."""
    chosen = select_events(selection) if events is None else list(events)
    skipped: dict[str, int] = {}
    by_namespace: dict[str, list[TraceEvent]] = {}
    for event in chosen:
        why = None
        if event.status != "ok":
            why = "failed calls"
        elif event.tool == "memory_update" and not event.arguments.get("content"):
            why = "updates without new content"
        if why is not None:
            skipped[why] = skipped.get(why, 0) + 1
            continue
        by_namespace.setdefault(event.context.namespace, []).append(event)
    selection.not_carried = skipped
    episodes = []
    for namespace, events_of in by_namespace.items():
        episode = _episode(selection, namespace, events_of)
        if episode is not None:
            episodes.append(episode)
    if not episodes:
        raise ConfigError(f"--from-trace selection holds no replayable writes ({selection.describe()})")
    return episodes


def _episode(selection: TraceSelection, namespace: str, events: list[TraceEvent]) -> Episode | None:
    sessions: dict[str, dict[str, Any]] = {}
    probes: list[dict[str, Any]] = []
    people = {namespace}
    n = 0
    current: tuple[str, str] | None = None  # (recorded session, suite session) of the last write
    parts: dict[str, int] = {}
    for event in events:
        if event.tool == "memory_search":
            current = None
            requester = event.context.requester or namespace
            people.add(requester)
            probes.append({
                "probe_id": f"q{len(probes):05d}",
                "type": "qa",
                "requester": requester,
                "question": str(event.arguments.get("query") or "?"),
                "time": event.started_at.isoformat(),
                "metadata": {"recorded_event": event.id, "recorded_turn": event.context.turn,
                             "limit": event.arguments.get("limit")},
            })  # fmt: skip
            continue
        if event.tool != "memory_delete" and not str(event.arguments.get("content") or "").strip():
            continue
        recorded = event.context.session or "recorded"
        if current is None or current[0] != recorded:  # a new part: first write, or after a cut
            parts[recorded] = parts.get(recorded, 0) + 1
            current = (recorded, recorded if parts[recorded] == 1 else f"{recorded}#{parts[recorded]}")
        name = current[1]
        session = sessions.setdefault(
            name, {"session_id": name, "time": event.started_at.isoformat(), "turns": [], "participants": []}
        )
        turn = _turn_of(event, n)
        n += 1
        session["turns"].append(turn)
        people.add(turn["speaker"])
    if not sessions:
        return None
    ordered = sorted(sessions.values(), key=lambda s: str(s["time"]))
    return Episode.model_validate({
        "format": FORMAT,
        "episode_id": f"trace-{namespace}",
        "suite": "from-trace",
        "paradigm": "qa",
        "namespace": namespace,
        "participants": [{"id": p, "role": "user" if p == namespace else "requester"} for p in sorted(people)],  # noqa: E501
        "sessions": ordered,
        "probes": probes,
        "metadata": {"from_trace": {"db": str(selection.db), "run": selection.run, "namespace": namespace}},
    })  # fmt: skip
