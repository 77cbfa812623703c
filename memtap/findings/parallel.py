"""``memtap check`` on several processes: the trace split by namespace, each part checked by its own
engine, the findings merged back into trace order.

Every rule judges an event against what earlier events did to the same items, the same
namespaces (the effects' namespaces and the call's), the same session's turns and the calls it
links to; nothing else. So when the namespaces fall into groups that no event, item or link
crosses, each group can be checked on its own, and the findings of its events are exactly the
ones a single engine over the whole trace finds for them, in the same order (an event's findings
all come from the part that holds it). Whether the trace splits is only known while it is read,
so every part checks as it goes and reports what would join it to another:

* an event whose call or effect names a namespace outside its part (an item of namespace A
  served to B, a write across namespaces): the part stops at once;
* the items its effects touch: an item id two parts touch joins them (ids, whatever the backend:
  a coarser test, never a looser one);
* the events it links to (``parent_id``, ``links``: a chat and its memory search): each must be
  in the same part, or not in the trace.

If anything joins two parts, or a canary is configured (its owners are learnt across namespaces),
the check runs on one engine instead: the same findings, only slower. Parts are balanced by how
many events each namespace has, largest first.
"""

from __future__ import annotations

import os
import pickle
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from heapq import merge
from pathlib import Path

from memtap.findings.engine import Engine, gc_paused, make_detectors
from memtap.findings.model import EventView, Finding
from memtap.findings.reader import read_page
from memtap.findings.rows import Columns, finding_columns

__all__ = ["PartResult", "check_in_parts", "namespace_counts", "plan_parts"]

PARALLEL_MIN_EVENTS = 50_000  # below this a trace is checked on one process (starting more costs more)
_CHUNK = 5000


@dataclass
class PartResult:
    """What one part found, and what would join it to another part."""

    events: int = 0
    findings: list[tuple[str, Finding]] = field(default_factory=list)  # (id of the event seen, finding)
    columns: list[Columns] = field(default_factory=list)  # each finding's ``finding_columns``, when asked
    detector_errors: int = 0
    last_error: tuple[str, str] | None = None  # (event id, message) of the last error
    foreign: str | None = None  # why this part cannot be checked on its own
    items: set[str] = field(default_factory=set)
    links: set[str] = field(default_factory=set)
    cpu_s: float = 0.0  # CPU seconds the part's process spent (benchmarks: how even the parts are)


def namespace_counts(conn: sqlite3.Connection, run: str | None) -> list[tuple[str | None, int]]:
    """How many events each namespace of the trace (of ``run``) has."""
    sql = "SELECT namespace, count(*) FROM events"
    args: tuple[str, ...] = ()
    if run is not None:
        sql += " WHERE run_id = ?"
        args = (run,)
    return [(namespace, count) for namespace, count in conn.execute(sql + " GROUP BY namespace", args)]


def plan_parts(
    conn: sqlite3.Connection,
    run: str | None,
    workers: int,
    counts: list[tuple[str | None, int]] | None = None,
) -> list[list[str | None]]:
    """The namespaces of the trace (of ``run``) in up to ``workers`` parts of similar event counts
    (``counts``: ``namespace_counts``, when the caller has them already)."""
    if counts is None:
        counts = namespace_counts(conn, run)
    parts: list[tuple[int, list[str | None]]] = [(0, []) for _ in range(max(1, workers))]
    for namespace, count in sorted(counts, key=lambda row: (-row[1], row[0] or "")):
        size, names = min(parts, key=lambda part: part[0])
        parts[parts.index((size, names))] = (size + count, [*names, namespace])
    return [names for _, names in parts if names]


def check_part(
    path: str,
    run: str | None,
    only: Sequence[str] | None,
    namespaces: list[str | None],
    keep: list[object] | None = None,
    columns: bool = False,
) -> PartResult:
    """One part's events (of ``run``), in trace order, through a fresh engine (runs in a worker).
    ``columns``: each finding's stored columns are worked out here too (beside the other parts,
    not after them in the parent).

    ``keep``: the engine is appended to it rather than freed on return (a worker then exits
    without freeing the millions of objects of its state one by one: ``part_worker``). Pages are
    freed as they go: kept, they cost more than freeing them (a 1,000,000-event part: 67.9 s of
    CPU against 60.1 s, its memory 3.4 GB against 1.8 GB; freed pages' memory is reused)."""
    result = PartResult()
    mine = set(namespaces)
    conn = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True)  # read only
    engine = Engine(make_detectors((), only))
    if keep is not None:
        keep.append(engine)
    stats, found, items, links = engine.stats, result.findings, result.items, result.links
    after: str | int | None = None
    try:
        with gc_paused():
            while result.foreign is None:
                events, after = read_page(
                    conn, after=after, limit=_CHUNK, run=run, lean=True, namespaces=namespaces
                )
                if not events:
                    break
                # What would join this part to another, for the whole page before any of it is
                # fed (a part that stops is checked again on one engine: its findings are dropped).
                result.foreign = _joins(events, mine, items, links)
                if result.foreign is not None:
                    break
                found.extend(engine.feed_seen(events))
                result.events += len(events)
    finally:
        conn.close()
    if columns:
        result.columns = [finding_columns(finding) for _, finding in found]
    result.detector_errors = stats.detector_errors
    result.cpu_s = time.process_time()
    if stats.last_error_event is not None:
        result.last_error = (stats.last_error_event, stats.last_error or "")
    return result


def _joins(
    events: Sequence[EventView], mine: set[str | None], items: set[str], links: set[str]
) -> str | None:
    """Why a page joins its part to another (its first event naming a namespace outside ``mine``),
    or None; the items its effects touch and the events it links to are added to ``items`` and
    ``links``. Set operations over the whole page (a page mostly holds none of these)."""
    effects = [eff for event in events for eff in event.effects]
    named = {event.context.namespace for event in events}
    named.update([eff.namespace for eff in effects if eff.namespace is not None])
    if not named <= mine:
        for event in events:  # the first event that names one, as a loop over the page finds it
            if event.context.namespace not in mine:
                return f"event {event.id} is in namespace {event.context.namespace!r}"
            for eff in event.effects:
                if eff.namespace is not None and eff.namespace not in mine:
                    return f"event {event.id} touched namespace {eff.namespace!r}"
    items.update([eff.item_id for eff in effects])
    links.update([event.parent_id for event in events if event.parent_id is not None])
    for event in events:
        if event.links:
            links.update(event.links)
    return None


@dataclass
class Merged:
    events: int
    findings: list[Finding]
    columns: list[Columns] | None  # each finding's ``finding_columns``, when asked
    detector_errors: int
    last_error: str | None
    processes: int
    part_cpu_s: list[float]


def check_in_parts(
    path: Path,
    conn: sqlite3.Connection,
    run: str | None,
    only: Sequence[str] | None,
    workers: int,
    counts: list[tuple[str | None, int]] | None = None,
    columns: bool = False,
) -> Merged | None:
    """The findings of the whole trace, checked in parts on ``workers`` processes; None when the
    trace does not split (one part, or something joins two: the caller checks it on one engine).
    ``counts``: ``namespace_counts``, when the caller has them already; ``columns``: the parts work
    out each finding's stored columns (``finding_columns``) too."""
    parts = plan_parts(conn, run, workers, counts)
    if len(parts) < 2:
        return None
    # Workers are ``python -m memtap.findings.part_worker`` children (not multiprocessing's: those
    # import the caller's ``__main__`` again, or fork its threads): the part's arguments pickled
    # on stdin, its result on stdout.
    env = worker_env(os.environ)
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "memtap.findings.part_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        for _ in parts
    ]
    results: list[PartResult] = []
    try:
        for child, names in zip(children, parts, strict=True):
            assert child.stdin is not None
            child.stdin.write(pickle.dumps((str(path), run, only, names, columns)))
            child.stdin.close()
        for child in children:
            assert child.stdout is not None
            data = child.stdout.read()
            if child.wait() != 0:
                return None  # a worker failed (it said why on stderr): check on one engine
            with gc_paused():  # the findings hold no cycles: scanning them as they are made cost 4x
                results.append(pickle.loads(data))
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    if any(r.foreign is not None for r in results) or _joined(results) or _links_cross(conn, parts, results):
        return None
    errors = [r.last_error for r in results if r.last_error is not None]
    with gc_paused():
        # Trace order: each part's findings (with their columns) are in it, keyed by the event seen.
        ordered = list(
            merge(
                *(zip(r.findings, r.columns or [()] * len(r.findings), strict=True) for r in results),
                key=lambda pair: pair[0][0],
            )
        )
    return Merged(
        events=sum(r.events for r in results),
        findings=[f for (_, f), _ in ordered],
        columns=[cols for _, cols in ordered] if columns else None,
        detector_errors=sum(r.detector_errors for r in results),
        last_error=max(errors)[1] if errors else None,
        processes=len(parts),
        part_cpu_s=[r.cpu_s for r in results],
    )


def _joined(results: Sequence[PartResult]) -> bool:
    """Whether two parts touched one item."""
    seen: set[str] = set()
    for result in results:
        if not seen.isdisjoint(result.items):
            return True
        seen |= result.items
    return False


def _links_cross(
    conn: sqlite3.Connection, parts: list[list[str | None]], results: Iterable[PartResult]
) -> bool:
    """Whether an event links to an event of another part."""
    for names, result in zip(parts, results, strict=True):
        mine = set(names)
        linked = sorted(result.links)
        for start in range(0, len(linked), 500):
            chunk = linked[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for (namespace,) in conn.execute(f"SELECT namespace FROM events WHERE id IN ({marks})", chunk):
                if namespace not in mine:
                    return True
    return False


# glibc's malloc asks the kernel for transparent huge pages for what it maps (glibc 2.35 and later;
# an older glibc, or another C library, ignores the setting). A part's state is a heap of 1-2 GB
# read at random; with 4 KiB pages most of its lookups miss the TLB. With 2 MiB pages part 0 of a
# 1,000,000-event trace spent 57.7 and 51.6 s of CPU against 63.6 and 60.0 s (alternated runs,
# the same findings); what pymalloc maps for small objects itself is not affected.
_HUGE_PAGES = "glibc.malloc.hugetlb=1"


def worker_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment of a part worker: ``env``, with glibc's malloc told to use transparent huge
    pages (``GLIBC_TUNABLES``; tunables the caller set are kept, and a hugetlb setting of theirs wins)."""
    out = dict(env)
    tunables = out.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.hugetlb=" not in tunables:
        out["GLIBC_TUNABLES"] = f"{tunables}:{_HUGE_PAGES}" if tunables else _HUGE_PAGES
    return out


def default_workers() -> int:
    return max(1, min(os.cpu_count() or 1, 8))
