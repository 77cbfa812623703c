"""What the detectors cost: live detection beside the recorder, and ``memtap check`` over a big trace.

Runnable on its own: ``.venv/bin/python benchmarks/findings_overhead.py [--live N] [--check N]``.

* **live**: a mixed stream of N events (adds, updates, deletes and searches over 200
  namespaces, as the builtin backend records them) submitted to a ``Recorder`` as fast as it
  takes them, with and without live detection attached (the detector thread fed after each
  commit), interleaved; prints the recorder's sustained rate in both, the ratio (target: no more
  than 10% slower), and how long the detectors took to catch up after the last commit.
* **check**: a trace of N events (default 1,000,000) written straight to a database, then
  ``check_trace`` (every detector, findings stored) against the same pass with no detectors
  (reading every event back in id order); target under 60 s.
"""

from __future__ import annotations

import argparse
import random
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


def live_part(tmp: Path, n: int) -> None:
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


def check_part(tmp: Path, n: int) -> None:
    from memtap.findings.check import check_trace
    from memtap.trace.store import TraceStore

    print(f"\n== memtap check over {n:,} events")
    path = tmp / "check.db"
    store = TraceStore(path)
    t0 = time.perf_counter()
    chunk = 50_000
    for start in range(0, n, chunk):
        store.write_events(mixed_events(min(chunk, n - start), seed=start))
    print(f"(built the trace in {time.perf_counter() - t0:.1f} s)")
    t0 = time.perf_counter()
    bare = check_trace(store, only=[], save=False)
    bare_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = check_trace(store)
    check_s = time.perf_counter() - t0
    store.close()
    assert bare.events == result.events == n
    print(f"reading every event, no detectors: {bare_s:6.1f} s ({n / bare_s:,.0f} events/s)")
    print(f"memtap check, every detector:      {check_s:6.1f} s ({n / check_s:,.0f} events/s); "
          f"{len(result.findings):,} findings; ratio {check_s / bare_s:.2f}; target < 60 s")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--live", type=int, default=50_000, help="events for the live part (0: skip)")
    parser.add_argument("--check", type=int, default=1_000_000, help="events for the check part (0: skip)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.live:
            live_part(Path(tmp), args.live)
        if args.check:
            check_part(Path(tmp), args.check)


if __name__ == "__main__":
    main()
