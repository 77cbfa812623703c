"""What the detectors cost: live detection beside the recorder, and ``memtap check`` over a big trace.

Runnable on its own: ``.venv/bin/python benchmarks/findings_overhead.py [--live N] [--events N]
[--trace PATH]``.

* **live**: a mixed stream of N events (adds, updates, deletes and searches over 200
  namespaces, as the builtin backend records them) submitted to a ``Recorder`` as fast as it
  takes them, with and without live detection attached (its detector process poked after each
  commit), interleaved, best of two each; prints the recorder's sustained rate in both, the ratio
  (target: at least 0.90, no more than 10% slower), and how long the detectors took to catch up
  after the last commit.
* **check**: a trace of N events (``--events``, default 1,000,000) built with the store's own
  bulk insert (``TraceStore.write_events``, 50,000 events a transaction: events, effects and the
  items they materialise, as the recorder writes them); then the same trace read back without
  detectors (every event and its effects, in id order, as ``memtap check`` reads them) and
  ``check_trace`` with every detector (findings stored; on one process per core, the trace split
  by namespace, its CPU seconds counting the workers'); target under 60 s for 1,000,000 events
  (a smaller N is extrapolated linearly, and says so). ``--trace PATH`` keeps the trace there
  and reuses it on the next run (its findings cleared first). Wall and CPU seconds are printed,
  and the load average: on a shared machine the wall time grows with the other processes' load;
  so is the CPU of each part's process, and from it about how long the check would take on idle
  cores (the largest part's CPU plus the parent's own, reading the disk not counted).

The last lines say which target is met.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.mcp_overhead import sentence  # noqa: E402

NAMESPACES = 200


def mixed_events(n: int, seed: int = 7) -> list[Any]:
    """n events: 60% adds, 10% updates, 5% deletes, 25% searches (10 hits), over NAMESPACES."""
    from memtap.ids import new_id
    from memtap.trace.models import (
        AccessTags,
        Context,
        EffectKind,
        MemoryEffect,
        Op,
        Role,
        TraceEvent,
        utc_now,
    )

    rng = random.Random(seed)
    live: dict[str, list[tuple[str, str]]] = {}
    events = []
    for i in range(n):
        ns = f"user-{rng.randrange(NAMESPACES)}"
        items = live.setdefault(ns, [])
        ctx = Context(principal="local", namespace=ns, run="bench", session=f"s{i // 50}", role=Role.USER)
        now = utc_now()
        roll = rng.random()
        if roll < 0.6 or len(items) < 3:
            content, item_id = sentence(rng), "mem_" + new_id()
            items.append((item_id, content))
            op, tool, args = Op.WRITE, "memory_add", {"content": content}
            effects = [MemoryEffect(kind=EffectKind.ADD, item_id=item_id, namespace=ns, content_after=content,
                                    tags_after=AccessTags(owner=ns))]  # fmt: skip
            gate = None
        elif roll < 0.7:
            at = rng.randrange(len(items))
            item_id, before = items[at]
            content = sentence(rng)
            items[at] = (item_id, content)
            op, tool, args = Op.UPDATE, "memory_update", {"id": item_id, "content": content}
            effects = [MemoryEffect(kind=EffectKind.UPDATE, item_id=item_id, namespace=ns,
                                    content_before=before, content_after=content)]  # fmt: skip
            gate = None
        elif roll < 0.75:
            item_id, before = items.pop(rng.randrange(len(items)))
            op, tool, args = Op.DELETE, "memory_delete", {"id": item_id}
            effects = [
                MemoryEffect(kind=EffectKind.DELETE, item_id=item_id, namespace=ns, content_before=before)
            ]
            gate = None
        else:
            hits = rng.sample(items, min(10, len(items)))
            op, tool, args = Op.RETRIEVE, "memory_search", {"query": "coffee on monday"}
            effects = [MemoryEffect(kind=EffectKind.RETRIEVE, item_id=h[0], namespace=ns, content_after=h[1],
                                    rank=r, score=10.0 - r) for r, h in enumerate(hits, 1)]  # fmt: skip
            gate = "observe:allow"
        events.append(TraceEvent(id=new_id(), started_at=now, ended_at=now, front_door="bench",
                                 backend="builtin", tool=tool, op=op, context=ctx, arguments=args,
                                 effects=effects, gate=gate, backend_ms=0.2, overhead_ms=0.05))  # fmt: skip
    return events


def live_run(path: Path, events: list[Any], detect: bool) -> tuple[float, float]:
    """(recorder seconds to write everything, seconds more until the detectors caught up)."""
    from memtap.findings.live import LiveFindings
    from memtap.findings.settings import FindingsSettings
    from memtap.trace.writer import Recorder

    recorder = Recorder(path).start()
    live = LiveFindings(path, FindingsSettings(), recorder).start() if detect else None
    try:
        t0 = time.perf_counter()
        for event in events:
            recorder.submit(event)
        if not recorder.flush(timeout=600):
            raise RuntimeError("recorder flush timed out")
        t1 = time.perf_counter()
        if live is not None and not live.wait_idle(timeout=600):
            raise RuntimeError("detectors did not catch up")
        return t1 - t0, time.perf_counter() - t1
    finally:
        recorder.close()
        if live is not None:
            live.close()


def live_part(tmp: Path, n: int) -> tuple[float, float]:
    """(ratio of the recorder's rate with live detection to its rate without, catch-up seconds)."""
    print(f"\n== live detection beside the recorder: {n:,} mixed events, 200 namespaces")
    events = mixed_events(n)
    rates: dict[bool, list[float]] = {False: [], True: []}
    lags: list[float] = []
    for round_ in range(2):
        for detect in (False, True):
            write_s, lag_s = live_run(tmp / f"live-{round_}-{detect}.db", events, detect)
            rates[detect].append(n / write_s)
            if detect:
                lags.append(lag_s)
    base, with_detect = max(rates[False]), max(rates[True])
    print(f"recorder alone:           {base:>10,.0f} events/s (best of 2)")
    print(f"recorder + live findings: {with_detect:>10,.0f} events/s (best of 2)")
    print(f"ratio: {with_detect / base:.3f} (target >= 0.90); detectors caught up "
          f"{max(lags):.2f} s after the last commit")  # fmt: skip
    return with_detect / base, max(lags)


def read_all(store: Any) -> int:
    """Every event and its effects read back as ``memtap check`` reads them, and nothing else."""
    from memtap.findings.check import gc_paused
    from memtap.findings.reader import read_page

    count, after = 0, None
    with gc_paused():
        while True:
            events, after = read_page(store.db.conn, after=after, limit=5000, lean=True)
            if not events:
                return count
            count += len(events)


def children_cpu() -> float:
    """CPU seconds of the finished child processes (``memtap check``'s workers) so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def check_part(path: Path, n: int) -> tuple[float, float]:
    """Seconds ``check_trace`` took over ``n`` events (every detector, findings stored), and about
    how long it would take on idle cores. The trace at ``path`` is built first, unless it already
    holds ``n`` events (``--trace``: built by an earlier run); its findings are cleared, so every
    run stores the same ones."""
    from memtap.findings.check import check_trace
    from memtap.trace.store import TraceStore

    print(f"\n== memtap check over {n:,} events")
    store = TraceStore(path)
    have = store.count_events()
    if have == n:
        print(f"(reusing the trace at {path})")
        with store.db.conn:
            store.db.conn.execute("DELETE FROM findings")
    elif have:
        raise SystemExit(f"{path} holds {have:,} events, not {n:,}: give another --trace path")
    else:
        t0 = time.perf_counter()
        chunk = 50_000
        for start in range(0, n, chunk):
            store.write_events(mixed_events(min(chunk, n - start), seed=start))
        print(f"(built the trace with TraceStore.write_events, {chunk:,} a transaction, in "
              f"{time.perf_counter() - t0:.1f} s)")  # fmt: skip
    t0, c0 = time.perf_counter(), time.process_time()
    read = read_all(store)
    bare_s, bare_cpu = time.perf_counter() - t0, time.process_time() - c0
    t0, c0, k0 = time.perf_counter(), time.process_time(), children_cpu()
    result = check_trace(store)
    check_s, check_cpu = time.perf_counter() - t0, time.process_time() - c0 + children_cpu() - k0
    store.close()
    assert read == result.events == n
    print(f"reading every event, no detectors: {bare_s:6.1f} s ({n / bare_s:,.0f} events/s; "
          f"{bare_cpu:.1f} s of CPU)")  # fmt: skip
    print(f"memtap check, every detector:      {check_s:6.1f} s ({n / check_s:,.0f} events/s; "
          f"{check_cpu:.1f} s of CPU on {result.processes} process(es)); {len(result.findings):,} findings; "
          f"ratio {check_s / bare_s:.2f}")  # fmt: skip
    print(f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the end: other processes "
          "share them, and the wall times above grow with it)")  # fmt: skip
    idle_s = check_cpu
    if result.part_cpu_s:
        parts = ", ".join(f"{cpu:.1f}" for cpu in result.part_cpu_s)
        # The parent only plans, waits and merges: its own CPU runs beside or after the parts.
        idle_s = max(result.part_cpu_s) + (check_cpu - sum(result.part_cpu_s))
        print(f"CPU seconds of each part's process: {parts}; the parent's own: "
              f"{check_cpu - sum(result.part_cpu_s):.1f}")  # fmt: skip
    print(f"on idle cores (one per process) the check would take about {idle_s:.0f} s: the largest "
          "part's CPU plus the parent's, the disk not counted")  # fmt: skip
    return check_s, idle_s


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--live", type=int, default=50_000, help="events for the live part (0: skip)")
    parser.add_argument(
        "--events", "--check", type=int, default=1_000_000, help="events for the check part (0: skip)"
    )
    parser.add_argument(
        "--trace",
        type=Path,
        help="the check part's trace database: built there if missing, reused if it holds --events events "
        "(building a million takes minutes); default: a temporary file",
    )
    args = parser.parse_args()
    verdicts = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.live:
            ratio, _ = live_part(Path(tmp), args.live)
            met = "met" if ratio >= 0.9 else "NOT met"
            verdicts.append(f"live detection: recorder at {ratio:.2f}x its rate alone (>= 0.90): {met}")
        if args.events:
            seconds, idle_s = check_part(args.trace or Path(tmp) / "check.db", args.events)
            scale = 1_000_000 / args.events
            million, idle = seconds * scale, idle_s * scale
            how = "" if args.events == 1_000_000 else f" (extrapolated from {args.events:,} events)"
            met = "met" if million < 60 else "NOT met"
            verdicts.append(f"memtap check: 1,000,000 events in {million:.0f} s{how} (< 60 s): {met}")
            met = "met" if idle < 60 else "NOT met"
            verdicts.append(
                f"memtap check on idle cores, from its CPU seconds: about {idle:.0f} s{how} (< 60 s): {met}"
            )
    print()
    for line in verdicts:
        print(line)


if __name__ == "__main__":
    main()
