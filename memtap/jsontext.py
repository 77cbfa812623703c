"""JSON text the way memtap writes it everywhere: compact, UTF-8, and never failing on text
that is not valid Unicode (an unpaired surrogate is escaped instead)."""

from __future__ import annotations

import json
from typing import Any

from pydantic_core import to_json

__all__ = ["json_body", "json_text"]


def json_text(value: Any) -> str:
    """Compact JSON; non-ASCII stays readable unless the value holds an unpaired surrogate."""
    try:
        return to_json(value).decode("utf-8")  # about 3x json.dumps; refuses unpaired surrogates
    except (ValueError, TypeError):
        return json.dumps(value, ensure_ascii=True, separators=(",", ":"), default=str)


def json_body(value: Any) -> bytes:
    """A request body for an upstream: UTF-8 JSON as written, or, when a string holds an unpaired
    surrogate (valid JSON escapes, not valid UTF-8), with ``\\uXXXX`` escapes, so the upstream
    reads exactly the string the client sent."""
    try:
        return json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value).encode("ascii")
