"""The recorder: events go to a bounded queue; one writer thread inserts them in batches.

Recording is off the request path: a front door hands an event over and goes on.
In ``durable`` mode the front door waits until the batch holding its event is
committed, so an acknowledged call is on disk. Nothing is dropped silently: a full
queue makes the caller wait (and is counted), a database that refuses writes is
retried, and what still cannot be written at shutdown is spilled to a JSON Lines
file beside the database and reported.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from memtap.errors import StoreError
from memtap.trace.models import TraceEvent
from memtap.trace.store import TraceStore

__all__ = ["Recorder", "RecorderStats"]

log = logging.getLogger("memtap.recorder")

_STOP = object()


@dataclass
class RecorderStats:
    submitted: int = 0
    written: int = 0
    batches: int = 0
    overflow_waits: int = 0
    write_retries: int = 0
    spilled: int = 0
    last_error: str | None = None

    def as_dict(self, queue_depth: int) -> dict[str, object]:
        return {**self.__dict__, "queue_depth": queue_depth, "pending": self.submitted - self.written}


class Recorder:
    """Owns the trace store's writing side for one process."""

    def __init__(
        self,
        path: str | Path,
        *,
        durable: bool = False,
        max_queue: int = 50_000,
        batch_size: int = 1000,
        retry_for_s: float = 30.0,
        linger_s: float = 0.005,
    ) -> None:
        self.path = Path(path)
        self.durable = durable
        self.batch_size = batch_size
        self.retry_for_s = retry_for_s
        # After writing a batch, let the next one gather this long (never in durable mode):
        # one wake-up and one commit for many events instead of one per event, which keeps the
        # writer thread from taking the GIL from the event loop after every call.
        self.linger_s = 0.0 if durable else linger_s
        self.stats = RecorderStats()
        self._queue: queue.Queue[object] = queue.Queue(maxsize=max_queue)
        self._thread: threading.Thread | None = None
        self._store: TraceStore | None = None
        self._closing = threading.Event()
        self._idle = threading.Condition()
        # Called on the writer thread with each committed batch (live findings): a callback
        # must only hand the events on, never block; one that raises is logged and skipped.
        self.after_commit: list[Callable[[list[TraceEvent]], None]] = []

    @property
    def spill_path(self) -> Path:
        return self.path.with_name(self.path.name + ".unwritten.jsonl")

    def start(self) -> Recorder:
        """Open the store (raising StoreError now if it cannot be used) and start writing."""
        if self._thread is not None:
            return self
        self._store = TraceStore(self.path, durable=self.durable, check_same_thread=False)
        self._thread = threading.Thread(target=self._run, name="memtap-recorder", daemon=True)
        self._thread.start()
        return self

    def _entry(self, event: TraceEvent) -> tuple[TraceEvent, Future[None]]:
        if self._thread is None or self._closing.is_set():
            raise StoreError("the recorder is not running; the event was not recorded")
        with self._idle:
            self.stats.submitted += 1
        return event, Future()

    def submit(self, event: TraceEvent) -> Future[None]:
        """Queue an event from synchronous code (a full queue blocks this thread); the
        future completes when its batch is committed."""
        entry = self._entry(event)
        try:
            self._queue.put_nowait(entry)
        except queue.Full:
            self.stats.overflow_waits += 1
            self._queue.put(entry)
        return entry[1]

    async def record(self, event: TraceEvent) -> None:
        """Record from async code; in durable mode, return only after the commit.

        A full queue makes this caller wait in a worker thread, never the event loop,
        so other requests go on while the writer catches up.
        """
        entry = self._entry(event)
        try:
            self._queue.put_nowait(entry)
        except queue.Full:
            self.stats.overflow_waits += 1
            await asyncio.to_thread(self._queue.put, entry)
        if self.durable:
            await asyncio.wrap_future(entry[1])

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every event submitted so far is written (or spilled)."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self.stats.written + self.stats.spilled < self.stats.submitted:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def close(self, timeout: float = 30.0) -> None:
        """Flush and stop. Events that cannot be written are spilled, never dropped."""
        if self._thread is None:
            return
        self._closing.set()
        self._queue.put(_STOP)
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.error("recorder did not finish within %.0f s; %s", timeout, self.stats_dict())
        self._thread = None
        if self._store is not None:
            self._store.close()
            self._store = None

    def stats_dict(self) -> dict[str, object]:
        return self.stats.as_dict(self._queue.qsize())

    # -- the writer thread -------------------------------------------------------------

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            batch: list[tuple[TraceEvent, Future[None]]] = []
            if first is _STOP:
                stopping = True
            else:
                batch.append(first)  # type: ignore[arg-type]
            while len(batch) < self.batch_size and not stopping:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stopping = True
                    continue
                batch.append(item)  # type: ignore[arg-type]
            if batch:
                try:
                    self._write(batch)
                except Exception:  # never let the writer die: later events must still be written
                    log.exception("recorder: unexpected failure writing a batch")
            if self.linger_s and not stopping:
                self._closing.wait(self.linger_s)

    def _write(self, batch: list[tuple[TraceEvent, Future[None]]]) -> None:
        try:
            self._write_batch(batch)
        except Exception as exc:  # an event the store cannot take: write the others one by one
            log.error("a batch of %d events failed (%s); writing them one at a time", len(batch), exc)
            for one in batch:
                try:
                    self._write_batch([one])
                except Exception as single:
                    reason = f"{type(single).__name__}: {single}"
                    error = StoreError(f"event {one[0].id} could not be stored: {reason}")
                    self._spill([one[0]], error)
                    one[1].set_exception(error)

    def _write_batch(self, batch: list[tuple[TraceEvent, Future[None]]]) -> None:
        assert self._store is not None
        events = [event for event, _ in batch]
        delay = 0.02
        deadline = time.monotonic() + self.retry_for_s
        while True:
            try:
                self._store.write_events(events)
                error: StoreError | None = None
                break
            except StoreError as exc:
                error = exc
                self.stats.last_error = str(exc)
                if not exc.transient:
                    raise  # retrying cannot help: the caller writes the batch event by event
                self.stats.write_retries += 1
                if time.monotonic() >= deadline:
                    break
                log.warning("trace write failed, retrying: %s", exc)
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
        if error is None:
            # Before the batch counts as written, so whoever flushed the recorder finds it handed on.
            for callback in self.after_commit:
                try:
                    callback(events)
                except Exception:
                    log.exception("recorder: an after-commit callback failed")
            with self._idle:
                self.stats.written += len(batch)
                self.stats.batches += 1
                self._idle.notify_all()
            for _, done in batch:
                done.set_result(None)
            return
        self._spill(events, error)
        for _, done in batch:
            done.set_exception(error)

    def _spill(self, events: list[TraceEvent], error: StoreError) -> None:
        try:
            with self.spill_path.open("a", encoding="utf-8") as fh:
                for event in events:
                    data = event.model_dump(mode="python")
                    fh.write(json.dumps(data, ensure_ascii=True, default=str) + "\n")
            log.error("%d events could not be written (%s); saved to %s", len(events), error, self.spill_path)
        except OSError as exc:  # the spill file failed too: say so loudly
            log.critical("%d events lost: %s; and spill failed: %s", len(events), error, exc)
        with self._idle:
            self.stats.spilled += len(events)
            self._idle.notify_all()
