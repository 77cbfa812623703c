"""MemProbe (``jq-ding/MemProbe``, ``data/suite56/episodes.jsonl``) to memtap suites.

- ``expected_behavior`` ``should_update`` / ``should_preserve`` become ``update`` / ``preserve``;
- ``session_type`` becomes the phase: ``encoding``; fillers before the (last) perturbation
  ``filler``, after it ``post``; ``perturbation``, ``perturbation_p1``, ``perturbation_p2`` as
  they are. The session type and MemProbe's own session metadata stay in session metadata;
- ``tool_output`` turns are spoken by a ``tool`` participant with role ``tool``;
- MemProbe gives no times: session ``i`` is placed on day ``i`` after 2026-01-05 at 09:00 UTC,
  turn ``k`` ``k`` minutes into its session, probes one day after the last session;
- ``latent_spec`` becomes the gold bank: ``fact@v0`` (the original value, created in the first
  encoding session) and, for update episodes, ``fact@v1`` (the new value, created where the new
  value is given: ``perturbation_p2`` when split) replacing it; in a split episode
  ``perturbation_p1`` invalidates ``fact@v0``;
- ``latent_spec.gold`` and ``conflict_gold`` become each probe's structured gold: ``changed``,
  ``source``, ``conflict`` (value, source, status, applies_to_target), ``temporal`` (old and new
  value, trigger, reason); MemProbe's gold answer text is kept verbatim as ``gold.answer``;
- the split flag is ``metadata.split_perturbation`` (a boolean), and the hints object some
  episodes carry in ``latent_spec.split_perturbation`` is kept as ``metadata.split_hints``;
- the suite remembers its origin (``metadata.source: memprobe``), and the part of the latent spec
  MemProbe's scorer reads (``gold`` with ``conflict_gold`` and ``temporal_gold``, ``condition``,
  the canonical values) stays under ``metadata.memprobe``, so ``memtap score`` can reproduce
  MemProbe's labels (``--answer-scorer memprobe``).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memtap.probes.errors import Problem
from memtap.probes.importers._common import (
    FORMAT,
    Malformed,
    Record,
    iso,
    read_json_records,
    require,
)
from memtap.probes.importers._common import object_or_empty as _object
from memtap.probes.stats import turns_mentioning

__all__ = ["convert", "records"]

START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
USER, ASSISTANT, TOOL = "user", "assistant", "tool"
_ROLES = {"user": ("user", USER), "assistant": ("assistant", ASSISTANT), "tool_output": ("tool", TOOL)}
_BEHAVIOUR = {"should_update": "update", "should_preserve": "preserve"}
_MEMORY_TYPE = {"personal": "user_profile", "work": "fact", "agentic": "agent_knowledge"}
_PERTURBATION = ("perturbation", "perturbation_p1", "perturbation_p2")


def records(path: Path) -> Iterator[Record]:
    yield from read_json_records(path)


def source_label(text: str | None) -> str | None:
    """MemProbe's free-text source (``assistant_hallucination``, ``user explicitly ...``) as a label."""
    if not text:
        return None
    low = text.lower()
    for needle, label in (
        ("stale", "stale_record"),
        ("tool", "stale_record"),
        ("assistant", "assistant"),
        ("third", "third_party"),
        ("document", "document"),
        ("user", "user"),
    ):
        if needle in low:
            return label
    return None


def _sentence(text: str) -> str:
    text = text.strip()
    return (text[:1].upper() + text[1:]).rstrip(".") + "."


def _sessions(raw: list[Any]) -> tuple[list[dict[str, Any]], bool]:
    indexed = []
    for i, session in enumerate(raw):
        where = f"sessions[{i}]"
        kind = require(session, "session_type", str, where)
        dialogue = require(session, "dialogue", list, where)
        idx = session.get("session_idx", i)
        if not isinstance(idx, int):
            raise Malformed(f"{where}.session_idx", "expected an integer")
        indexed.append((idx, kind, dialogue, session.get("metadata") or {}))
    indexed.sort(key=lambda item: item[0])
    last_perturbation = max(
        (n for n, (_, kind, _, _) in enumerate(indexed) if kind in _PERTURBATION), default=-1
    )
    sessions: list[dict[str, Any]] = []
    uses_tool = False
    for n, (idx, kind, dialogue, meta) in enumerate(indexed):
        sid = f"s{idx}"
        start = START + timedelta(days=n)
        turns = []
        for k, turn in enumerate(dialogue):
            role_in = require(turn, "role", str, f"sessions[{n}].dialogue[{k}]")
            if role_in not in _ROLES:
                raise Malformed(f"sessions[{n}].dialogue[{k}].role", f"unknown role {role_in!r}")
            role, speaker = _ROLES[role_in]
            uses_tool |= role == "tool"
            content = require(turn, "content", str, f"sessions[{n}].dialogue[{k}]")
            turns.append(
                {
                    "turn_id": f"{sid}-t{k}",
                    "role": role,
                    "speaker": speaker,
                    "content": content,
                    "time": iso(start + timedelta(minutes=k)),
                }
            )
        if kind == "encoding":
            phase = "encoding"
        elif kind in _PERTURBATION:
            phase = kind
        else:
            phase = "post" if last_perturbation >= 0 and n > last_perturbation else "filler"
        sessions.append(
            {
                "session_id": sid,
                "time": iso(start),
                "phase": phase,
                "participants": [USER, ASSISTANT],
                "turns": turns,
                "metadata": {"session_type": kind, "memprobe": meta},
            }
        )
    if uses_tool:
        for session in sessions:
            session["participants"].append(TOOL)
    return sessions, uses_tool


def convert(record: Any, where: str) -> list[dict[str, Any] | Problem]:
    episode_id = require(record, "episode_id", str)
    behaviour_in = require(record, "expected_behavior", str)
    if behaviour_in not in _BEHAVIOUR:
        raise Malformed(
            "expected_behavior", f"expected should_update or should_preserve, got {behaviour_in!r}"
        )
    behaviour = _BEHAVIOUR[behaviour_in]
    latent = require(record, "latent_spec", dict)
    gold = require(latent, "gold", dict, "latent_spec")
    original = require(latent, "canonical_initial", str, "latent_spec")
    new = require(latent, "canonical_new", str, "latent_spec")
    current = require(gold, "current_value", str, "latent_spec.gold")
    meta = _object(record.get("metadata"))
    split_hints = latent.get("split_perturbation")
    split = meta.get("split_perturbation") is True or split_hints is True or isinstance(split_hints, dict)
    sessions, uses_tool = _sessions(require(record, "sessions", list))
    by_phase = {s["phase"]: s["session_id"] for s in reversed(sessions)}
    encoding = by_phase.get("encoding")
    if encoding is None:
        raise Malformed("sessions", "no encoding session")
    updated = behaviour == "update"
    memory_type = _MEMORY_TYPE.get(str(latent.get("domain")), "fact")
    bank: dict[str, Any] = {
        "fact@v0": {
            "content": _sentence(str(latent.get("initial_value") or original)),
            "type": memory_type,
            "source": "user",
            "created_in": encoding,
            "metadata": {"value": original},
        }
    }
    next(s for s in sessions if s["session_id"] == encoding)["gold"] = {"capture": ["fact@v0"]}
    if updated:
        arrives = by_phase.get("perturbation_p2") or by_phase.get("perturbation")
        closes = by_phase.get("perturbation_p1") or arrives
        if arrives is None or closes is None:
            raise Malformed("sessions", "an update episode without a perturbation session")
        bank["fact@v0"]["invalidated_in"] = closes
        bank["fact@v1"] = {
            "content": _sentence(str(latent.get("new_value") or new)),
            "type": memory_type,
            "source": "user",
            "created_in": arrives,
            "replaces": ["fact@v0"],
            "metadata": {"value": new},
        }
        for s in sessions:
            if s["session_id"] in (closes, arrives):
                s["gold"] = {
                    "update": {
                        "delete": ["fact@v0"] if s["session_id"] == closes else [],
                        "add": ["fact@v1"] if s["session_id"] == arrives else [],
                    }
                }
    probes = _probes(require(record, "probes", list), gold, behaviour, original, new, current, sessions)
    participants = [{"id": USER, "role": "user"}, {"id": ASSISTANT, "role": "assistant"}]
    if uses_tool:
        participants.append({"id": TOOL, "role": "tool"})
    keep = (
        "domain",
        "fact_type",
        "length_tier",
        "difficulty_target",
        "initial_value",
        "new_value",
        "canonical_initial",
        "canonical_new",
        "distractor_values",
        "group_role",
        "perturbation_type",
        "condition",
        "gold",
    )
    metadata = {
        "source": "memprobe",
        "source_record": where,
        "memprobe": {key: latent[key] for key in keep if key in latent} | {"metadata": meta},
    }
    if isinstance(split_hints, dict):
        metadata["split_hints"] = split_hints
    return [
        {
            "format": FORMAT,
            "episode_id": episode_id,
            "suite": "memprobe",
            "paradigm": require(record, "paradigm", str),
            "condition": record.get("condition"),
            "expected_behavior": behaviour,
            "group_id": record.get("group_id"),
            "namespace": USER,
            "participants": participants,
            "split_perturbation": split,
            "sessions": sessions,
            "gold_memory": bank,
            "probes": probes,
            "metadata": metadata,
        }
    ]


def _probes(
    raw: list[Any],
    gold: dict[str, Any],
    behaviour: str,
    original: str,
    new: str,
    current: str,
    sessions: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    updated = behaviour == "update"
    ask_at = iso(START + timedelta(days=len(sessions)))
    conflict = _object(gold.get("conflict_gold")) or None
    temporal_gold = _object(gold.get("temporal_gold"))
    changed = bool(gold.get("has_changed", updated))
    change_source = source_label(gold.get("source_of_change")) if updated else None
    conflict_fields: dict[str, Any] | None = None
    if conflict is not None:
        conflict_fields = {
            "value": conflict.get("conflict_value"),
            "source": source_label(conflict.get("source")),
            "status": conflict.get("status"),
            "applies_to_target": conflict.get("applies_to_target"),
        }
    temporal_fields = {
        "old_value": temporal_gold.get("old_value") or original,
        "new_value": temporal_gold.get("new_value") or (new if updated else None),
        "trigger": temporal_gold.get("trigger"),
        "reason": temporal_gold.get("reason") or gold.get("source_of_change"),
    }
    current_key = "fact@v1" if updated else "fact@v0"
    perturbed = turns_mentioning(sessions, _PERTURBATION, new)
    probes = []
    for i, probe in enumerate(raw):
        where = f"probes[{i}]"
        kind = require(probe, "probe_type", str, where)
        answer = probe.get("gold_answer")
        fields: dict[str, Any] = {"changed": changed}
        support = [current_key]
        evidence = turns_mentioning(
            sessions, ("perturbation_p2", "perturbation") if updated else ("encoding",), current
        )
        if kind == "previous_value":
            support, evidence = ["fact@v0"], turns_mentioning(sessions, ("encoding",), original)
        elif kind == "change_detection":
            support = ["fact@v0", "fact@v1"] if updated else ["fact@v0"]
            evidence = perturbed
        elif kind == "source":
            fields["source"] = change_source if updated else (conflict_fields or {}).get("source")
            evidence = perturbed
        elif kind == "conflict_value":
            fields["conflict"] = conflict_fields
            evidence = perturbed
        elif kind == "temporal":
            support = ["fact@v0", "fact@v1"] if updated else ["fact@v0"]
            fields["temporal"] = temporal_fields
            evidence = [t["turn_id"] for s in sessions if s["phase"] in _PERTURBATION for t in s["turns"]]
        probes.append(
            {
                "probe_id": f"p{i}",
                "type": kind,
                "requester": USER,
                "question": require(probe, "question", str, where),
                "time": ask_at,
                "expected_behavior": behaviour,
                "expected_action": "answer",
                "gold": {"answer": answer, "fields": {k: v for k, v in fields.items() if v is not None}},
                "support": support,
                "evidence_turns": evidence,
            }
        )
    return probes
