"""One recorded call: timing, the span, the event, the hand-over to the recorder.

Every front door wraps each call it serves in :func:`recorded_call` and fills in
the :class:`CallRecord` it yields. Whatever happens inside, failed or not, the
call becomes exactly one event. A :class:`MemtapError` raised inside becomes the
event's error; any other exception is logged and recorded as an internal error.
Neither propagates: the front door reads ``record.error`` and answers its caller.
In durable mode a failed commit is an error too: the caller learns that the call was
carried out but not recorded (the event is spilled beside the database, never lost).

Calls nest: a call made while another is being served (a chat's memory search) names
the outer one as its ``parent_id``, and its span is a child of the outer span.
A chat call (``op=Op.CHAT``) gets a GenAI ``chat {model}`` span instead of a memory span.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from memtap.errors import MemtapError, StoreError
from memtap.ids import new_id
from memtap.trace.models import Context, MemoryEffect, Op, TraceEvent, utc_now
from memtap.trace.otel import chat_span, finish_chat_span, finish_memory_span, memory_span
from memtap.trace.writer import Recorder

__all__ = ["CallRecord", "recorded_call"]

log = logging.getLogger("memtap.calls")

_CURRENT_CALL: contextvars.ContextVar[str | None] = contextvars.ContextVar("memtap_call", default=None)


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
    model: str | None = None
    provider: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    ttft_ms: float | None = None
    memory_ms: float | None = None
    links: list[str] = field(default_factory=list)
    parent_id: str | None = None
    # Set by a front door whose caller had its answer before the call ended (work after the
    # response, such as a chat's memory capture, is then not counted as the caller's wait).
    total_ms: float | None = None
    started: float = field(default_factory=time.perf_counter)
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
    model: str | None = None,
    provider: str | None = None,
    started_at: float | None = None,
) -> AsyncIterator[CallRecord]:
    """Serve one call inside; on the way out, record it exactly once (``durable``: committed).

    An exception raised inside replaces the call's value with ``{"error": ...}``; a front
    door that sets ``record.error`` itself (a stream cut off after it began) keeps its value.

    ``model`` and ``provider`` name a chat call's span; ``started_at`` (a ``perf_counter``
    reading) lets a front door count time it spent before the call was opened.
    """
    t0 = time.perf_counter() if started_at is None else started_at
    started = utc_now()
    record = CallRecord(
        id=new_id(), tool=tool, op=op, arguments=arguments, model=model, provider=provider, started=t0
    )
    record.parent_id = _CURRENT_CALL.get()
    token = _CURRENT_CALL.set(record.id)
    span_cm = (
        chat_span(model or tool, provider or backend) if op == Op.CHAT else memory_span(op, tool, backend)
    )
    with span_cm as span:
        try:
            yield record
        except MemtapError as exc:
            record.error = str(exc)
            record.value = {"error": record.error}
        except Exception as exc:  # a bug or an unexpected backend failure: report it, stay up
            log.exception("%s %s failed", front_door, tool)
            record.error = f"internal error: {type(exc).__name__}: {exc}"
            record.value = {"error": record.error}
        finally:
            _CURRENT_CALL.reset(token)
        if record._backend_started is not None and record.backend_ms is None:
            record.end_backend()
        # Every field is already of its type: construct without validating (hot path).
        event = TraceEvent.model_construct(
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
            parent_id=record.parent_id,
            model=record.model,
            provider=record.provider,
            input_tokens=record.input_tokens,
            output_tokens=record.output_tokens,
            ttft_ms=None if record.ttft_ms is None else round(record.ttft_ms, 4),
            memory_ms=None if record.memory_ms is None else round(record.memory_ms, 4),
            links=record.links,
        )
        total_ms = record.total_ms if record.total_ms is not None else (time.perf_counter() - t0) * 1000
        event.total_ms = round(total_ms, 4)
        event.overhead_ms = round(total_ms - (record.backend_ms or 0.0) - (record.memory_ms or 0.0), 4)
        # The content policy and secret redaction, before the span or the trace sees the event.
        query = recorder.privacy.apply(event, record.query)
        if op == Op.CHAT:
            finish_chat_span(span, event)
        else:
            finish_memory_span(span, event, query)
        try:
            await recorder.record(event)
        except StoreError as exc:  # durable mode: the commit failed, so the caller must not think it did
            outcome = "the call failed" if record.error else "the call was carried out"
            record.error = (
                f"{outcome} but its trace could not be committed ({exc}); "
                f"the event was saved to {recorder.spill_path}"
            )
            record.value = {"error": record.error}
