"""Indexes over the live items of one namespace, so that the rules asking "does a live item still
state this fact?" and "is a live item near-equal to this one?" stop comparing against every item.

Both are filters that never change an answer: they find a superset of the items a full scan would
accept, and those candidates are then checked with the rule's own test.

* **Tokens.** A fact survives inside an item's words when `` fact `` is a substring of the item's
  normalised text padded with spaces; its words are then all words of the item. Each word maps
  to the live items holding it; the intersection of a fact's words' items are the candidates.
* **Near-duplicate signatures.** Word sets A and B with Jaccard >= 0.9 (``19 s >= 9 (a + b)``,
  s shared) differ in at most ``(a + b) // 19`` words. Split the words into ``k`` groups (by
  hash) with ``k`` above that: by pigeonhole, A and B agree exactly on one group. Each item is
  stored under (k, group, a hash of its words in the group) for every ``k`` a query of a size that
  compares it could use; a query looks up its own ``k`` keys.
* **Openings.** Two clauses state one subject with another value only when they open with the
  same word (``supersede.py``): each opening word maps to the live items with a clause opening
  with it (a superset: ``supersede.openings``).
"""

from __future__ import annotations

from collections import defaultdict
from functools import lru_cache

__all__ = ["NamespaceIndex", "compared_sizes", "jaccard_at_least_09"]

Key = tuple[str, str]  # (backend, item_id)


def compared_sizes(size: int) -> range:
    """The word-set sizes the duplicate rule compares a set of ``size`` words with (within 10%)."""
    low, high = size * 0.9, size / 0.9
    return range(max(0, int(low)), int(high) + 1)


def jaccard_at_least_09(mine: frozenset[str], other: frozenset[str]) -> bool:
    """The duplicate rule's test (Jaccard >= 0.9, without building the union)."""
    shared = len(mine & other)
    return shared >= 0.9 * (len(mine) + len(other) - shared)


@lru_cache(maxsize=1024)
def _groups_for_query(size: int) -> int:
    """How many groups a query of ``size`` words splits them into: more than the most words a
    near-duplicate of any compared size can differ in."""
    return (size + compared_sizes(size)[-1]) // 19 + 1 if size else 1


@lru_cache(maxsize=1024)
def _groups_for_item(size: int) -> tuple[int, ...]:
    """Every group count a query comparing an item of ``size`` words could use."""
    ks = {_groups_for_query(a) for a in range(1, 2 * size + 5) if size in compared_sizes(a)}
    return tuple(sorted(ks))


Signature = tuple[int, int, int]  # (k, group, a hash of the group's words)


class _WordGroups:
    """Each word's group among 2 and among 3 (its hash modulo 2 or 3), kept as sets of the words
    seen, so that a word set's groups are set intersections made in C: only a word not seen
    before is hashed in a Python loop (a trace's words mostly repeat)."""

    LIMIT = 1 << 20  # words kept; past this all are forgotten (and grouped again when seen)

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.even: set[str] = set()  # hash % 2 == 0
        self.thirds: tuple[set[str], set[str]] = (set(), set())  # hash % 3 == 0, == 1

    def learn(self, words: frozenset[str]) -> None:
        new = words - self.seen
        if not new:
            return
        if len(self.seen) > self.LIMIT:  # start again: every word is new
            for known in (self.seen, self.even, *self.thirds):
                known.clear()
            new = words
        even, thirds = self.even, self.thirds
        for word in new:
            h = hash(word)
            if not h % 2:
                even.add(word)
            third = h % 3
            if third < 2:
                thirds[third].add(word)
        self.seen |= new


_GROUPS = _WordGroups()


@lru_cache(maxsize=8192)  # a written item's words: signed when the duplicate rule asks, then indexed
def _signatures(words: frozenset[str], k: int) -> tuple[Signature, ...]:
    """Each of the ``k`` groups of ``words`` (by each word's hash modulo ``k``) as (k, group, a
    hash of its words): equal groups sign alike; two unequal ones rarely do, and then only add a
    candidate the rule's own test turns down. (A hash, not the group's words: the index holds an
    int per item, not a set of its words.) Two or three groups (most word sets) are found with set
    intersections (``_WordGroups``), more in a loop over the words."""
    if k == 1:
        return ((1, 0, hash(words)),)
    if k <= 3:
        _GROUPS.learn(words)
        if k == 2:
            even = words & _GROUPS.even
            return ((2, 0, hash(even)), (2, 1, hash(words - even)))
        first, second = words & _GROUPS.thirds[0], words & _GROUPS.thirds[1]
        return ((3, 0, hash(first)), (3, 1, hash(second)), (3, 2, hash(words - first - second)))
    sums = [0] * k  # each group's words' hashes, xor-ed
    for word in words:
        h = hash(word)
        sums[h % k] ^= h
    return tuple((k, g, total) for g, total in enumerate(sums))


class NamespaceIndex:
    """Live items of one namespace by word, and by near-duplicate signature."""

    def __init__(self) -> None:
        self.by_word: defaultdict[str, set[Key]] = defaultdict(set)
        # A signature's one item as its key, a set only once a second item shares it: signatures
        # are mostly one item's own, and a set each (200 bytes) was most of the index's memory.
        self.by_signature: dict[Signature, Key | set[Key]] = {}
        self.by_opening: defaultdict[str, set[Key]] = defaultdict(set)

    def add(self, key: Key, words: frozenset[str], openings: frozenset[str]) -> None:
        for word in openings:
            self.by_opening[word].add(key)
        by_word = self.by_word
        for word in words:
            by_word[word].add(key)
        by_signature = self.by_signature
        for k in _groups_for_item(len(words)):
            for signature in _signatures(words, k):
                bucket = by_signature.get(signature)
                if bucket is None:
                    by_signature[signature] = key
                elif isinstance(bucket, set):
                    bucket.add(key)
                else:
                    by_signature[signature] = {bucket, key}

    def remove(self, key: Key, words: frozenset[str], openings: frozenset[str]) -> None:
        # Emptied word and opening sets stay (one per word ever seen): cheaper than deleting and
        # making them again, and the word lookups below treat an empty set as none.
        for word in openings:
            self.by_opening[word].discard(key)
        by_word = self.by_word
        for word in words:
            by_word[word].discard(key)
        by_signature = self.by_signature
        for k in _groups_for_item(len(words)):
            for signature in _signatures(words, k):
                bucket = by_signature.get(signature)
                if bucket is None:
                    continue
                if isinstance(bucket, set):
                    bucket.discard(key)
                    if bucket:
                        continue
                elif bucket != key:
                    continue
                del by_signature[signature]  # signatures are mostly one item's own: not kept once emptied

    def holding_words(self, words: list[str]) -> set[Key]:
        """The live items whose word set holds every one of ``words`` (for one word, the index's
        own set: read it, do not change it)."""
        if len(words) == 1:
            return self.by_word.get(words[0]) or set()
        buckets = []
        for word in words:
            bucket = self.by_word.get(word)
            if not bucket:
                return set()
            buckets.append(bucket)
        buckets.sort(key=len)
        return buckets[0].intersection(*buckets[1:])

    def opening_with(self, words: set[str]) -> set[Key]:
        """The live items with a clause that may open with one of ``words``."""
        found: set[Key] = set()
        for word in words:
            bucket = self.by_opening.get(word)
            if bucket:
                found |= bucket
        return found

    def duplicate_candidates(self, words: frozenset[str]) -> set[Key]:
        """A superset of the live items near-equal (Jaccard >= 0.9) to ``words``."""
        found: set[Key] = set()
        by_signature = self.by_signature
        for signature in _signatures(words, _groups_for_query(len(words))):
            bucket = by_signature.get(signature)
            if bucket is None:
                continue
            if isinstance(bucket, set):
                found |= bucket
            else:
                found.add(bucket)  # one item's key
        return found
