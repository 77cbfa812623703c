"""``memtap check``: every detector over a trace database, offline, in trace order."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from memtap.findings.access import Canary
from memtap.findings.engine import Engine, make_detectors
from memtap.findings.model import Finding, Severity
from memtap.findings.reader import read_page
from memtap.findings.storage import save_findings
from memtap.trace.store import TraceStore

__all__ = ["CheckResult", "check_trace"]

_CHUNK = 5000


@dataclass
class CheckResult:
    events: int = 0
    findings: list[Finding] = field(default_factory=list)
    stored: int = 0
    detector_errors: int = 0
    last_error: str | None = None

    def at_least(self, severity: Severity) -> list[Finding]:
        return [f for f in self.findings if f.severity >= severity]

    def undetermined(self) -> list[Finding]:
        return [f for f in self.findings if f.evidence.get("judged") is False]


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off for a bulk pass: the events, effects and state built here
    hold no reference cycles, and collecting a heap of millions of them again and again cost more
    than reading them."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def check_trace(
    store: TraceStore,
    *,
    run: str | None = None,
    since: str | None = None,
    canaries: Sequence[Canary] = (),
    only: Sequence[str] | None = None,
    save: bool = True,
) -> CheckResult:
    """Feed every event (of ``run``, if given) to a fresh engine; keep the findings of events that
    started at or after ``since`` (earlier events still build the state the rules judge against)."""
    with gc_paused():
        return _check(store, run, since, Engine(make_detectors(canaries, only)), save)


def _check(store: TraceStore, run: str | None, since: str | None, engine: Engine, save: bool) -> CheckResult:
    result = CheckResult()
    after: str | int | None = None
    while True:
        events, after = read_page(store.db.conn, after=after, limit=_CHUNK, run=run, lean=True)
        if not events:
            break
        found = engine.feed(events)
        if since is not None:
            started = {e.id: e.started_at.isoformat() for e in events}
            found = [f for f in found if started.get(f.event_id, since) >= since]
        result.findings.extend(found)
        result.events += len(events)
    result.detector_errors = engine.stats.detector_errors
    result.last_error = engine.stats.last_error
    if save and result.findings:
        result.stored = len(save_findings(store.db, result.findings))
    return result
