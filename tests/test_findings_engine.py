"""The engine applies to the state only the events that can change it, and counts every event."""

from __future__ import annotations

from datetime import UTC, datetime

from memtap.findings.engine import Engine
from memtap.findings.state import TraceState
from memtap.trace.models import Context, EffectKind, MemoryEffect, Op, TraceEvent

T0 = datetime(2026, 3, 1, 9, tzinfo=UTC)


def _event(n: int, op: Op, effects: list[MemoryEffect], arguments: dict[str, object]) -> TraceEvent:
    return TraceEvent(
        id=f"e{n:03d}",
        started_at=T0,
        ended_at=T0,
        front_door="test",
        backend="builtin",
        tool=op.value,
        op=op,
        context=Context(namespace="alice", session="s1"),
        arguments=arguments,
        effects=effects,
    )


def test_retrievals_are_counted_and_the_rest_applied_as_apply_does() -> None:
    add = MemoryEffect(
        kind=EffectKind.ADD, item_id="m1", namespace="alice", content_after="Leo lives in Oslo."
    )
    hit = MemoryEffect(
        kind=EffectKind.RETRIEVE, item_id="m1", namespace="alice", content_after="Leo lives in Oslo."
    )
    gone = MemoryEffect(
        kind=EffectKind.DELETE, item_id="m1", namespace="alice", content_before="Leo lives in Oslo."
    )
    events = [
        _event(1, Op.WRITE, [add], {"content": "Leo lives in Oslo."}),
        _event(2, Op.RETRIEVE, [hit, hit.model_copy(update={"item_id": "m2"})], {"query": "Leo"}),
        _event(3, Op.CHAT, [], {"messages": [{"role": "user", "content": "Where does Leo live?"}]}),
        _event(4, Op.RETRIEVE, [], {"query": "nothing"}),
        _event(5, Op.DELETE, [gone], {"id": "m1"}),
    ]
    engine = Engine()
    engine.feed(events)
    applied = TraceState()
    for event in events:
        applied.apply(event)
    state = engine.state
    assert state.events_seen == applied.events_seen == 5
    assert state.turns == applied.turns and list(state.turns[("alice", "s1")]) == ["Where does Leo live?"]
    assert state.items.keys() == applied.items.keys() and not state.items[("builtin", "m1")].live
    assert [engine._plan(e)[1] for e in events] == [True, False, True, False, True]
