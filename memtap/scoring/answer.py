"""Answer level: MemProbe's typed scorer, LoCoMo's token F1, permission and abstention.

An answer is the reader's JSON (``{"answer", ...typed fields}``) or an agent's reply (under
``reply``); its text is ``answer`` and ``reply`` together. Each probe gets an outcome:
``correct``, ``partial`` (counts zero in accuracy), ``incorrect``, or ``skip`` (no gold to score
against; counted, not in any denominator). Rules by probe type:

- ``current_value``, ``previous_value`` (and ``cloze``, ``metadata``): the gold value contained
  in the text as a whole phrase; then after normalisation (``text.normalise_value``);
- ``change_detection``: the parsed boolean (``changed``, else yes/no and change phrases in the
  text) equals the gold ``changed``;
- ``source``: the source class (aliases folded: third-party, hallucination, stale tool, ...)
  equals the gold source;
- ``conflict_value``: four parts (value, source, status, target applicability); a wrong value is
  incorrect, three or four parts right are correct, otherwise partial;
- ``temporal``: direction (the new value, or "changed"; for no change, "unchanged") and trigger
  (at least 40% of the gold trigger's words over three letters, or of the reason's when there is
  no trigger); both correct, one partial;
- ``qa``: token F1 (LoCoMo: lower case, no punctuation or articles); correct at F1 >= 0.5;
- ``permission`` and ``abstention``: see ``permission.py``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memtap.probes.schema import Probe
from memtap.scoring.permission import abstains, classify_permission, permission_correct
from memtap.scoring.text import value_match, words

__all__ = ["Verdict", "change_claim", "score_answer", "source_class", "status_class", "token_f1"]


@dataclass(frozen=True)
class Verdict:
    outcome: str  # correct | partial | incorrect | skip
    reason: str
    parts: dict[str, bool] = field(default_factory=dict)
    f1: float | None = None
    label: str | None = None


SOURCES = ("user", "assistant", "tool", "document", "third_party", "stale_record")
_SOURCE_ALIASES = {
    "third-party": "third_party", "thirdparty": "third_party", "third party": "third_party",
    "other_person": "third_party", "someone_else": "third_party", "friend": "third_party",
    "colleague": "third_party", "coworker": "third_party", "hallucination": "assistant",
    "assistant_hallucination": "assistant", "assistant_error": "assistant", "ai": "assistant",
    "stale_tool": "stale_record", "stale": "stale_record", "outdated_record": "stale_record",
    "old_record": "stale_record", "tool_output": "tool", "user_explicit": "user", "the_user": "user",
    "doc": "document",
}  # fmt: skip
_SOURCE_WORDS = (
    ("stale_record", ("stale", "outdated", "old backup", "old export", "old record", "cached",
                      "last synced")),
    ("assistant", ("assistant", "hallucinat", "the ai ")),
    ("third_party", ("third party", "third-party", "friend", "colleague", "coworker", "co-worker",
                     "someone else", "sister", "neighbour", "neighbor", "another person")),
    ("tool", ("tool", "export", "system record")),
    ("document", ("document",)),
    ("user", ("user", "you said", "you told", "you mentioned", "yourself")),
)  # fmt: skip
_STATUS = (
    ("not_accepted", ("not accepted", "not_accepted", "not adopted", "rejected", "not confirmed",
                      "not_confirmed", "unconfirmed", "declined", "dismissed", "not the user's choice")),
    ("different_entity", ("different_entity", "other_entity", "different entity", "other entity",
                          "someone else's", "another person's", "not the user's")),
    ("stale", ("stale", "outdated", "out of date", "superseded", "expired", "obsolete", "old backup")),
    ("hypothetical", ("hypothetical", "suggest", "maybe", "someday", "one day", "an idea", "speculat",
                      "proposed", "considered")),
    ("accepted", ("accepted", "adopted", "confirmed", "switched", "changed to", "updated to")),
)  # fmt: skip
_NO_CHANGE = (
    "did not change", "didn't change", "has not changed", "hasn't changed", "no change", "not changed",
    "unchanged", "nothing changed", "nothing to change", "still", "remains", "remained", "stayed",
    "not adopted", "never changed",
)  # fmt: skip
_CHANGE = ("changed", "switched", "switch", "moved", "updated", "replaced", "now ", "increased",
           "decreased", "extended", "adopted", "transition", "migrat", "no longer")  # fmt: skip


def _fold(value: object) -> str:
    return re.sub(r"[\s-]+", "_", str(value).strip().lower())


def source_class(value: object) -> str | None:
    """A structured source label folded to the suite's classes (None: not one of them)."""
    if value is None or not str(value).strip():
        return None
    key = _fold(value)
    key = _SOURCE_ALIASES.get(key, key)
    return key if key in SOURCES else None


def source_from_text(text: str) -> str | None:
    low = text.lower()
    for label, needles in _SOURCE_WORDS:
        if any(n in low for n in needles):
            return label
    return None


def _same_source(gold: str, pred: str | None) -> bool:
    return pred == gold or (gold == "stale_record" and pred == "tool")


def status_class(value: object) -> str | None:
    if value is None or not str(value).strip():
        return None
    low = str(value).lower().replace("_", " ")
    for label, needles in _STATUS:
        if any(n.replace("_", " ") in low for n in needles):
            return label
    return None


def change_claim(text: str) -> bool | None:
    """What a text says about change: True (changed), False (unchanged), None (nothing clear)."""
    low = text.lower().strip()
    if re.match(r"^no\b", low):
        return False
    if re.match(r"^yes\b", low):
        return True
    if any(p in low for p in _NO_CHANGE):
        return False
    if any(p in low + " " for p in _CHANGE):
        return True
    return None


def _text(answer: dict[str, Any] | None) -> str:
    if not answer:
        return ""
    parts = [answer.get("answer"), answer.get("reply")]
    return " ".join(str(p) for p in parts if isinstance(p, str | int | float) and str(p).strip())


def _field(answer: dict[str, Any] | None, *path: str) -> Any:
    value: Any = answer or {}
    for name in path:
        value = value.get(name) if isinstance(value, dict) else None
    return value


def token_f1(predicted: str, gold: str) -> float:
    skip = {"a", "an", "the", "and"}
    pred = [w for w in words(predicted) if w not in skip]
    want = [w for w in words(gold) if w not in skip]
    if not pred or not want:
        return float(pred == want)
    common = 0
    pool = list(want)
    for w in pred:
        if w in pool:
            pool.remove(w)
            common += 1
    if not common:
        return 0.0
    precision, recall = common / len(pred), common / len(want)
    return 2 * precision * recall / (precision + recall)


def _value(probe: Probe, answer: dict[str, Any] | None) -> Verdict:
    gold = probe.gold.answer
    if not gold:
        return Verdict("skip", "no gold answer")
    ok, why = value_match(gold, _text(answer))
    return Verdict("correct" if ok else "incorrect", why)


def _change(probe: Probe, answer: dict[str, Any] | None) -> Verdict:
    gold = probe.gold.fields.changed
    if gold is None and probe.gold.answer:
        gold = change_claim(probe.gold.answer)
    if gold is None:
        return Verdict("skip", "no gold change")
    said = _field(answer, "changed")
    pred = said if isinstance(said, bool) else change_claim(_text(answer))
    how = "structured" if isinstance(said, bool) else "parsed from text"
    if pred is None:
        return Verdict("incorrect", "no change claim found")
    return Verdict("correct" if pred == gold else "incorrect", f"{how}: {pred} vs gold {gold}")


def _source(probe: Probe, answer: dict[str, Any] | None) -> Verdict:
    gold = probe.gold.fields.source
    if gold is None:
        return Verdict("skip", "no gold source")
    said = _field(answer, "source")
    pred = source_class(said) or source_from_text(f"{said or ''} {_text(answer)}")
    ok = _same_source(gold, pred)
    return Verdict("correct" if ok else "incorrect", f"source {pred} vs gold {gold}")


def _conflict(probe: Probe, answer: dict[str, Any] | None) -> Verdict:
    gold = probe.gold.fields.conflict
    if gold is None or not gold.value:
        return Verdict("skip", "no gold conflict")
    text = _text(answer)
    pred_value = _field(answer, "conflict", "value")
    value_ok = value_match(gold.value, str(pred_value) if pred_value else text)[0]
    pred_source = source_class(_field(answer, "conflict", "source")) or source_from_text(text)
    pred_status = status_class(_field(answer, "conflict", "status")) or status_class(text)
    applies = _field(answer, "conflict", "applies_to_target")
    if not isinstance(applies, bool):
        claim = change_claim(text)
        applies = claim if claim is not None else None
    parts = {
        "value": value_ok,
        "source": gold.source is not None and _same_source(gold.source, pred_source),
        "status": gold.status is not None and pred_status == gold.status,
        "applies_to_target": gold.applies_to_target is not None and applies == gold.applies_to_target,
    }
    right = sum(parts.values())
    outcome = "incorrect" if not value_ok else "correct" if right >= 3 else "partial"
    return Verdict(outcome, f"{right}/4 parts: " + ", ".join(f"{k}={v}" for k, v in parts.items()), parts)


def _cue_hit(cue: str, text: str) -> bool:
    wanted = {w for w in words(cue) if len(w) > 3}
    if not wanted:
        return False
    have = set(words(text))
    return len(wanted & have) >= max(1, 0.4 * len(wanted))


def _temporal(probe: Probe, answer: dict[str, Any] | None) -> Verdict:
    gold = probe.gold.fields.temporal
    if gold is None:
        return Verdict("skip", "no gold temporal fields")
    text = _text(answer)
    pred_new = _field(answer, "temporal", "new_value")
    said = _field(answer, "changed")
    claim = said if isinstance(said, bool) else change_claim(text)
    if gold.new_value:
        direction = bool(pred_new and value_match(gold.new_value, str(pred_new))[0]) or (
            value_match(gold.new_value, text)[0] or claim is True
        )
    else:
        direction = not pred_new and claim is False
    cue = gold.trigger or gold.reason
    said_cue = " ".join(
        str(v)
        for v in (_field(answer, "temporal", "trigger"), _field(answer, "temporal", "reason"), text)
        if v
    )
    trigger = _cue_hit(cue, said_cue) if cue else not _field(answer, "temporal", "trigger")
    parts = {"direction": direction, "trigger": trigger}
    outcome = "correct" if direction and trigger else "partial" if direction or trigger else "incorrect"
    return Verdict(outcome, f"direction={direction}, trigger={trigger}", parts)


def _qa(probe: Probe, answer: dict[str, Any] | None) -> Verdict:
    gold = probe.gold.answer
    if not gold:
        return Verdict("skip", "no gold answer")
    f1 = token_f1(_text(answer), gold)
    return Verdict("correct" if f1 >= 0.5 else "incorrect", f"token F1 {f1:.3f}", f1=f1)


def _permission(probe: Probe, answer: dict[str, Any] | None, judge: Any) -> Verdict:
    label, why = judge(probe, answer)
    ok = permission_correct(probe, label)
    return Verdict("correct" if ok else "incorrect", f"{label}: {why}", label=label)


def _abstention(probe: Probe, answer: dict[str, Any] | None) -> Verdict:
    ok = abstains(answer)
    return Verdict("correct" if ok else "incorrect", "abstained" if ok else "answered a fabricated premise")


_RULES: dict[str, Callable[[Probe, dict[str, Any] | None], Verdict]] = {
    "current_value": _value,
    "previous_value": _value,
    "cloze": _value,
    "metadata": _value,
    "change_detection": _change,
    "source": _source,
    "conflict_value": _conflict,
    "temporal": _temporal,
    "qa": _qa,
    "abstention": _abstention,
}


def score_answer(probe: Probe, answer: dict[str, Any] | None, *, judge: Any = classify_permission) -> Verdict:
    """The verdict on one probe's answer (``judge``: the permission classifier)."""
    if probe.type == "permission":
        return _permission(probe, answer, judge)
    return _RULES[probe.type](probe, answer)
