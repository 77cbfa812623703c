"""Calls answered before they are recorded (outside durable mode).

The forwarding proxy answers a ``tools/call`` as soon as the upstream's result is in hand
and derives the call's effects (the reference server's file read again) and records its
event after, in a task of its own. The event is the same as when it was recorded first:
same effects, same lineage, built from the same record.

So that nothing waiting for "every call so far" misses such an event, the recorder counts
these tasks: :meth:`Recorder.flush` waits for them too (from another thread), and the
upstream pool :meth:`drains <AnsweredFirst.drain>` them before it stops the upstreams (a
re-read may still need the server).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["AnsweredFirst"]

log = logging.getLogger("memtap.recorder")

T = TypeVar("T")


class AnsweredFirst:
    """The tasks recording calls whose callers already have their answer."""

    def __init__(self, idle: threading.Condition) -> None:
        self._idle = idle  # the recorder's: notified when the last such task ends
        self._tasks: set[asyncio.Task[Any]] = set()
        self.pending = 0  # tasks not yet ended (read by flush() under ``idle``)

    def spawn(self, work: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        """Run ``work`` (which records its call) as a task of the running loop, counted until it ends."""
        task = asyncio.get_running_loop().create_task(work)
        with self._idle:
            self.pending += 1
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        with self._idle:
            self.pending -= 1
            self._idle.notify_all()

    async def drain(self, timeout: float = 30.0) -> None:
        """Wait (shielded from cancellation) until the tasks of this loop have recorded their calls."""
        loop = asyncio.get_running_loop()
        tasks = [t for t in self._tasks if t.get_loop() is loop and not t.done()]
        if not tasks:
            return
        waiting = asyncio.ensure_future(asyncio.wait(tasks, timeout=timeout))
        try:
            await asyncio.shield(waiting)
        except asyncio.CancelledError:
            await waiting  # still wait: these events are the calls' only record
            raise
        left = [t for t in tasks if not t.done()]
        if left:
            log.error("%d answered calls were not recorded within %.0f s", len(left), timeout)
