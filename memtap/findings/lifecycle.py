"""Lifecycle detectors: what writes, updates and deletes did to the facts a namespace holds.

Each rule is deterministic (facts come from ``facts.py``). Where a rule needs to know whether a
user asked for a change and the trace holds no user turn of that session (MCP traffic carries
none; the chat proxy's does), it says so with an ``info`` finding marked ``judged: false``
instead of guessing, once per namespace and session.
"""

from __future__ import annotations

from collections.abc import Iterator

from memtap.findings.facts import (
    asks_to_change,
    correction_old_values,
    facts,
    is_correction,
    near_equal,
    normalise,
    strings_in,
    word_set,
)
from memtap.findings.model import EffectView, EventView, Finding, Severity, Shape, finding_for
from memtap.findings.state import LiveItem, Removal, TraceState, effect_namespace
from memtap.findings.supersede import (
    Corrections,
    replaced_facts,
    restated_findings,
    self_superseded,
    states_change,
    superseded_findings,
)
from memtap.trace.models import EffectKind, Op, Role

__all__ = [
    "DestructiveUpdate",
    "Duplicate",
    "Erasure",
    "LostOnFailure",
    "ReaddDeletes",
    "StaleCoexistence",
    "UntrustedOverwrite",
]

# Enum members and tuples of them as module constants: an ``EffectKind.X`` lookup costs about
# 0.2 us, and the rules and the state ask them for every effect of a million events.
_UPDATE = EffectKind.UPDATE
_DELETE = EffectKind.DELETE
_RETRIEVE = EffectKind.RETRIEVE
_OP_WRITE = Op.WRITE
_OP_UPDATE = Op.UPDATE
_OP_DELETE = Op.DELETE
_UPDATE_DELETE = (EffectKind.UPDATE, EffectKind.DELETE)
_DELETE_ONLY = (EffectKind.DELETE,)
_WRITE_OPS = (Op.WRITE, Op.UPDATE)
_UNTRUSTED = (Role.THIRD_PARTY, Role.TOOL)
_USER_ROLE = Role.USER.value

_DUPLICATE_SCAN_LIMIT = 500  # live items of a similar size compared per write, newest first


_REMOVALS = (EffectKind.DELETE, EffectKind.UPDATE)
_WRITES = (EffectKind.ADD, EffectKind.UPDATE)
_REMOVALS_SET = frozenset(_REMOVALS)
_WRITES_SET = frozenset(_WRITES)


def has_effect(event: EventView, kinds: tuple[EffectKind, ...]) -> bool:
    """Whether the event has an effect of ``kinds``: a rule returns at once for the events it is
    not about (most events remove nothing; a quarter are retrievals that write nothing)."""
    return any(e.kind in kinds for e in event.effects)


def touched(event: EventView) -> set[tuple[str, str]]:
    return {(event.backend, e.item_id) for e in event.effects if e.kind != _RETRIEVE}


def written_texts(event: EventView) -> list[str]:
    """What an event wrote: its add and update effects' content after."""
    return [e.content_after for e in event.effects if e.kind in _WRITES and e.content_after]


def surviving(
    state: TraceState, namespace: str, fact: str, event: EventView, skip: set[tuple[str, str]]
) -> bool:
    """Whether ``fact`` is still stated after ``event``: by a live item it did not touch, or by
    what it wrote."""
    padded = f" {fact} "
    for text in written_texts(event):
        if fact in facts(text) or padded in f" {normalise(text)} ":
            return True
    return state.live_item_states(namespace, fact, skip)


def removed_facts(item: LiveItem | None, text: str) -> frozenset[str]:
    """``facts(text)`` of a removed content: the item's own, worked out when it was made, when it
    still holds that text (most removals remove what the trace last wrote)."""
    return item.facts if item is not None and item.content == text else facts(text)


def requested_removals(event: EventView) -> set[str]:
    """The item ids of the removals (deletes, updates) the call asked for. When the arguments name
    some removed item (by id or exact content), only the named ones were asked for; when they name
    none (an entity name, a filter), every removal of a delete or update call counts as asked for.
    A write (an add) asks for no removal, even when it names the content it removed: it was
    re-adding that content, and a backend that deletes it instead did so on its own."""
    if event.op == _OP_WRITE:
        return set()
    strings = set(strings_in(event.arguments))
    removals = [e for e in event.effects if e.kind in _REMOVALS]
    named = {e.item_id for e in removals if e.item_id in strings or (e.content_before or "\0") in strings}
    if named:
        return named
    out = set()
    for eff in removals:
        if (eff.kind == _DELETE and event.op == _OP_DELETE) or (
            eff.kind == _UPDATE and event.op == _OP_UPDATE
        ):
            out.add(eff.item_id)
    return out


class Erasure:
    """A delete, an update or a backend-side removal that removes facts no live item of the
    namespace still states, with no user turn of the session asking to forget or change them."""

    name = "erasure"
    severity = Severity.HIGH
    rule = (
        "a removal (delete effect, or an update's old content) whose facts survive in no live item of the "
        "namespace, and no user turn of the session asks to forget or change anything"
    )

    def __init__(self) -> None:
        self._undetermined: set[tuple[str, str | None]] = set()

    def wants(self, shape: Shape) -> bool:
        return bool(shape.kinds & _REMOVALS_SET)

    def observe(self, event: EventView, state: TraceState) -> Iterator[Finding]:
        if not has_effect(event, _REMOVALS):
            return
        skip = touched(event)
        asked = requested_removals(event)
        # A delete of what an update of the same call was derived from (a server rewriting an
        # item) is judged once, as that update: its old content is the deleted one's.
        rewritten = {d for e in event.effects if e.kind == _UPDATE for d in e.derived_from}
        for eff in event.effects:
            if eff.kind not in _REMOVALS or (eff.kind == _DELETE and eff.item_id in rewritten):
                continue
            namespace = effect_namespace(event, eff)
            before = eff.content_before
            old = state.item(event.backend, eff.item_id)
            if before is None:
                before = old.content if old is not None else ""
            lost = sorted(
                f for f in removed_facts(old, before) if not surviving(state, namespace, f, event, skip)
            )
            if not lost:
                continue
            requested = eff.item_id in asked
            turns = state.user_turns(namespace, event.context.session)
            asking = [t for t in turns if asks_to_change(t)]
            evidence = {
                "removed": eff.kind.value,
                "content_before": before,
                "content_after": eff.content_after,
                "lost_facts": lost,
                "requested_by_call": requested,
                "user_turns_known": len(turns),
            }
            if asking:
                continue  # a turn of this session asked for a change: not flagged
            if turns or not requested:
                why = (
                    "no user turn of the session asked to forget or change it"
                    if turns
                    else ("the call did not ask to remove this item (a backend-side removal)")
                )
                yield finding_for(
                    self,
                    event,
                    f"{eff.item_id}: {', '.join(lost)} erased; {why}",
                    item_ids=[eff.item_id],
                    evidence=evidence,
                    namespace=namespace,
                )
                continue
            key = (namespace, event.context.session)
            if key in self._undetermined:
                continue
            self._undetermined.add(key)
            yield finding_for(
                self,
                event,
                f"{eff.item_id}: removal of {', '.join(lost)} not judged: "
                "no user turn of this session is in the trace",
                item_ids=[eff.item_id],
                severity=Severity.INFO,
                namespace=namespace,
                evidence={**evidence, "judged": False, "reason": "no user turn of the session is recorded"},
            )


class DestructiveUpdate:
    """An update whose new content drops facts of the old content without restating or replacing them."""

    name = "destructive_update"
    severity = Severity.MEDIUM
    rule = (
        "an update effect drops a fact of the old content that the new content neither restates nor "
        "replaces (gives the same subject another value, in a clause worded as the old one)"
    )

    def wants(self, shape: Shape) -> bool:
        return _UPDATE in shape.kinds

    def observe(self, event: EventView, state: TraceState) -> Iterator[Finding]:
        for eff in event.effects:
            if eff.kind != _UPDATE or eff.content_before is None or eff.content_after is None:
                continue
            after_norm = f" {normalise(eff.content_after)} "
            after_facts = facts(eff.content_after)
            before_facts = removed_facts(state.item(event.backend, eff.item_id), eff.content_before)
            gone = {f for f in before_facts if f not in after_facts and f" {f} " not in after_norm}
            if not gone:
                continue
            swapped = replaced_facts(eff.content_before, eff.content_after, gone, after_facts)
            dropped = sorted(gone - swapped)
            new = sorted(f for f in after_facts if f not in before_facts)
            if dropped:
                yield finding_for(
                    self,
                    event,
                    f"{eff.item_id}: update dropped {', '.join(dropped)}",
                    item_ids=[eff.item_id],
                    namespace=effect_namespace(event, eff),
                    evidence={
                        "content_before": eff.content_before,
                        "content_after": eff.content_after,
                        "dropped_facts": dropped,
                        "new_facts": new,
                    },
                )


class StaleCoexistence:
    """After a write that corrects a value, the old value is still live beside the new one: named
    by the correction ("from X"), or stated by a live item about the same subject (supersede.py)."""

    name = "stale_coexistence"
    severity = Severity.MEDIUM
    rule = (
        "a write whose content (or the session's last user turn) is a correction naming an old value "
        "('from X', 'no longer X', 'instead of X', 'not X'), while another live item still states X; or "
        "says something changed while a live item states the same subject with another value, or "
        "while the written item itself states it first with another value; or a later write that, "
        "saying nothing changed, states a corrected subject with another value while the corrected "
        "value is live"
    )

    def __init__(self) -> None:
        self._corrections = Corrections()

    def wants(self, shape: Shape) -> bool:
        return shape.ok and bool(shape.kinds & _WRITES_SET)

    def observe(self, event: EventView, state: TraceState) -> Iterator[Finding]:
        if event.status != "ok":
            return
        skip: set[tuple[str, str]] | None = None
        for eff in event.effects:
            if eff.kind not in _WRITES or not eff.content_after:
                continue
            namespace = effect_namespace(event, eff)
            turns = state.turns.get((namespace, event.context.session))
            sources = [eff.content_after, turns[-1]] if turns else [eff.content_after]
            cued = is_correction(eff.content_after) or (bool(turns) and is_correction(sources[1]))
            if not cued and not self._corrections.holds(namespace):
                continue  # neither names an old value nor states a change (both need a cue): most writes
            if skip is None:
                skip = touched(event)
            if not cued:  # it may still restate a subject a change statement of the namespace corrected
                yield from restated_findings(self, event, eff, state, namespace, self._corrections, skip)
                continue
            old_values: set[str] = set()
            for text in sources:
                if is_correction(text):
                    old_values |= correction_old_values(text)
            if old_values:
                old_values = {v for v in old_values if v not in _STOPLIKE}
            flagged: set[str] = set()
            for item in state.live_items(namespace) if old_values else ():
                if (item.backend, item.item_id) in skip:
                    continue
                stale = sorted(v for v in old_values if v in item.facts or f" {v} " in item.normalised)
                if stale and is_correction(item.content) is False:
                    flagged.add(item.item_id)
                    yield finding_for(
                        self,
                        event,
                        f"{item.item_id} still states {', '.join(stale)} after {eff.item_id} corrected it",
                        item_ids=[item.item_id, eff.item_id],
                        event_ids=[event.id, item.event_id],
                        namespace=namespace,
                        evidence={
                            "old_values": stale,
                            "stale_content": item.content,
                            "correction": eff.content_after,
                        },
                    )
            if any(states_change(text) for text in sources):
                yield from self._holds_both(event, eff, namespace, flagged)
                yield from superseded_findings(self, event, eff, state, namespace, skip, flagged)
                self._corrections.register(namespace, eff, event)
            elif eff.item_id not in flagged:
                yield from restated_findings(self, event, eff, state, namespace, self._corrections, skip)

    def _holds_both(
        self, event: EventView, eff: EffectView, namespace: str, flagged: set[str]
    ) -> Iterator[Finding]:
        """The written item itself states a subject with its old value and then its new one."""
        found = self_superseded(eff.content_after or "") if eff.item_id not in flagged else None
        if found is None:
            return
        flagged.add(eff.item_id)
        yield finding_for(
            self,
            event,
            f"{eff.item_id} states {found.subject!r} as {found.old_value!r} and as {found.new_value!r}",
            item_ids=[eff.item_id],
            namespace=namespace,
            evidence=found.evidence(eff.content_after, eff.content_after),
        )


_STOPLIKE = frozenset({"a", "an", "the", "it", "that", "this", "be", "so", "sure", "really", "very"})


class ReaddDeletes:
    """A write of content equal or near-equal to a live item that ends with that item deleted."""

    name = "readd_deletes"
    severity = Severity.HIGH
    rule = "a write-op call deletes an item whose content near-equals what the call writes"

    def wants(self, shape: Shape) -> bool:
        return shape.op in _WRITE_OPS and _DELETE in shape.kinds

    def observe(self, event: EventView, state: TraceState) -> Iterator[Finding]:
        if event.op not in _WRITE_OPS or not has_effect(event, _DELETE_ONLY):
            return
        wanted = sorted({t for t in strings_in(event.arguments) if len(t) >= 3}) + written_texts(event)
        if not wanted:
            return
        for eff in event.effects:
            if eff.kind != _DELETE:
                continue
            before = eff.content_before or ""
            if not any(near_equal(before, text) for text in wanted):
                continue
            survives = any(near_equal(before, t) for t in written_texts(event)) or any(
                near_equal(before, item.content)
                for item in state.live_items(effect_namespace(event, eff))
                if item.item_id != eff.item_id
            )
            yield finding_for(
                self,
                event,
                f"re-adding {before!r} deleted {eff.item_id}"
                + ("" if survives else "; no live item holds it any more"),
                item_ids=[eff.item_id],
                namespace=effect_namespace(event, eff),
                severity=Severity.MEDIUM if survives else Severity.HIGH,
                evidence={"deleted_content": before, "written": wanted, "content_survives": survives},
            )


class LostOnFailure:
    """A removal followed, in the same turn (or the same call), by a write that failed."""

    name = "lost_on_failure"
    severity = Severity.HIGH
    rule = (
        "a write or update that failed, after a removal in the same session and turn (or inside the same "
        "call), when the removed facts survive in no live item"
    )

    def wants(self, shape: Shape) -> bool:
        return not shape.ok and shape.op in _WRITE_OPS

    def observe(self, event: EventView, state: TraceState) -> Iterator[Finding]:
        if event.status == "ok" or event.op not in _WRITE_OPS:
            return
        ctx = event.context
        pending = list(state.removals.get((event.backend, ctx.namespace, ctx.session, ctx.turn), []))
        for eff in event.effects:
            if eff.kind == _DELETE:
                pending.append(
                    Removal(event.id, eff.item_id, effect_namespace(event, eff), eff.content_before or "")
                )
        skip = touched(event)
        for removal in pending:
            lost = sorted(
                f for f in facts(removal.content) if not surviving(state, removal.namespace, f, event, skip)
            )
            if not lost and removal.content:
                continue
            yield finding_for(
                self,
                event,
                f"{removal.item_id} was removed and the write that should replace it failed: {event.error}",
                item_ids=[removal.item_id],
                event_ids=sorted({removal.event_id, event.id}),
                namespace=removal.namespace,
                evidence={"removed_content": removal.content, "lost_facts": lost, "error": event.error},
            )


class Duplicate:
    """Near-duplicate live items in one namespace."""

    name = "duplicate"
    severity = Severity.LOW
    rule = (
        "an add or update leaves two live items of one namespace whose content is near-equal (Jaccard >= 0.9)"
    )

    def wants(self, shape: Shape) -> bool:
        return bool(shape.kinds & _WRITES_SET)

    def observe(self, event: EventView, state: TraceState) -> Iterator[Finding]:
        skip: set[tuple[str, str]] | None = None
        for eff in event.effects:
            if eff.kind not in _WRITES or not eff.content_after:
                continue
            namespace = effect_namespace(event, eff)
            mine = word_set(eff.content_after)
            if not mine:
                continue
            if skip is None:
                skip = touched(event)
            # Jaccard >= 0.9 needs word sets within 10% of each other's size: only those are compared.
            if not state.has_near_duplicate(namespace, mine, skip):
                continue  # no live item passes the test below: the scan would find nothing
            low, high = len(mine) * 0.9, len(mine) / 0.9
            for n, item in enumerate(state.similar_size(namespace, low, high)):
                if n >= _DUPLICATE_SCAN_LIMIT:
                    break
                if (item.backend, item.item_id) in skip:
                    continue
                # Jaccard >= 0.9 without building the union (equal normalised texts have equal word sets).
                shared = len(mine & item.words)
                if shared >= 0.9 * (len(mine) + len(item.words) - shared):
                    yield finding_for(
                        self,
                        event,
                        f"{eff.item_id} duplicates live item {item.item_id}",
                        item_ids=[eff.item_id, item.item_id],
                        event_ids=[event.id, item.event_id],
                        namespace=namespace,
                        evidence={"content": eff.content_after, "duplicate_of": item.content},
                    )
                    break


class UntrustedOverwrite:
    """A write from a third-party or tool source that updated or removed what a user stated."""

    name = "untrusted_overwrite"
    severity = Severity.HIGH
    rule = (
        "an update or delete effect by a call whose role is third_party or tool, "
        "on an item a user-role call wrote"
    )

    def wants(self, shape: Shape) -> bool:
        return shape.role in _UNTRUSTED and bool(shape.kinds & _REMOVALS_SET)

    def observe(self, event: EventView, state: TraceState) -> Iterator[Finding]:
        role = event.context.role
        if role not in _UNTRUSTED:
            return
        for eff in event.effects:
            if eff.kind not in _UPDATE_DELETE:
                continue
            item: LiveItem | None = state.item(event.backend, eff.item_id)
            if item is None or item.role != _USER_ROLE:
                continue
            yield finding_for(
                self,
                event,
                f"a {role.value} source {eff.kind.value}d {eff.item_id}, which a user stated",
                item_ids=[eff.item_id],
                event_ids=[event.id, item.event_id],
                namespace=effect_namespace(event, eff),
                evidence={
                    "source_role": role.value,
                    "user_content": item.content,
                    "content_after": eff.content_after,
                    "effect": eff.kind.value,
                },
            )
