"""One recorded call: timing, the span, the event, the hand-over to the recorder.

Every front door wraps each call it serves in :func:`recorded_call` and fills in
the :class:`CallRecord` it yields. Whatever happens inside, failed or not, the
call becomes exactly one event. A :class:`MemtapError` raised inside becomes the
event's error; any other exception is logged and recorded as an internal error.
Neither propagates: the front door reads ``record.error`` and answers its caller.
In durable mode a failed commit is an error too: the caller learns that the call was
carried out but not recorded (``record.commit_error``; the event is spilled beside the
database, never lost), and a front door must not answer as if it had succeeded.

A cancelled call (a client that disconnected, an MCP ``notifications/cancelled``) is
recorded too, with what it did, and the cancellation goes on. A storage call offers its
event to the backend (:mod:`memtap.trace.inline`): the builtin backend commits it with
its write, and it is then not handed to the recorder again.

Calls nest: a call made while another is being served (a chat's memory search) names
the outer one as its ``parent_id``, and its span is a child of the outer span.
A chat call (``op=Op.CHAT``) gets a GenAI ``chat {model}`` span instead of a memory span.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from memtap.errors import MemtapError, StoreError
from memtap.ids import new_id
from memtap.trace.inline import InlineEvent, offer, withdraw
from memtap.trace.models import Context, MemoryEffect, Op, TraceEvent, utc_now
from memtap.trace.otel import chat_span, finish_chat_span, finish_memory_span, memory_span
from memtap.trace.writer import Recorder

__all__ = ["CallRecord", "recorded_call"]

log = logging.getLogger("memtap.calls")

_CURRENT_CALL: contextvars.ContextVar[str | None] = contextvars.ContextVar("memtap_call", default=None)
_STORAGE_OPS = frozenset({Op.WRITE, Op.UPDATE, Op.DELETE})
CANCELLED = "cancelled: the caller went away before the answer"


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
    # Set when durable mode could not commit the event: the front door must answer with an error.
    commit_error: str | None = None
    # Set by a front door whose caller had its answer before the call ended (work after the
    # response, such as a chat's memory capture, is then not counted as the caller's wait).
    total_ms: float | None = None
    # Set by a front door whose event's value can be worked out after the call (a stream's
    # summary): it fills the event's ``result`` and the fields that come from it, and runs on the
    # recorder's writer thread before the event is stored (``Recorder.record(finish=...)``); the
    # event is built without a value, and the trace's privacy applied once it has one.
    deferred: Callable[[TraceEvent], None] | None = None
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

    span_query: list[str | None] = [None]  # what a span may show of the query, set by build()

    def build(
        value: Any, effects: list[MemoryEffect], error: str | None = None, *, private: bool = True
    ) -> TraceEvent:
        """The call's event as it stands, with ``value``, ``effects`` and ``error`` (else the
        record's); any thread (the builtin backend builds it inside its transaction).
        ``private=False``: the trace's privacy is left to whoever completes the event."""
        error = record.error if error is None else error
        backend_ms = record.backend_ms
        if record._backend_started is not None and backend_ms is None:
            backend_ms = (time.perf_counter() - record._backend_started) * 1000
        ended = utc_now()
        total_ms = record.total_ms if record.total_ms is not None else (time.perf_counter() - t0) * 1000
        # Every field is already of its type: construct without validating (hot path).
        event = TraceEvent.built(
            {
                "id": record.id,
                "started_at": started,
                "ended_at": ended,
                "front_door": front_door,
                "backend": backend,
                "tool": tool,
                # The serving code may refine it once it knows (a write that replaced: update).
                "op": record.op,
                "context": record.context or fallback_context(),
                "arguments": arguments,
                "result": value,
                "effects": effects,
                "backend_ms": backend_ms,
                "overhead_ms": round(total_ms - (backend_ms or 0.0) - (record.memory_ms or 0.0), 4),
                "status": "ok" if error is None else "error",
                "error": error,
                "gate": record.gate,
                "total_ms": round(total_ms, 4),
                "parent_id": record.parent_id,
                "model": record.model,
                "provider": record.provider,
                "input_tokens": record.input_tokens,
                "output_tokens": record.output_tokens,
                "ttft_ms": None if record.ttft_ms is None else round(record.ttft_ms, 4),
                "memory_ms": None if record.memory_ms is None else round(record.memory_ms, 4),
                "links": record.links,
            }
        )
        # The content policy and secret redaction, before the span or the trace sees the event.
        if private:
            span_query[0] = recorder.privacy.apply(event, record.query)
        return event

    inline: InlineEvent | None = None

    def inline_committed() -> None:
        event = inline.event if inline is not None else None
        recorder.count_committed(1, [event] if event is not None else None)

    inline = InlineEvent(recorder.real_path, build, inline_committed) if op in _STORAGE_OPS else None
    token = _CURRENT_CALL.set(record.id)
    offered = offer(inline)
    recorder.stats.open_calls += 1
    span_cm = (
        chat_span(model or tool, provider or backend) if op == Op.CHAT else memory_span(op, tool, backend)
    )
    with span_cm as span:

        def finish(event: TraceEvent) -> None:
            if op == Op.CHAT:
                finish_chat_span(span, event)
            else:
                finish_memory_span(span, event, span_query[0])

        try:
            yield record
        except MemtapError as exc:
            record.error = str(exc)
            record.value = {"error": record.error}
            record.deferred = None
        except Exception as exc:  # a bug or an unexpected backend failure: report it, stay up
            log.exception("%s %s failed", front_door, tool)
            record.error = f"internal error: {type(exc).__name__}: {exc}"
            record.value = {"error": record.error}
            record.deferred = None
        except asyncio.CancelledError:  # recorded with what it did; the cancellation goes on
            recorder.stats.cancelled += 1
            # The record is left as it is: a backend committing this call's write now builds
            # its event from it, and that event (not this one) is then the call's.
            cancelled = build({"error": CANCELLED}, list(record.effects), CANCELLED)
            finish(cancelled)
            if inline is not None:
                inline.abandon(lambda: _hand_over(recorder, cancelled))
            else:
                _hand_over(recorder, cancelled)
            raise
        finally:
            withdraw(offered)
            _CURRENT_CALL.reset(token)
            recorder.stats.open_calls -= 1
        if record._backend_started is not None and record.backend_ms is None:
            record.end_backend()
        if inline is not None and inline.claimed and inline.event is not None:
            finish(inline.event)  # committed with the backend's write
            if record.error is not None:
                log.error(
                    "%s %s failed after its write and event committed: %s", front_door, tool, record.error
                )
            return
        deferred = record.deferred
        event = build(record.value, record.effects, private=deferred is None)
        finish(event)
        try:
            await recorder.record(
                event, finish=None if deferred is None else _completing(deferred, recorder, record)
            )
        except StoreError as exc:  # durable mode: the commit failed, so the caller must not think it did
            outcome = "the call failed" if record.error else "the call was carried out"
            record.commit_error = f"{outcome} but its trace could not be committed: {exc}"
            record.error = record.commit_error
            record.value = {"error": record.error}


def _completing(
    deferred: Callable[[TraceEvent], None], recorder: Recorder, record: CallRecord
) -> Callable[[TraceEvent], None]:
    """The finisher of an event built without its value: the front door's, then the privacy,
    which is applied even when the front door's part failed; where the privacy itself fails, the
    event keeps neither its arguments nor its result (nothing the policy did not see is stored)."""

    def complete(event: TraceEvent) -> None:
        try:
            deferred(event)
        finally:
            try:
                recorder.privacy.apply(event, record.query)
            except BaseException:
                event.arguments, event.result = {}, None
                raise

    return complete


def _hand_over(recorder: Recorder, event: TraceEvent) -> None:
    """Queue a cancelled call's event without waiting for its commit (its caller is gone)."""
    try:
        recorder.submit(event)
    except StoreError as exc:
        log.error("the event of cancelled call %s was not recorded: %s", event.id, exc)
