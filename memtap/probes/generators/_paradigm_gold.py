"""Gold and probes of a paradigms episode: the bank with lineage, and six typed probes.

Split from ``paradigms.py``, which writes the dialogue; this module says what should be
remembered and asked. The questions depend only on the pair, so both members ask the same.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from memtap.probes.generators._facts import sentence
from memtap.probes.schema import FORMAT
from memtap.probes.stats import turns_mentioning

if TYPE_CHECKING:
    from memtap.probes.generators.paradigms import _Pair

__all__ = ["NOISE", "assemble"]

ASSISTANT, TOOL = "assistant", "tool"

# (source of the conflicting mention, its status) for each preserve condition
NOISE = {
    "decoy_no_update": ("user", "not_accepted"),
    "assistant_noise": ("assistant", "not_accepted"),
    "third_party_noise": ("third_party", "not_accepted"),
    "stale_tool": ("stale_record", "stale"),
    "high_weak_challenge": ("third_party", "hypothetical"),
    "low_weak_challenge": ("third_party", "hypothetical"),
    "reactivated_weak": ("third_party", "hypothetical"),
    "direct_weak": ("third_party", "hypothetical"),
}


def assemble(
    p: _Pair, seed: int, behaviour: str, condition: str, sessions: list[dict[str, Any]], tool: bool
) -> dict[str, Any]:
    updated = behaviour == "update"
    sid = {s["phase"]: s["session_id"] for s in reversed(sessions)}
    first = sid["encoding"]
    arrives = sid["perturbation_p2"] if p.split else sid["perturbation"]
    closes = sid.get("perturbation_p1", arrives)
    bank: dict[str, Any] = {
        "fact@v0": {
            "content": sentence(p.fact.fact.format(v=p.old)),
            "type": p.fact.memory_type,
            "source": "user",
            "created_in": first,
            "metadata": {"value": p.old},
        }
    }
    sessions[0]["gold"] = {"capture": ["fact@v0"]}
    if updated:
        bank["fact@v0"]["invalidated_in"] = closes
        bank["fact@v1"] = {
            "content": sentence(p.fact.fact.format(v=p.new)),
            "type": p.fact.memory_type,
            "source": "user",
            "created_in": arrives,
            "replaces": ["fact@v0"],
            "metadata": {"value": p.new},
        }
        for s in sessions:
            if s["session_id"] in (closes, arrives):
                s["gold"] = {
                    "update": {
                        "delete": ["fact@v0"] if s["session_id"] == closes else [],
                        "add": ["fact@v1"] if s["session_id"] == arrives else [],
                    }
                }
    pert = ("perturbation", "perturbation_p1", "perturbation_p2")
    current, now_key = (p.new, "fact@v1") if updated else (p.old, "fact@v0")
    noise_source, status = ("user", "accepted") if updated else NOISE[condition]
    topic, ask = p.fact.topic, (p.clock + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    history = ["fact@v0", "fact@v1"] if updated else ["fact@v0"]
    on_record = turns_mentioning(sessions, ("encoding",), p.old)
    new_turns = turns_mentioning(sessions, pert, p.new)
    probes: list[tuple[str, str, str, dict[str, Any], list[str], list[str]]] = [
        (
            "current_value",
            f"What is {topic} now?",
            current,
            {},
            [now_key],
            new_turns if updated else on_record,
        ),
        (
            "previous_value",
            f"What was {topic} before it last changed, if it changed?",
            p.old,
            {},
            ["fact@v0"],
            on_record,
        ),
        (
            "change_detection",
            f"Has {topic} changed?",
            f"Yes, from {p.old} to {p.new}." if updated else f"No, it is still {p.old}.",
            {},
            history,
            new_turns,
        ),
        (
            "source",
            f"Who or what said that {topic} is {p.new}, and was it confirmed?",
            "The user said so."
            if updated
            else f"It came from the {noise_source.replace('_', ' ')}; the user did not confirm it.",
            {"source": noise_source},
            [now_key],
            new_turns,
        ),
        (
            "conflict_value",
            f"Was {p.new} mentioned for {topic}, and was it adopted?",
            f"Yes, {p.new} was mentioned and adopted."
            if updated
            else f"{p.new} was mentioned but not adopted.",
            {
                "conflict": {
                    "value": p.new,
                    "source": noise_source,
                    "status": status,
                    "applies_to_target": updated,
                }
            },
            [now_key],
            new_turns,
        ),
        (
            "temporal",
            f"When and why did {topic} change?",
            f"It changed from {p.old} to {p.new} after {p.trigger}, because {p.reason}."
            if updated
            else f"It did not change; it is still {p.old}.",
            {
                "temporal": {
                    "old_value": p.old,
                    "new_value": p.new if updated else None,
                    "trigger": p.trigger if updated else None,
                    "reason": p.reason if updated else None,
                }
            },
            history,
            [t["turn_id"] for s in sessions if s["phase"] in pert for t in s["turns"]] if updated else [],
        ),
    ]
    typed = [
        {
            "probe_id": f"p{i}",
            "type": kind,
            "requester": p.user,
            "question": question,
            "time": ask,
            "expected_behavior": behaviour,
            "gold": {"answer": answer, "fields": {"changed": updated, **fields}},
            "support": support,
            "evidence_turns": evidence,
        }
        for i, (kind, question, answer, fields, support, evidence) in enumerate(probes)
    ]
    participants = [{"id": p.user, "role": "user"}, {"id": ASSISTANT, "role": "assistant"}]
    if tool:
        participants.append({"id": TOOL, "role": "tool"})
    return {
        "format": FORMAT,
        "episode_id": f"par-{p.index:03d}-{behaviour}",
        "suite": "paradigms",
        "paradigm": p.paradigm,
        "condition": condition,
        "expected_behavior": behaviour,
        "group_id": f"pair-{p.index:03d}",
        "namespace": p.user,
        "participants": participants,
        "split_perturbation": p.split,
        "sessions": sessions,
        "gold_memory": bank,
        "probes": typed,
        "metadata": {
            "source": "generated",
            "generator": "paradigms",
            "seed": seed,
            "fact_type": p.fact.name,
            "domain": p.fact.domain,
            "values": {"old": p.old, "new": p.new, "distractors": p.distractors},
        },
    }
