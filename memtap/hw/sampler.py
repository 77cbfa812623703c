"""The sampler: one thread reads every source each interval and hands the readings to a bounded
queue; another thread writes them to the trace database in batches. Nothing on a request path
waits for either: a full queue drops the tick's readings and counts them.

A source that raises is a gap: the tick is recorded as one row per device with the error and
no readings, and the next tick tries again. The first tick is taken when the sampler starts and
one more when it stops, so every call made while it ran lies between two samples.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence

from memtap.hw.sources import HwError, Sample, Source

__all__ = ["DEFAULT_INTERVAL_MS", "MIN_INTERVAL_MS", "Sampler", "check_interval"]

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_MS = 100.0
MIN_INTERVAL_MS = 20.0
"""NVML refreshes a GPU's power reading at best every 20 ms (older boards: 100 ms to 1 s);
sampling faster only repeats readings and costs CPU."""


def check_interval(interval_ms: float) -> float:
    """The interval in seconds, or an ``HwError`` naming the minimum."""
    if not math.isfinite(interval_ms):  # nan would make the sampler spin, inf would never tick
        raise HwError(f"--hw-interval {interval_ms:g} is not a number of milliseconds; use 20 or more")
    if interval_ms < MIN_INTERVAL_MS:
        raise HwError(
            f"--hw-interval {interval_ms:g} ms is below the {MIN_INTERVAL_MS:g} ms NVML can deliver "
            f"(its power reading refreshes every {MIN_INTERVAL_MS:g} ms at best); "
            f"use {MIN_INTERVAL_MS:g} or more"
        )
    return interval_ms / 1000


Writer = Callable[[list[Sample]], None]


class Sampler:
    """Samples ``sources`` every ``interval_s`` on its own thread; ``write`` stores a batch (it runs
    on the writer thread). ``sample_once`` takes one tick on the caller's thread."""

    def __init__(
        self,
        sources: Sequence[Source],
        write: Writer,
        interval_s: float,
        *,
        queue_size: int = 256,
        batch_size: int = 128,
    ) -> None:
        self.sources = list(sources)
        self.write = write
        self.interval_s = interval_s
        self.batch_size = batch_size
        self._queue: queue.Queue[list[Sample] | None] = queue.Queue(maxsize=queue_size)
        self._devices = {id(s): [d.device for d in s.describe()] for s in self.sources}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.ticks = 0
        self.samples = 0
        self.written = 0
        self.dropped = 0
        self.gaps = 0
        self.write_errors = 0
        self.sampler_cpu_s = 0.0

    def sample_once(self) -> None:
        with self._lock:
            self._tick()

    def _tick(self) -> None:
        self.ticks += 1
        for source in self.sources:
            try:
                rows = source.sample()
            except Exception as exc:  # a lost device, a permission error: a gap, and go on
                now = getattr(exc, "ts", None) or time.time()
                error = f"{type(exc).__name__}: {exc}"
                rows = [Sample(d, now, error=error) for d in self._devices[id(source)] or ["unknown"]]
            self.gaps += sum(1 for r in rows if r.error)
            if rows:
                self._offer(rows)

    def _offer(self, rows: list[Sample]) -> None:
        self.samples += len(rows)
        try:
            self._queue.put_nowait(rows)
        except queue.Full:  # the database is not keeping up: never block, count the loss
            self.dropped += len(rows)

    def start(self) -> None:
        for target, name in (
            (self._write_loop, "memtap-hw-writer"),
            (self._sample_loop, "memtap-hw-sampler"),
        ):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 30.0) -> None:
        """Take the closing tick, write what is queued, and end both threads."""
        self._stop.set()
        if not self._threads:  # never started (sampled by hand): write what is queued here
            batch: list[Sample] = []
            while not self._queue.empty():
                batch.extend(self._queue.get_nowait() or [])
            self._store(batch)
            return
        writer, sampler = self._threads
        sampler.join(timeout)
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            log.warning("hw-probe: the sample writer did not drain its queue in %s s", timeout)
        writer.join(timeout)
        self._threads = []

    def _sample_loop(self) -> None:
        started = time.thread_time()
        next_at = time.monotonic()
        try:
            while True:
                self.sample_once()
                next_at += self.interval_s
                delay = next_at - time.monotonic()
                if delay < 0:  # behind (a slow source): skip the missed ticks rather than burst
                    next_at, delay = time.monotonic(), 0.0
                if self._stop.wait(delay):
                    break
            self.sample_once()
        finally:
            self.sampler_cpu_s = time.thread_time() - started

    def _write_loop(self) -> None:
        done = False
        while not done:
            item = self._queue.get()
            batch: list[Sample] = []
            while True:
                if item is None:
                    done = True
                    break
                batch.extend(item)
                if len(batch) >= self.batch_size:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            self._store(batch)

    def _store(self, batch: list[Sample]) -> None:
        if batch:
            try:
                self.write(batch)
                self.written += len(batch)
            except Exception as exc:  # a locked or full database: the batch is lost, counted
                self.write_errors += 1
                self.dropped += len(batch)
                log.warning("hw-probe: %d samples not stored: %s", len(batch), exc)
