"""Findings as OpenTelemetry: an event on the span of the call that caused the finding while that
span is still open; once it has ended, a short ``memtap.finding`` span linked to it."""

from __future__ import annotations

import json
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Link

from memtap.findings.model import Finding
from memtap.trace.otel import span_of_event, tracer

__all__ = ["export_finding", "finding_attributes"]


def finding_attributes(finding: Finding) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        "memtap.finding.id": finding.id or "",
        "memtap.finding.kind": finding.kind,
        "memtap.finding.severity": finding.severity.label,
        "memtap.finding.summary": finding.summary,
        "memtap.finding.event_id": finding.event_id,
        "memtap.finding.item_ids": list(finding.item_ids),
        "memtap.finding.evidence": json.dumps(finding.evidence, ensure_ascii=False, default=str)[:4096],
    }
    if finding.namespace is not None:
        attrs["memtap.namespace"] = finding.namespace
    return attrs


def export_finding(finding: Finding) -> None:
    """Put ``finding`` on its call's span, or on a linked span if that one has ended."""
    span = span_of_event(finding.event_id)
    if span is None:
        return  # tracing is off, or the call is too old to be remembered
    attrs = finding_attributes(finding)
    if span.is_recording():
        span.add_event("memtap.finding", attributes=attrs)
        return
    context = span.get_span_context()
    with tracer.start_as_current_span(
        "memtap.finding", context=trace.set_span_in_context(trace.INVALID_SPAN), links=[Link(context)]
    ) as linked:
        linked.set_attributes(attrs)
