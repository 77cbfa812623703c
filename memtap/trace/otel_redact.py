"""Spans leave the process without a configured secret in them.

memtap's own spans take their names and attributes from the recorded event, which is already
redacted (:mod:`memtap.trace.privacy`). Other instrumentation in the process does not: the
MCP SDK names its ``tools/call {tool}`` span after whatever tool a caller asked for. So every
exporter memtap installs is wrapped in :class:`RedactingExporter`, which replaces each
configured secret in span names, attributes, events and status messages before export.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import Status

__all__ = ["RedactingExporter", "set_span_redactor"]

_redactor: list[Callable[[str], str]] = []


def set_span_redactor(redact: Callable[[str], str] | None) -> None:
    """The function applied to every exported span's text (the process's :class:`TracePrivacy`)."""
    _redactor[:] = [redact] if redact is not None else []


def _value(value: Any, redact: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_value(v, redact) for v in value)
    return value


def _redacted(span: ReadableSpan, redact: Callable[[str], str]) -> ReadableSpan:
    status = span.status
    if status.description:
        status = Status(status.status_code, redact(status.description))
    return ReadableSpan(
        name=redact(span.name),
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes={k: _value(v, redact) for k, v in (span.attributes or {}).items()},
        events=[
            Event(e.name, {k: _value(v, redact) for k, v in (e.attributes or {}).items()}, e.timestamp)
            for e in span.events
        ],
        links=span.links,
        kind=span.kind,
        status=status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


class RedactingExporter(SpanExporter):
    """Wraps an exporter; spans pass through the redactor on their way out."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if _redactor:
            redact = _redactor[0]
            spans = [_redacted(span, redact) for span in spans]
        return self.inner.export(spans)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)
