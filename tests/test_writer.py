from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import anyio
import pytest
from trace_builder import add_event

from memtap.adapters.builtin import BuiltinBackend
from memtap.errors import StoreError
from memtap.proxy.service import MemoryService
from memtap.trace.journal import peek
from memtap.trace.store import TraceStore
from memtap.trace.writer import Recorder


def _count(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])


def test_every_submitted_event_is_written_in_batches(db_path: Path) -> None:
    recorder = Recorder(db_path, batch_size=100).start()
    events = [add_event(i) for i in range(1000)]
    futures = [recorder.submit(e) for e in events]
    assert recorder.flush(timeout=30)
    assert all(f.done() and f.exception() is None for f in futures)
    recorder.close()
    assert _count(db_path) == 1000
    assert recorder.stats.written == 1000
    assert 10 <= recorder.stats.batches <= 100  # batches, not one event at a time
    assert recorder.stats.write_retries == 0 and recorder.stats.last_error is None
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT count(*) FROM items").fetchone()[0] == 1000


def test_a_full_queue_makes_the_caller_wait_and_is_counted_not_dropped(db_path: Path) -> None:
    recorder = Recorder(db_path, max_queue=5, batch_size=2).start()
    for i in range(300):
        recorder.submit(add_event(i))
    recorder.close()
    assert _count(db_path) == 300
    assert recorder.stats.overflow_waits > 0
    assert recorder.stats.spilled == 0


def test_close_flushes_what_is_queued(db_path: Path) -> None:
    recorder = Recorder(db_path).start()
    for i in range(50):
        recorder.submit(add_event(i))
    recorder.close()
    assert _count(db_path) == 50


def test_submit_after_close_is_an_error_not_a_silent_drop(db_path: Path) -> None:
    recorder = Recorder(db_path).start()
    recorder.close()
    with pytest.raises(StoreError, match="not running"):
        recorder.submit(add_event(0))


@pytest.mark.anyio
async def test_durable_record_returns_only_after_commit(db_path: Path) -> None:
    recorder = Recorder(db_path, durable=True, journal=False).start()
    event = add_event(1)
    await recorder.record(event)
    reader = TraceStore(db_path)
    assert [e.id for e in reader.list_events()] == [event.id]
    reader.close()
    recorder.close()


@pytest.mark.anyio
async def test_durable_record_returns_once_its_event_is_in_the_synced_journal_or_the_database(
    db_path: Path,
) -> None:
    recorder = Recorder(db_path, durable=True, journal_linger_s=60).start()
    event = add_event(1)
    await recorder.record(event)
    in_journal = [e.id for e in peek(recorder.journal_path)]  # inserted only on flush: no linger ran out
    assert in_journal == [event.id] and _count(db_path) == 0
    assert recorder.flush(10)
    assert _count(db_path) == 1
    with anyio.fail_after(10):  # flush() returns once the event is in the tables; the reset comes just after
        while peek(recorder.journal_path):
            await anyio.sleep(0.005)
    recorder.close()


@pytest.mark.anyio
async def test_a_locked_database_is_retried_until_it_frees(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMTAP_SQLITE_BUSY_TIMEOUT_MS", "100")
    recorder = Recorder(db_path, durable=True, journal=False, retry_for_s=30).start()
    blocker = sqlite3.connect(db_path, isolation_level=None, timeout=0)
    blocker.execute("BEGIN EXCLUSIVE")
    pending = asyncio.ensure_future(recorder.record(add_event(1)))
    with anyio.fail_after(20):  # the writer hits the lock (after its busy timeout) at least once
        while recorder.stats.write_retries == 0:
            await anyio.sleep(0.05)
    assert not pending.done()
    blocker.execute("ROLLBACK")
    blocker.close()
    await asyncio.wait_for(pending, 30)
    recorder.close()
    assert _count(db_path) == 1 and recorder.stats.spilled == 0


@pytest.mark.anyio
async def test_events_that_cannot_be_written_are_spilled_to_a_file_and_reported(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMTAP_SQLITE_BUSY_TIMEOUT_MS", "100")
    recorder = Recorder(db_path, durable=True, journal=False, retry_for_s=0).start()
    blocker = sqlite3.connect(db_path, isolation_level=None, timeout=0)
    blocker.execute("BEGIN EXCLUSIVE")
    event = add_event(7)
    with pytest.raises(StoreError, match="locked"):
        await asyncio.wait_for(recorder.record(event), 30)
    blocker.execute("ROLLBACK")
    blocker.close()
    recorder.close()
    assert recorder.stats.spilled == 1
    [line] = recorder.spill_path.read_text().splitlines()
    assert json.loads(line)["id"] == event.id


def test_an_event_the_store_cannot_take_is_spilled_and_the_rest_still_written(db_path: Path) -> None:
    recorder = Recorder(db_path).start()
    odd_arguments = add_event(1).model_copy(update={"arguments": {"content": "broken \ud800 text"}})
    poison = add_event(2)
    poison.effects[0].content_after = "unstorable \udfff"
    later = add_event(3)
    futures = [recorder.submit(e) for e in (odd_arguments, poison, later)]
    recorder.close()
    assert futures[0].exception() is None and futures[2].exception() is None
    assert isinstance(futures[1].exception(), StoreError)
    store = TraceStore(db_path)
    stored = {e.id: e for e in store.list_events()}
    store.close()
    assert set(stored) == {odd_arguments.id, later.id}
    assert stored[odd_arguments.id].arguments == {"content": "broken \ud800 text"}
    [line] = recorder.spill_path.read_text().splitlines()
    assert json.loads(line)["id"] == poison.id
    assert recorder.stats.spilled == 1 and recorder.stats.written == 2


@pytest.mark.anyio
async def test_a_durable_call_whose_commit_fails_tells_the_caller(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMTAP_SQLITE_BUSY_TIMEOUT_MS", "50")
    recorder = Recorder(db_path, durable=True, journal=False, retry_for_s=0).start()
    backend = BuiltinBackend(tmp := db_path.with_name("memory.db"))
    service = MemoryService(backend, recorder)
    blocker = sqlite3.connect(db_path, isolation_level=None, timeout=0)
    blocker.execute("BEGIN EXCLUSIVE")
    outcome = await service.call_tool("memory_add", {"content": "kept"}, principal="u", front_door="t")
    blocker.execute("ROLLBACK")
    blocker.close()
    await backend.close()
    recorder.close()
    assert outcome.is_error
    assert outcome.error is not None and "carried out but its trace could not be committed" in outcome.error
    assert "locked" in outcome.error and str(recorder.spill_path) in outcome.error
    assert json.loads(recorder.spill_path.read_text())["id"] == outcome.event_id
    assert (await BuiltinBackend(tmp).list("u")).value["total"] == 1


def test_a_permanent_store_error_is_not_retried_and_spares_the_rest_of_the_batch(db_path: Path) -> None:
    recorder = Recorder(db_path, retry_for_s=30).start()
    first = add_event(1)
    duplicate = first.model_copy()  # same primary key: an integrity error, permanent
    later = add_event(2)
    futures = [recorder.submit(e) for e in (first, duplicate, later)]
    recorder.close()
    assert futures[0].exception() is None and futures[2].exception() is None
    assert isinstance(futures[1].exception(), StoreError)
    assert recorder.stats.write_retries == 0
    assert _count(db_path) == 2 and recorder.stats.spilled == 1


def test_close_cuts_the_retry_window_short_and_spills_before_closing_the_store(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMTAP_SQLITE_BUSY_TIMEOUT_MS", "50")
    recorder = Recorder(db_path, retry_for_s=600).start()
    blocker = sqlite3.connect(db_path, isolation_level=None, timeout=0)
    blocker.execute("BEGIN EXCLUSIVE")
    event = add_event(1)
    future = recorder.submit(event)
    thread = recorder._thread
    recorder.close(timeout=3)  # far shorter than the retry window
    blocker.execute("ROLLBACK")
    blocker.close()
    assert thread is not None and not thread.is_alive()  # the writer ended before its store was closed
    assert recorder.stats.spilled == 1 and recorder.stats.write_retries > 0
    assert isinstance(future.exception(timeout=0), StoreError)
    [line] = recorder.spill_path.read_text().splitlines()
    assert json.loads(line)["id"] == event.id


@pytest.mark.anyio
async def test_a_call_after_the_recorder_stopped_says_where_its_event_went(db_path: Path) -> None:
    recorder = Recorder(db_path).start()
    backend = BuiltinBackend(db_path.with_name("memory.db"))
    service = MemoryService(backend, recorder)
    recorder.close()
    outcome = await service.call_tool("memory_search", {"query": "tea"}, principal="u", front_door="t")
    await backend.close()
    assert outcome.error is not None and "the recorder is not running" in outcome.error
    assert f"the event was saved to {recorder.spill_path}" in outcome.error
    assert json.loads(recorder.spill_path.read_text())["id"] == outcome.event_id


def _results(db: Path) -> dict[str, object]:
    with sqlite3.connect(db) as conn:
        return {i: json.loads(r) if r else None for i, r in conn.execute("SELECT id, result FROM events")}


@pytest.mark.anyio
async def test_an_event_handed_over_with_a_finisher_is_stored_finished_on_the_writer_thread(
    db_path: Path,
) -> None:
    import threading

    recorder = Recorder(db_path).start()
    threads: list[str] = []

    def finish(event: object) -> None:
        threads.append(threading.current_thread().name)
        event.result = {"summary": "made later"}  # type: ignore[attr-defined]

    events = [add_event(i) for i in range(3)]
    for event in events:
        await recorder.record(event, finish=finish if event is events[1] else None)
    assert recorder.flush(10)
    recorder.close()
    assert threads == ["memtap-recorder"]  # once, off the caller's thread
    assert _results(db_path) == {
        events[0].id: None,
        events[1].id: {"summary": "made later"},
        events[2].id: None,
    }


@pytest.mark.anyio
async def test_a_finisher_that_fails_leaves_its_event_as_handed_over_and_the_batch_written(
    db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    recorder = Recorder(db_path).start()

    def broken(event: object) -> None:
        raise RuntimeError("summary bug")

    events = [add_event(i) for i in range(2)]
    await recorder.record(events[0], finish=broken)
    await recorder.record(events[1])
    assert recorder.flush(10)
    recorder.close()
    assert _results(db_path) == {events[0].id: None, events[1].id: None}
    assert recorder.stats.spilled == 0
    assert f"finishing event {events[0].id} failed" in caplog.text and "summary bug" in caplog.text


@pytest.mark.anyio
async def test_a_durable_or_stopped_recorder_finishes_the_event_before_it_is_stored_or_spilled(
    db_path: Path,
) -> None:
    def finish(event: object) -> None:
        event.result = {"finished": True}  # type: ignore[attr-defined]

    recorder = Recorder(db_path, durable=True, journal=False).start()
    event = add_event(1)
    await recorder.record(event, finish=finish)  # returns after the commit: already finished here
    assert event.result == {"finished": True} and _results(db_path) == {event.id: {"finished": True}}
    recorder.close()

    late = add_event(2)
    with pytest.raises(StoreError, match="not running"):
        await recorder.record(late, finish=finish)
    [line] = recorder.spill_path.read_text().splitlines()
    assert json.loads(line)["id"] == late.id and json.loads(line)["result"] == {"finished": True}
