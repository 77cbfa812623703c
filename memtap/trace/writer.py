"""The recorder: events go to a bounded queue; one writer thread inserts them in batches.

Recording is off the request path: a front door hands an event over and goes on.
In ``durable`` mode the front door waits until the batch holding its event is
committed, so an acknowledged call is on disk. Nothing is dropped silently: a full
queue makes the caller wait (and is counted), a database that refuses writes is
retried, and what still cannot be written at shutdown is spilled to a JSON Lines
file beside the database and reported.

Cancellation-safe: a caller that stops waiting (a cancelled task, a client that went
away) never stops its event from being written, and never touches another caller's
answer. The writer settles each future once, after its batch's transaction is over,
and skips futures whose waiter is gone; a batch is written again event by event only
when its transaction failed, never after it committed.

A write of the builtin backend commits its event in its own transaction (see
:mod:`memtap.trace.calls`); :meth:`Recorder.count_committed` counts such events here too.

Durable mode with the journal (the default; ``MEMTAP_DURABLE_JOURNAL=0`` turns it off): a
small batch (a lone caller's event) is appended to the synced journal beside the database
(:mod:`memtap.trace.journal`) and answered; the journaled events are inserted into the
database in one commit when 64 are waiting, when no event came for ``journal_linger_s``, on
``flush()`` and ``close()``, before the journal would overflow, and together with the next
larger batch (which commits as before), so they reach the tables in the order they came.
A journaled event counts as written once it is in the tables; after a crash the next
recorder on the database puts the journal's events in first.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from pathlib import Path

from memtap.errors import StoreError
from memtap.trace.after import AnsweredFirst
from memtap.trace.journal import JOURNAL_BYTES
from memtap.trace.lane import JournalLane
from memtap.trace.models import TraceEvent
from memtap.trace.privacy import TracePrivacy
from memtap.trace.store import TraceStore

__all__ = ["Recorder", "RecorderStats"]

log = logging.getLogger("memtap.recorder")

_STOP = object()
_FLUSH = object()  # put by flush(): insert the journaled events now

# An event and who waits for its commit: a caller of submit(), a durable caller of record()
# (a future of its event loop), or nobody.
_Entry = tuple[TraceEvent, "Future[None] | asyncio.Future[None] | None"]


def _answer(done: asyncio.Future[None], error: StoreError | None) -> None:
    """On the waiter's event loop: complete its future unless it was cancelled meanwhile."""
    if done.done():
        return
    if error is None:
        done.set_result(None)
    else:
        done.set_exception(error)


@dataclass
class RecorderStats:
    submitted: int = 0
    written: int = 0
    batches: int = 0
    overflow_waits: int = 0
    write_retries: int = 0
    spilled: int = 0
    # Events committed by the builtin backend in its write transaction (also in submitted/written).
    committed_with_write: int = 0
    # Calls being served now (recorded_call entered, not yet left): they will each add one event.
    open_calls: int = 0
    # Calls whose caller went away (cancelled) while served or while waiting for a durable commit.
    cancelled: int = 0
    # Durable events answered once in the synced journal (then inserted in batches).
    journaled: int = 0
    # Events found in the journal at start (a crash before they were inserted) and inserted then.
    recovered: int = 0
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
        max_linger_s: float = 0.05,
        journal: bool | None = None,
        journal_bytes: int = JOURNAL_BYTES,
        journal_batch: int = 4,
        journal_pending: int = 64,
        journal_linger_s: float = 0.01,
    ) -> None:
        self.path = Path(path)
        self.real_path = self.path.resolve()  # what a backend writing the same file compares
        self.durable = durable
        self.batch_size = batch_size
        self.retry_for_s = retry_for_s
        # After writing a batch, let the next one gather a while (never in durable mode): one
        # wake-up and one commit for many events instead of one per event, which keeps the
        # writer thread from taking the GIL from the event loop after every call. Adaptive:
        # the linger starts at linger_s, doubles (up to max_linger_s) while batches hold more
        # than one event, and halves back while they hold one. An event that finds the writer
        # idle is written at once; a busy one waits at most max_linger_s plus the writes of
        # the batch before it and its own. flush() and close() cut a linger short.
        self.linger_s = 0.0 if durable else linger_s
        self.max_linger_s = 0.0 if durable else max(linger_s, max_linger_s)
        self._linger = self.linger_s  # the current one (writer thread only)
        self._wake = threading.Event()  # set by flush() and close(): stop lingering
        self.stats = RecorderStats()
        # Applied to every event before it is recorded (recorded_call): content policy, secrets.
        self.privacy = TracePrivacy()
        self._queue: queue.Queue[object] = queue.Queue(maxsize=max_queue)
        self._thread: threading.Thread | None = None
        self._store: TraceStore | None = None
        self._closing = threading.Event()
        self._give_up_at = float("inf")  # set by close(): retrying stops here
        self._idle = threading.Condition()
        # Calls answered before they were recorded (outside durable mode): flush() waits for them.
        self.answered_first = AnsweredFirst(self._idle)
        # Events whose finishing was left to the writer thread (record(finish=...)), by id.
        self._finishing: dict[str, Callable[[TraceEvent], None]] = {}
        # Called on the writer thread with each committed batch (live findings): a callback
        # must only hand the events on, never block; one that raises is logged and skipped.
        self.after_commit: list[Callable[[list[TraceEvent]], None]] = []
        # The durable journal (see the module's docstring and trace/lane.py).
        if journal is None:
            journal = os.environ.get("MEMTAP_DURABLE_JOURNAL", "1").lower() not in ("0", "false", "no", "off")
        self.lane = JournalLane(
            self.path,
            enabled=durable and journal,
            size=journal_bytes,
            batch=journal_batch,
            pending_max=journal_pending,
            linger_s=journal_linger_s,
        )
        self._unsaved = 0  # events neither written nor spilled (the spill file failed too)

    @property
    def spill_path(self) -> Path:
        return self.path.with_name(self.path.name + ".unwritten.jsonl")

    @property
    def journal_path(self) -> Path:
        return self.lane.path

    def start(self) -> Recorder:
        """Open the store (raising StoreError now if it cannot be used), put in the events a
        crashed process left in the journal, and start writing."""
        if self._thread is not None:
            return self
        self._store = TraceStore(self.path, durable=self.durable, check_same_thread=False)
        try:
            self.stats.recovered = self.lane.open(self._store)
        except BaseException:
            self._store.close()
            self._store = None
            raise
        self._thread = threading.Thread(target=self._run, name="memtap-recorder", daemon=True)
        self._thread.start()
        return self

    def _check_running(self, event: TraceEvent) -> None:
        if self._thread is None or self._closing.is_set():
            error = StoreError("the recorder is not running")
            raise StoreError(f"the recorder is not running; {self._spill([event], error)}")
        with self._idle:
            self.stats.submitted += 1

    def _after_commit(self, events: list[TraceEvent]) -> None:
        for callback in self.after_commit:
            try:
                callback(events)
            except Exception:
                log.exception("recorder: an after-commit callback failed")

    def count_committed(self, n: int = 1, events: list[TraceEvent] | None = None) -> None:
        """Count events that a backend committed in its own write transaction (``events``:
        handed to the after-commit callbacks, as the writer thread's own batches are)."""
        if events:
            self._after_commit(events)
        with self._idle:
            self.stats.submitted += n
            self.stats.written += n
            self.stats.committed_with_write += n
            self._idle.notify_all()

    def submit(self, event: TraceEvent) -> Future[None]:
        """Queue an event from synchronous code (a full queue blocks this thread); the
        future completes when its batch is committed."""
        self._check_running(event)
        done: Future[None] = Future()
        entry = (event, done)
        try:
            self._queue.put_nowait(entry)
        except queue.Full:
            self.stats.overflow_waits += 1
            self._queue.put(entry)
        return done

    async def record(self, event: TraceEvent, *, finish: Callable[[TraceEvent], None] | None = None) -> None:
        """Record from async code; in durable mode, return only after the commit.

        A full queue makes this caller wait in a worker thread, never the event loop,
        so other requests go on while the writer catches up.

        ``finish`` completes the event off the caller's path: the writer thread runs it just
        before the event's batch is written (or spilled), so what is stored is the finished
        event. In durable mode, or when the recorder is not running, it runs here first.
        """
        if finish is not None and (self.durable or self._thread is None or self._closing.is_set()):
            finish(event)
            finish = None
        self._check_running(event)
        if finish is not None:  # before the event is queued: the writer sees both or neither
            self._finishing[event.id] = finish
        # Durable: the writer answers this loop's future; not durable: nobody waits.
        done = asyncio.get_running_loop().create_future() if self.durable else None
        entry = (event, done)
        try:
            self._queue.put_nowait(entry)
        except queue.Full:
            self.stats.overflow_waits += 1
            await asyncio.to_thread(self._queue.put, entry)
        if done is not None:
            # A cancelled wait cancels only this future: the event stays queued and is written,
            # and the writer skips futures that are already done (see _settle).
            try:
                await done
            except asyncio.CancelledError:
                self.stats.cancelled += 1
                raise

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every event submitted so far is written (or spilled), the events of calls
        answered before they were recorded included (call it from another thread than their loop's)."""
        deadline = time.monotonic() + timeout
        self._wake.set()
        if self.lane.enabled:
            with contextlib.suppress(queue.Full):  # a full queue: the writer is busy and inserts them soon
                self._queue.put_nowait(_FLUSH)
        with self._idle:
            stats = self.stats
            while self.answered_first.pending or stats.written + stats.spilled < stats.submitted:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def close(self, timeout: float = 30.0) -> None:
        """Flush and stop within ``timeout``. Events that cannot be written are spilled, never dropped.

        Closing cuts the retry window short: a batch still refused a second before the
        timeout is spilled, so the writer ends before the store is closed. A writer that is
        still busy anyway (a commit stuck in the file system) keeps its store open.
        """
        if self._thread is None:
            return
        self._give_up_at = time.monotonic() + max(0.0, timeout - 1.0)
        self._closing.set()
        self._wake.set()
        self._queue.put(_STOP)
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.error(
                "recorder did not finish within %.0f s; its store stays open; %s", timeout, self.stats_dict()
            )
            self._thread = None
            return
        self._thread = None
        if self._store is not None:
            self._store.close()
            self._store = None

    @property
    def linger_now_s(self) -> float:
        """The linger the writer uses now (between linger_s and max_linger_s)."""
        return self._linger

    def stats_dict(self) -> dict[str, object]:
        return self.stats.as_dict(self._queue.qsize())

    # -- the writer thread -------------------------------------------------------------

    def _run(self) -> None:
        stopping = False
        while not stopping:
            try:  # journaled events waiting: insert them once no event came for a while
                first = (
                    self._queue.get(timeout=self.lane.linger_s) if self.lane.pending else self._queue.get()
                )
            except queue.Empty:
                self._guarded(self._write, [])
                continue
            batch: list[_Entry] = []
            flush = first is _FLUSH
            if first is _STOP:
                stopping = True
            elif not flush:
                batch.append(first)  # type: ignore[arg-type]
            while len(batch) < self.batch_size and not stopping:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP:
                    stopping = True
                elif item is _FLUSH:
                    flush = True
                else:
                    batch.append(item)  # type: ignore[arg-type]
            if batch and self.lane.take([event for event, _ in batch]):
                with self._idle:
                    self.stats.journaled += len(batch)
                self._settle(batch, None)  # durable in the synced journal
                batch = []
            if batch or self.lane.due(flush or stopping):
                self._guarded(self._write, batch)
            if self.linger_s and not stopping:
                self._gather(len(batch))
        self.lane.close()  # empty now, unless a write failed unexpectedly: the next start recovers those

    def _guarded(self, write: Callable[[list[_Entry]], None], batch: list[_Entry]) -> None:
        try:
            write(batch)
        except Exception as exc:  # never let the writer die: later events must still be written
            log.exception("recorder: unexpected failure writing a batch")
            self._settle(batch, StoreError(f"recorder failure: {type(exc).__name__}: {exc}"))

    def _gather(self, written: int) -> None:
        """After a batch of ``written`` events: adapt the linger and let the next batch gather.

        A full batch means a backlog: no wait. More than one event means calls came while the
        last batch gathered: linger longer (up to max_linger_s). One event: halve back to
        linger_s. An idle writer blocks in the queue's get and writes the next event at once.
        """
        if written >= self.batch_size:
            return
        if written > 1:
            self._linger = min(self.max_linger_s, self._linger * 2)
        else:
            self._linger = max(self.linger_s, self._linger / 2)
        self._wake.wait(self._linger)
        self._wake.clear()  # a flush() that came during the wait is served by the next drain

    def _write(self, batch: list[_Entry]) -> None:
        """Commit ``batch`` after the journaled events (in one transaction), then reset the journal."""
        if not self.lane.pending:
            self._write_batch(batch)
            return
        # Out of memory before the commit: after an unexpected failure, the next start recovers them.
        pending = self.lane.pending
        self.lane.pending = []
        unsaved, spilled = self._unsaved, self.stats.spilled
        self._write_batch([(event, None) for event in pending] + batch)
        self.lane.inserted(all_saved=self._unsaved == unsaved, some_spilled=self.stats.spilled != spilled)

    def _write_batch(self, batch: list[_Entry]) -> None:
        events = [event for event, _ in batch]
        if self._finishing:
            self._finish(events)
        error = self._commit(events)
        if error is None:
            self._settle(batch, None)
            return
        if error.transient:  # retried until the window closed: nothing more to try
            error = StoreError(f"{error}; {self._spill(events, error)}", transient=True)
            self._settle(batch, error)
            return
        # An event the store cannot take: write the others one by one, spill that one.
        log.error("a batch of %d events failed (%s); writing them one at a time", len(batch), error)
        for one in batch:
            single = self._commit([one[0]]) if len(batch) > 1 else error
            if single is not None:
                single = StoreError(
                    f"event {one[0].id} could not be stored: {single}; {self._spill([one[0]], single)}"
                )
            self._settle([one], single)

    def _commit(self, events: list[TraceEvent]) -> StoreError | None:
        """Write ``events`` in one transaction, retrying transient failures; the error, if it failed."""
        assert self._store is not None
        delay = 0.02
        deadline = time.monotonic() + self.retry_for_s
        while True:
            try:
                self._store.write_events(events)
            except StoreError as exc:
                self.stats.last_error = str(exc)
                self.lane.healthy = False
                if not exc.transient:
                    return exc  # retrying cannot help
                self.stats.write_retries += 1
                left = min(deadline, self._give_up_at) - time.monotonic()
                if left <= 0:
                    return exc
                log.warning("trace write failed, retrying: %s", exc)
                time.sleep(min(delay, left))
                delay = min(delay * 2, 1.0)
                continue
            except Exception as exc:  # not a database error: a bug; the batch is written event by event
                log.exception("recorder: unexpected failure writing %d events", len(events))
                return StoreError(f"{type(exc).__name__}: {exc}")
            self.lane.healthy = True
            # Before the batch counts as written, so whoever flushed the recorder finds it handed on.
            self._after_commit(events)
            with self._idle:
                self.stats.written += len(events)
                self.stats.batches += 1
                self._idle.notify_all()
            return None

    def _finish(self, events: list[TraceEvent]) -> None:
        """Run the finishers handed to :meth:`record` for ``events`` (see there). An event whose
        finisher fails is recorded as far as it got (the log says so); the batch goes on."""
        for event in events:
            finish = self._finishing.pop(event.id, None)
            if finish is None:
                continue
            try:
                finish(event)
            except Exception:
                log.exception(
                    "recorder: finishing event %s failed; it is recorded as far as it was finished", event.id
                )

    @staticmethod
    def _settle(batch: list[_Entry], error: StoreError | None) -> None:
        """Answer each waiter once; a waiter that has gone (its future cancelled) is skipped."""
        for _, done in batch:
            if done is None:
                continue
            if isinstance(done, Future):
                try:  # under the future's lock: a cancelled future refuses, nothing else changes
                    if error is None:
                        done.set_result(None)
                    else:
                        done.set_exception(error)
                except InvalidStateError:
                    pass  # cancelled by its waiter, or already answered
                continue
            with contextlib.suppress(RuntimeError):  # its event loop is closed: nobody waits
                done.get_loop().call_soon_threadsafe(_answer, done, error)

    def _spill(self, events: list[TraceEvent], error: StoreError) -> str:
        """Append ``events`` to the spill file; says where they went (for the caller's error)."""
        try:
            with self.spill_path.open("a", encoding="utf-8") as fh:
                for event in events:
                    data = event.model_dump(mode="python")
                    fh.write(json.dumps(data, ensure_ascii=True, default=str) + "\n")
                fh.flush()
                os.fsync(fh.fileno())  # acknowledged events may have only this copy once the journal resets
            log.error("%d events could not be written (%s); saved to %s", len(events), error, self.spill_path)
            where = f"the event was saved to {self.spill_path}"
        except OSError as exc:  # the spill file failed too: say so loudly
            log.critical("%d events lost: %s; and spill failed: %s", len(events), error, exc)
            self._unsaved += len(events)
            where = f"the event could not be saved to {self.spill_path} either ({exc}) and is lost"
        with self._idle:
            self.stats.spilled += len(events)
            self._idle.notify_all()
        return where
