"""--durable commits the event and its effects, answers, then applies the items: a process
killed in between loses nothing, and nothing is applied twice."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from trace_builder import add_event

from memtap.trace.deferred import materialise_pending
from memtap.trace.models import EffectKind, MemoryEffect
from memtap.trace.store import TraceStore
from memtap.trace.writer import Recorder

pytestmark = pytest.mark.anyio

# A real recorder in a child process, SIGKILLed by its own after-commit hook (a public hook the
# writer thread calls once a batch is committed, before it answers and applies the items) on
# the batch of its last event: that event is on disk, its items are not.
CHILD = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    sys.path.insert(0, sys.argv[2])
    from trace_builder import add_event
    from memtap.trace.models import EffectKind, MemoryEffect
    from memtap.trace.writer import Recorder

    async def main() -> None:
        recorder = Recorder(sys.argv[1], durable=True).start()
        for i in range(5):
            await recorder.record(add_event(i))
            print("acked", i, flush=True)
        last = add_event(5)
        last.effects.append(MemoryEffect(kind=EffectKind.RETRIEVE, item_id="m0", rank=1))

        def kill(events: list) -> None:
            if any(e.id == last.id for e in events):
                os.kill(os.getpid(), signal.SIGKILL)

        recorder.after_commit.append(kill)
        await recorder.record(last)
        print("not reached", flush=True)

    asyncio.run(main())
    """
)


def _rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute(sql))


def test_items_of_an_event_committed_before_a_sigkill_are_applied_once_on_the_next_open(tmp_path: Path) -> None:
    db = tmp_path / "trace.db"
    tests_dir = str(Path(__file__).parent)
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(db), tests_dir],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), tests_dir]))},
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert child.stdout.split("\n")[:-1] == [f"acked {i}" for i in range(5)]

    # Killed after the durable commit of the last event and before its items.
    assert _rows(db, "SELECT count(*) FROM events") == [(6,)]
    (pending,) = _rows(db, "SELECT count(*) FROM pending_items")[0]
    assert 1 <= int(pending) <= 6  # (events of one batch of items not yet applied)
    assert _rows(db, "SELECT count(*) FROM items WHERE item_id = 'm5'") == [(0,)]

    TraceStore(db).close()  # opening it for writing applies what the killed recorder left
    assert _rows(db, "SELECT count(*) FROM pending_items") == [(0,)]
    assert _rows(db, "SELECT item_id, version, content FROM items ORDER BY item_id") == [
        (f"m{i}", 1, f"fact {i}") for i in range(6)
    ]
    assert _rows(db, "SELECT count(*) FROM item_versions") == [(6,)]
    assert _rows(db, "SELECT retrieved_count FROM items WHERE item_id = 'm0'") == [(1,)]

    TraceStore(db).close()  # and a second open applies nothing again
    assert _rows(db, "SELECT count(*) FROM item_versions") == [(6,)]
    assert _rows(db, "SELECT retrieved_count FROM items WHERE item_id = 'm0'") == [(1,)]


def test_an_event_applied_by_another_store_is_not_applied_again_by_the_recorder(tmp_path: Path) -> None:
    db = tmp_path / "trace.db"
    writer = TraceStore(db, durable=True)
    event = add_event(1)
    event.effects.append(MemoryEffect(kind=EffectKind.RETRIEVE, item_id="m1", rank=1))
    writer.write_events([event], items=False)  # a durable commit: event, effects, pending row
    assert _rows(db, "SELECT count(*) FROM items") == [(0,)]

    TraceStore(db).close()  # another process opened the file and applied it
    assert materialise_pending(writer.db.conn, [event]) == 0  # the recorder's own try finds it done
    assert materialise_pending(writer.db.conn, [event]) == 0
    writer.close()
    assert _rows(db, "SELECT item_id, version, retrieved_count FROM items") == [("m1", 1, 1)]
    assert _rows(db, "SELECT count(*) FROM item_versions") == [(1,)]


async def test_a_durable_caller_finds_its_event_committed_and_flush_finds_its_items_applied(
    tmp_path: Path,
) -> None:
    db = tmp_path / "trace.db"
    recorder = Recorder(db, durable=True).start()
    try:
        for i in range(20):
            event = add_event(i)
            await recorder.record(event)
            # Answered: the event is on disk; its item is applied or still named as pending.
            with sqlite3.connect(db) as conn:
                assert conn.execute("SELECT count(*) FROM events WHERE id = ?", (event.id,)).fetchone() == (1,)
                applied = conn.execute("SELECT count(*) FROM items WHERE item_id = ?", (f"m{i}",)).fetchone()
                pending = conn.execute(
                    "SELECT count(*) FROM pending_items WHERE event_id = ?", (event.id,)
                ).fetchone()
            assert applied[0] + pending[0] == 1
        assert recorder.flush(timeout=30)
        assert _rows(db, "SELECT count(*) FROM items") == [(20,)]
        assert _rows(db, "SELECT count(*) FROM pending_items") == [(0,)]
    finally:
        recorder.close()
    assert recorder.stats.written == 20 and recorder.stats.last_error is None
