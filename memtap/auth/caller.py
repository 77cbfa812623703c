"""Who is calling: made once per request by the gate, read by every front door."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from memtap.auth.grants import Right

__all__ = ["CALLER_SCOPE_KEY", "Caller"]

CALLER_SCOPE_KEY = "memtap.caller"


@dataclass(frozen=True)
class Caller:
    """An authenticated caller. ``scopes`` caps the principal's rights (a JWT's scopes); None: no cap."""

    principal: str
    via: Literal["api-key", "jwt", "local"]
    scopes: frozenset[Right] | None = None
    pinned: Mapping[str, Any] = field(default_factory=dict)
