"""One dedicated thread for one SQLite connection, so that no commit runs on the event loop.

Reads run one at a time, outside any transaction of the thread's own. Writes are
**grouped**: the writes waiting when the thread takes one run in a single ``BEGIN
IMMEDIATE`` transaction, each in its own savepoint (one that fails is rolled back alone and
its caller gets the error), and commit together: one commit (one fsync, in durable mode)
for all of them, so concurrent writers share commits as the recorder's callers do. A
single writer gets a group of one.

A caller that stops waiting (cancelled) before its turn never runs; one that had started
finishes, and its outcome (:meth:`Written.committed` or :meth:`Written.rolled_back`) is
still applied.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

__all__ = ["MAX_GROUP", "SqliteThread", "Written"]

log = logging.getLogger("memtap.sqlite_thread")

MAX_GROUP = 64  # writes committed together at most

_T = TypeVar("_T")
_W = TypeVar("_W", bound="Written")
_STOP = object()


class Written(Protocol):
    """What a write step did, told whether its transaction committed."""

    def committed(self) -> None: ...

    def rolled_back(self) -> None: ...


@dataclass
class _Job:
    fn: Callable[[], Any]
    done: Future[Any]
    write: bool


class SqliteThread:
    """The thread that owns ``conn``: :meth:`run` for reads, :meth:`write` for grouped writes."""

    def __init__(self, name: str, conn: sqlite3.Connection, describe: Callable[[sqlite3.Error], Exception]):
        self._conn = conn
        self._describe = describe  # a SQLite error -> the exception a caller gets
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.groups = 0  # write transactions begun
        self.writes = 0  # write steps run in them
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    async def run(self, fn: Callable[[], _T]) -> _T:
        """Run ``fn`` on the thread (a read, or anything outside a write transaction)."""
        return await self._submit(_Job(fn, Future(), write=False))  # type: ignore[no-any-return]

    async def write(self, step: Callable[[], _W]) -> _W:
        """Run ``step`` inside a write transaction shared with the other waiting writes; returns
        once that transaction committed (``step``'s result was told :meth:`Written.committed`)."""
        return await self._submit(_Job(step, Future(), write=True))  # type: ignore[no-any-return]

    async def _submit(self, job: _Job) -> Any:
        self._queue.put(job)
        return await asyncio.wrap_future(job.done)

    def close(self, timeout: float = 30.0) -> None:
        """Finish what is queued, then stop the thread."""
        self._queue.put(_STOP)
        self._thread.join(timeout)

    # -- the thread ----------------------------------------------------------------------

    def _serve(self) -> None:
        carried: object | None = None
        while True:
            job = carried if carried is not None else self._queue.get()
            carried = None
            if job is _STOP:
                return
            assert isinstance(job, _Job)
            if not job.write:
                self._read(job)
                continue
            group = [job]
            while len(group) < MAX_GROUP:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if isinstance(more, _Job) and more.write:
                    group.append(more)
                else:
                    carried = more  # a read or the stop: after this group
                    break
            self._write_group(group)

    @staticmethod
    def _read(job: _Job) -> None:
        if not job.done.set_running_or_notify_cancel():
            return
        try:
            job.done.set_result(job.fn())
        except BaseException as exc:
            job.done.set_exception(exc)

    def _write_group(self, group: list[_Job]) -> None:
        conn = self._conn
        running = [job for job in group if job.done.set_running_or_notify_cancel()]
        if not running:
            return
        self.groups += 1
        self.writes += len(running)
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            for job in running:
                job.done.set_exception(self._describe(exc))
            return
        steps: list[tuple[_Job, Written]] = []
        lost: sqlite3.Error | None = None  # why SQLite rolled the whole transaction back, if it did
        for job in running:
            if not conn.in_transaction:  # an earlier step's failure (a full disk) ended the transaction
                lost = lost or sqlite3.OperationalError("the transaction was rolled back")
                job.done.set_exception(self._describe(lost))
                continue
            try:
                conn.execute("SAVEPOINT step")
                try:
                    written = job.fn()
                except BaseException:
                    if conn.in_transaction:  # SQLite may have rolled everything back already
                        conn.execute("ROLLBACK TO step")
                        conn.execute("RELEASE step")
                    raise
                conn.execute("RELEASE step")
                steps.append((job, written))
            except sqlite3.Error as exc:
                if lost is None and not conn.in_transaction:
                    lost = exc  # what ended the transaction is what every later write is told
                job.done.set_exception(self._describe(exc))
            except BaseException as exc:
                cause = exc.__cause__ if isinstance(exc.__cause__, sqlite3.Error) else None
                if lost is None and cause is not None and not conn.in_transaction:
                    lost = cause
                job.done.set_exception(exc)
        try:
            if not conn.in_transaction:
                raise lost or sqlite3.OperationalError("the transaction was rolled back")
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            for job, written in steps:
                written.rolled_back()
                job.done.set_exception(self._describe(exc))
            return
        for job, written in steps:
            try:
                written.committed()
            except Exception:  # committed all the same: the caller gets its result
                log.exception("after a committed write")
            job.done.set_result(written)
