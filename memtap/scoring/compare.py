"""``memtap compare RUN_A RUN_B``: paired bootstrap differences between two scored runs.

Both runs' score files carry their per-episode counts. The episodes both runs scored are
paired by id; every headline measure is recomputed on the same 2,000 episode resamples for A
and for B, and the difference B minus A is reported with its 95% interval. Runs of different
suites are paired on the episode ids they share (with a warning); runs sharing none cannot be
compared.
"""

from __future__ import annotations

from typing import Any

from memtap.scoring.errors import ScoringError
from memtap.scoring.measures import HEADLINE
from memtap.scoring.stats import RESAMPLES, SEED, paired_bootstrap, resample_weights

__all__ = ["COMPARE_FORMAT", "compare_scores"]

COMPARE_FORMAT = "memtap-compare/1"


def compare_scores(
    a: dict[str, Any], b: dict[str, Any], *, resamples: int = RESAMPLES, seed: int = SEED
) -> dict[str, Any]:
    ids_a, ids_b = a["episodes"]["ids"], b["episodes"]["ids"]
    counts_a = dict(zip(ids_a, a["episodes"]["counts"], strict=True))
    counts_b = dict(zip(ids_b, b["episodes"]["counts"], strict=True))
    shared = [i for i in ids_a if i in counts_b]
    if not shared:
        raise ScoringError(
            f"runs {a['run']['id']} and {b['run']['id']} scored no episode in common; nothing to pair"
        )
    warnings = []
    if a["run"]["suite_sha256"] != b["run"]["suite_sha256"]:
        warnings.append("the runs replayed different suite files; paired on the episode ids they share")
    only = (len(ids_a) - len(shared), len(ids_b) - len(shared))
    if any(only):
        warnings.append(f"unpaired episodes left out: {only[0]} only in A, {only[1]} only in B")
    for side, score in (("A", a), ("B", b)):
        if score["coverage"].get("answers_scored") is False:
            warnings.append(
                f"run {side} ({score['run']['id']}) has no answers: its answer measures are undefined"
            )
    scorers = [(score.get("answer_scorer") or {}).get("name", "strict") for score in (a, b)]
    if scorers[0] != scorers[1]:
        warnings.append(
            "the runs' answers were scored by different answer scorers "
            f"({scorers[0]} for A, {scorers[1]} for B): their answer measures are not comparable; "
            "rescore one with --answer-scorer"
        )
    weights = resample_weights(len(shared), resamples, seed)
    measures = paired_bootstrap(
        HEADLINE, [counts_a[i] for i in shared], [counts_b[i] for i in shared], weights
    )
    unanswered = any(score["coverage"].get("answers_scored") is False for score in (a, b))
    for m in HEADLINE:  # a run without answers has no answer-level values to compare
        if unanswered and m.level in ("answer", "profile"):
            measures[m.name] = {"a": None, "b": None, "difference": {"value": None, "ci": None, "n": 0}}
    return {
        "format": COMPARE_FORMAT,
        "a": {"run": a["run"]["id"], "score_created_at": a["created_at"]},
        "b": {"run": b["run"]["id"], "score_created_at": b["created_at"]},
        "paired_episodes": len(shared),
        "bootstrap": {"resamples": resamples, "seed": seed, "unit": "paired episode", "interval": 0.95},
        "measures": measures,
        "warnings": warnings,
    }
