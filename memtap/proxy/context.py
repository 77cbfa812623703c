"""Request context: who is calling, on whose memory, in which run, session and turn.

Sources, strongest first: tool arguments, the MCP request's ``_meta`` (an object
under the key ``memtap``), HTTP headers (``X-Memtap-*``), then defaults. The
principal comes from the API key when keys are configured, and is never taken
from the request then.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from memtap.errors import InvalidArguments, MemtapError
from memtap.limits import check_context_fields, clip
from memtap.trace.models import Context

__all__ = [
    "HEADERS",
    "META_KEY",
    "build_context",
    "build_context_safely",
    "fields_from_headers",
    "fields_from_meta",
]

META_KEY = "memtap"

HEADERS = {
    "x-memtap-namespace": "namespace",
    "x-memtap-session": "session",
    "x-memtap-turn": "turn",
    "x-memtap-role": "role",
    "x-memtap-requester": "requester",
    "x-memtap-run": "run",
    "x-memtap-episode": "episode",
    "x-memtap-agent": "agent_id",
    "x-memtap-trace-id": "trace_id",
}
_META_FIELDS = frozenset(HEADERS.values())


def fields_from_headers(headers: Mapping[str, str] | None) -> dict[str, Any]:
    if not headers:
        return {}
    found = {}
    for header, name in HEADERS.items():
        value = headers.get(header)
        if value:
            found[name] = value
    return found


def fields_from_meta(meta: Mapping[str, Any] | None) -> dict[str, Any]:
    if not meta:
        return {}
    block = meta.get(META_KEY)
    if not isinstance(block, Mapping):
        return {}
    return {key: value for key, value in block.items() if key in _META_FIELDS and value is not None}


def build_context(
    *,
    principal: str,
    client: str | None = None,
    upstream: str | None = None,
    layers: tuple[Mapping[str, Any], ...] = (),
) -> Context:
    """Merge context layers, weakest first; the namespace defaults to the principal."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged.update({key: value for key, value in layer.items() if value is not None})
    merged.setdefault("namespace", principal)
    check_context_fields(merged)  # lengths and encodability, before they reach the trace
    client = clip(client)  # informational (a user agent, an MCP client's name): cut, not refused
    try:
        return Context(principal=principal, client=client, upstream=upstream, **merged)
    except ValidationError as exc:
        problems = [f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()]
        raise InvalidArguments("invalid context: " + "; ".join(problems)) from None


def build_context_safely(
    principal: str, client: str | None, layers: tuple[Mapping[str, Any], ...]
) -> Context:
    """The best context for recording a call whose own context could not be built."""
    try:
        return build_context(principal=principal, client=client, layers=layers)
    except MemtapError:
        return Context(principal=principal, namespace=principal, client=clip(client))
