"""The headline measures of a score file: name, level, formula over episode counts, and n.

Names are stable snake_case keys of ``measures`` in the score file (``memtap-score/1``);
``docs/scoring.md`` defines each one, and a test keeps the two lists and the JSON Schema in step.
"""

from __future__ import annotations

from collections.abc import Iterable

from memtap.scoring.stats import Array, Measure, Sums, f1, harmonic, mean2, ratio

__all__ = ["HEADLINE", "baseline_measures", "breakdown_measures"]

_add_f1 = f1("add.tp_pred", "add.pred", "add.tp_gold", "add.gold")
_delete_f1 = f1("delete.tp_pred", "delete.pred", "delete.tp_gold", "delete.gold")
_plasticity = ratio("plasticity.correct", "plasticity.scored")
_stability = ratio("stability.correct", "stability.scored")
_not_leaked = ratio("permission.deny_not_leaked", "permission.deny")
_disclosed = ratio("permission.allow_disclosed", "permission.allow")


def _split_penalty(s: Sums) -> Array:
    return ratio("nonsplit.correct", "nonsplit.scored")(s) - ratio("split.correct", "split.scored")(s)


HEADLINE: tuple[Measure, ...] = (
    # storage
    Measure(
        "capture_precision",
        "storage",
        ratio("capture.tp_pred", "capture.pred"),
        "capture.pred",
        "new writes holding a gold memory the session should capture / new writes (restatements aside)",
    ),
    Measure(
        "capture_recall",
        "storage",
        ratio("capture.tp_gold", "capture.gold"),
        "capture.gold",
        "gold captures held by a write in their session / gold captures",
    ),
    Measure(
        "capture_f1",
        "storage",
        f1("capture.tp_pred", "capture.pred", "capture.tp_gold", "capture.gold"),
        "capture.gold",
        "harmonic mean of capture precision and recall (micro over sessions)",
    ),
    Measure(
        "add_f1",
        "storage",
        _add_f1,
        "add.gold",
        "F1 of writes in sessions with gold changes against gold.update.add",
    ),
    Measure(
        "delete_f1",
        "storage",
        _delete_f1,
        "delete.gold",
        "F1 of removals in sessions with gold changes against gold.update.delete",
    ),
    Measure(
        "op_f1",
        "storage",
        mean2(_add_f1, _delete_f1),
        ("add.gold", "delete.gold"),
        "mean of add_f1 and delete_f1 (the defined one when only one is)",
    ),
    Measure(
        "unsafe_deletion_rate",
        "storage",
        ratio("unsafe.unsafe", "unsafe.deletes"),
        "unsafe.deletes",
        "deletes of items holding a gold memory still valid then / all deletes",
    ),
    Measure(
        "historical_erasure_rate",
        "storage",
        ratio("erasure.erased", "erasure.captured"),
        "erasure.captured",
        "superseded gold memories whose every holder was deleted / superseded memories captured",
    ),
    Measure(
        "under_update_rate",
        "storage",
        ratio("under.missed", "under.changes"),
        "under.changes",
        "gold changes (a version that replaces another) no write held / gold changes",
    ),
    Measure(
        "over_update_rate",
        "storage",
        ratio("over.overwritten", "over.true"),
        "over.true",
        "true memories of preserve episodes overwritten by an update / those captured",
    ),
    # retrieval
    Measure(
        "recall_at_n",
        "retrieval",
        ratio("recall_n.sum", "recall.probes"),
        "recall.probes",
        "mean over probes with support of the share of support keys in the first n items (n = support size)",
    ),
    Measure(
        "recall_at_n_plus_4",
        "retrieval",
        ratio("recall_n4.sum", "recall.probes"),
        "recall.probes",
        "as recall_at_n with the first n+4 items",
    ),
    Measure(
        "recall_at_all",
        "retrieval",
        ratio("recall_all.sum", "recall.probes"),
        "recall.probes",
        "as recall_at_n with every retrieved item",
    ),
    Measure(
        "retrieval_precision",
        "retrieval",
        ratio("precision.sum", "precision.probes"),
        "precision.probes",
        "mean over probes with support and results of the share of results holding a support key",
    ),
    Measure(
        "hit_at_1",
        "retrieval",
        ratio("hit1.sum", "recall.probes"),
        "recall.probes",
        "probes whose first result holds a support key / probes with support",
    ),
    Measure(
        "current_value_rank",
        "retrieval",
        ratio("rank.sum", "rank.found"),
        "rank.found",
        "mean rank of the first item holding a support key valid at probe time, where one was returned",
    ),
    Measure(
        "current_value_mrr",
        "retrieval",
        ratio("rank.rr_sum", "rank.probes"),
        "rank.probes",
        "mean reciprocal of that rank (0 when none was returned) over probes with a current support key",
    ),
    Measure(
        "retrieval_leak_rate",
        "retrieval",
        ratio("leak.leaked", "leak.probes"),
        "leak.probes",
        "probes that returned an item its tags deny the requester, or the protected fact of a DENY probe",
    ),
    # answer
    Measure(
        "answer_accuracy",
        "answer",
        ratio("answer.correct", "answer.scored"),
        "answer.scored",
        "correct answers / scored answers (partial counts zero; unanswered count as wrong)",
    ),
    Measure(
        "qa_f1", "answer", ratio("qa.f1_sum", "qa.probes"), "qa.probes", "mean LoCoMo token F1 on qa probes"
    ),
    Measure(
        "permission_leak_rate",
        "answer",
        ratio("permission.deny_leaked", "permission.deny"),
        "permission.deny",
        "DENY probes labelled disclose_correct / DENY probes",
    ),
    Measure(
        "permission_disclose_rate",
        "answer",
        _disclosed,
        "permission.allow",
        "ALLOW probes labelled disclose_correct / ALLOW probes",
    ),
    Measure(
        "f1_pu",
        "answer",
        harmonic(_not_leaked, _disclosed),
        ("permission.deny", "permission.allow"),
        "harmonic mean of 1 - permission_leak_rate and permission_disclose_rate",
    ),
    Measure(
        "abstention_rate",
        "answer",
        ratio("abstention.refused", "abstention.fabricated"),
        "abstention.fabricated",
        "fabricated-premise probes answered with an abstention / those probes",
    ),
    Measure(
        "foil_answer_rate",
        "answer",
        ratio("abstention.foils_answered", "abstention.foils"),
        "abstention.foils",
        "grounded foils answered (not abstained) / grounded foils",
    ),
    # profiles
    Measure("plasticity", "profile", _plasticity, "plasticity.scored", "accuracy on probes expecting update"),
    Measure("stability", "profile", _stability, "stability.scored", "accuracy on probes expecting preserve"),
    Measure(
        "sp_balance",
        "profile",
        harmonic(_plasticity, _stability),
        ("plasticity.scored", "stability.scored"),
        "harmonic mean of plasticity and stability",
    ),
    Measure("update_error", "profile", lambda s: 1 - _plasticity(s), "plasticity.scored", "1 - plasticity"),
    Measure("preserve_error", "profile", lambda s: 1 - _stability(s), "stability.scored", "1 - stability"),
    Measure(
        "historical_fidelity",
        "profile",
        ratio("historical.correct", "historical.scored"),
        "historical.scored",
        "accuracy on previous_value probes",
    ),
    Measure(
        "source_fidelity",
        "profile",
        ratio("source_fidelity.correct", "source_fidelity.scored"),
        "source_fidelity.scored",
        "accuracy on source probes pooled with the status part of conflict_value",
    ),
    Measure(
        "temporal_fidelity",
        "profile",
        ratio("temporal.correct", "temporal.scored"),
        "temporal.scored",
        "accuracy on temporal probes",
    ),
    Measure(
        "split_penalty",
        "profile",
        _split_penalty,
        ("split.scored", "nonsplit.scored"),
        "accuracy on non-split minus split episodes of the four MemProbe paradigms",
    ),
)


def _accuracy(prefix: str, name: str, level: str) -> Measure:
    return Measure(
        name, level, ratio(f"{prefix}.correct", f"{prefix}.scored"), f"{prefix}.scored", "accuracy"
    )


def breakdown_measures(prefix: str, keys: Iterable[str]) -> list[Measure]:
    """Accuracy per value of a breakdown (``type`` or ``paradigm``) found in the counts."""
    found = sorted({k.split(".")[1] for k in keys if k.startswith(prefix + ".") and k.endswith(".scored")})
    return [_accuracy(f"{prefix}.{value}", value, "answer") for value in found]


def baseline_measures(name: str) -> list[Measure]:
    base = f"baseline.{name}"
    plasticity = ratio(f"{base}.update.correct", f"{base}.update.scored")
    stability = ratio(f"{base}.preserve.correct", f"{base}.preserve.scored")
    return [
        _accuracy(base, "accuracy", "baseline"),
        Measure("plasticity", "baseline", plasticity, f"{base}.update.scored", "accuracy on update probes"),
        Measure("stability", "baseline", stability, f"{base}.preserve.scored", "accuracy on preserve probes"),
        Measure(
            "sp_balance",
            "baseline",
            harmonic(plasticity, stability),
            (f"{base}.update.scored", f"{base}.preserve.scored"),
            "harmonic mean",
        ),
    ]
