"""The durable journal: a lone durable event is answered once it is in the synced journal beside the
database, reaches the tables later, and is put in exactly once by the next start after a crash."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from trace_builder import add_event

from memtap.errors import StoreError
from memtap.trace.journal import _RECORD, HEADER_BYTES, MAGIC, Journal, journal_path, peek
from memtap.trace.models import TraceEvent
from memtap.trace.writer import Recorder

TESTS = Path(__file__).parent
MARKER = "OSPREY-7731"


def _ids(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [row[0] for row in conn.execute("SELECT id FROM events ORDER BY rowid")]


def _killed_after_answers(db: Path, n: int, content: str = "noted") -> dict[str, Any]:
    """Run tests/journal_child.py: ``n`` durable events answered through the journal, then SIGKILL
    before any is in the database. Returns what the child printed once they were answered."""
    child = subprocess.Popen(
        [sys.executable, str(TESTS / "journal_child.py"), str(db), str(n), content],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line, f"the child ended early: {child.stderr.read() if child.stderr else ''}"
        answered: dict[str, Any] = json.loads(line)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    assert child.returncode == -signal.SIGKILL
    return answered


def test_events_answered_through_the_journal_and_killed_before_insertion_are_recovered_once(
    db_path: Path,
) -> None:
    answered = _killed_after_answers(db_path, 40)
    assert answered["journaled"] == 40 and answered["written"] == 0
    assert _ids(db_path) == []  # the kill came before the events reached the tables
    recorder = Recorder(db_path, durable=True).start()
    recorder.close()
    assert recorder.stats.recovered == 40
    assert _ids(db_path) == answered["ids"]  # each once, in the order answered
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT count(*) FROM items").fetchone()[0] == 40
    again = Recorder(db_path, durable=True).start()  # the journal was reset: nothing to put in twice
    again.close()
    assert again.stats.recovered == 0 and _ids(db_path) == answered["ids"]


def test_a_recorder_that_is_not_durable_recovers_the_journal_and_removes_it(db_path: Path) -> None:
    answered = _killed_after_answers(db_path, 5)
    recorder = Recorder(db_path).start()
    recorder.close()
    assert recorder.stats.recovered == 5 and _ids(db_path) == answered["ids"]
    assert not journal_path(db_path).exists()


def _write_journal(db: Path, events: list[TraceEvent]) -> list[int]:
    """A journal holding ``events`` as a recorder writes them; the offset of each record."""
    journal = Journal.open(journal_path(db), create=True)
    try:
        journal.wipe()
        offsets = []
        for event in events:
            offsets.append(journal.tail)
            journal.append([event.model_dump_json().encode()])
    finally:
        journal.close()
    return offsets


def _patch(path: Path, at: int, data: bytes) -> None:
    fd = os.open(path, os.O_RDWR)
    try:
        os.pwrite(fd, data, at)
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("damage", "kept"),
    [
        ("torn tail", 2),  # the last record only half written
        ("garbage after", 3),  # bytes after the last record that are no record
        ("wrong cycle", 1),  # the second record belongs to an earlier cycle
        ("bad crc", 1),  # a flipped byte in the second record's payload
        ("zeros", 0),  # the first record never reached the disk
    ],
)
def test_recovery_takes_only_the_valid_prefix_of_a_damaged_journal(
    db_path: Path, damage: str, kept: int
) -> None:
    events = [add_event(i) for i in range(3)]
    offsets = _write_journal(db_path, events)
    path = journal_path(db_path)
    end = offsets[2] + _RECORD.size + len(events[2].model_dump_json().encode())
    if damage == "torn tail":
        _patch(path, end - 20, bytes(20))
    elif damage == "garbage after":
        _patch(path, end, os.urandom(64))
    elif damage == "wrong cycle":
        _patch(path, offsets[1] + 4, (12345).to_bytes(8, "little"))
    elif damage == "bad crc":
        _patch(path, offsets[1] + _RECORD.size + 5, b"#")
    else:
        _patch(path, offsets[0], bytes(offsets[1] - offsets[0]))
    recorder = Recorder(db_path, durable=True).start()
    recorder.close()
    assert recorder.stats.recovered == kept
    assert _ids(db_path) == [e.id for e in events[:kept]]


def test_a_journal_of_an_unknown_format_version_stops_the_start_and_is_left_untouched(db_path: Path) -> None:
    _write_journal(db_path, [add_event(1)])
    path = journal_path(db_path)
    _patch(path, len(MAGIC), (99).to_bytes(4, "little"))
    before = path.read_bytes()
    with pytest.raises(StoreError, match=r"format version 99.*may hold acknowledged events"):
        Recorder(db_path, durable=True).start()
    assert path.read_bytes() == before
    assert _ids(db_path) == []


@pytest.mark.anyio
async def test_durable_callers_are_answered_after_a_real_commit_when_the_journal_cannot_be_made(
    db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    journal_path(db_path).mkdir(parents=True)  # a folder where the file should be
    with caplog.at_level(logging.WARNING, "memtap.recorder"):
        recorder = Recorder(db_path, durable=True).start()
    assert "cannot be used" in caplog.text
    events = [add_event(i) for i in range(3)]
    for event in events:
        await recorder.record(event)
        assert event.id in _ids(db_path)  # committed before the answer, no flush
    recorder.close()
    assert recorder.stats.journaled == 0 and _ids(db_path) == [e.id for e in events]


@pytest.mark.anyio
async def test_a_lone_durable_call_is_answered_from_the_journal_while_the_database_is_locked(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMTAP_SQLITE_BUSY_TIMEOUT_MS", "50")
    recorder = Recorder(db_path, durable=True, retry_for_s=60).start()
    blocker = sqlite3.connect(db_path, isolation_level=None, timeout=0)
    blocker.execute("BEGIN EXCLUSIVE")
    event = add_event(1)
    with anyio.fail_after(20):
        await recorder.record(event)  # durable in the journal: answered though no commit can happen
    assert [e.id for e in peek(recorder.journal_path)] == [event.id]
    with anyio.fail_after(20):  # its insertion is retried meanwhile
        while recorder.stats.write_retries == 0:
            await anyio.sleep(0.02)
    blocker.execute("ROLLBACK")
    blocker.close()
    assert await asyncio.to_thread(recorder.flush, 30)
    recorder.close()
    assert _ids(db_path) == [event.id] and recorder.stats.spilled == 0


@pytest.mark.anyio
async def test_once_the_database_refuses_the_journaled_events_durable_callers_get_the_error(
    db_path: Path,
) -> None:
    recorder = Recorder(db_path, durable=True).start()
    with sqlite3.connect(db_path) as conn:
        conn.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
    first, second, third = add_event(1), add_event(2), add_event(3)
    await recorder.record(first)  # in the synced journal: answered
    assert await asyncio.to_thread(recorder.flush, 30)  # refused by the database: spilled, durable there
    with pytest.raises(StoreError, match="refused"):
        await recorder.record(second)  # the journal is not used while the database refuses
    with sqlite3.connect(db_path) as conn:
        conn.execute("DROP TRIGGER refuse")
    await recorder.record(third)  # committed: the database takes events again
    fourth = add_event(4)
    await recorder.record(fourth)  # so the journal is used again
    recorder.close()
    spilled = [json.loads(line)["id"] for line in recorder.spill_path.read_text().splitlines()]
    assert spilled == [first.id, second.id]
    assert _ids(db_path) == [third.id, fourth.id]
    assert recorder.stats.journaled == 2 and recorder.stats.spilled == 2
    assert peek(recorder.journal_path) == []


@pytest.mark.anyio
async def test_cancelled_waiters_through_the_journal_leave_the_others_answered_and_each_event_written_once(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMTAP_SQLITE_BUSY_TIMEOUT_MS", "50")
    # Every batch goes to the journal, and each journaled batch is put into the database at once.
    recorder = Recorder(db_path, durable=True, retry_for_s=60, journal_batch=100, journal_pending=1).start()
    blocker = sqlite3.connect(db_path, isolation_level=None, timeout=0)
    blocker.execute("BEGIN EXCLUSIVE")
    head = add_event(0)
    await recorder.record(head)  # journaled; its insertion now waits for the lock, holding the writer
    events = [add_event(i) for i in range(1, 51)]
    tasks = [asyncio.ensure_future(recorder.record(e)) for e in events]
    with anyio.fail_after(20):
        while recorder.stats.submitted < 51 or recorder.stats.write_retries == 0:
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
    assert results == [None] * 40 and all(t.cancelled() for t in cancelled)
    assert recorder.stats.journaled == 51  # the 50 went through the journal, not the commit path
    assert sorted(_ids(db_path)) == sorted(e.id for e in [head, *events])
    assert recorder.stats.spilled == 0 and not recorder.spill_path.exists()


def test_purge_puts_in_a_dead_writers_journal_and_leaves_no_byte_of_the_content_in_it(db_path: Path) -> None:
    answered = _killed_after_answers(db_path, 3, content=MARKER)
    path = journal_path(db_path)
    assert MARKER.encode() in path.read_bytes()
    purged = subprocess.run(
        [sys.executable, "-m", "memtap", "purge", "--db", str(db_path), "--namespace", "u", "--by", "dpo"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert purged.returncode == 0, purged.stderr
    assert _ids(db_path) == answered["ids"]  # put in, then purged
    for file in sorted(db_path.parent.glob(db_path.name + "*")):
        assert MARKER.encode() not in file.read_bytes(), file.name
    assert path.stat().st_size > HEADER_BYTES  # still preallocated, zeroed


def test_the_journal_has_the_databases_permissions(db_path: Path) -> None:
    Recorder(db_path).start().close()
    db_path.chmod(0o640)
    Recorder(db_path, durable=True).start().close()
    assert journal_path(db_path).stat().st_mode & 0o777 == 0o640
