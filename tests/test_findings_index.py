"""The near-duplicate signature index (``findings/index.py``) never loses a candidate: every live
item whose word set is near-equal (Jaccard >= 0.9) to a query's is among the candidates, for
every group count, and after the word groups are forgotten."""

from __future__ import annotations

import random

import pytest

from memtap.findings import index
from memtap.findings.index import NamespaceIndex, jaccard_at_least_09


def _near_pairs(rng: random.Random) -> list[tuple[frozenset[str], frozenset[str]]]:
    """Word sets of 1 to 60 words, each with a near-equal one (words dropped and added)."""
    vocabulary = [f"w{n}" for n in range(400)]
    pairs = []
    for size in range(1, 61):
        for _ in range(6):
            words = rng.sample(vocabulary, size)
            other = set(words)
            for _ in range(rng.randint(0, max(0, size // 19))):
                other.discard(rng.choice(words))
            for _ in range(rng.randint(0, 2)):
                other.add(rng.choice(vocabulary))
            if other:
                pairs.append((frozenset(words), frozenset(other)))
    return pairs


def test_every_near_duplicate_is_a_candidate() -> None:
    rng = random.Random(19)
    pairs = [(a, b) for a, b in _near_pairs(rng) if jaccard_at_least_09(a, b)]
    assert len(pairs) > 100
    assert {len(a) for a, _ in pairs} >= {1, 8, 16, 19, 40, 60}  # one to four groups
    for n, (item, query) in enumerate(pairs):
        live = NamespaceIndex()
        live.add(("b", f"i{n}"), item, frozenset())
        assert ("b", f"i{n}") in live.duplicate_candidates(query), (sorted(item), sorted(query))


def test_candidates_survive_forgetting_the_word_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index._WordGroups, "LIMIT", 5)
    monkeypatch.setattr(index, "_GROUPS", index._WordGroups())
    index._signatures.cache_clear()
    item = frozenset(f"x{n}" for n in range(12))
    live = NamespaceIndex()
    live.add(("b", "one"), item, frozenset())
    index._GROUPS.learn(frozenset(f"y{n}" for n in range(10)))  # past the limit: all forgotten
    assert not index._GROUPS.seen & item
    index._signatures.cache_clear()  # signed again, with the groups learnt again
    query = item - {"x0"}
    assert jaccard_at_least_09(item, query)
    assert live.duplicate_candidates(query) == {("b", "one")}
    live.remove(("b", "one"), item, frozenset())
    assert not live.duplicate_candidates(item)
    assert not live.by_signature  # emptied signature buckets are dropped
    index._signatures.cache_clear()


def test_a_signature_shared_by_several_items() -> None:
    words = frozenset(f"w{n}" for n in range(12))
    live = NamespaceIndex()
    for name in ("one", "two", "three"):
        live.add(("b", name), words, frozenset())
    assert live.duplicate_candidates(words) == {("b", "one"), ("b", "two"), ("b", "three")}
    live.remove(("b", "two"), words, frozenset())
    assert live.duplicate_candidates(words) == {("b", "one"), ("b", "three")}
    live.remove(("b", "two"), words, frozenset())  # removing again changes nothing
    live.remove(("b", "one"), words, frozenset())
    assert live.duplicate_candidates(words) == {("b", "three")}
    live.remove(("b", "three"), words, frozenset())
    assert not live.duplicate_candidates(words)
    assert not live.by_signature  # emptied signature buckets are dropped
    live.add(("b", "four"), words, frozenset())  # a signature's one item again
    live.remove(("b", "five"), words, frozenset())  # not its item: kept
    assert live.duplicate_candidates(words) == {("b", "four")}
