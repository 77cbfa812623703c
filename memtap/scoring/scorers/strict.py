"""``strict``: memtap's own answer scorer (``memtap/scoring/answer.py``), under a name.

It reads the reader's JSON in memtap's shape (``{"answer", "changed", "source", "conflict":
{...}, "temporal": {...}}``) and also in MemProbe's (``source_class``, ``conflict_value``,
``status_class``, ``new_value``, ``trigger``, ...), so a run replayed for MemProbe's scorer can
be scored with this one too. Its departures from each published scorer are listed, with the
reasons, in ``docs/scoring.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memtap.probes.schema import Episode, Probe
from memtap.scoring.answer import Verdict, score_answer
from memtap.scoring.permission import classify_permission

__all__ = ["StrictScorer", "memtap_shape"]

PermissionJudge = Callable[[Probe, dict[str, Any] | None], tuple[str, str]]


def memtap_shape(answer: dict[str, Any] | None) -> dict[str, Any] | None:
    """An answer in MemProbe's keys read into memtap's (memtap's own keys win where both are)."""
    if not answer:
        return answer
    out = dict(answer)
    if "answer" not in out:
        text = out.get("source_description") or out.get("current_value")
        if isinstance(text, str):
            out["answer"] = text
    if "source" not in out and "source_class" in out:
        out["source"] = out["source_class"]
    if "conflict" not in out and "conflict_value_mentioned" in out:
        out["conflict"] = {
            "value": out.get("conflict_value") if out.get("conflict_value_mentioned") else None,
            "source": out.get("source_class") or out.get("source"),
            "status": out.get("status_class") or out.get("status"),
            "applies_to_target": out.get("applies_to_target"),
        }
    if "temporal" not in out and any(k in out for k in ("new_value", "old_value", "trigger")):
        out["temporal"] = {k: out.get(k) for k in ("old_value", "new_value", "trigger", "reason")}
    return out


class StrictScorer:
    name = "strict"
    version = "1"
    reference = "memtap (memtap/scoring/answer.py)"
    types: frozenset[str] | None = None

    def __init__(self, judge: PermissionJudge | None = None) -> None:
        self.judge = judge or classify_permission

    def score(self, episode: Episode, probe: Probe, answer: dict[str, Any] | None) -> Verdict:
        return score_answer(probe, memtap_shape(answer), judge=self.judge)
