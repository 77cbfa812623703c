"""The forwarding proxy answers a call first and records it after (outside durable mode), and
the trace holds the same events and effects as when it recorded first."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import http_client
from findings_helpers import serve_proxy
from served import ServedMemtap
from trace_builder import durable_events_in, events_in

from memtap.adapters.memory_server import entity_id, observation_id
from memtap.config import ConfigFile
from memtap.trace.models import EffectKind, Op, TraceEvent

pytestmark = pytest.mark.anyio

ALICE = {"entities": [{"name": "alice", "entityType": "person", "observations": ["likes tea"]}]}


def _add(i: int) -> dict[str, Any]:
    return {"observations": [{"entityName": "alice", "contents": [f"fact {i}"]}]}


def _own_effect(event: TraceEvent) -> tuple[EffectKind, str | None, str | None]:
    (effect,) = event.effects
    return effect.kind, effect.item_id, effect.content_after


async def test_concurrent_writes_answered_first_each_record_exactly_their_own_effect(
    tmp_path: Path, memory_server: dict[str, Any]
) -> None:
    served = serve_proxy(tmp_path / "trace.db", {"memory": memory_server})
    try:
        async with http_client(served.mcp_url) as client:
            assert not (await client.call_tool("create_entities", ALICE)).is_error
            async with anyio.create_task_group() as tg:
                for i in range(16):
                    tg.start_soon(client.call_tool, "add_observations", _add(i))
        served.settle()  # waits for calls answered before they were recorded, too
        events = events_in(served.db)
    finally:
        served.stop()
    assert [e.tool for e in events].count("add_observations") == 16
    created = next(e for e in events if e.tool == "create_entities")
    assert [(f.kind, f.item_id) for f in created.effects] == [
        (EffectKind.ADD, entity_id("alice")),
        (EffectKind.ADD, observation_id("alice", "likes tea")),
    ]
    # The write lock is held until each write's state is read again: no event holds another's change.
    added = sorted(_own_effect(e) for e in events if e.tool == "add_observations")
    assert added == sorted(
        (EffectKind.ADD, observation_id("alice", f"fact {i}"), f"fact {i}") for i in range(16)
    )
    assert {e.op for e in events if e.tool == "add_observations"} == {Op.WRITE}
    assert all(e.status == "ok" and e.total_ms is not None for e in events)


async def test_calls_answered_before_they_were_recorded_are_recorded_when_the_proxy_stops(
    tmp_path: Path, memory_server: dict[str, Any]
) -> None:
    served = serve_proxy(tmp_path / "trace.db", {"memory": memory_server})
    try:
        async with http_client(served.mcp_url) as client:
            await client.call_tool("create_entities", ALICE)
            for i in range(5):
                await client.call_tool("add_observations", _add(i))
    finally:
        served.stop()  # no flush first: stopping waits for the answered calls' events
    events = events_in(served.db)
    assert [e.tool for e in events].count("add_observations") == 5
    assert sorted(_own_effect(e)[2] or "" for e in events if e.tool == "add_observations") == [
        f"fact {i}" for i in range(5)
    ]


async def test_a_durable_proxy_records_a_write_with_its_effects_before_answering(
    tmp_path: Path, memory_server: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMTAP_SQLITE_BUSY_TIMEOUT_MS", "50")  # the writer retries at once
    config = {"mcpServers": {"memory": memory_server}}
    upstreams = ConfigFile.model_validate(config).enabled_servers()
    served = ServedMemtap(tmp_path / "trace.db", config, upstreams=upstreams, durable=True).start()
    blocker = sqlite3.connect(served.db, isolation_level=None, timeout=0)
    try:
        async with http_client(served.mcp_url) as client:
            await client.call_tool("create_entities", ALICE)
            served.events(lambda events: len(events) == 1)
            # While another connection holds the write lock nothing reaches the tables: an event
            # on disk after its answer was put in the synced journal before the answer (a proxy
            # that answered first would have it in neither).
            blocker.execute("BEGIN IMMEDIATE")
            await client.call_tool("add_observations", _add(0))
            events = durable_events_in(served.db)  # no flush, no waiting
            blocker.execute("ROLLBACK")
    finally:
        blocker.close()
        served.stop()
    assert [e.tool for e in events] == ["create_entities", "add_observations"]
    assert _own_effect(events[1]) == (EffectKind.ADD, observation_id("alice", "fact 0"), "fact 0")
