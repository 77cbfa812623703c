"""Live findings: the detectors run on a thread of their own, fed each batch the recorder commits.

Nothing here is on the request path. The recorder's writer thread only puts the committed batch
on a bounded queue (``submit`` never blocks: a full queue is counted and the batch left to
``memtap check``). The detector thread runs the engine, stores new findings, and exports them
to OpenTelemetry. Notifications (a command, a webhook) run on a third thread with a bounded
timeout; a failure is logged, counted and recorded as a ``control`` event of the trace.
"""

from __future__ import annotations

import json
import logging
import queue
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

from memtap.findings.engine import Engine, make_detectors
from memtap.findings.model import Finding, Severity
from memtap.findings.otel import export_finding
from memtap.findings.settings import FindingsSettings
from memtap.findings.storage import save_findings
from memtap.ids import new_id
from memtap.trace.models import Context, Op, TraceEvent, utc_now
from memtap.trace.store import TraceStore
from memtap.trace.writer import Recorder

__all__ = ["LiveFindings"]

log = logging.getLogger("memtap.findings")

_STOP = object()


class LiveFindings:
    """One process's live detection: start it, attach it to the recorder, close it after the recorder."""

    def __init__(self, db: str | Path, settings: FindingsSettings, recorder: Recorder | None = None) -> None:
        self.db = Path(db)
        self.settings = settings
        self.recorder = recorder
        self.engine = Engine(make_detectors(settings.canary_list()))
        self.skipped_batches = 0
        self.notify_failures = 0
        self.stored = 0
        self._queue: queue.Queue[object] = queue.Queue(maxsize=1000)
        self._notify: queue.Queue[object] = queue.Queue(maxsize=1000)
        self._threads: list[threading.Thread] = []
        self._idle = threading.Condition()
        self._pending = 0
        self._min_notify = Severity.parse(settings.notify_severity)

    def start(self) -> LiveFindings:
        self._threads = [
            threading.Thread(target=self._run, name="memtap-findings", daemon=True),
            threading.Thread(target=self._run_notify, name="memtap-findings-notify", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        if self.recorder is not None:
            self.recorder.after_commit.append(self.submit)
        return self

    def submit(self, events: list[TraceEvent]) -> None:
        """Called by the recorder after a commit: hand the batch over, never wait."""
        with self._idle:
            self._pending += 1
        try:
            self._queue.put_nowait(events)
        except queue.Full:
            self.skipped_batches += 1
            with self._idle:
                self._pending -= 1
                self._idle.notify_all()

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until every batch handed over so far has been examined (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def close(self, timeout: float = 30.0) -> None:
        if self.recorder is not None and self.submit in self.recorder.after_commit:
            self.recorder.after_commit.remove(self.submit)
        if not self._threads:
            return
        self._queue.put(_STOP)
        self._threads[0].join(timeout)
        self._notify.put(_STOP)
        self._threads[1].join(self.settings.notify_timeout_s + 1)
        self._threads = []

    def stats_dict(self) -> dict[str, object]:
        stats = self.engine.stats
        return {
            "events": stats.events,
            "findings": stats.findings,
            "stored": self.stored,
            "by_kind": dict(stats.by_kind),
            "detector_errors": stats.detector_errors,
            "skipped_batches": self.skipped_batches,
            "notify_failures": self.notify_failures,
        }

    # -- the detector thread ---------------------------------------------------------

    def _run(self) -> None:
        store: TraceStore | None = None
        try:
            store = TraceStore(self.db, check_same_thread=False)
        except Exception:
            log.exception("live findings: the trace database could not be opened; detection is off")
        while True:
            item = self._queue.get()
            if item is _STOP:
                break
            try:
                found = self.engine.feed(item)  # type: ignore[arg-type]
                fresh = save_findings(store.db, found) if (store is not None and found) else []
                self.stored += len(fresh)
                for finding in fresh:
                    export_finding(finding)
                    if (
                        self.settings.command or self.settings.webhook
                    ) and finding.severity >= self._min_notify:
                        try:
                            self._notify.put_nowait(finding)
                        except queue.Full:
                            self.notify_failures += 1
            except Exception:
                log.exception("live findings: a batch could not be examined")
            finally:
                with self._idle:
                    self._pending -= 1
                    self._idle.notify_all()
        if store is not None:
            store.close()

    # -- notifications -----------------------------------------------------------------

    def _run_notify(self) -> None:
        while True:
            item = self._notify.get()
            if item is _STOP:
                return
            assert isinstance(item, Finding)
            self._deliver(item)

    def _deliver(self, finding: Finding) -> None:
        body = json.dumps(finding.as_dict(), ensure_ascii=False, default=str).encode()
        timeout = self.settings.notify_timeout_s
        problems = []
        if self.settings.command:
            try:
                done = subprocess.run(
                    self.settings.command, input=body, capture_output=True, timeout=timeout, check=False
                )
                if done.returncode != 0:
                    problems.append(
                        f"command exited {done.returncode}: {done.stderr.decode(errors='replace')[:200]}"
                    )
            except (OSError, subprocess.TimeoutExpired) as exc:
                problems.append(f"command failed: {type(exc).__name__}: {exc}")
        if self.settings.webhook:
            request = urllib.request.Request(
                str(self.settings.webhook),
                data=body,
                method="POST",
                headers={"Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(request, timeout=timeout) as response:
                    response.read(1024)
            except Exception as exc:  # any failure of someone else's endpoint: bounded, recorded
                problems.append(f"webhook failed: {type(exc).__name__}: {exc}")
        if problems:
            self.notify_failures += 1
            message = f"finding {finding.id} ({finding.kind}): " + "; ".join(problems)
            log.warning("findings notification: %s", message)
            self._record_failure(finding, message)

    def _record_failure(self, finding: Finding, message: str) -> None:
        if self.recorder is None:
            return
        now = utc_now()
        event = TraceEvent(
            id=new_id(),
            started_at=now,
            ended_at=now,
            front_door="findings",
            backend="memtap",
            tool="findings.notify",
            op=Op.CONTROL,
            context=Context(namespace=finding.namespace or "local", principal="memtap"),
            arguments={"finding": finding.id, "kind": finding.kind},
            status="error",
            error=message,
        )
        try:
            self.recorder.privacy.apply(event)  # as every recorded call's event: policy and secrets
            self.recorder.submit(event)
        except Exception:
            log.exception("findings notification failure could not be recorded")


def start_live_findings(
    db: str | Path, settings: FindingsSettings, recorder: Recorder
) -> LiveFindings | None:
    """Live detection for a serving process, attached to its recorder (``None`` when turned off)."""
    if not settings.live:
        return None
    return LiveFindings(db, settings, recorder).start()
