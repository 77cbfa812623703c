"""One context resolver for every front door: who calls, on whose memory, in which turn.

Sources, weakest first:

1. defaults: the namespace is the caller's pinned ``namespace``, else its principal;
2. the connection: ``X-Memtap-*`` headers, then the request's ``_meta`` (``{"memtap": {...}}``);
3. tool arguments (what a model writes): they may fill a field the connection left
   empty, never change one it set; a contradicting argument is a
   :class:`PinnedContextViolation`, refused and recorded. For a restricted caller (API key,
   JWT) with context arguments off (the default), the namespace is pinned to its derived
   value too: an argument may repeat it, not choose another;
4. the caller's ``pinned`` fields (fixed by the operator for the credential), applied last:
   neither the connection nor an argument may contradict them.

Then the replay clock attributes the call (fills its turn), then the requester is checked
(a caller may name only requesters it may act for), then the grant for the call's right.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from memtap.auth.caller import Caller
from memtap.auth.grants import Policy, Right
from memtap.errors import InvalidArguments, PinnedContextViolation
from memtap.limits import check_context_fields, clip, within_caps
from memtap.trace.models import Context

__all__ = [
    "ARGUMENT_FIELDS",
    "HEADERS",
    "META_KEY",
    "Clock",
    "best_context",
    "default_requester",
    "fields_from_headers",
    "fields_from_meta",
    "merge_layers",
    "resolve_context",
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
ARGUMENT_FIELDS = ("namespace", "session", "turn", "role", "requester", "run", "episode")
"""The context fields a memory tool's arguments may carry (when context arguments are on)."""

Clock = Callable[[Context], Context]
"""Attributes a call to the turn a replay is playing (the replay clock's ``attribute``)."""

_OPEN = Policy()
_CONNECTION = "the connection (X-Memtap-* headers or _meta)"


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


def merge_layers(layers: tuple[Mapping[str, Any], ...]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for layer in layers:
        for key, value in layer.items():
            if value is not None:
                merged[key] = value
    return merged


def _same(a: object, b: object) -> bool:
    return a == b or str(a) == str(b)


def _violation(caller: Caller, name: str, value: object, fixed: object, by: str) -> PinnedContextViolation:
    return PinnedContextViolation(
        f"argument {name}={value!r} contradicts {name}={fixed!r} fixed by {by} "
        f"(principal {caller.principal!r}); context the connection sets cannot be changed by a tool argument"
    )


def _merged(
    caller: Caller, layers: tuple[Mapping[str, Any], ...], arguments: Mapping[str, Any], context_args: bool
) -> dict[str, Any]:
    """The merged context fields, or a :class:`PinnedContextViolation`."""
    merged = merge_layers(layers)
    pinned = caller.pinned
    for name, value in pinned.items():
        if name in merged and not _same(merged[name], value):
            raise PinnedContextViolation(
                f"{name}={merged[name]!r} in the request contradicts {name}={value!r} "
                f"fixed for principal {caller.principal!r} by the operator"
            )
    derived = pinned.get("namespace") or merged.get("namespace") or caller.principal
    for name, value in arguments.items():
        if value is None:
            continue
        if name in pinned:
            if not _same(value, pinned[name]):
                raise _violation(caller, name, value, pinned[name], "the operator for this key")
        elif name in merged:
            if not _same(value, merged[name]):
                raise _violation(caller, name, value, merged[name], _CONNECTION)
        elif name == "namespace" and caller.restricted and not context_args and not _same(value, derived):
            raise _violation(caller, name, value, derived, "the credential (context arguments are off)")
        else:
            merged[name] = value
    merged.update(pinned)
    merged.setdefault("namespace", caller.principal)
    return merged


def _context(caller: Caller, client: str | None, upstream: str | None, fields: dict[str, Any]) -> Context:
    check_context_fields(fields)  # lengths and encodability, before they reach the trace (memtap.limits)
    client = clip(client)  # informational (a user agent, an MCP client's name): cut, not refused
    try:
        return Context(principal=caller.principal, client=client, upstream=upstream, **fields)
    except ValidationError as exc:
        problems = [f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()]
        raise InvalidArguments("invalid context: " + "; ".join(problems)) from None


def default_requester(policy: Policy, caller: Caller, context: Context) -> str:
    """On whose behalf a retrieval is shown when the call names nobody: the namespace's owner
    (the namespace) when the caller may act for it, else the caller itself."""
    if context.requester:
        return context.requester
    if policy.may_act_for(caller, context.namespace):
        return context.namespace
    return caller.principal


def resolve_context(
    caller: Caller,
    *,
    layers: tuple[Mapping[str, Any], ...] = (),
    arguments: Mapping[str, Any] | None = None,
    client: str | None = None,
    upstream: str | None = None,
    clock: Clock | None = None,
    policy: Policy | None = None,
    right: Right | None = None,
    context_args: bool = False,
) -> Context:
    """The call's context (see the module's docstring), checked against ``policy`` for ``right``.

    Raises :class:`PinnedContextViolation` or :class:`InvalidArguments` before a context
    exists, and :class:`AccessDenied` after it (a requester the caller may not act for, a
    missing grant): a refused call is recorded with :func:`best_context`, which then gives the
    same context (nothing in the call contradicted the connection)."""
    context = _context(caller, client, upstream, _merged(caller, layers, arguments or {}, context_args))
    if clock is not None:
        context = clock(context)
    if caller.restricted:
        policy = policy or _OPEN
        if context.requester:
            policy.check_act_for(caller, context.requester)
        if right is not None:
            policy.check(caller, context.namespace, right)
    return context


def best_context(
    caller: Caller,
    *,
    layers: tuple[Mapping[str, Any], ...] = (),
    arguments: Mapping[str, Any] | None = None,
    client: str | None = None,
    upstream: str | None = None,
    clock: Clock | None = None,
) -> Context:
    """The context to record for a call whose own could not be resolved: what it asked for
    (arguments over ``_meta`` over headers, pinned fields last where nothing asked otherwise),
    dropping only the fields that are not valid."""
    fields = merge_layers((*layers, {k: v for k, v in (arguments or {}).items() if k in ARGUMENT_FIELDS}))
    fields = within_caps(fields)  # a field over the caps is what the call was refused for
    client = clip(client)
    for name, value in caller.pinned.items():
        fields.setdefault(name, value)
    fields.setdefault("namespace", caller.pinned.get("namespace") or caller.principal)
    for _ in range(len(fields) + 1):
        try:
            context = Context(principal=caller.principal, client=client, upstream=upstream, **fields)
        except ValidationError as exc:
            bad = {str(err["loc"][0]) for err in exc.errors() if err["loc"]}
            if not bad & set(fields):
                break
            for name in bad:
                fields.pop(name, None)
            fields.setdefault("namespace", caller.principal)
            continue
        return clock(context) if clock is not None else context
    return Context(principal=caller.principal, namespace=caller.principal, client=client, upstream=upstream)
