"""Answer dialects: the field names each published scorer expects a reader's answer in.

A reader answers in memtap's shape (``readers.SHAPES``) unless the episode comes from a
benchmark whose scorer reads another (its origin, ``metadata.source``):

- ``memprobe``: MemProbe's reader JSON per probe type (``jq-ding/MemProbe``,
  ``src/eval/protocol.py`` ``_PROBE_SCHEMAS``), which its scorer parses: ``{answer, reason}`` for
  values; ``{changed, current_value, previous_value, reason}``; ``{source_description,
  source_class, action, accepted, current_value, reason}``; ``{conflict_value_mentioned,
  conflict_value, source, source_class, status, status_class, applies_to_target, current_value,
  reason}``; ``{changed, trigger, old_value, new_value, timing, reason}``;
- ``locomo``, ``memarena``, ``longmemeval``: free text in ``answer`` (their scorers read text),
  with a withheld or abstaining answer written as words those scorers recognise.
"""

from __future__ import annotations

from typing import Any

from memtap.probes.schema import Episode

__all__ = ["DIALECTS", "MEMPROBE_SHAPES", "dialect_of", "in_dialect"]

DIALECTS = ("memtap", "memprobe", "locomo", "memarena", "longmemeval")
_S, _B = "string or null", "true or false"
MEMPROBE_SHAPES: dict[str, str] = {
    "current_value": f'{{"answer": "the current value" ({_S}), "reason": "brief evidence" ({_S})}}',
    "previous_value": f'{{"answer": "the value before any change" ({_S}), '
    f'"reason": "brief evidence" ({_S})}}',
    "change_detection": f'{{"changed": {_B}, "current_value": {_S}, '
    f'"previous_value": "the value before, if it changed" ({_S}), "reason": {_S}}}',
    "source": f'{{"source_description": "who introduced or communicated the fact" ({_S}), '
    f'"source_class": one of "user", "assistant", "third_party", "tool", "stale_tool", '
    f'"other_entity", "hypothetical", "unknown", "action": "what they did: stated, mentioned, suggested, ..." ({_S}), "accepted": {_B}, '  # noqa: E501
    f'"current_value": {_S}, "reason": {_S}}}',
    "conflict_value": f'{{"conflict_value_mentioned": {_B}, "conflict_value": {_S}, '
    f'"source": "who or what introduced the conflicting value" ({_S}), '
    f'"source_class": one of "assistant", "third_party", "stale_tool", "other_entity", "hypothetical", '
    f'"unknown", "status": "what happened to it" ({_S}), "status_class": one of "accepted", "not_accepted", "stale", "hypothetical", "other_entity", "superseded", "unknown", '  # noqa: E501
    f'"applies_to_target": {_B}, "current_value": "the actual current value" ({_S}), "reason": {_S}}}',
    "temporal": f'{{"changed": {_B}, "trigger": "what caused the change" ({_S}), "old_value": {_S}, '
    f'"new_value": {_S}, "timing": "when or in what context" ({_S}), "reason": {_S}}}',
}
_DECLINE = {
    "memarena": "I cannot share that.",
    "locomo": "Not mentioned.",
    "longmemeval": "I cannot share that.",
}
_UNKNOWN = {
    "memarena": "I don't know.",
    "locomo": "No information available.",
    "longmemeval": "The information is not available.",
}


def dialect_of(episode: Episode) -> str:
    source = episode.metadata.get("source")
    return source if isinstance(source, str) and source in DIALECTS else "memtap"


def _memprobe(kind: str, answer: dict[str, Any]) -> dict[str, Any]:
    text = answer.get("answer")
    if kind == "change_detection":
        return {
            "changed": answer.get("changed"),
            "current_value": None,
            "previous_value": None,
            "reason": text,
        }
    if kind == "source":
        said = answer.get("source")
        return {
            "source_description": text,
            "source_class": said or "unknown",
            "action": None,
            "accepted": None,
            "current_value": None,
            "reason": None,
        }
    if kind == "conflict_value":
        conflict = answer.get("conflict") or {}
        return {
            "conflict_value_mentioned": None if conflict.get("value") is None else True,
            "conflict_value": conflict.get("value"),
            "source": text,
            "source_class": conflict.get("source") or "unknown",
            "status": None,
            "status_class": conflict.get("status") or "unknown",
            "applies_to_target": conflict.get("applies_to_target"),
            "current_value": None,
            "reason": text,
        }
    if kind == "temporal":
        temporal = answer.get("temporal") or {}
        return {
            "changed": None,
            "trigger": temporal.get("trigger"),
            "old_value": temporal.get("old_value"),
            "new_value": temporal.get("new_value"),
            "timing": None,
            "reason": text,
        }
    return {"answer": text, "reason": None}


def in_dialect(kind: str, answer: dict[str, Any] | None, dialect: str) -> dict[str, Any] | None:
    """A memtap-shaped answer (the extractive reader's) written in ``dialect``'s field names."""
    if answer is None or dialect == "memtap":
        return answer
    if dialect == "memprobe":
        return _memprobe(kind, answer)
    out = dict(answer)
    if not out.get("answer"):
        if out.get("action") == "withhold":
            out["answer"] = _DECLINE[dialect]
        elif out.get("action") == "abstain" or kind == "abstention":
            out["answer"] = _UNKNOWN[dialect]
    return out
