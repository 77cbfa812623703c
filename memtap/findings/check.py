"""``memtap check``: every detector over a trace database, offline, in trace order."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from memtap.findings.access import Canary
from memtap.findings.engine import Engine, make_detectors
from memtap.findings.model import Finding, Severity
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
    engine = Engine(make_detectors(canaries, only))
    result = CheckResult()
    after: str | None = None
    while True:
        events = store.list_events(run=run, after_id=after, limit=_CHUNK)
        if not events:
            break
        after = events[-1].id
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
