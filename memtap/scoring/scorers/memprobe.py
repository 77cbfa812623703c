"""``memprobe``: MemProbe's ``score_answer`` (``jq-ding/MemProbe``, ``src/eval/protocol.py``).

The rules are in :mod:`memprobe_rules`; this module feeds them what MemProbe's harness did
(``src/eval/run_eval.py`` ``evaluate``): the reader's raw reply, the probe's gold answer text,
the probe type, and the episode's latent spec. A suite imported by memtap keeps the spec's
``gold`` (with ``conflict_gold`` and ``temporal_gold``), ``condition`` and canonical values; for a
suite imported before it kept them, the spec is rebuilt from the probe's structured gold.

Labels map to memtap's outcomes one to one; MemProbe's ``execution_error`` (a reply starting
``[ERROR:``) is ``incorrect``, and a type MemProbe does not handle is ``skip``.
"""

from __future__ import annotations

from typing import Any

from memtap.probes.schema import Episode, Probe
from memtap.scoring.answer import Verdict
from memtap.scoring.scorers.base import raw_reply
from memtap.scoring.scorers.memprobe_rules import judge

__all__ = ["TYPES", "MemProbeScorer", "latent_spec"]

TYPES = frozenset(
    {"current_value", "previous_value", "change_detection", "temporal", "source", "conflict_value"}
)
# memtap's source labels back to MemProbe's conflict sources (memprobe importer, ``source_label``)
_CONFLICT_SOURCE = {
    "assistant": "assistant_hallucination",
    "third_party": "third_party",
    "stale_record": "stale_tool",
}


def latent_spec(episode: Episode, probe: Probe) -> dict[str, Any]:
    """The part of MemProbe's latent spec its scorer reads, from what the suite kept."""
    found = episode.metadata.get("memprobe")
    kept: dict[str, Any] = found if isinstance(found, dict) else {}
    spec: dict[str, Any] = {
        "condition": episode.condition,
        "canonical_initial": kept.get("canonical_initial", ""),
        "canonical_new": kept.get("canonical_new", ""),
    }
    gold = kept.get("gold")
    if isinstance(gold, dict):
        spec["gold"] = gold
        return spec
    rebuilt: dict[str, Any] = {}
    conflict = probe.gold.fields.conflict
    if conflict is not None and conflict.value:
        rebuilt["conflict_gold"] = {
            "conflict_value": conflict.value,
            "source": _CONFLICT_SOURCE.get(conflict.source or "", conflict.source or ""),
            "status": conflict.status or "",
            "applies_to_target": conflict.applies_to_target,
            "target_remains": spec["canonical_initial"],
        }
    temporal = probe.gold.fields.temporal
    if temporal is not None and temporal.trigger:  # the importer takes a trigger only from temporal_gold
        rebuilt["temporal_gold"] = {
            "old_value": temporal.old_value or "",
            "new_value": temporal.new_value or "",
            "trigger": temporal.trigger,
            "reason": temporal.reason or "",
        }
    spec["gold"] = rebuilt
    return spec


class MemProbeScorer:
    name = "memprobe"
    version = "1"
    reference = "jq-ding/MemProbe@4ef09390 src/eval/protocol.py score_answer"
    types: frozenset[str] | None = TYPES

    def score(self, episode: Episode, probe: Probe, answer: dict[str, Any] | None) -> Verdict:
        found = judge(raw_reply(answer), probe.gold.answer, probe.type, latent_spec(episode, probe))
        outcome = {"execution_error": "incorrect", "unknown": "skip"}.get(found.match, found.match)
        return Verdict(outcome, f"memprobe {found.rule}: {found.reason}", dict(found.parts))
