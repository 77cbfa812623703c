"""The builtin backend's writes and their events commit together: the trace equals the state."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
from collections.abc import Callable
from pathlib import Path

import anyio
import httpx
import pytest
from conftest import ServerProcess, http_client

from memtap.adapters.builtin import BuiltinBackend
from memtap.proxy.service import MemoryService
from memtap.trace.store import TraceStore
from memtap.trace.writer import Recorder

pytestmark = pytest.mark.anyio


def _state_and_trace(db: Path) -> tuple[set[str], set[str], set[str]]:
    """Stored memories, the items the trace's add effects name, and the trace's items."""
    with sqlite3.connect(db) as conn:
        stored = {row[0] for row in conn.execute("SELECT item_id FROM builtin_memory")}
        added = {row[0] for row in conn.execute("SELECT item_id FROM effects WHERE kind = 'add'")}
        items = {row[0] for row in conn.execute("SELECT item_id FROM items")}
    return stored, added, items


async def test_after_a_sigkill_in_default_mode_every_stored_memory_has_its_event_and_item(
    start_http_server: Callable[..., ServerProcess],
) -> None:
    server = start_http_server()  # not durable: the recorder batches, but a write carries its own event
    acked: set[str] = set()
    enough = anyio.Event()
    killed: list[bool] = []

    async def writer(client_no: int) -> None:
        try:
            async with http_client(server.url) as client:
                for i in range(10_000):
                    result = await client.call_tool("memory_add", {"content": f"client {client_no} fact {i}"})
                    assert not result.is_error
                    acked.add(result.structured_content["id"])  # type: ignore[index]
                    if i % 3 == 0:  # searches go through the recorder's batches meanwhile
                        await client.call_tool("memory_search", {"query": f"fact {i}"})
                    if len(acked) >= 150:
                        enough.set()
        except Exception:  # the server died under us: expected after the kill, a failure before it
            if not killed:
                raise

    with anyio.fail_after(120):
        async with anyio.create_task_group() as tg:
            for n in range(4):
                tg.start_soon(writer, n)
            await enough.wait()
            killed.append(True)
            server.proc.send_signal(signal.SIGKILL)
            server.proc.wait()
    assert server.proc.returncode == -signal.SIGKILL

    stored, added, items = _state_and_trace(server.db)
    assert acked <= stored
    assert stored == added == items  # no memory without its event and item, acknowledged or not

    restarted = start_http_server(db=server.db)
    async with http_client(restarted.url) as client:
        listed = await client.call_tool("memory_list", {"limit": 1000})
    assert listed.structured_content is not None
    served = {item["id"] for item in listed.structured_content["items"]}
    assert served == stored and served <= added


async def test_a_write_is_in_the_trace_when_it_is_acknowledged_even_without_durable(
    start_http_server: Callable[..., ServerProcess],
) -> None:
    server = start_http_server()
    async with http_client(server.url) as client:
        added = await client.call_tool("memory_add", {"content": "the old colour is blue"})
        assert added.structured_content is not None
        item = added.structured_content["id"]
        updated = await client.call_tool("memory_update", {"id": item, "content": "the colour is green"})
        # Read at once, without waiting for the recorder: the event committed with the write.
        store = TraceStore(server.db)
        [add, update] = store.list_events()
        store.close()
        assert update.status == "ok" and update.result == updated.structured_content
        [effect] = update.effects
        assert (effect.content_before, effect.content_after) == (
            "the old colour is blue",
            "the colour is green",
        )
        assert add.effects[0].item_id == item
        deleted = await client.call_tool("memory_delete", {"id": item})
        assert not deleted.is_error
        with sqlite3.connect(server.db) as conn:
            tools = [row[0] for row in conn.execute("SELECT tool FROM events ORDER BY id")]
            [(version, valid_to)] = conn.execute("SELECT version, valid_to FROM items").fetchall()
    assert tools == ["memory_add", "memory_update", "memory_delete"]
    assert version == 2 and valid_to is not None
    health = httpx.get(f"http://127.0.0.1:{server.port}/healthz").json()["recorder"]
    assert health["committed_with_write"] == 3 and health["written"] == 3


async def test_waiting_writes_share_one_commit_and_a_failing_one_is_rolled_back_alone(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMTAP_SQLITE_BUSY_TIMEOUT_MS", "60000")
    recorder = Recorder(db_path, durable=True).start()
    backend = BuiltinBackend(db_path, durable=True)
    service = MemoryService(backend, recorder)
    blocker = sqlite3.connect(db_path, isolation_level=None, timeout=0)
    blocker.execute("BEGIN EXCLUSIVE")  # the first write waits for the lock; the others queue behind it
    adds = [
        asyncio.ensure_future(
            service.call_tool("memory_add", {"content": f"fact {i}"}, principal="u", front_door="t")
        )
        for i in range(30)
    ]
    bad = [
        asyncio.ensure_future(
            service.call_tool(
                "memory_update", {"id": f"mem_missing{i}", "content": "x"}, principal="u", front_door="t"
            )
        )
        for i in range(5)
    ]
    with anyio.fail_after(30):
        while recorder.stats.open_calls < 35:
            await anyio.sleep(0.01)
    blocker.execute("ROLLBACK")
    blocker.close()
    with anyio.fail_after(60):
        added = await asyncio.gather(*adds)
        refused = await asyncio.gather(*bad)
    await backend.close()
    recorder.close()
    assert not any(outcome.is_error for outcome in added)
    assert all(outcome.error and "no memory item" in outcome.error for outcome in refused)
    assert backend._thread.writes == 35 and backend._thread.groups <= 3  # not one commit per write
    stored, effected, items = _state_and_trace(db_path)
    assert stored == effected == items == {outcome.value["id"] for outcome in added}
    with sqlite3.connect(db_path) as conn:
        statuses = sorted(row[0] for row in conn.execute("SELECT status FROM events"))
    assert statuses == ["error"] * 5 + ["ok"] * 30
    assert recorder.stats.committed_with_write == 30
