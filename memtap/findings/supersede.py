"""Superseded statements: a write that says a value changed, while a live item still states the
old value of the same subject.

Most corrections are not phrased "from X to Y": a user says "That has changed. My dentist is
Dr. Okafor." and the memory that said "My dentist is Dr. Lindqvist." is the stale one. What a
live agent has to go on is the two statements themselves: a clause of the new write and a clause
of a live item that say the same thing about the same subject (they share their opening words,
and possibly their closing words) and differ only in the value between. The rule is
deterministic:

- a **change statement**: the write (or the session's last user turn) holds a change cue
  (``changed``, ``update``, ``no longer``, ``instead``, ...) that is not negated ("nothing
  changes for me", "no change", "hasn't changed" do not count);
- **clauses** are the text's sentences and colon- or semicolon-separated parts (a full stop
  after a title such as ``Dr.`` does not end one), normalised to lower-case words; requests to
  forget and questions are not statements;
- two clauses state **the same subject with another value** when they share at least one
  opening word and at least three opening plus closing words in all, and both differing
  middles are non-empty (one clause extending the other is a restatement, not a new value).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from sys import intern
from typing import TYPE_CHECKING

from memtap.findings.facts import asks_to_forget, is_correction, normalise, word_set, words
from memtap.findings.model import Detector, EffectView, EventView, Finding, finding_for

if TYPE_CHECKING:  # state.py caches each live item's clauses and openings with this module's functions
    from memtap.findings.index import NamespaceIndex
    from memtap.findings.state import LiveItem, TraceState

__all__ = [
    "Corrections",
    "Superseded",
    "clause_tuple",
    "clauses",
    "openings",
    "replaced_facts",
    "restated_findings",
    "self_superseded",
    "states_change",
    "superseded",
    "superseded_findings",
]

_NEGATED_CHANGE = re.compile(
    r"\b(?:nothing|no|not|never|hasn'?t|haven'?t|didn'?t|doesn'?t|don'?t|won'?t|isn'?t)\s+"
    r"(?:\w+\s+)?(?:change[ds]?|changing|updated?|different)\b",
    re.IGNORECASE,
)
_ABBREVIATION = re.compile(r"\b(Dr|Mr|Mrs|Ms|Prof|St|Jr|Sr|Mt|No|vs|etc|e\.g|i\.e)\.\s")
_SPLIT = re.compile(r"(?<=[.!?;:])\s+|\n+")
# Cheap tests (a character class or a literal the search skips to in C) for a text with nothing to
# split or protect: most are one sentence, and ``_SPLIT`` and ``_ABBREVIATION`` open with
# lookbehinds and word boundaries tried at every position.
_SPLIT_AT = re.compile(r"[.!?;:]\s")  # where ``_SPLIT`` splits, but at a newline
_PERIOD_SPACE = re.compile(r"\.\s")  # every ``_ABBREVIATION`` match ends with one
_MIN_SHARED = 3  # opening plus closing words two clauses must share to be about one subject
_WORD = re.compile(r"[\w'-]+")  # a word, as ``normalise`` finds them


def _split(text: str) -> list[str]:
    """``_SPLIT.split(text)``: a text with no newline and no sentence end before a space is one part."""
    if "\n" not in text and _SPLIT_AT.search(text) is None:
        return [text]
    return _SPLIT.split(text)


def states_change(text: str) -> bool:
    """Whether ``text`` says something changed: a change cue outside negated phrases. (Blanking
    the negated phrases cannot make a cue: with none in ``text``, none is left.)"""
    if not is_correction(text):
        return False
    if text.isascii():
        # Every negated phrase ends with one of these words (in ASCII text a letter matches
        # ignoring case exactly when its lower case does): with none, nothing is blanked, and
        # ``_NEGATED_CHANGE.sub`` (tried at every position) is not run. (The same test spells every
        # match of the pattern against this: tests/test_findings_quality.py.)
        lowered = text.lower()
        if "chang" not in lowered and "updat" not in lowered and "differen" not in lowered:
            return True
    return is_correction(_NEGATED_CHANGE.sub(" ", text))


def clauses(text: str) -> list[tuple[str, ...]]:
    """The statements of ``text``: each sentence or colon/semicolon part as normalised words;
    requests to forget and questions are left out."""
    return list(clause_tuple(text))


@lru_cache(maxsize=8192)  # one write's content is asked for by several rules, and again when it is live
def clause_tuple(text: str) -> tuple[tuple[str, ...], ...]:
    """``clauses(text)``, worked out once per text (shared: read it, never change it)."""
    if _PERIOD_SPACE.search(text) is None:
        protected = text
    else:
        protected = _ABBREVIATION.sub(lambda m: m.group(0).replace(". ", "\0 "), text)
    out = []
    for part in _split(protected):
        part = part.replace("\0", ".").strip()
        if not part or part.endswith("?") or asks_to_forget(part):
            continue
        words = tuple(map(intern, normalise(part).split()))  # interned, as ``word_set``: items keep them
        if words:
            out.append(words)
    return tuple(out)


@lru_cache(maxsize=8192)  # a write's, asked when it is judged and again when it is made live
def openings(text: str) -> frozenset[str]:
    """A superset of the opening words of ``clauses(text)``, cheaply: the first word of every part
    the text splits into at a sentence end. Titles are not protected and no part is left out here:
    both only add openings (a clause is one or more consecutive parts, and its first word is the
    first word of the first of them that has one). Two clauses about one subject share their
    opening word, so this indexes the live items a change statement can supersede."""
    found = set()
    for part in _split(text):
        match = _WORD.search(part.casefold())
        if match is not None:
            found.add(match.group(0))
    return frozenset(found)


@dataclass(frozen=True)
class Superseded:
    """A live clause that a new clause gives another value: the shared subject and both values."""

    subject: str
    old_value: str
    new_value: str
    old_clause: str
    new_clause: str

    def evidence(self, stale_content: str | None, correction: str | None) -> dict[str, object]:
        """A ``stale_coexistence`` finding's evidence for this pair of clauses."""
        return {
            "old_values": [self.old_value],
            "new_value": self.new_value,
            "subject": self.subject,
            "stale_content": stale_content,
            "correction": correction,
        }


def _shared_ends(new: tuple[str, ...], old: tuple[str, ...]) -> tuple[int, int]:
    """How many words two clauses share at their start, and then at their end."""
    limit = min(len(new), len(old))
    head = 0
    while head < limit and new[head] == old[head]:
        head += 1
    tail = 0
    while tail < limit - head and new[-1 - tail] == old[-1 - tail]:
        tail += 1
    return head, tail


def _compare(new: tuple[str, ...], old: tuple[str, ...]) -> Superseded | None:
    if new == old:
        return None
    head, tail = _shared_ends(new, old)
    new_mid, old_mid = new[head : len(new) - tail], old[head : len(old) - tail]
    if head < 1 or head + tail < _MIN_SHARED or not new_mid or not old_mid:
        return None
    subject = " ".join((*new[:head], "…", *new[len(new) - tail :])) if tail else " ".join(new[:head])
    return Superseded(subject, " ".join(old_mid), " ".join(new_mid), " ".join(old), " ".join(new))


def replaced_facts(
    old_text: str, new_text: str, candidates: Iterable[str], values: Iterable[str]
) -> set[str]:
    """Which of ``candidates`` (facts of ``old_text`` that ``new_text`` no longer states) it gives
    another value: a clause of ``new_text`` and one of ``old_text`` holding the fact share their
    opening word(s), a content word among the shared ones, and differ in the middle, where the new
    clause states one of ``values`` (the facts of ``new_text``): "works at *Acme*" → "works at
    *Globex*" replaces, "lives in *Oslo*" → "lives somewhere" or "I still owe *4,200*" → "I get to
    work by bike" does not."""
    wanted = {f: set(normalise(f).split()) for f in candidates}
    value_words = {w for v in values for w in normalise(v).split()}
    news = clause_tuple(new_text)
    out: set[str] = set()
    for old in clause_tuple(old_text):
        held = set(old)
        holding = [f for f, key in wanted.items() if f not in out and key and key <= held]
        if not holding:
            continue
        for new in news:
            head, tail = _shared_ends(new, old)
            new_mid, old_mid = new[head : len(new) - tail], old[head : len(old) - tail]
            shared = words(" ".join((*new[:head], *new[len(new) - tail :])))
            if head < 1 or not shared or not old_mid or not value_words & set(new_mid):
                continue
            out.update(f for f in holding if wanted[f] & set(old_mid))
    return out


def superseded(new_text: str, old_texts: Iterable[str]) -> Iterator[tuple[int, Superseded]]:
    """For each of ``old_texts`` (by position) that states a subject of ``new_text`` with another
    value, the first such pair of clauses."""
    mine = clause_tuple(new_text)
    if not mine:
        return
    for n, old_text in enumerate(old_texts):
        found = first_superseded(mine, clause_tuple(old_text))
        if found is not None:
            yield n, found


def first_superseded(mine: Sequence[tuple[str, ...]], theirs: Sequence[tuple[str, ...]]) -> Superseded | None:
    """The first clause of ``theirs`` (in order) that a clause of ``mine`` (the first that does)
    gives another value. Pairs that cannot share the words ``_compare`` needs are passed over
    first: a shared opening word and, since at least three words are shared in all, either the
    second or the last word too (both clauses of two words or more)."""
    for old in theirs:
        if len(old) < 2:
            continue
        first, second, last = old[0], old[1], old[-1]
        for new in mine:
            if len(new) < 2 or new[0] != first or (new[1] != second and new[-1] != last):
                continue
            found = _compare(new, old)
            if found is not None:
                return found
    return None


def self_superseded(text: str) -> Superseded | None:
    """A clause of ``text`` that a later clause of the same text gives another value, the earlier
    one a plain statement (no change cue of its own, so not "it changed from X"): a memory holding
    the old value beside the new one, as a summarising memory that merges a correction into what
    it held ("Our office is at 88 King Road. That has changed. Our office is at 12 Harbour
    Street.")."""
    said = clause_tuple(text)
    for j in range(1, len(said)):
        plain = [c for c in said[:j] if not is_correction(" ".join(c))]
        found = first_superseded([said[j]], plain) if plain else None
        if found is not None:
            return found
    return None


_NONE: frozenset[tuple[str, str]] = frozenset()


def _able(index: NamespaceIndex, ends: list[tuple[str, str, str]], heads: set[str]) -> set[tuple[str, str]]:
    """The live items that can have a clause one of ``ends`` (a clause's first, second and last
    words) gives another value: a clause that may open with one of ``heads`` (``opening_with``)
    and holds the first word and the second or the last (``first_superseded``; a clause's words
    are words of its text). Worked out with the word index's sets (each word's live items), not
    item by item: set operations in C over a namespace's thousands of live items."""
    by_word = index.by_word
    found = index.opening_with(heads)  # mostly a few of the live items
    able: set[tuple[str, str]] = set()
    if not found:
        return able
    for a, b, z in ends:
        first = by_word.get(a)
        if first:
            held = found & first  # each ``&`` walks the smaller set: ``found``, then fewer
            if held:
                able |= held & by_word.get(b, _NONE)
                able |= held & by_word.get(z, _NONE)
    return able


def _made_live(item: LiveItem) -> int:
    return item.seq


def superseded_findings(
    detector: Detector,
    event: EventView,
    eff: EffectView,
    state: TraceState,
    namespace: str,
    skip: set[tuple[str, str]],
    flagged: set[str],
) -> Iterator[Finding]:
    """``stale_coexistence`` findings for a change statement ``eff`` wrote: each live item of the
    namespace (not touched by the event, not already ``flagged``) stating one of its subjects with
    another value, in the order the items became live. Only the items with a clause opening with
    the word one of ``eff``'s clauses opens with are compared (the state's opening index): the
    others share no opening word with it, which ``_compare`` requires."""
    mine = clause_tuple(eff.content_after or "")
    ends = [(c[0], c[1], c[-1]) for c in mine if len(c) >= 2]
    if not ends:
        return  # no clause of two words or more: none can give a subject another value
    index = state.index.get(namespace)
    if index is None:
        return
    live = state.live[namespace]
    # The items whose clauses (not worked out) can share the words a superseded one does, in the
    # order they became live (filtered first, then sorted: a namespace holds thousands).
    others = []
    for key in _able(index, ends, {clause[0] for clause in mine}):
        if key in skip:
            continue
        item = live[key]
        if item.item_id not in flagged:
            others.append(item)
    others.sort(key=_made_live)
    for item in others:
        found = first_superseded(mine, item.clauses)
        if found is None:
            continue
        yield finding_for(
            detector,
            event,
            f"{item.item_id} still states {found.subject!r} is {found.old_value!r} after "
            f"{eff.item_id} changed it to {found.new_value!r}",
            item_ids=[item.item_id, eff.item_id],
            event_ids=[event.id, item.event_id],
            namespace=namespace,
            evidence=found.evidence(item.content, eff.content_after),
        )


@dataclass(frozen=True)
class _Change:
    """A clause of a change statement a write stored, and where it came from."""

    clause: tuple[str, ...]
    item_id: str
    event_id: str
    content: str


class _Kept:
    """The change clauses kept for one namespace, oldest first: all of them, and by opening word."""

    __slots__ = ("by_head", "order")

    def __init__(self) -> None:
        self.order: list[_Change] = []
        self.by_head: dict[str, list[_Change]] = {}

    def may_restate(self, content: str) -> bool:
        """Whether a kept clause can be one a clause of ``content`` gives another value, from the
        content's words alone: ``first_superseded`` pairs clauses that open with the same word (one
        of ``openings(content)``) and share the second or the last word too (words of ``content``),
        so a kept clause with none of these is passed over without working out its clauses."""
        content_words: frozenset[str] | None = None
        for head in openings(content):
            same = self.by_head.get(head)
            if same:
                if content_words is None:
                    content_words = word_set(content)
                if any(c.clause[1] in content_words or c.clause[-1] in content_words for c in same):
                    return True
        return False


class Corrections:
    """The clauses the change statements of each namespace stored, for the restated-value rule: a
    later write that states one of their subjects with another value, without saying anything
    changed, while the corrected value is still live, puts the superseded value back beside its
    replacement ("I looked at PyPy 3.10 again, but nothing changes for me: the project targets
    Python 3.13." after "... The project targets PyPy 3.10."). The backend's state cannot tell
    this: the old item may be long gone (an overwriting backend), so the change statements are
    remembered here, the latest per subject (a newer change of the subject replaces the older)."""

    PER_NAMESPACE = 64  # change clauses kept per namespace, the oldest dropped first
    NAMESPACES = 4096  # namespaces kept, the one changed least recently dropped first

    def __init__(self) -> None:
        self._by_ns: OrderedDict[str, _Kept] = OrderedDict()

    def register(self, namespace: str, eff: EffectView, event: EventView) -> None:
        """Remember the clauses of a change statement ``eff`` wrote."""
        content = eff.content_after or ""
        kept = self._by_ns.pop(namespace, None) or _Kept()
        for clause in clause_tuple(content):
            if len(clause) < 2:
                continue
            # Only a kept clause opening with the same word can be this one or one it gives another
            # value (``_compare`` needs a shared opening word): the others are kept unasked.
            first = clause[0]
            same = kept.by_head.get(first)
            if same:
                gone = {id(c) for c in same if c.clause == clause or _compare(clause, c.clause) is not None}
                if gone:
                    kept.by_head[first] = [c for c in same if id(c) not in gone]
                    kept.order = [c for c in kept.order if id(c) not in gone]
            change = _Change(clause, eff.item_id, event.id, content)
            kept.order.append(change)
            kept.by_head.setdefault(first, []).append(change)
        excess = len(kept.order) - self.PER_NAMESPACE
        if excess > 0:
            for old in kept.order[:excess]:  # the oldest of all is the oldest of its opening word
                same = kept.by_head[old.clause[0]]
                del same[next(n for n, c in enumerate(same) if c is old)]
            del kept.order[:excess]
        self._by_ns[namespace] = kept
        while len(self._by_ns) > self.NAMESPACES:
            self._by_ns.popitem(last=False)

    def holds(self, namespace: str) -> bool:
        """Whether a change statement of ``namespace`` is remembered."""
        return namespace in self._by_ns

    def restated(self, namespace: str, content: str) -> tuple[_Change, Superseded] | None:
        """The first remembered change whose subject ``content`` states with another value."""
        kept = self._by_ns.get(namespace)
        if kept is None or not kept.order or not kept.may_restate(content):
            return None
        mine = clause_tuple(content)
        # ``first_superseded`` pairs only clauses of two words or more opening with the same word:
        # only the changes opening with one of ``mine``'s opening words are asked, latest first.
        firsts = {c[0] for c in mine if len(c) >= 2}
        if len(firsts) == 1:
            candidates: Sequence[_Change] = kept.by_head.get(next(iter(firsts)), ())
        else:
            candidates = [c for c in kept.order if c.clause[0] in firsts]
        for change in reversed(candidates):  # the latest change of a subject first
            found = first_superseded([change.clause], mine)
            if found is not None:
                return change, found
        return None


def restated_findings(
    detector: Detector,
    event: EventView,
    eff: EffectView,
    state: TraceState,
    namespace: str,
    corrections: Corrections,
    skip: set[tuple[str, str]],
) -> Iterator[Finding]:
    """A ``stale_coexistence`` finding for a write (no change statement) that states a corrected
    subject with another value while the corrected value is live: in what it wrote, or in a live
    item it did not touch."""
    content = eff.content_after or ""
    hit = corrections.restated(namespace, content)
    if hit is None:
        return
    change, found = hit
    live_new = f" {found.new_value} " in f" {normalise(content)} " or state.live_item_states(
        namespace, found.new_value, skip
    )
    if not live_new:
        return  # the write replaced the corrected value, cue or not: nothing coexists
    yield finding_for(
        detector,
        event,
        f"{eff.item_id} states {found.subject!r} is {found.old_value!r} again after {change.item_id} "
        f"changed it to {found.new_value!r}, which is still live",
        item_ids=[eff.item_id, change.item_id],
        event_ids=[event.id, change.event_id],
        namespace=namespace,
        evidence=found.evidence(content, change.content),
    )
