"""``memtap check``: every detector over a trace database, offline, in trace order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from memtap.findings.access import Canary
from memtap.findings.engine import Engine, gc_paused, make_detectors
from memtap.findings.model import Finding, Severity
from memtap.findings.parallel import (
    PARALLEL_MIN_EVENTS,
    check_in_parts,
    default_workers,
    namespace_counts,
)
from memtap.findings.reader import read_page
from memtap.findings.storage import PurgedMeanwhile, purge_mark, save_findings
from memtap.trace.store import TraceStore

__all__ = ["CheckResult", "check_trace", "gc_paused"]

_CHUNK = 5000


@dataclass
class CheckResult:
    events: int = 0
    findings: list[Finding] = field(default_factory=list)
    stored: int = 0
    detector_errors: int = 0
    last_error: str | None = None
    processes: int = 1  # how many processes checked the trace (parts split by namespace)
    part_cpu_s: list[float] = field(default_factory=list)  # CPU seconds of each part's process

    def at_least(self, severity: Severity) -> list[Finding]:
        return [f for f in self.findings if f.severity >= severity]

    def undetermined(self) -> list[Finding]:
        return [f for f in self.findings if f.evidence.get("judged") is False]


def check_trace(
    store: TraceStore,
    *,
    run: str | None = None,
    since: str | None = None,
    canaries: Sequence[Canary] = (),
    only: Sequence[str] | None = None,
    save: bool = True,
    workers: int | None = None,
) -> CheckResult:
    """Feed every event (of ``run``, if given) to a fresh engine; keep the findings of events that
    started at or after ``since`` (earlier events still build the state the rules judge against).

    ``workers``: how many processes check the trace, split by namespace (``parallel.py``; the same
    findings, in the same order); None: one per core for a trace of at least
    ``PARALLEL_MIN_EVENTS`` events, else one. A trace that does not split is checked on one."""
    detectors = make_detectors(canaries, only)
    result = CheckResult()
    mark = purge_mark(store.db)  # a purge while checking: the findings are not stored (save_findings)
    split, counts = _parallel_workers(
        store, run, workers, bool(canaries) and any(d.name == "canary_exposure" for d in detectors)
    )
    merged = (
        check_in_parts(store.path, store.db.conn, run, only, split, counts, columns=save and since is None)
        if split > 1
        else None
    )
    columns = None
    if merged is not None:
        result.events, result.findings = merged.events, merged.findings
        result.detector_errors, result.last_error = merged.detector_errors, merged.last_error
        result.processes, result.part_cpu_s = merged.processes, merged.part_cpu_s
        columns = merged.columns  # worked out by the parts (not with ``since``: it drops findings)
    else:
        engine = Engine(detectors)
        with gc_paused():
            result.events, result.findings = _check(store, run, engine)
        result.detector_errors = engine.stats.detector_errors
        result.last_error = engine.stats.last_error
    if since is not None:
        result.findings = _started_since(store, result.findings, since)
    if save and result.findings:
        try:
            result.stored = len(save_findings(store.db, result.findings, columns, read_at_purge=mark))
        except PurgedMeanwhile:
            raise PurgedMeanwhile(
                "a purge ran while the trace was being checked: no finding was stored; run the check again"
            ) from None
    return result


def _parallel_workers(
    store: TraceStore, run: str | None, workers: int | None, canaries: bool
) -> tuple[int, list[tuple[str | None, int]] | None]:
    """How many processes to check on: one for canaries (their owners are learnt across
    namespaces) or a database that is not a file; and the event count of each namespace, when it
    was read to decide (the parts are planned from it)."""
    if canaries or workers == 1 or not store.path.is_file():
        return 1, None
    if workers is not None:
        return workers, None
    counts = namespace_counts(store.db.conn, run)  # one pass over the namespace index, not two
    total = sum(count for _, count in counts)
    return (default_workers() if total >= PARALLEL_MIN_EVENTS else 1), counts


def _check(store: TraceStore, run: str | None, engine: Engine) -> tuple[int, list[Finding]]:
    found: list[Finding] = []
    count = 0
    after: str | int | None = None
    while True:
        events, after = read_page(store.db.conn, after=after, limit=_CHUNK, run=run, lean=True)
        if not events:
            return count, found
        found.extend(engine.feed(events))
        count += len(events)


def _started_since(store: TraceStore, findings: list[Finding], since: str) -> list[Finding]:
    """The findings whose event started at or after ``since`` (a finding of an event not in the
    trace is kept)."""
    ids = sorted({f.event_id for f in findings})
    started: dict[str, str] = {}
    for at in range(0, len(ids), 500):
        chunk = ids[at : at + 500]
        marks = ",".join("?" * len(chunk))
        for event_id, text in store.db.conn.execute(
            f"SELECT id, started_at FROM events WHERE id IN ({marks})", chunk
        ):
            started[event_id] = datetime.fromisoformat(text).isoformat()
    return [f for f in findings if started.get(f.event_id, since) >= since]
