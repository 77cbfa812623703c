"""A cancelled call is still recorded, exactly once, and no caller's cancellation touches another's answer."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client, StdioServerParameters
from trace_builder import add_event as _event

from memtap.probes.targets._server import free_port
from memtap.trace.calls import CANCELLED
from memtap.trace.writer import Recorder

pytestmark = pytest.mark.anyio


def _ids(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [row[0] for row in conn.execute("SELECT id FROM events")]


async def test_cancelled_durable_waiters_leave_every_other_caller_answered_and_every_event_written(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMTAP_SQLITE_BUSY_TIMEOUT_MS", "50")
    recorder = Recorder(db_path, durable=True, retry_for_s=60).start()
    blocker = sqlite3.connect(db_path, isolation_level=None, timeout=0)
    blocker.execute("BEGIN EXCLUSIVE")  # every commit waits: all 50 callers are waiting in record()
    events = [_event(i) for i in range(50)]
    tasks = [asyncio.ensure_future(recorder.record(e)) for e in events]
    with anyio.fail_after(20):
        while recorder.stats.submitted < 50 or recorder.stats.write_retries == 0:
            await anyio.sleep(0.01)
    cancelled = tasks[::5]
    for task in cancelled:
        task.cancel()
    await asyncio.gather(*cancelled, return_exceptions=True)
    blocker.execute("ROLLBACK")
    blocker.close()
    others = [t for t in tasks if t not in cancelled]
    with anyio.fail_after(30):
        results = await asyncio.gather(*others, return_exceptions=True)
    recorder.close()
    assert results == [None] * 40  # answered, none with an error
    assert all(t.cancelled() for t in cancelled)
    written = _ids(db_path)
    assert sorted(written) == sorted(e.id for e in events)  # each event once, cancelled ones included
    assert recorder.stats.spilled == 0 and not recorder.spill_path.exists()


async def _health(port: int) -> dict[str, Any] | None:
    try:
        async with httpx.AsyncClient() as http:
            response = await http.get(f"http://127.0.0.1:{port}/healthz")
    except httpx.HTTPError:  # not listening yet
        return None
    return dict(response.json()["recorder"])


async def _wait_for(port: int, check: Callable[[dict[str, Any]], bool]) -> None:
    with anyio.fail_after(60):
        while (stats := await _health(port)) is None or not check(stats):
            await anyio.sleep(0.02)


async def test_cancelled_mcp_calls_are_recorded_once_each_and_the_rest_answered(db_path: Path) -> None:
    """Over stdio the client's cancellation reaches the server as ``notifications/cancelled``
    (the 2026-07-28 HTTP transport has none); /healthz on the same process shows its progress."""
    port = free_port()
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "memtap",
            "serve",
            "--stdio",
            "--http",
            f"127.0.0.1:{port}",
            "--durable",
            "--db",
            str(db_path),
        ],
        # The old durable path, where a lone search waits for its commit behind the lock (through
        # the journal it would be answered at once; tests/test_durable_journal.py covers that path).
        env={**os.environ, "MEMTAP_SQLITE_BUSY_TIMEOUT_MS": "60000", "MEMTAP_DURABLE_JOURNAL": "0"},
    )
    n = 24
    answers: dict[int, Any] = {}
    scopes = [anyio.CancelScope() for _ in range(n)]
    cancelled = set(range(0, n, 4)) | set(range(1, n, 4))  # half the searches, half the adds
    async with Client(params) as client:
        await _wait_for(port, lambda stats: True)
        blocker = sqlite3.connect(db_path, isolation_level=None, timeout=0)

        async def call(i: int) -> None:
            with scopes[i]:
                if i % 2:
                    answers[i] = await client.call_tool("memory_add", {"content": f"fact number {i}"})
                else:
                    answers[i] = await client.call_tool("memory_search", {"query": f"number {i}"})

        blocker.execute("BEGIN EXCLUSIVE")  # writes (the builtin's and the recorder's) wait for it
        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(call, i)
            # Every call is in the server: being served, or (a search) waiting for its durable commit.
            await _wait_for(port, lambda stats: stats["open_calls"] + stats["pending"] == n)
            for i in cancelled:
                scopes[i].cancel()  # the client sends notifications/cancelled
            await _wait_for(port, lambda stats: stats["cancelled"] == len(cancelled))
            blocker.execute("ROLLBACK")
            blocker.close()
    # The client closed the server's input: it has stopped and flushed its recorder.

    assert set(answers) == set(range(n)) - cancelled
    assert not any(answer.is_error for answer in answers.values())
    with sqlite3.connect(db_path) as conn:
        rows = conn.execute("SELECT id, tool, arguments, status, error FROM events").fetchall()
        memories = {row[0] for row in conn.execute("SELECT content FROM builtin_memory")}
        effects = {row[0] for row in conn.execute("SELECT item_id FROM effects WHERE kind = 'add'")}
        items = {row[0] for row in conn.execute("SELECT item_id FROM items")}
        stored_ids = {row[0] for row in conn.execute("SELECT item_id FROM builtin_memory")}
    seen = set()
    for _, _, arguments, _, _ in rows:
        args = json.loads(arguments)
        key = args.get("content") or args.get("query")
        assert key not in seen, f"{key!r} recorded twice"
        seen.add(key)
    assert len(rows) == n  # every call exactly once, cancelled or not
    cancelled_events = [row for row in rows if row[4] == CANCELLED]
    assert len(cancelled_events) >= len(cancelled) // 2 - 1  # the adds queued behind the lock never ran
    # The trace equals the state: every stored memory has its add event and its item, and no other.
    assert stored_ids == effects == items
    assert memories <= {f"fact number {i}" for i in range(1, n, 2)}
    assert memories >= {f"fact number {i}" for i in set(range(1, n, 2)) - cancelled}
