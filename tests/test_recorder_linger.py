"""The recorder's adaptive linger: idle events go at once, bursts go in large batches."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest
from trace_builder import add_event

from memtap.trace.writer import Recorder


def _count(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])


def test_an_event_that_finds_the_writer_idle_is_written_without_lingering(db_path: Path) -> None:
    # Lingers of minutes: the event could only be written within the timeout if the idle
    # writer wrote it at once.
    recorder = Recorder(db_path, linger_s=300.0, max_linger_s=600.0).start()
    try:
        recorder.submit(add_event(0)).result(timeout=10)
        assert _count(db_path) == 1
    finally:
        recorder.close()


def test_flush_cuts_a_linger_short(db_path: Path) -> None:
    recorder = Recorder(db_path, linger_s=300.0, max_linger_s=600.0).start()
    try:
        recorder.submit(add_event(0)).result(timeout=10)  # the writer now lingers for minutes
        later = [recorder.submit(add_event(i)) for i in range(1, 50)]
        assert recorder.flush(timeout=10)
        assert all(f.done() and f.exception() is None for f in later)
        assert _count(db_path) == 50
    finally:
        recorder.close()


def test_a_burst_is_written_in_few_large_batches_and_nothing_is_lost(db_path: Path) -> None:
    recorder = Recorder(db_path, batch_size=200).start()
    futures = [recorder.submit(add_event(i)) for i in range(4000)]
    assert recorder.flush(timeout=60)
    recorder.close()
    assert all(f.done() and f.exception() is None for f in futures)
    assert _count(db_path) == 4000 == recorder.stats.written
    assert recorder.stats.spilled == 0
    # At most the full batches plus a few small ones while the linger grew.
    assert recorder.stats.batches <= 4000 // 200 + 10
    assert recorder.stats.written / recorder.stats.batches >= 100


def test_the_linger_stays_within_its_bounds(db_path: Path) -> None:
    recorder = Recorder(db_path, batch_size=10_000, linger_s=0.001, max_linger_s=0.004).start()
    try:
        for round_ in range(20):
            futures = [recorder.submit(add_event(round_ * 100 + i)) for i in range(100)]
            for f in futures:
                f.result(timeout=10)
        assert 0.001 <= recorder.linger_now_s <= 0.004
    finally:
        recorder.close()
    assert _count(db_path) == 2000


@pytest.mark.anyio
async def test_durable_mode_never_lingers_and_commits_concurrent_callers_together(db_path: Path) -> None:
    recorder = Recorder(db_path, durable=True, linger_s=300.0, max_linger_s=600.0).start()
    try:
        assert recorder.linger_s == recorder.max_linger_s == recorder.linger_now_s == 0.0
        await asyncio.wait_for(asyncio.gather(*(recorder.record(add_event(i)) for i in range(200))), 30)
        assert _count(db_path) == 200
        assert recorder.stats.batches < 200  # group commit: waiters share transactions
    finally:
        recorder.close()
