"""The caller of one request: who (the principal), how it proved it, what caps its rights, and
the context values fixed for it. The HTTP gate makes one per request; stdio makes one per
process."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from memtap.auth.grants import Right

__all__ = ["CALLER_SCOPE_KEY", "Caller", "Via", "caller_in", "local_caller"]

CALLER_SCOPE_KEY = "memtap.caller"
"""The ASGI scope key under which the HTTP gate puts the request's :class:`Caller`."""

Via = Literal["api-key", "jwt", "local"]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class Caller:
    """Who is calling.

    ``via``: ``api-key`` (a configured key), ``jwt`` (a verified bearer token) or ``local``
    (keyless loopback or stdio: the single-user mode, which no grant restricts).
    ``scopes``: a token's scopes cap the principal's rights (``None``: no cap).
    ``pinned``: context fields fixed by the operator for this credential (a key's
    ``namespace``); no header, ``_meta`` or argument may contradict them.
    """

    principal: str
    via: Via = "local"
    scopes: frozenset[Right] | None = None
    pinned: Mapping[str, Any] = field(default_factory=lambda: _EMPTY, hash=False)

    @property
    def restricted(self) -> bool:
        """Whether grants apply (every caller but ``local``)."""
        return self.via != "local"


def local_caller(principal: str = "local") -> Caller:
    return Caller(principal=principal, via="local")


def caller_in(scope: Mapping[str, Any], default: Caller) -> Caller:
    """The caller the HTTP gate put into ``scope``; ``default`` where no gate ran (an app
    embedded without it, stdio): the single-user mode."""
    found = scope.get(CALLER_SCOPE_KEY)
    return found if isinstance(found, Caller) else default
