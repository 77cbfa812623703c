"""One recorded call: timing, the span, the event, the hand-over to the recorder.

Every front door wraps each call it serves in :func:`recorded_call` and fills in
the :class:`CallRecord` it yields. Whatever happens inside, failed or not, the
call becomes exactly one event. A :class:`MemtapError` raised inside becomes the
event's error; any other exception is logged and recorded as an internal error.
Neither propagates: the front door reads ``record.error`` and answers its caller.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from memtap.errors import MemtapError
from memtap.ids import new_id
from memtap.trace.models import Context, MemoryEffect, Op, TraceEvent, utc_now
from memtap.trace.otel import finish_memory_span, memory_span
from memtap.trace.writer import Recorder

__all__ = ["CallRecord", "recorded_call"]

log = logging.getLogger("memtap.calls")


@dataclass
class CallRecord:
    """What a front door learns about a call while serving it."""

    id: str
    tool: str
    op: Op
    arguments: dict[str, Any]
    context: Context | None = None
    value: Any = None
    effects: list[MemoryEffect] = field(default_factory=list)
    backend_ms: float | None = None
    gate: str | None = None
    error: str | None = None
    query: str | None = None
    _backend_started: float | None = None

    def start_backend(self) -> None:
        """Mark where the backend's own time begins (the rest is proxy overhead)."""
        self._backend_started = time.perf_counter()

    def end_backend(self) -> None:
        if self._backend_started is not None:
            self.backend_ms = (time.perf_counter() - self._backend_started) * 1000


@contextlib.asynccontextmanager
async def recorded_call(
    recorder: Recorder,
    *,
    tool: str,
    op: Op,
    front_door: str,
    backend: str,
    arguments: dict[str, Any],
    fallback_context: Callable[[], Context],
) -> AsyncIterator[CallRecord]:
    """Serve one call inside; on the way out, record it exactly once (``durable``: committed)."""
    t0 = time.perf_counter()
    started = utc_now()
    record = CallRecord(id=new_id(), tool=tool, op=op, arguments=arguments)
    with memory_span(op, tool, backend) as span:
        try:
            yield record
        except MemtapError as exc:
            record.error = str(exc)
        except Exception as exc:  # a bug or an unexpected backend failure: report it, stay up
            log.exception("%s %s failed", front_door, tool)
            record.error = f"internal error: {type(exc).__name__}: {exc}"
        if record._backend_started is not None and record.backend_ms is None:
            record.end_backend()
        if record.error is not None:
            record.value = {"error": record.error}
        event = TraceEvent(
            id=record.id,
            started_at=started,
            ended_at=utc_now(),
            front_door=front_door,
            backend=backend,
            tool=tool,
            op=record.op,  # the serving code may refine it once it knows (a write that replaced: update)
            context=record.context or fallback_context(),
            arguments=arguments,
            result=record.value,
            effects=record.effects,
            backend_ms=record.backend_ms,
            status="ok" if record.error is None else "error",
            error=record.error,
            gate=record.gate,
        )
        total_ms = (time.perf_counter() - t0) * 1000
        event.overhead_ms = round(total_ms - (record.backend_ms or 0.0), 4)
        finish_memory_span(span, event, record.query)
        await recorder.record(event)
