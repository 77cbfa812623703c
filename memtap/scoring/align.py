"""Alignment: which gold memories a memory item the backend wrote covers, and why.

Every scorer above the answer level asks one question of an item: *which gold entries does it
hold?* The default matcher answers it deterministically:

1. **time**: an item written in session *t* can only hold a gold memory created in *t* or
   before (a friend's gym mentioned before the user switched to it is not the switch);
2. **anchors**: every anchor value of the gold memory (``metadata.value``, and each of
   ``metadata.anchors``) must appear in the item as a whole phrase, after value normalisation
   (``text.value_match``): the canonical old or new value, the protected fact;
3. **coverage**, on content tokens (``text.tokens``): the share of the gold memory's tokens the
   item holds must reach 0.5 when the gold has anchors; without anchors it must reach 0.6 *and*
   the share of the item's tokens the gold holds must reach 0.15 (bidirectional: a long dump of
   everything does not cover each memory in it).

Stronger matchers are optional: :class:`EmbeddingMatcher` (cosine similarity from a local
embedding model, anchors still required) and :class:`JudgeMatcher` (an LLM asked yes or no,
for the pairs the default finds plausible). Each decision is kept with its reason and stored in
the ``alignments`` table, so a user can see why an item counted or did not.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from memtap.probes.schema import Episode, GoldMemory
from memtap.scoring.text import tokens, value_match

__all__ = [
    "Aligner",
    "Decision",
    "DefaultMatcher",
    "EmbeddingMatcher",
    "JudgeMatcher",
    "Matcher",
    "anchors_of",
]

ANCHORED_GOLD_COVERAGE = 0.5
UNANCHORED_GOLD_COVERAGE = 0.6
UNANCHORED_ITEM_COVERAGE = 0.15
NEAR_MISS = 0.34  # decisions below this gold coverage, without an anchor, are not stored


@dataclass(frozen=True)
class Decision:
    key: str | None
    matched: bool
    gold_coverage: float | None
    item_coverage: float | None
    reason: str


def anchors_of(gold: GoldMemory) -> list[str]:
    """The values a gold memory's item must contain: ``metadata.value`` and ``metadata.anchors``."""
    found: list[str] = []
    value = gold.metadata.get("value")
    if isinstance(value, str | int | float) and not isinstance(value, bool) and str(value).strip():
        found.append(str(value))
    extra = gold.metadata.get("anchors")
    if isinstance(extra, list):
        found += [str(a) for a in extra if isinstance(a, str | int | float) and str(a).strip()]
    return found


def _coverage(content: str, gold: GoldMemory) -> tuple[float, float]:
    g, t = tokens(gold.content), tokens(content)
    shared = len(g & t)
    return (shared / len(g) if g else 0.0), (shared / len(t) if t else 0.0)


class Matcher(Protocol):
    name: str

    def judge(self, content: str, key: str, gold: GoldMemory) -> Decision: ...


class DefaultMatcher:
    """Normalised tokens, bidirectional coverage thresholds and anchor values (see the module)."""

    name = "default"

    def judge(self, content: str, key: str, gold: GoldMemory) -> Decision:
        gcov, icov = _coverage(content, gold)
        anchors = anchors_of(gold)
        missing = [a for a in anchors if not value_match(a, content)[0]]
        cov = f"gold coverage {gcov:.2f}, item coverage {icov:.2f}"
        if missing:
            return Decision(key, False, gcov, icov, f"anchor {missing[0]!r} absent ({cov})")
        if anchors:
            ok = gcov >= ANCHORED_GOLD_COVERAGE
            rule = (
                f"anchor {anchors[0]!r} present; gold coverage {gcov:.2f} {'>=' if ok else '<'} "
                f"{ANCHORED_GOLD_COVERAGE} (item coverage {icov:.2f})"
            )
            return Decision(key, ok, gcov, icov, rule)
        ok = gcov >= UNANCHORED_GOLD_COVERAGE and icov >= UNANCHORED_ITEM_COVERAGE
        return Decision(
            key,
            ok,
            gcov,
            icov,
            f"no anchor; {cov} (needs {UNANCHORED_GOLD_COVERAGE} and {UNANCHORED_ITEM_COVERAGE})",
        )


def _cosine(a: Sequence[float], b: Sequence[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=False))
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


class EmbeddingMatcher:
    """Cosine similarity of embeddings (``embed``: texts to vectors) at or above ``threshold``, with
    every anchor value still required."""

    def __init__(
        self,
        embed: Callable[[list[str]], list[list[float]]],
        *,
        threshold: float = 0.75,
        name: str = "embedding",
    ) -> None:
        self.embed, self.threshold, self.name = embed, threshold, name
        self._cache: dict[str, list[float]] = {}

    def _vector(self, text: str) -> list[float]:
        if text not in self._cache:
            self._cache[text] = self.embed([text])[0]
        return self._cache[text]

    def judge(self, content: str, key: str, gold: GoldMemory) -> Decision:
        gcov, icov = _coverage(content, gold)
        missing = [a for a in anchors_of(gold) if not value_match(a, content)[0]]
        if missing:
            return Decision(key, False, gcov, icov, f"anchor {missing[0]!r} absent")
        sim = _cosine(self._vector(content), self._vector(gold.content))
        ok = sim >= self.threshold
        return Decision(key, ok, gcov, icov, f"cosine {sim:.3f} {'>=' if ok else '<'} {self.threshold}")


JUDGE_PROMPT = (
    "Does the MEMORY state the GOLD fact (the same fact about the same subject; extra content is "
    'fine)? Reply with JSON only: {{"match": true|false, "why": "<a few words>"}}\n'
    "GOLD: {gold}\nMEMORY: {memory}"
)


class JudgeMatcher:
    """An LLM judge (``ask``: prompt to reply) for every pair the default matcher finds plausible
    (an anchor present, or gold coverage at least 0.34); the rest are decided by the default."""

    def __init__(self, ask: Callable[[str], str], *, name: str = "llm") -> None:
        self.ask, self.name = ask, name
        self.default = DefaultMatcher()

    def judge(self, content: str, key: str, gold: GoldMemory) -> Decision:
        first = self.default.judge(content, key, gold)
        anchored = bool(anchors_of(gold)) and "absent" not in first.reason
        if not anchored and (first.gold_coverage or 0.0) < NEAR_MISS:
            return first
        reply = self.ask(JUDGE_PROMPT.format(gold=gold.content, memory=content))
        verdict = _parse_verdict(reply)
        if verdict is None:
            return Decision(
                key,
                first.matched,
                first.gold_coverage,
                first.item_coverage,
                f"judge reply unreadable ({reply[:60]!r}); default: {first.reason}",
            )
        ok, why = verdict
        return Decision(key, ok, first.gold_coverage, first.item_coverage, f"llm judge: {ok} ({why})")


def _parse_verdict(reply: str) -> tuple[bool, str] | None:
    start, end = reply.find("{"), reply.rfind("}")
    if start >= 0 and end > start:
        try:
            data = json.loads(reply[start : end + 1])
        except ValueError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("match"), bool):
            return data["match"], str(data.get("why", ""))[:120]
    low = reply.strip().lower()
    if low.startswith(("yes", "true")):
        return True, "yes"
    if low.startswith(("no", "false")):
        return False, "no"
    return None


class Aligner:
    """Aligns the item versions of one episode to its gold bank, keeping every decision.

    ``align`` is called with an item version and the position (session index) where it was
    written; results are cached per (content, position)."""

    def __init__(self, episode: Episode, matcher: Matcher) -> None:
        self.episode, self.matcher = episode, matcher
        index = {s.session_id: i for i, s in enumerate(episode.sessions)}
        self.created = {
            k: index.get(g.created_in, -1) if g.created_in else -1 for k, g in episode.gold_memory.items()
        }
        self.invalidated = {
            k: index.get(g.invalidated_in or "", math.inf) for k, g in episode.gold_memory.items()
        }
        self._cache: dict[tuple[str, int], tuple[frozenset[str], list[Decision]]] = {}
        self.rows: list[tuple[str, int, Decision]] = []
        self._seen: set[tuple[str, int]] = set()

    def valid_at(self, key: str, pos: float) -> bool:
        return self.created[key] <= pos < self.invalidated[key]

    def _decide(self, content: str, pos: int) -> tuple[frozenset[str], list[Decision]]:
        cached = self._cache.get((content, pos))
        if cached is not None:
            return cached
        matched: set[str] = set()
        kept: list[Decision] = []
        best: Decision | None = None
        for key, gold in self.episode.gold_memory.items():
            decision = self.matcher.judge(content, key, gold)
            if decision.matched and self.created[key] > pos:
                created = self.episode.gold_memory[key].created_in
                decision = Decision(
                    key,
                    False,
                    decision.gold_coverage,
                    decision.item_coverage,
                    f"would match ({decision.reason}) but {key} is created in {created}, "
                    "after this item was written",
                )
            if decision.matched:
                matched.add(key)
                kept.append(decision)
            elif (decision.gold_coverage or 0.0) >= NEAR_MISS or "would match" in decision.reason:
                kept.append(decision)
            if best is None or (decision.gold_coverage or 0.0) > (best.gold_coverage or 0.0):
                best = decision
        if not matched:
            why = f"no gold memory matched; closest {best.key}: {best.reason}" if best else "no gold memories"
            kept.append(
                Decision(
                    None,
                    False,
                    best.gold_coverage if best else None,
                    best.item_coverage if best else None,
                    why,
                )
            )
        result = (frozenset(matched), kept)
        self._cache[(content, pos)] = result
        return result

    def align(self, item_id: str, version: int, content: str | None, pos: int) -> frozenset[str]:
        if not content:
            return frozenset()
        keys, decisions = self._decide(content, pos)
        if (item_id, version) not in self._seen:
            self._seen.add((item_id, version))
            self.rows.extend((item_id, version, d) for d in decisions)
        return keys


def describe_rows(rows: list[tuple[str, int, Decision]]) -> list[dict[str, Any]]:
    return [
        {
            "item_id": i,
            "version": v,
            "gold_key": d.key,
            "matched": d.matched,
            "gold_coverage": d.gold_coverage,
            "item_coverage": d.item_coverage,
            "reason": d.reason,
        }
        for i, v, d in rows
    ]
