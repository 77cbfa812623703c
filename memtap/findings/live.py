"""Live findings: the detectors run in a process of their own, woken after each recorder commit.

Nothing here is on the request path, nor on the recorder's interpreter. The recorder's writer
thread only bumps a counter (a "poke"); a small thread writes the latest poke to the detector
process (``memtap.findings.worker``), which reads the newly committed events from the database,
runs the engine, stores new findings and sends them back. Here they are exported to
OpenTelemetry (on the span of their call, which lives in this process) and notified: a command
or webhook runs on a thread of its own with a bounded timeout; a failure is logged, counted and
recorded as a ``control`` event of the trace.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import IO, Any

from memtap.findings.model import Finding, Severity
from memtap.findings.otel import export_finding
from memtap.findings.reader import tail_start
from memtap.findings.settings import FindingsSettings
from memtap.ids import new_id
from memtap.trace.models import Context, Op, TraceEvent, utc_now
from memtap.trace.store import TraceStore
from memtap.trace.writer import Recorder

__all__ = ["LiveFindings"]

log = logging.getLogger("memtap.findings")

_STOP = object()
# How often the poke thread looks for new commits. Woken by every commit instead, it took the
# interpreter lock from the recorder's threads hundreds of times a second (measured: the recorder
# at 0.74x its rate with a detector process that did no work at all).
_POKE_EVERY_S = 0.05


def finding_from_dict(data: dict[str, Any]) -> Finding:
    """A finding as :meth:`Finding.as_dict` wrote it."""
    return Finding(**{**data, "severity": Severity.parse(data["severity"])})


class LiveFindings:
    """One process's live detection: start it, attach it to the recorder, close it after the recorder."""

    def __init__(self, db: str | Path, settings: FindingsSettings, recorder: Recorder | None = None) -> None:
        self.db = Path(db)
        self.settings = settings
        self.recorder = recorder
        self.notify_failures = 0
        self.stored = 0
        self.worker_error: str | None = None
        self._stats: dict[str, Any] = {"events": 0, "findings": 0, "by_kind": {}, "detector_errors": 0}
        self._notify: queue.Queue[object] = queue.Queue(maxsize=1000)
        self._threads: list[threading.Thread] = []
        self._idle = threading.Condition()
        self._poked = 0  # pokes made (one per commit handed over)
        self._sent = 0  # the last poke written to the worker
        self._acked = 0  # the last poke the worker answered
        self._closing = False
        self._urgent = False
        self._worker: subprocess.Popen[str] | None = None
        self._min_notify = Severity.parse(settings.notify_severity)

    def start(self) -> LiveFindings:
        store = TraceStore(self.db)
        try:
            after = tail_start(store.db.conn)  # a serving process judges what it records from now on
        finally:
            store.close()
        self._worker = subprocess.Popen(
            [sys.executable, "-m", "memtap.findings.worker", str(self.db)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
        assert self._worker.stdin is not None
        canaries = [[c.value, sorted(c.owners), c.configured] for c in self.settings.canary_list()]
        self._worker.stdin.write(json.dumps({"after": after, "canaries": canaries}) + "\n")
        self._worker.stdin.flush()
        self._threads = [
            threading.Thread(target=self._run_pokes, name="memtap-findings-poke", daemon=True),
            threading.Thread(target=self._run_answers, name="memtap-findings", daemon=True),
            threading.Thread(target=self._run_notify, name="memtap-findings-notify", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        if self.recorder is not None:
            self.recorder.after_commit.append(self.submit)
        return self

    def submit(self, events: list[TraceEvent]) -> None:
        """Called by the recorder after a commit: poke the worker, never wait. The worker reads
        the committed events from the database itself."""
        with self._idle:
            self._poked += 1  # no wake-up: waking a thread per commit took the GIL from the recorder

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Wait until every event committed before this call has been examined (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        with self._idle:
            target = self._poked
            self._urgent = True  # poke now, not at the next look
            self._idle.notify_all()
            while self._acked < target:
                left = deadline - time.monotonic()
                if left <= 0 or self.worker_error is not None:
                    return False
                self._idle.wait(left)
        return True

    def close(self, timeout: float = 30.0) -> None:
        if self.recorder is not None and self.submit in self.recorder.after_commit:
            self.recorder.after_commit.remove(self.submit)
        if not self._threads:
            return
        self.wait_idle(timeout)  # what was committed before closing is examined
        with self._idle:
            self._closing = True
            self._idle.notify_all()
        self._threads[0].join(timeout)
        worker = self._worker
        if worker is not None:
            try:
                worker.wait(timeout)
            except subprocess.TimeoutExpired:
                log.error("live findings: the detector process did not end; killing it")
                worker.kill()
                worker.wait()
        self._threads[1].join(timeout)
        self._notify.put(_STOP)
        self._threads[2].join(self.settings.notify_timeout_s + 1)
        self._threads = []

    def stats_dict(self) -> dict[str, object]:
        with self._idle:
            stats = dict(self._stats)
            lag = self._poked - self._acked
        return {
            "events": stats.get("events", 0),
            "findings": stats.get("findings", 0),
            "stored": self.stored,
            "by_kind": dict(stats.get("by_kind", {})),
            "detector_errors": stats.get("detector_errors", 0),
            "notify_failures": self.notify_failures,
            "pending_commits": lag,
            **({"worker_error": self.worker_error} if self.worker_error else {}),
        }

    # -- talking to the detector process -------------------------------------------------

    def _run_pokes(self) -> None:
        """Every ``_POKE_EVERY_S`` (at once when someone waits), write the latest poke to the
        worker if there is a newer one (many commits, one line); end its input when closing."""
        worker = self._worker
        assert worker is not None and worker.stdin is not None
        pipe: IO[str] = worker.stdin
        try:
            while True:
                with self._idle:
                    if not self._urgent and not self._closing:
                        self._idle.wait(_POKE_EVERY_S)
                    self._urgent = False
                    if self._poked == self._sent:
                        if self._closing:
                            break  # nothing more to send
                        continue
                    seq = self._sent = self._poked
                pipe.write(f"{seq}\n")
                pipe.flush()
        except (OSError, ValueError) as exc:
            self._worker_failed(f"the detector process stopped reading: {exc}")
        finally:
            with contextlib.suppress(OSError):
                pipe.close()

    def _run_answers(self) -> None:
        """Read the worker's answers: export and notify the new findings, then count the poke
        answered (so ``wait_idle`` returns once the findings are on their spans)."""
        worker = self._worker
        assert worker is not None and worker.stdout is not None
        for line in worker.stdout:
            try:
                answer = json.loads(line)
                found = [finding_from_dict(data) for data in answer["findings"]]
            except Exception:
                log.exception("live findings: an answer of the detector process could not be read")
                continue
            for finding in found:  # one that cannot be exported holds back neither the others nor the ack
                try:
                    self._publish(finding)
                except Exception:
                    log.exception("live findings: finding %s could not be exported", finding.id)
            if answer.get("error"):
                log.warning("live findings: %s", answer["error"])
            with self._idle:
                self._stats = answer["stats"]
                self.stored = int(answer["stats"].get("stored", self.stored))
                self._acked = max(self._acked, int(answer["ack"]))
                self._idle.notify_all()
        code = worker.wait()
        if not self._closing or code != 0:
            self._worker_failed(f"the detector process ended (exit code {code})")

    def _worker_failed(self, message: str) -> None:
        log.error("live findings: %s; live detection is off, memtap check finds the rest", message)
        with self._idle:
            self.worker_error = self.worker_error or message  # the first cause, not its echo
            self._idle.notify_all()

    def _publish(self, finding: Finding) -> None:
        export_finding(finding)
        if (self.settings.command or self.settings.webhook) and finding.severity >= self._min_notify:
            try:
                self._notify.put_nowait(finding)
            except queue.Full:
                self.notify_failures += 1

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
