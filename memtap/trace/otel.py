"""OpenTelemetry in one place: one module-level tracer and the memory-span middleware.

Chat calls get ``chat {model}`` client spans with the GenAI model attributes
(provider, request model, token usage, time to first chunk); the memory calls a chat
causes are their children. Spans follow the GenAI memory conventions (status: development):
``create_memory``, ``update_memory``, ``delete_memory``, ``search_memory``, with
``gen_ai.memory.*`` attributes, plus ``openinference.span.kind`` so Phoenix and
Langfuse render them. Reads (get, list, history) have no operation name in the
conventions; they are named ``get_memory``. Query text and records are opt-in
(``MEMTAP_OTEL_CAPTURE_CONTENT=true``) because they carry memory content.

Export is configured by the standard ``OTEL_EXPORTER_OTLP_*`` variables, or to
the console (stderr) on request. Without either, the tracer is a no-op.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from memtap.trace.models import Context, Op, TraceEvent

__all__ = [
    "OPERATION_NAMES",
    "chat_span",
    "configure_tracing",
    "finish_chat_span",
    "finish_memory_span",
    "memory_span",
    "span_of_event",
    "tracer",
    "tracing",
]

tracer = trace.get_tracer("memtap")

OPERATION_NAMES = {
    Op.WRITE: "create_memory",
    Op.UPDATE: "update_memory",
    Op.DELETE: "delete_memory",
    Op.RETRIEVE: "search_memory",
    Op.READ: "get_memory",
}
_SPAN_KINDS = {Op.RETRIEVE: "RETRIEVER", Op.READ: "RETRIEVER"}
_configured = False

# The spans of recent calls, by event id, so findings made after a call's commit can be put on
# its span, or linked to it once it has ended (memtap/findings/otel.py). Bounded; only filled
# while a tracer provider is installed.
_RECENT_SPANS: OrderedDict[str, Span] = OrderedDict()
_RECENT_SPANS_MAX = 10_000
_RECENT_LOCK = threading.Lock()


def _remember_span(event_id: str, span: Span) -> None:
    with _RECENT_LOCK:
        _RECENT_SPANS[event_id] = span
        if len(_RECENT_SPANS) > _RECENT_SPANS_MAX:
            _RECENT_SPANS.popitem(last=False)


def span_of_event(event_id: str) -> Span | None:
    """The span of a recent call recorded as ``event_id`` (ended or not), if still remembered."""
    with _RECENT_LOCK:
        return _RECENT_SPANS.get(event_id)


def _capture_content() -> bool:
    return os.environ.get("MEMTAP_OTEL_CAPTURE_CONTENT", "").lower() in {"1", "true", "yes"}


def configure_tracing(*, console: bool = False) -> bool:
    """Install a tracer provider when OTLP variables are set or ``console`` is asked for.

    Returns whether spans are exported anywhere. Safe to call more than once.
    """
    global _configured
    otlp = any(
        os.environ.get(name) for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )
    if _configured or not (otlp or console):
        return _configured
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        ConsoleSpanExporter,
        SimpleSpanProcessor,
        SpanExporter,
    )

    from memtap.trace.otel_redact import RedactingExporter

    provider = TracerProvider(resource=Resource.create({"service.name": "memtap"}))
    if otlp:
        protocol = os.environ.get(
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        )
        exporter: SpanExporter
        if protocol.startswith("http"):
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HTTPExporter

            exporter = HTTPExporter()
        else:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GRPCExporter

            exporter = GRPCExporter()
        provider.add_span_processor(BatchSpanProcessor(RedactingExporter(exporter)))
    if console:
        provider.add_span_processor(
            SimpleSpanProcessor(RedactingExporter(ConsoleSpanExporter(out=sys.stderr)))
        )
    trace.set_tracer_provider(provider)
    _configured = True
    return True


_UNKNOWN = object()


def tracing() -> bool:
    """Whether spans are being made (a tracer provider is installed)."""
    return _tracing()


def _tracing() -> bool:
    """Whether a tracer provider is installed; without one, spans are skipped outright (the
    API's no-op spans, and get_tracer_provider's environment lookups, cost tens of
    microseconds a call on the proxy's hot path). Reads the API's module global when it has
    one, and asks the API otherwise."""
    provider = getattr(trace, "_TRACER_PROVIDER", _UNKNOWN)
    if provider is _UNKNOWN:
        return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    return provider is not None


@contextlib.contextmanager
def memory_span(op: Op, tool: str, store_id: str) -> Iterator[Span]:
    """A span around one memory call; exceptions mark it as an error and propagate."""
    if not _tracing():
        yield trace.INVALID_SPAN
        return
    name = f"{OPERATION_NAMES.get(op, op.value)} {store_id}"
    with tracer.start_as_current_span(name, kind=SpanKind.INTERNAL) as span:
        if span.is_recording():
            span.set_attributes(
                {
                    "gen_ai.operation.name": OPERATION_NAMES.get(op, op.value),
                    "gen_ai.memory.store.id": store_id,
                    "gen_ai.tool.name": tool,
                    "openinference.span.kind": _SPAN_KINDS.get(op, "TOOL"),
                    "memtap.op": op.value,
                }
            )
        yield span


def _context_attributes(context: Context) -> dict[str, Any]:
    attrs: dict[str, Any] = {"memtap.namespace": context.namespace, "memtap.principal": context.principal}
    for key in ("session", "turn", "run", "episode", "requester", "client", "upstream"):
        value = getattr(context, key)
        if value is not None:
            attrs[f"memtap.{key}"] = value
    if context.role is not None:
        attrs["memtap.role"] = context.role.value
    return attrs


def finish_memory_span(span: Span, event: TraceEvent, query: str | None = None) -> None:
    """Put what the call did on its span: record ids, counts, status."""
    if not span.is_recording():
        return
    span.set_attribute("memtap.event_id", event.id)
    _remember_span(event.id, span)
    if event.gate:
        span.set_attribute("memtap.gate", event.gate)
    operation = OPERATION_NAMES.get(event.op, event.op.value)
    span.update_name(f"{operation} {event.backend}")
    span.set_attributes(
        {
            "gen_ai.operation.name": operation,
            "openinference.span.kind": _SPAN_KINDS.get(event.op, "TOOL"),
            "memtap.op": event.op.value,
            "gen_ai.tool.name": event.tool,  # as recorded: a configured secret is redacted
        }
    )
    span.set_attributes(_context_attributes(event.context))
    ids = [eff.item_id for eff in event.effects]
    if event.op == Op.RETRIEVE:
        span.set_attribute("gen_ai.memory.record.count", len(ids))
    if len(ids) == 1:
        span.set_attribute("gen_ai.memory.record.id", ids[0])
    if _capture_content():
        if query is not None:
            span.set_attribute("gen_ai.memory.query.text", query)
        records = [
            {"id": eff.item_id, "content": eff.content_after or eff.content_before} for eff in event.effects
        ]
        span.set_attribute("gen_ai.memory.records", json.dumps(records, ensure_ascii=False))
    if event.status != "ok":
        span.set_status(Status(StatusCode.ERROR, event.error or event.status))
        span.set_attribute("error.type", (event.error or "error").split(":", 1)[0][:100])


@contextlib.contextmanager
def chat_span(model: str, provider: str) -> Iterator[Span]:
    """A ``chat {model}`` span (GenAI conventions) around one chat call; memory calls made
    while serving it become its children."""
    if not _tracing():
        yield trace.INVALID_SPAN
        return
    with tracer.start_as_current_span(f"chat {model}", kind=SpanKind.CLIENT) as span:
        if span.is_recording():
            span.set_attributes(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.provider.name": provider,
                    "gen_ai.request.model": model,
                    "openinference.span.kind": "LLM",
                }
            )
        yield span


def finish_chat_span(span: Span, event: TraceEvent) -> None:
    """Put token usage, time to first chunk and the decomposition on a chat span."""
    if not span.is_recording():
        return
    span.set_attribute("memtap.event_id", event.id)
    span.update_name(f"chat {event.model or event.tool}")  # the model as recorded (secrets redacted)
    span.set_attribute("gen_ai.request.model", event.model or event.tool)
    _remember_span(event.id, span)
    span.set_attributes(_context_attributes(event.context))
    result = event.result if isinstance(event.result, dict) else {}
    attrs: dict[str, Any] = {}
    if isinstance(result.get("model"), str):
        attrs["gen_ai.response.model"] = result["model"]
    if isinstance(result.get("id"), str):
        attrs["gen_ai.response.id"] = result["id"]
    finish = result.get("finish_reasons")
    if isinstance(finish, list) and finish:
        attrs["gen_ai.response.finish_reasons"] = [str(f) for f in finish]
    if event.input_tokens is not None:
        attrs["gen_ai.usage.input_tokens"] = event.input_tokens
    if event.output_tokens is not None:
        attrs["gen_ai.usage.output_tokens"] = event.output_tokens
    if event.ttft_ms is not None:
        attrs["gen_ai.response.time_to_first_chunk"] = event.ttft_ms / 1000
    for name in ("ttft_ms", "memory_ms", "backend_ms", "overhead_ms", "total_ms"):
        value = getattr(event, name)
        if value is not None:
            attrs[f"memtap.{name}"] = value
    span.set_attributes(attrs)
    if event.status != "ok":
        span.set_status(Status(StatusCode.ERROR, event.error or event.status))
        span.set_attribute("error.type", (event.error or "error").split(":", 1)[0][:100])
