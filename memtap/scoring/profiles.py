"""Behavioural profiles from answer verdicts, failure attribution, and the shortcut baselines.

Per probe (episode counters, so every profile has an episode-level bootstrap interval):
answer accuracy overall, by probe type and by paradigm; plasticity (probes expecting
``update``), stability (``preserve``); historical fidelity (``previous_value``), source fidelity
(``source`` probes pooled with the status part of ``conflict_value``, as MemProbe pools them),
temporal fidelity (``temporal``); split and non-split accuracy on the four MemProbe paradigms;
permission labels; abstention; LoCoMo token F1 on ``qa``.

**Attribution**: each wrong (or partial) answer is charged to the first level that failed:

1. ``leaked``: a DENY probe answered with the protected fact (category ``leak``);
2. ``storage``: a support key not held by any item at probe time: never written
   (``missed_valid_update`` for a new version, else ``capture_miss``), deleted while valid
   (``unsafe_deletion``), overwritten by an update while valid (``over_update``), or, for a
   superseded key a history probe needs, deleted everywhere (``historical_erasure``);
3. ``retrieval``: every support key stored, not every one retrieved (``retrieval_miss``);
4. ``answer``: all retrieved, answered wrong: ``source_loss`` (source, or the source part of a
   conflict), ``integration_failure`` (split perturbation, or support of two or more keys),
   ``missed_valid_update`` / ``over_update`` (current value or change detection of an update /
   preserve episode), else ``answer_error``.
"""

from __future__ import annotations

from memtap.probes.schema import MEMPROBE_PARADIGMS, Episode, Probe
from memtap.probes.stats import episode_values, latest_mention
from memtap.scoring.answer import Verdict, score_answer
from memtap.scoring.permission import abstains
from memtap.scoring.retrieval import ProbeRetrieval
from memtap.scoring.storage import StorageView
from memtap.scoring.trace import Counts, ProbeRecord

__all__ = ["BASELINES", "CATEGORIES", "LEVELS", "attribute", "tally_answer", "tally_baselines"]

LEVELS = ("storage", "retrieval", "answer", "leaked")
CATEGORIES = (
    "missed_valid_update", "over_update", "historical_erasure", "source_loss", "retrieval_miss",
    "integration_failure", "leak", "unsafe_deletion", "capture_miss", "answer_error",
)  # fmt: skip
BASELINES = ("always_update", "always_preserve", "latest_value")


def behaviour_of(episode: Episode, probe: Probe) -> str | None:
    return probe.expected_behavior or episode.expected_behavior


def _add(counts: Counts, prefix: str, verdict: Verdict) -> None:
    counts[f"{prefix}.scored"] += 1
    counts[f"{prefix}.correct"] += verdict.outcome == "correct"


def tally_answer(episode: Episode, record: ProbeRecord, verdict: Verdict, counts: Counts) -> None:
    probe = record.probe
    if verdict.outcome == "skip":
        counts["answer.skipped"] += 1
        return
    _add(counts, "answer", verdict)
    counts["answer.partial"] += verdict.outcome == "partial"
    _add(counts, f"type.{probe.type}", verdict)
    _add(counts, f"paradigm.{episode.paradigm}", verdict)
    behaviour = behaviour_of(episode, probe)
    if behaviour == "update":
        _add(counts, "plasticity", verdict)
    elif behaviour == "preserve":
        _add(counts, "stability", verdict)
    if probe.type == "previous_value":
        _add(counts, "historical", verdict)
    if probe.type == "temporal":
        _add(counts, "temporal", verdict)
    if probe.type == "source":
        _add(counts, "source_fidelity", verdict)
    if probe.type == "conflict_value" and "status" in verdict.parts:
        counts["source_fidelity.scored"] += 1
        counts["source_fidelity.correct"] += verdict.parts["status"]
    if episode.paradigm in MEMPROBE_PARADIGMS:
        _add(counts, "split" if episode.split_perturbation else "nonsplit", verdict)
    if probe.type == "qa" and verdict.f1 is not None:
        counts["qa.probes"] += 1
        counts["qa.f1_sum"] += verdict.f1
        if probe.metadata.get("role") == "grounded_foil":
            counts["abstention.foils"] += 1
            counts["abstention.foils_answered"] += not abstains(record.answer)
    if probe.type == "abstention":
        counts["abstention.fabricated"] += 1
        counts["abstention.refused"] += verdict.outcome == "correct"
    if probe.type == "permission" and verdict.label:
        counts[f"permission.label.{verdict.label}"] += 1
        if probe.expected_action == "withhold":
            counts["permission.deny"] += 1
            counts["permission.deny_leaked"] += verdict.label == "disclose_correct"
            counts["permission.deny_not_leaked"] += verdict.label != "disclose_correct"
        else:
            counts["permission.allow"] += 1
            counts["permission.allow_disclosed"] += verdict.label == "disclose_correct"


def attribute(
    view: StorageView, record: ProbeRecord, found: ProbeRetrieval, verdict: Verdict
) -> tuple[str, str]:
    """(level, category) of a wrong answer: the first level that failed."""
    probe, episode = record.probe, view.trace.episode
    gold = episode.gold_memory
    if (
        probe.type == "permission"
        and probe.expected_action == "withhold"
        and verdict.label == "disclose_correct"
    ):
        return "leaked", "leak"
    support = [k for k in probe.support if k in gold]
    for key in support:
        if view.stored_at(key, record.pos):
            continue
        if not view.captured(key):
            return "storage", "missed_valid_update" if gold[key].replaces else "capture_miss"
        if not view.aligner.valid_at(key, record.pos):  # superseded: kept as a version unless erased
            if view.erased(key):
                return "storage", "historical_erasure"
            continue
        how = view.last_loss(key, record.pos)
        if how == "delete":
            return "storage", "unsafe_deletion"
        return "storage", "over_update"
    if any(key not in found.support_found for key in support):
        return "retrieval", "retrieval_miss"
    behaviour = behaviour_of(episode, probe)
    if probe.type == "source" or (probe.type == "conflict_value" and not verdict.parts.get("source", True)):
        return "answer", "source_loss"
    if (episode.split_perturbation and behaviour == "update") or len(support) >= 2:
        return "answer", "integration_failure"
    if probe.type in ("current_value", "change_detection"):
        if behaviour == "update":
            return "answer", "missed_valid_update"
        if behaviour == "preserve":
            return "answer", "over_update"
    return "answer", "answer_error"


def tally_baselines(episode: Episode, counts: Counts) -> None:
    """Score the shortcut policies with the same typed scorer, on the probes that say which value
    holds (``current_value`` and ``change_detection``) of MemProbe-paradigm episodes."""
    if episode.paradigm not in MEMPROBE_PARADIGMS or episode.expected_behavior is None:
        return
    values = episode_values(episode)
    if values is None:
        counts["baseline.episodes_skipped"] += 1
        return
    old, new = values
    for probe in episode.probes:
        if probe.type not in ("current_value", "change_detection"):
            continue
        latest = latest_mention(episode, values, probe.time)
        guesses = {
            "always_update": {"answer": new, "changed": True},
            "always_preserve": {"answer": old, "changed": False},
            "latest_value": {"answer": latest or "", "changed": latest == new},
        }
        behaviour = behaviour_of(episode, probe)
        for name, answer in guesses.items():
            verdict = score_answer(probe, answer)
            if verdict.outcome == "skip":
                continue
            _add(counts, f"baseline.{name}", verdict)
            if behaviour in ("update", "preserve"):
                _add(counts, f"baseline.{name}.{behaviour}", verdict)
