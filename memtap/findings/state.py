"""What the detectors know of a trace so far: the live items of each namespace, who wrote them,
the user turns of each session, and the removals a failed write may have orphaned.

The state is built from events alone (their effects and chat messages), in trace order, so the
live detectors and ``memtap check`` see exactly the same thing.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from memtap.findings.facts import facts, normalise, word_set
from memtap.findings.index import NamespaceIndex, compared_sizes, jaccard_at_least_09
from memtap.findings.model import EffectView, EventView
from memtap.findings.supersede import clause_tuple, openings
from memtap.trace.models import AccessTags, EffectKind, Op

__all__ = ["LiveItem", "Removal", "TraceState", "changes_state", "effect_namespace", "last_user_text"]

# Enum members and tuples of them as module constants: an ``EffectKind.X`` lookup costs about
# 0.2 us, and the rules and the state ask them for every effect of a million events.
_ADD = EffectKind.ADD
_UPDATE = EffectKind.UPDATE
_DELETE = EffectKind.DELETE
_CHAT = Op.CHAT
_CHANGING = (_ADD, _UPDATE, _DELETE)  # the effects ``TraceState.apply`` applies (a retrieval changes nothing)
_WRITE_OPS = (Op.WRITE, Op.UPDATE)

_TURNS_KEPT = 200  # user turns remembered per session


@dataclass(slots=True)
class LiveItem:
    """A live item, with what the rules ask of its content worked out once: its facts, words and
    clause openings when it is made (every write needs them for the indexes), its normalised text
    and clauses when first asked."""

    backend: str
    item_id: str
    namespace: str
    content: str
    tags: AccessTags | None
    role: str | None
    principal: str | None
    session: str | None
    turn: str | None
    event_id: str
    live: bool = True
    seq: int = 0  # when it became live: the order of its namespace's live items
    facts: frozenset[str] = field(init=False, repr=False, compare=False)
    words: frozenset[str] = field(init=False, repr=False, compare=False)
    openings: frozenset[str] = field(init=False, repr=False, compare=False)
    _normalised: str | None = field(default=None, init=False, repr=False, compare=False)
    _clauses: tuple[tuple[str, ...], ...] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.facts = facts(self.content)
        self.words = word_set(self.content)
        self.openings = openings(self.content)

    @property
    def normalised(self) -> str:
        """The content normalised and padded with spaces, for whole-phrase lookups."""
        if self._normalised is None:
            self._normalised = f" {normalise(self.content)} "
        return self._normalised

    @property
    def clauses(self) -> tuple[tuple[str, ...], ...]:
        if self._clauses is None:
            self._clauses = clause_tuple(self.content)
        return self._clauses


@dataclass
class Removal:
    event_id: str
    item_id: str
    namespace: str
    content: str


@dataclass
class TraceState:
    items: dict[tuple[str, str], LiveItem] = field(default_factory=dict)
    live: dict[str, dict[tuple[str, str], LiveItem]] = field(default_factory=dict)
    live_facts: dict[str, Counter[str]] = field(default_factory=dict)
    # Live items by namespace and by the size of their word set: near-duplicate candidates.
    by_size: dict[str, dict[int, dict[tuple[str, str], LiveItem]]] = field(default_factory=dict)
    # Live items by word and by near-duplicate signature (index.py): lookups instead of scans.
    index: dict[str, NamespaceIndex] = field(default_factory=dict)
    turns: dict[tuple[str, str | None], deque[str]] = field(default_factory=dict)
    removals: dict[tuple[str, str, str | None, str | None], list[Removal]] = field(default_factory=dict)
    events_seen: int = 0
    made_live: int = 0  # live items made so far: the next one's ``seq``

    # -- queries --------------------------------------------------------------------

    def live_items(self, namespace: str) -> Iterator[LiveItem]:
        return iter(self.live.get(namespace, {}).values())

    def item(self, backend: str, item_id: str) -> LiveItem | None:
        return self.items.get((backend, item_id))

    def live_item_states(self, namespace: str, fact: str, skip: set[tuple[str, str]]) -> bool:
        """Whether a live item of ``namespace`` not in ``skip`` states ``fact``: as one of its facts,
        or inside its words (`` fact `` in its padded normalised text). The same answer as asking
        every live item, from the fact counts and the word index."""
        live = self.live.get(namespace)
        if not live:
            return False
        count = self.live_facts[namespace].get(fact, 0)
        if count > 0:
            count -= sum(1 for key in skip if key in live and fact in live[key].facts)
            if count > 0:
                return True
        padded = f" {fact} "
        words = fact.split(" ")
        if any(not w or w != w.strip() or len(w.split()) != 1 for w in words):
            # Not single words joined by single spaces: ask every item, as the rule says.
            return any(key not in skip and padded in item.normalised for key, item in live.items())
        return any(
            key not in skip and padded in live[key].normalised
            for key in self.index[namespace].holding_words(words)
        )

    def has_near_duplicate(self, namespace: str, words: frozenset[str], skip: set[tuple[str, str]]) -> bool:
        """Whether a live item of ``namespace`` not in ``skip``, of a compared size, has a word set
        near-equal to ``words`` (the duplicate rule's own test, on the index's candidates only)."""
        index = self.index.get(namespace)
        if index is None:
            return False
        candidates = index.duplicate_candidates(words)
        if not candidates:  # most writes
            return False
        live = self.live[namespace]
        sizes = compared_sizes(len(words))
        for key in candidates:
            if key in skip:
                continue
            item = live[key]
            if len(item.words) in sizes and jaccard_at_least_09(words, item.words):
                return True
        return False

    def user_turns(self, namespace: str, session: str | None) -> list[str]:
        return list(self.turns.get((namespace, session), ()))

    # -- applying an event ----------------------------------------------------------

    def apply(self, event: EventView) -> None:
        self.events_seen += 1
        ctx = event.context
        if event.op == _CHAT:
            text = last_user_text(event.arguments)
            if text:
                self.turns.setdefault((ctx.namespace, ctx.session), deque(maxlen=_TURNS_KEPT)).append(text)
        wrote = False  # an add or update effect (the turn's write landed, when the call is a write)
        for eff in event.effects:
            kind = eff.kind
            if kind not in _CHANGING:
                continue
            key = (event.backend, eff.item_id)
            namespace = effect_namespace(event, eff)
            if kind == _DELETE:
                item = self.items.get(key)
                if item is not None and item.live:
                    self._unlive(item)
                self.removals.setdefault(self._turn_key(event), []).append(
                    Removal(
                        event.id, eff.item_id, namespace, eff.content_before or (item.content if item else "")
                    )
                )
                continue
            wrote = True
            old = self.items.get(key)
            if old is not None and old.live:
                self._unlive(old)
            if kind == _UPDATE and eff.content_before is not None and old is None:
                self.removals.setdefault(self._turn_key(event), []).append(
                    Removal(event.id, eff.item_id, namespace, eff.content_before)
                )
            creator_role = old.role if old is not None and kind == _UPDATE else None
            # Positional, in the fields' order (backend, item_id, namespace, content, tags, role,
            # principal, session, turn, event_id, live, seq): half the cost of eleven keywords.
            item = LiveItem(
                event.backend,
                eff.item_id,
                namespace,
                eff.content_after or "",
                eff.tags_after or (old.tags if old is not None else None),
                creator_role or (str(ctx.role) if ctx.role is not None else None),
                ctx.principal,
                ctx.session,
                ctx.turn,
                event.id,
                True,
                self.made_live,
            )
            self.made_live += 1
            self.items[key] = item
            index = self.index.get(namespace)
            if index is None:  # the namespace's first live item
                index = self.index[namespace] = NamespaceIndex()
                self.live[namespace] = {}
                self.live_facts[namespace] = Counter()
                self.by_size[namespace] = {}
            self.live[namespace][key] = item
            counts = self.live_facts[namespace]  # ``Counter.update``, without its Python-level checks
            held = counts.get
            for fact in item.facts:
                counts[fact] = held(fact, 0) + 1
            sized = self.by_size[namespace]
            bucket = sized.get(len(item.words))
            if bucket is None:
                bucket = sized[len(item.words)] = {}
            bucket[key] = item
            index.add(key, item.words, item.openings)
        if wrote and self.removals and event.status == "ok" and event.op in _WRITE_OPS:
            self.removals.pop(self._turn_key(event), None)  # the turn's write landed

    def _unlive(self, item: LiveItem) -> None:
        item.live = False
        self.live.get(item.namespace, {}).pop((item.backend, item.item_id), None)
        counter = self.live_facts.get(item.namespace)
        if counter is not None:  # ``Counter.subtract``, without its Python-level checks
            held = counter.get
            for fact in item.facts:
                counter[fact] = held(fact, 0) - 1
        sized = self.by_size.get(item.namespace, {}).get(len(item.words))
        if sized is not None:
            sized.pop((item.backend, item.item_id), None)
        index = self.index.get(item.namespace)
        if index is not None:
            index.remove((item.backend, item.item_id), item.words, item.openings)

    def similar_size(self, namespace: str, low: float, high: float) -> Iterator[LiveItem]:
        """Live items of ``namespace`` whose word set has between ``low`` and ``high`` words."""
        sizes = self.by_size.get(namespace, {})
        for size in range(max(0, int(low)), int(high) + 1):
            bucket = sizes.get(size)
            if bucket:
                yield from reversed(bucket.values())

    @staticmethod
    def _turn_key(event: EventView) -> tuple[str, str, str | None, str | None]:
        ctx = event.context
        return (event.backend, ctx.namespace, ctx.session, ctx.turn)


def changes_state(op: Op, kinds: Iterable[EffectKind]) -> bool:
    """Whether :meth:`TraceState.apply` does more than count an event of ``op`` whose effects are
    of ``kinds``: a chat (its user turn is kept) or an add, update or delete effect (what its loop
    applies); a retrieval changes nothing. The engine asks once per event shape, and only counts
    the events this says no for."""
    return op == _CHAT or any(k in _CHANGING for k in kinds)


def effect_namespace(event: EventView, eff: EffectView) -> str:
    return eff.namespace or event.context.namespace


def last_user_text(arguments: Mapping[str, Any]) -> str | None:
    """The text of the last user message of a chat request's ``messages``, if any."""
    messages = arguments.get("messages")
    if not isinstance(messages, list):
        return None
    for message in reversed(messages):
        if isinstance(message, Mapping) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                return " ".join(
                    str(p.get("text", ""))
                    for p in content
                    if isinstance(p, Mapping) and p.get("type") == "text"
                )
    return None
