"""Access detectors: memories shown to someone who may not see them, attempts outside a
principal's grants, planted canaries where they should not be, and credentials stored as memory."""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from memtap.findings.facts import facts, normalise
from memtap.findings.model import EventView, Finding, Severity, Shape, finding_for
from memtap.findings.state import TraceState, effect_namespace
from memtap.trace.models import AccessTags, EffectKind, Op

__all__ = [
    "Canary",
    "CanaryExposure",
    "CrossNamespace",
    "LeakInjection",
    "LeakRetrieval",
    "SecretStored",
    "denied_ids",
]

# Enum members and tuples of them as module constants: an ``EffectKind.X`` lookup costs about
# 0.2 us, and the rules and the state ask them for every effect of a million events.
_RETRIEVE = EffectKind.RETRIEVE
_CHAT = Op.CHAT
_WRITE_KINDS = (EffectKind.ADD, EffectKind.UPDATE)

_DENIED = re.compile(r"^(observe:would-deny|enforce:withheld)=(.*)$")
_REFUSAL = re.compile(
    r"(may not (read|write|delete|admin|act for|call)|contradicts .* fixed by|in the request contradicts)"
)
_WRITES = frozenset({EffectKind.ADD, EffectKind.UPDATE})
_HOLDING = 65536  # items holding a canary remembered, to see them in the prompts they are injected into
_RECENT = 2048  # chat calls and denied retrievals remembered to pair them, whichever is recorded first


def denied_ids(gate: str | None) -> tuple[str, list[str]]:
    """The gate verdict's mode (``observe:would-deny`` or ``enforce:withheld``) and item ids."""
    match = _DENIED.match(gate or "")
    if match is None:
        return "", []
    return match.group(1), [i for i in match.group(2).split(",") if i]


def requester_of(event: EventView) -> str:
    ctx = event.context
    return ctx.requester or ctx.namespace or ctx.principal


class LeakRetrieval:
    """A retrieval returned items whose access tags deny the requester (gate ``observe:would-deny``;
    with no verdict recorded, as a wrapped server's retrievals have none, judged from the tags the
    trace recorded for the items, as the gate would)."""

    name = "leak_retrieval"
    severity = Severity.HIGH
    rule = (
        "the access gate recorded observe:would-deny=ID,...: the items were returned to a requester they "
        "deny; where no verdict was recorded (a wrapped server), the items' recorded tags deny the requester"
    )

    def wants(self, shape: Shape) -> bool:
        return shape.gate == "deny" or (shape.gate is None and shape.ok and _RETRIEVE in shape.kinds)

    def observe(self, event: EventView, state: TraceState) -> Iterator[Finding]:
        mode, ids = denied_ids(event.gate)
        judged_here = False
        if event.gate is None and event.status == "ok":
            # No verdict recorded (a wrapped server's retrieval): judge the items' recorded tags.
            ids = tags_deny(event, state)
            mode, judged_here = "observe:would-deny", True
        if mode != "observe:would-deny" or not ids:
            return
        contents = {e.item_id: e.content_after for e in event.effects if e.kind == _RETRIEVE}
        tags = {}
        for item_id in ids:
            found = _tags_of(event, state, item_id)
            if found is not None:
                tags[item_id] = found.model_dump(exclude_defaults=True)
        yield finding_for(
            self,
            event,
            f"{len(ids)} item(s) returned to {requester_of(event)!r} whose tags deny it: {', '.join(ids)}",
            item_ids=ids,
            evidence={
                "gate": event.gate if not judged_here else "none recorded: judged from the items' tags",
                "requester": requester_of(event),
                "contents": contents,
                "tags": tags,
            },
        )


def _tags_of(event: EventView, state: TraceState, item_id: str) -> AccessTags | None:
    """The tags a retrieved item carried: on the retrieve effect, else as the trace last wrote it."""
    for eff in event.effects:
        if eff.item_id == item_id and eff.kind == _RETRIEVE and eff.tags_after is not None:
            return eff.tags_after
    item = state.item(event.backend, item_id)
    return item.tags if item is not None else None


def tags_deny(event: EventView, state: TraceState) -> list[str]:
    """The retrieved items whose recorded tags deny the event's requester, judged as the access
    gate judges (untagged items are allowed): for retrievals that carry no gate verdict."""
    requester = requester_of(event)
    out = []
    for eff in event.effects:
        if eff.kind != _RETRIEVE or eff.item_id in out:
            continue
        tags = _tags_of(event, state, eff.item_id)
        if tags is not None and not tags.permits(requester):
            out.append(eff.item_id)
    return out


class CrossNamespace:
    """A call refused for reaching outside the principal's grants, or an item of one namespace
    served to a call in another."""

    name = "cross_namespace"
    severity = Severity.CRITICAL
    rule = (
        "an error event whose error is a grant refusal or a pinned-context violation (medium: refused); "
        "a retrieval returning an item that belongs to another namespace (critical: served)"
    )

    def wants(self, shape: Shape) -> bool:
        return (not shape.ok and shape.error) or _RETRIEVE in shape.kinds

    def observe(self, event: EventView, state: TraceState) -> Iterator[Finding]:
        ctx = event.context
        if event.status != "ok" and event.error and _REFUSAL.search(event.error):
            yield finding_for(
                self,
                event,
                f"refused: {event.error}",
                severity=Severity.MEDIUM,
                evidence={
                    "refused": True,
                    "principal": ctx.principal,
                    "error": event.error,
                    "tool": event.tool,
                },
            )
            return
        items, backend, served, retrieve = state.items, event.backend, ctx.namespace, _RETRIEVE
        for eff in event.effects:
            if eff.kind != retrieve:
                continue
            item = items.get((backend, eff.item_id))
            owner_ns = item.namespace if item is not None else effect_namespace(event, eff)
            if owner_ns != served:
                yield finding_for(
                    self,
                    event,
                    f"{eff.item_id} of namespace {owner_ns!r} served to namespace {ctx.namespace!r}",
                    item_ids=[eff.item_id],
                    evidence={
                        "refused": False,
                        "item_namespace": owner_ns,
                        "served_to": ctx.namespace,
                        "principal": ctx.principal,
                        "content": eff.content_after,
                    },
                )


@dataclass
class Canary:
    """A planted string; ``owners`` (namespaces or requesters) may see it. With no owners, the
    namespaces it is first written to own it."""

    value: str
    owners: set[str] = field(default_factory=set)
    configured: bool = False


def _texts_of(event: EventView, injected: Mapping[str, str]) -> list[tuple[str, str]]:
    """(where, text) pairs an event shows to its requester or sends upstream. A chat's upstream
    request is the client's request (the recorded arguments) plus the memories the chat proxy
    injected into it (``result.memory.injected``), whose contents ``injected`` gives by id."""
    out: list[tuple[str, str]] = []
    for eff in event.effects:
        if eff.kind == _RETRIEVE and eff.content_after:
            out.append((f"retrieval of {eff.item_id}", eff.content_after))
    if event.op == _CHAT:
        sent = [json.dumps(event.arguments, ensure_ascii=False)]
        sent += [injected[i] for i in injected_ids(event.result) if i in injected]
        out.append(("upstream request", "\n".join(sent)))
        if event.result is not None:
            out.append(("reply", reply_text(event.result)))
    return out


def injected_ids(result: Any) -> list[str]:
    """The ids of the memories a chat call's ``result.memory.injected`` lists."""
    memory = result.get("memory") if isinstance(result, Mapping) else None
    injected = memory.get("injected") if isinstance(memory, Mapping) else None
    return [str(i) for i in injected if isinstance(i, str)] if isinstance(injected, list) else []


def reply_text(result: Any) -> str:
    """The assistant text of a recorded chat result (OpenAI shape), else its JSON."""
    if isinstance(result, Mapping):
        choices = result.get("choices")
        if isinstance(choices, list):
            parts = []
            for choice in choices:
                message = choice.get("message") if isinstance(choice, Mapping) else None
                if isinstance(message, Mapping) and isinstance(message.get("content"), str):
                    parts.append(message["content"])
            if parts:
                return "\n".join(parts)
    if isinstance(result, str):
        return result
    return json.dumps(result, ensure_ascii=False, default=str)


class CanaryExposure:
    """A configured canary string seen by a requester, or sent upstream for one, that may not see it."""

    name = "canary_exposure"
    severity = Severity.CRITICAL
    rule = (
        "a configured canary appears in a retrieval, a chat request sent upstream (the client's messages "
        "or the memories injected into them) or a reply, for a requester that is not one of its owners "
        "(configured, else the namespaces it was written to)"
    )

    def __init__(self, canaries: list[Canary]) -> None:
        self.canaries = canaries
        self._holding: OrderedDict[str, str] = OrderedDict()  # item id -> content, items holding a canary

    def wants(self, shape: Shape) -> bool:
        return bool(self.canaries)

    def observe(self, event: EventView, state: TraceState) -> Iterator[Finding]:
        if not self.canaries:
            return
        for eff in event.effects:  # learn owners, and which items hold a canary, from writes
            if eff.kind in _WRITE_KINDS and eff.content_after:
                for canary in self.canaries:
                    if canary.value in eff.content_after:
                        _remember_text(self._holding, eff.item_id, eff.content_after)
                        if not canary.configured:
                            canary.owners.add(effect_namespace(event, eff))
        requester = requester_of(event)
        seen = {requester, event.context.namespace} if event.context.requester is None else {requester}
        for where, text in _texts_of(event, self._holding):
            for canary in self.canaries:
                if canary.value in text and not (seen & canary.owners):
                    yield finding_for(
                        self,
                        event,
                        f"canary exposed to {requester!r} in the {where}",
                        item_ids=[
                            e.item_id
                            for e in event.effects
                            if e.content_after and canary.value in e.content_after
                        ]
                        + [
                            i
                            for i in (injected_ids(event.result) if where != "reply" else ())
                            if canary.value in self._holding.get(i, "")
                        ],
                        evidence={
                            "canary": canary.value,
                            "where": where,
                            "requester": requester,
                            "owners": sorted(canary.owners),
                        },
                    )


class SecretStored:
    """Memory content holding credential-shaped strings, found by detect-secrets' plugins
    (its entropy-only and keyword plugins are left out: they flag ordinary words)."""

    name = "secret_stored"
    severity = Severity.HIGH
    rule = (
        "an add or update effect's content matches a detect-secrets plugin "
        "(AWS keys, GitHub tokens, private keys, ...)"
    )

    _NOISY = frozenset({"Base64 High Entropy String", "Hex High Entropy String", "Secret Keyword"})

    def wants(self, shape: Shape) -> bool:
        return bool(shape.kinds & _WRITES)

    def observe(self, event: EventView, state: TraceState) -> Iterator[Finding]:
        for eff in event.effects:
            if eff.kind not in _WRITE_KINDS or not eff.content_after:
                continue
            kinds = scan_secrets(eff.content_after, self._NOISY)
            if kinds:
                yield finding_for(
                    self,
                    event,
                    f"{eff.item_id} stores a credential: {', '.join(kinds)}",
                    item_ids=[eff.item_id],
                    namespace=effect_namespace(event, eff),
                    evidence={"secret_types": kinds},  # never the secret itself
                )


# Every credential detect-secrets' named plugins find is a run of at least 16 token characters
# (an AWS key id is 20, a GitHub token 40, a JWT or Slack token longer) or a PEM header; text
# without one is not handed to the library, whose per-line cost (about 10 ms) would otherwise
# dominate live detection.
_CANDIDATE = re.compile(r"[A-Za-z0-9_\-+/=.:]{16,}|PRIVATE KEY")


def scan_secrets(text: str, skip: frozenset[str]) -> list[str]:
    if _CANDIDATE.search(text) is None:
        return []
    from detect_secrets.core.scan import scan_line
    from detect_secrets.settings import default_settings

    found: set[str] = set()
    with default_settings():
        for line in text.splitlines() or [text]:
            if _CANDIDATE.search(line) is None:
                continue
            for secret in scan_line(line):
                if secret.type not in skip:
                    found.add(secret.type)
    return sorted(found)


class LeakInjection:
    """The chat proxy injected an item the requester may not see, or the reply to a requester
    states a protected value of such an item."""

    name = "leak_injection"
    severity = Severity.CRITICAL
    rule = (
        "a chat call's memory search (linked by id) returned items the gate denies its requester: "
        "observe:would-deny means they were injected; and a fact of a denied item (a number, name, "
        "date or quoted value) that appears in the reply and that no returned item the requester may "
        "see states"
    )

    def __init__(self) -> None:
        self._chats: OrderedDict[str, EventView] = OrderedDict()
        self._denied: OrderedDict[str, EventView] = OrderedDict()

    def wants(self, shape: Shape) -> bool:
        return shape.op == _CHAT or (shape.parent and shape.gate == "deny")

    def observe(self, event: EventView, state: TraceState) -> Iterator[Finding]:
        if event.op == _CHAT:
            _remember(self._chats, event.id, event)
            for link in event.links:
                search = self._denied.pop(link, None)
                if search is not None:
                    yield from self._judge(event, search, state)
            return
        if event.parent_id is None or not denied_ids(event.gate)[1]:
            return
        chat = self._chats.get(event.parent_id)
        if chat is None:
            _remember(self._denied, event.id, event)
        else:
            yield from self._judge(chat, event, state)

    def _judge(self, chat: EventView, search: EventView, state: TraceState) -> Iterator[Finding]:
        mode, ids = denied_ids(search.gate)
        contents = {e.item_id: e.content_after or "" for e in search.effects if e.kind == _RETRIEVE}
        for item_id in ids:
            item = state.item(search.backend, item_id)
            if item is not None and not contents.get(item_id):
                contents[item_id] = item.content
        requester = requester_of(search)
        if mode == "observe:would-deny":
            yield finding_for(
                self,
                chat,
                f"the chat proxy injected {len(ids)} item(s) denied to {requester!r}",
                item_ids=ids,
                event_ids=[chat.id, search.id],
                evidence={"gate": search.gate, "requester": requester, "injected": contents},
            )
        reply = reply_text(chat.result) if chat.result is not None else ""
        folded = reply.casefold()
        # A value an item the requester may see also states is no secret of the denied one.
        allowed = [f" {normalise(c)} " for i, c in contents.items() if i not in ids and c]
        for item_id in ids:
            values = sorted(
                f
                for f in facts(contents.get(item_id, ""))
                if len(f) >= 3 and f in folded and not any(f" {f} " in text for text in allowed)
            )
            if values:
                yield finding_for(
                    self,
                    chat,
                    f"the reply to {requester!r} states {', '.join(values)} of denied item {item_id}",
                    item_ids=[item_id],
                    event_ids=[chat.id, search.id],
                    evidence={"requester": requester, "protected_values": values, "reply": reply},
                )


def _remember_text(cache: OrderedDict[str, str], key: str, text: str) -> None:
    cache[key] = text
    cache.move_to_end(key)
    while len(cache) > _HOLDING:
        cache.popitem(last=False)


def _remember(cache: OrderedDict[str, EventView], key: str, event: EventView) -> None:
    cache[key] = event
    while len(cache) > _RECENT:
        cache.popitem(last=False)
