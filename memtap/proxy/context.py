"""Request context: moved to :mod:`memtap.auth.resolve` (one resolver for every front door).

Kept as a re-export for code that imports it from here."""

from __future__ import annotations

from memtap.auth.resolve import (
    HEADERS,
    META_KEY,
    best_context,
    fields_from_headers,
    fields_from_meta,
    resolve_context,
)

__all__ = [
    "HEADERS",
    "META_KEY",
    "best_context",
    "fields_from_headers",
    "fields_from_meta",
    "resolve_context",
]
