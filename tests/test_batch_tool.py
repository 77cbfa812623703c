"""memory_add_batch over real transports: one memory_add event per item, the same grants, pins and
caps per item, and bad input answered by index and recorded."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import ServerProcess, http_client, meta
from mcp import Client, StdioServerParameters
from trace_builder import events_in

from memtap.limits import MAX_BATCH_ITEMS
from memtap.trace.models import TraceEvent
from memtap.trace.store import TraceStore

pytestmark = pytest.mark.anyio

StartServer = Callable[..., ServerProcess]


def _stdio(db: Path, *extra: str) -> Client:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memtap", "serve", "--stdio", "--db", str(db), *extra],
        env=dict(os.environ),
    )
    return Client(params)


def _text(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


def _items(db: Path) -> list[tuple[str, str]]:
    store = TraceStore(db)
    try:
        return sorted((i.namespace, i.content or "") for i in store.list_items(include_closed=True))
    finally:
        store.close()


def _shape(event: TraceEvent) -> tuple[Any, ...]:
    """An event without its ids, times and namespace (and the namespace as the owner of its tags)."""
    ctx = event.context.model_dump(exclude={"namespace"})
    effects = [
        (e.kind.value, e.content_after, e.tags_after.model_dump(exclude={"owner"}) if e.tags_after else None)
        for e in event.effects
    ]
    return (event.tool, event.op.value, event.status, event.error, event.arguments, ctx, effects)


TURNS = [
    ({"content": "Ana moved to Lisbon", "metadata": {"speaker": "ana"}}, {"session": "s1", "turn": "t1", "role": "user"}),
    ({"content": "Noted, Lisbon", "access": {"visibility": "public"}}, {"session": "s1", "turn": "t2", "role": "assistant"}),
    ({"content": "Her sister is Rita", "metadata": {"speaker": "ana"}}, {"session": "s2", "turn": 3, "role": "user"}),
]  # fmt: skip


async def test_a_batch_records_the_events_the_same_memory_add_calls_would_record(db_path: Path) -> None:
    async with _stdio(db_path) as client:
        for args, context in TURNS:
            one = await client.call_tool(
                "memory_add", args, meta=meta(namespace="single", run="r", **context)
            )
            assert not one.is_error, _text(one)
        items = [{**args, "meta": context} for args, context in TURNS]
        batch = await client.call_tool(
            "memory_add_batch", {"items": items}, meta=meta(namespace="batch", run="r")
        )
    assert not batch.is_error, _text(batch)
    answer = batch.structured_content
    assert answer is not None and (answer["stored"], answer["failed"]) == (3, 0)
    assert [entry["index"] for entry in answer["items"]] == [0, 1, 2]

    events = events_in(db_path)
    single = [e for e in events if e.context.namespace == "single"]
    batched = [e for e in events if e.context.namespace == "batch"]
    assert [e.tool for e in events] == ["memory_add"] * 6  # no event of the batch's own
    assert [_shape(e) for e in batched] == [_shape(e) for e in single]
    assert [e.id for e in batched] == [entry["event_id"] for entry in answer["items"]]
    assert [e.effects[0].item_id for e in batched] == [entry["id"] for entry in answer["items"]]
    assert batched[2].context.turn == "3" and batched[1].effects[0].tags_after.visibility == "public"  # type: ignore[union-attr]


async def test_a_bad_item_in_the_middle_is_refused_alone_by_index_and_the_others_are_stored(
    db_path: Path,
) -> None:
    items = [
        {"content": "first fact", "meta": {"turn": "t1"}},
        {"content": "x" * 101, "meta": {"turn": "t2"}},  # over --max-content-bytes
        {"content": "", "meta": {"turn": "t3"}},  # memory_add refuses an empty memory
        {"content": "last fact", "meta": {"turn": "t4"}},
    ]
    async with _stdio(db_path, "--max-content-bytes", "100") as client:
        result = await client.call_tool("memory_add_batch", {"items": items}, meta=meta(session="s1"))
    assert result.is_error
    text = _text(result)
    assert text.startswith("memory_add_batch: 2 of 4 items failed and 2 were stored")
    assert "item 1: content is 101 bytes; the limit is 100 bytes (--max-content-bytes)" in text
    assert "item 2: memory_add: invalid arguments: content: String should have at least 1 character" in text

    events = events_in(db_path)  # one event per item, in order, each as memory_add records it
    assert [(e.tool, e.status, e.context.turn, e.context.session) for e in events] == [
        ("memory_add", "ok", "t1", "s1"),
        ("memory_add", "error", "t2", "s1"),
        ("memory_add", "error", "t3", "s1"),
        ("memory_add", "ok", "t4", "s1"),
    ]
    assert events[1].error == "content is 101 bytes; the limit is 100 bytes (--max-content-bytes)"
    assert events[1].arguments == {"content": "x" * 101}  # the item as sent, without its meta
    assert _items(db_path) == [("local", "first fact"), ("local", "last fact")]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"items": [{"content": f"fact {i}"} for i in range(MAX_BATCH_ITEMS + 1)]},
            f"items: {MAX_BATCH_ITEMS + 1} items; the limit is {MAX_BATCH_ITEMS} per call (split the batch)",
        ),
        ({"items": []}, "items: empty; give at least one memory"),
        ({"items": "fact"}, "items: not a list but str"),
        ({}, "items: required (a list of the memories to add)"),
        (
            {"items": [{"content": "a"}, "b", {"content": "c", "meta": {"sesion": "s1"}}]},
            "items[1]: not an object but str; items[2].meta: unknown field(s) 'sesion' (known: agent_id, episode, "
            "namespace, requester, role, run, session, trace_id, turn)",
        ),
        ({"items": [{"content": "a"}], "colour": "red"}, "colour: Extra inputs are not permitted"),
    ],
)
async def test_a_batch_of_the_wrong_shape_is_refused_whole_named_by_index_and_recorded_once(
    db_path: Path, arguments: dict[str, Any], message: str
) -> None:
    async with _stdio(db_path) as client:
        result = await client.call_tool("memory_add_batch", arguments, meta=meta(session="s9"))
    assert result.is_error
    assert _text(result) == f"memory_add_batch: {message}; nothing was stored"
    [event] = events_in(db_path)
    assert (event.tool, event.op.value, event.status, event.context.session) == (
        "memory_add_batch", "write", "error", "s9"
    )  # fmt: skip
    assert event.error == _text(result) and event.arguments == arguments
    assert _items(db_path) == []


async def test_each_item_needs_the_grant_of_its_own_namespace_and_may_not_contradict_a_pin(
    tmp_path: Path, start_http_server: StartServer
) -> None:
    config = tmp_path / "memtap.json"
    config.write_text(json.dumps({"memtap": {"principals": {
        "alice": {"keys": ["k-alice-0123"], "grants": {"alice": ["read", "write"], "shared/*": ["read"]}},
        "kiosk": {"keys": ["k-kiosk-4567"], "namespace": "lobby", "grants": {"lobby": ["read", "write"]}},
    }}}))  # fmt: skip
    server = start_http_server("--config", str(config))
    items = [
        {"content": "mine", "meta": {"namespace": "alice", "turn": "t1"}},
        {"content": "not mine to write", "meta": {"namespace": "shared/team", "turn": "t2"}},
        {"content": "mine too", "meta": {"turn": "t3"}},
    ]
    async with http_client(server.url, {"Authorization": "Bearer k-alice-0123"}) as alice:
        by_alice = await alice.call_tool("memory_add_batch", {"items": items})
    kiosk_items = [{"content": "welcome"}, {"content": "elsewhere", "meta": {"namespace": "alice"}}]
    async with http_client(server.url, {"Authorization": "Bearer k-kiosk-4567"}) as kiosk:
        by_kiosk = await kiosk.call_tool("memory_add_batch", {"items": kiosk_items})
    assert server.stop() == 0

    assert by_alice.is_error and _text(by_alice).startswith(
        "memory_add_batch: 1 of 3 items failed and 2 were stored"
    )
    assert "item 1: " in _text(by_alice) and "shared/team" in _text(by_alice)
    assert (
        by_kiosk.is_error
        and "item 1: namespace='alice' in the request contradicts namespace='lobby'" in _text(by_kiosk)
    )
    events = events_in(server.db)
    assert [(e.context.principal, e.tool, e.status, e.context.namespace, e.context.turn) for e in events] == [
        ("alice", "memory_add", "ok", "alice", "t1"),
        ("alice", "memory_add", "error", "shared/team", "t2"),
        ("alice", "memory_add", "ok", "alice", "t3"),
        ("kiosk", "memory_add", "ok", "lobby", None),
        ("kiosk", "memory_add", "error", "alice", None),  # recorded with what it asked, as memory_add is
    ]
    assert _items(server.db) == [("alice", "mine"), ("alice", "mine too"), ("lobby", "welcome")]
