"""Where one durable commit's time goes, for a lone caller awaiting each ``record()``.

Prints, in one run:

* the WAL frames (pages) each durable commit writes, by b-tree (read from the WAL's frame
  headers and ``dbstat``), for a replay's events and a live client's;
* the median time of ``TraceStore.write_events`` for one event three ways: inserts then
  ROLLBACK (SQLite and Python CPU), committed without a sync (``synchronous=NORMAL``: the
  frames' ``pwrite`` calls too), and committed with ``synchronous=FULL`` (plus the WAL's
  ``fdatasync`` and the checkpoints' syncs);
* a bare ``fdatasync`` of 1 and of 16 rewritten pages in a scratch file (what the disk's
  flush costs, and whether it depends on the bytes);
* the round trip of the two thread hops alone (event loop -> writer thread through a
  ``queue.Queue`` -> back with ``call_soon_threadsafe``), on uvloop and asyncio;
* ``Recorder.record`` end to end (durable, one task, uvloop when installed).

Read it as: record ~= hops + FULL commit; FULL - NORMAL ~= the sync; NORMAL - rollback ~=
writing the frames. Every figure is a median over interleaved rounds, so a busy machine
moves them together. Run: ``.venv/bin/python benchmarks/durable_budget.py [--events N]``;
``--dir`` puts the databases on another file system (default: a temporary folder).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import queue
import sqlite3
import statistics
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mcp_overhead import NS, run_as_served, synthetic_events, table

from memtap.trace.store import TraceStore, insert_events
from memtap.trace.writer import Recorder


def frames_by_btree(tmp: Path, events: Sequence[Any]) -> tuple[float, list[tuple[str, float]]]:
    """Frames per one-event commit, by b-tree, after a warm-up of most of ``events``."""
    path = tmp / "frames.db"
    store = TraceStore(path)
    store.db.conn.execute("PRAGMA wal_autocheckpoint = 0")
    warm, measured = events[: len(events) - 100], events[len(events) - 100 :]
    store.write_events(warm)
    store.db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for event in measured:
        store.write_events([event])
    page_size = int(store.db.conn.execute("PRAGMA page_size").fetchone()[0])
    data = Path(str(path) + "-wal").read_bytes()  # before closing: the last close checkpoints it
    store.close()
    pages = []
    offset = 32  # the WAL header; then each frame: a 24-byte header (page number first) and a page
    while offset + 24 <= len(data):
        pages.append(struct.unpack(">I", data[offset : offset + 4])[0])
        offset += 24 + page_size
    with sqlite3.connect(path) as conn:
        names = {page: name for name, page in conn.execute("SELECT name, pageno FROM dbstat")}
    counts = collections.Counter(names.get(p, f"page {p}") for p in pages)
    n = len(measured)
    return len(pages) / n, [(name, c / n) for name, c in counts.most_common()]


def median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


def commit_rounds(tmp: Path, events: Sequence[Any], rounds: int) -> dict[str, float]:
    """Medians of one-event writes (rolled back, committed NORMAL, committed FULL), of bare
    fdatasyncs, of the hops alone and of durable ``Recorder.record``, in interleaved rounds."""
    recorder = Recorder(tmp / "record.db", durable=True).start()
    stores = {
        "rollback": TraceStore(tmp / "rollback.db"),
        "NORMAL": TraceStore(tmp / "normal.db"),
        "FULL": TraceStore(tmp / "full.db", durable=True),
    }
    scratch = os.open(tmp / "flush.bin", os.O_RDWR | os.O_CREAT)
    os.write(scratch, b"\0" * 4096 * 64)
    os.fsync(scratch)
    samples: dict[str, list[float]] = {
        k: []
        for k in (
            *stores,
            "fdatasync 1 page",
            "fdatasync 16 pages",
            "hops (uvloop)",
            "hops (asyncio)",
            "record",
        )
    }
    per_round = max(1, len(events) // (4 * rounds))
    it = iter(events)
    try:
        for _ in range(rounds):
            for name, store in stores.items():
                for _ in range(per_round):
                    event = next(it)
                    t0 = time.perf_counter()
                    if name == "rollback":
                        store.db.conn.execute("BEGIN IMMEDIATE")
                        insert_events(store.db.conn, [event])
                        store.db.conn.execute("ROLLBACK")
                    else:
                        store.write_events([event])
                    samples[name].append(time.perf_counter() - t0)
            for pages in (1, 16):
                for i in range(per_round):
                    os.pwrite(scratch, os.urandom(4096 * pages), (i % 4) * 4096 * 16)
                    t0 = time.perf_counter()
                    os.fdatasync(scratch)
                    samples[f"fdatasync {pages} page{'s' if pages > 1 else ''}"].append(
                        time.perf_counter() - t0
                    )
            samples["hops (uvloop)"] += run_as_served(hops(per_round))
            samples["hops (asyncio)"] += asyncio.run(hops(per_round))
            samples["record"] += run_as_served(lone_record(recorder, [next(it) for _ in range(per_round)]))
    finally:
        os.close(scratch)
        recorder.close()
        for store in stores.values():
            store.close()
    return {k: median_us(v) for k, v in samples.items()}


async def hops(n: int) -> list[float]:
    """Median round trip loop -> thread -> loop with no work: the recorder's two hops."""
    q: queue.Queue[asyncio.Future[None] | None] = queue.Queue()

    def writer() -> None:
        while (done := q.get()) is not None:
            done.get_loop().call_soon_threadsafe(done.set_result, None)

    thread = threading.Thread(target=writer)
    thread.start()
    loop = asyncio.get_running_loop()
    samples = []
    for _ in range(n):
        done = loop.create_future()
        t0 = time.perf_counter()
        q.put(done)
        await done
        samples.append(time.perf_counter() - t0)
    q.put(None)
    thread.join()
    return samples


async def lone_record(recorder: Recorder, events: Sequence[Any]) -> list[float]:
    samples = []
    for event in events:
        t0 = time.perf_counter()
        await recorder.record(event)
        samples.append(time.perf_counter() - t0)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--events", type=int, default=3000, help="events per measurement (default 3,000)")
    parser.add_argument("--dir", type=Path, help="where the databases go (default: a temporary folder)")
    args = parser.parse_args()
    n = args.events
    print(f"durable_budget: sqlite {sqlite3.sqlite_version}, {os.cpu_count()} cpus, {n} events per row")
    with tempfile.TemporaryDirectory(prefix="memtap-durable-", dir=args.dir) as name:
        tmp = Path(name)
        replay = synthetic_events(n + 400, seed=3)
        live = [e.model_copy(update={"context": type(e.context)(principal="local", namespace=NS)}) for e in
                synthetic_events(400, seed=5)]  # fmt: skip
        columns = {}
        for label, events in (("replay events", replay[:400]), ("live calls", live)):
            sub = tmp / label.split()[0]
            sub.mkdir()
            columns[label] = frames_by_btree(sub, events)
        trees = sorted({name for _, by_tree in columns.values() for name, _ in by_tree})
        rows = [[name, *(f"{dict(c[1]).get(name, 0.0):.2f}" for c in columns.values())] for name in trees]
        rows.append(["all (frames per commit)", *(f"{total:.1f}" for total, _ in columns.values())])
        print("\nWAL frames per one-event commit (each frame: two pwrite calls), by b-tree")
        print("(replay events carry a run and a session; a live client's calls carry neither)")
        print(table(["b-tree", *columns], rows))

        medians = commit_rounds(tmp, replay[400 : 400 + n], rounds=10)
        print("\nmedian us per event (or per call), 10 interleaved rounds")
        print(table(["what", "us"], [[k, f"{v:,.0f}"] for k, v in medians.items()]))
        sync = medians["FULL"] - medians["NORMAL"]
        frames = medians["NORMAL"] - medians["rollback"]
        record = medians["record"]
        print(
            f"budget: inserts {medians['rollback']:,.0f} + frames {frames:,.0f} + sync {sync:,.0f}"
            f" + hops and glue {record - medians['FULL']:,.0f} = record {record:,.0f} us"
            f" ({1e6 / record:,.0f} events/s for one caller; medians, so the parts need not add up)"
        )


if __name__ == "__main__":
    main()
