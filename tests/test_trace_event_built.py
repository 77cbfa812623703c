"""TraceEvent.built: the recorder's fast construction gives what model_construct gives."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

import pytest

from memtap.trace.models import Context, EffectKind, MemoryEffect, Op, TraceEvent

T0 = datetime(2026, 12, 2, 7, 30, tzinfo=UTC)


def _values() -> dict[str, Any]:
    return {
        "id": "01JEVENT",
        "started_at": T0,
        "ended_at": T0,
        "front_door": "openai",
        "backend": "fake",
        "tool": "chat.completions",
        "op": Op.CHAT,
        "context": Context(principal="local", namespace="bench"),
        "arguments": {"model": "fake-1", "messages": [{"role": "user", "content": "hi"}]},
        "result": {"choices": [{"message": {"content": "hello"}}]},
        "effects": [MemoryEffect(kind=EffectKind.RETRIEVE, item_id="m1")],
        "backend_ms": 1.5,
        "overhead_ms": 0.25,
        "status": "ok",
        "error": None,
        "gate": None,
        "total_ms": 1.75,
        "parent_id": None,
        "model": "fake-1",
        "provider": "openai",
        "input_tokens": 3,
        "output_tokens": 1,
        "ttft_ms": None,
        "memory_ms": None,
        "links": ["01JLINK"],
    }


def test_built_event_is_what_model_construct_gives_with_every_field() -> None:
    values = _values()
    assert tuple(values) == tuple(TraceEvent.model_fields)  # the order build() passes them in
    expected = TraceEvent.model_construct(**_values())
    event = TraceEvent.built(values)
    assert event == expected
    assert list(event.__dict__) == list(expected.__dict__)
    assert event.model_fields_set == expected.model_fields_set == set(TraceEvent.model_fields)
    assert event.model_dump_json() == expected.model_dump_json()
    # Set later like any model's fields, without touching another event's set of fields.
    event.status = "error"
    assert TraceEvent.built(_values()).status == "ok"


def test_built_event_puts_fields_given_out_of_order_in_the_models_order() -> None:
    items = list(_values().items())
    random.Random(7).shuffle(items)
    event = TraceEvent.built(dict(items))
    assert list(event.__dict__) == list(TraceEvent.model_fields)
    assert event == TraceEvent.model_construct(**_values())


def test_built_event_refuses_values_missing_a_field() -> None:
    values = _values()
    del values["links"]
    with pytest.raises(KeyError, match="links"):
        TraceEvent.built(values)
