"""MemProbe's text rules: value matching, number reading and reply parsing, ported.

Source: ``jq-ding/MemProbe`` at commit ``4ef09390``, ``src/eval/protocol.py``. Each function here
names the function it ports; the behaviour is MemProbe's, quirks included (a gold value matches as
a plain substring, so "weekly" is found in "bi-weekly"; the first word of a text that is a number
word up to twelve is read as that number), because a score that claims MemProbe's numbers must
give MemProbe's labels. memtap's own rules (``strict``) depart from several of these; see
``docs/scoring.md``.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["extract_number", "keyword_hits", "normalise_value", "parse_reply", "value_match"]

# protocol.py, _OPTIONAL_PREPS: words dropped anywhere in a normalised value.
_PREPOSITIONS = re.compile(r"\b(at|on|in|by|around|approximately|about|roughly)\s+", re.I)
# protocol.py, _UNITS: units a bare number may carry (joined into a pattern unescaped, as there).
UNITS = (
    "retries", "retry", "times", "attempts", "tries", "ms", "seconds", "minutes", "hours", "days",
    "weeks", "months", "pm", "am", "gb", "mb", "kb", "tb", "px", "pt", "em", "rem", "%", "percent",
)  # fmt: skip
_NUMBER_WITH_UNIT = re.compile(r"^(\d+(?:\.\d+)?)\s*(?:" + "|".join(UNITS) + r")?\.?$")
# protocol.py, _extract_number: number words read only as the first word, zero to twelve.
NUMBER_WORDS = {
    "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4", "five": "5", "six": "6",
    "seven": "7", "eight": "8", "nine": "9", "ten": "10", "eleven": "11", "twelve": "12",
}  # fmt: skip
# protocol.py, _normalize_value: "the gym is X" -> "X" (an owner word, anything, then a copula).
_COPULA = re.compile(r"^(?:the|a|an|my|our|their|its)\s+.*?\b(?:is|was|are|were|remains)\s+")


def normalise_value(text: str) -> str:
    """protocol.py ``_normalize_value``: lower case, no leading "the X is", no trailing
    punctuation, no optional prepositions, single spaces."""
    text = _COPULA.sub("", text.lower().strip())
    text = text.rstrip(".,;:!?")
    text = _PREPOSITIONS.sub("", text)
    return re.sub(r"\s+", " ", text).strip()


def extract_number(text: str) -> str | None:
    """protocol.py ``_extract_number``: the number of a text that is only a number (with an
    optional unit and full stop), else the digit of a leading number word, else None."""
    text = text.strip().lower()
    whole = _NUMBER_WITH_UNIT.match(text)
    if whole:
        return whole.group(1)
    first = text.split()[0] if text.split() else ""
    return NUMBER_WORDS.get(first)


def _bounded(number: str, text: str) -> bool:
    return re.search(r"\b" + re.escape(number) + r"\b", text) is not None


def value_match(gold: str, predicted: str) -> tuple[bool, str]:
    """protocol.py ``_value_match``: five tests in order, the first that holds wins."""
    gold_l, pred_l = gold.lower().strip(), predicted.lower().strip()
    if gold_l in pred_l:
        return True, "value present in answer"
    gold_n, pred_n = normalise_value(gold_l), normalise_value(pred_l)
    if gold_n and gold_n in pred_n:
        return True, f"normalized value match ('{gold_n}' in pred)"
    if pred_n and pred_n in gold_n and extract_number(pred_n):
        return True, f"reverse numeric match (pred '{pred_n}' in gold '{gold_n}')"
    gold_num = extract_number(gold_l)
    if gold_num:
        if _bounded(gold_num, pred_l):
            return True, f"numeric match ({gold_num})"
        if extract_number(pred_l) == gold_num:
            return True, f"numeric value match ({gold_num})"
    pred_num = extract_number(pred_l)
    if pred_num and _bounded(pred_num, gold_l):
        return True, f"reverse numeric match (pred={pred_num})"
    return False, f"expected '{gold}' not found"


def keyword_hits(cue: str, text: str, share: float) -> bool:
    """The cue-word test of protocol.py ``_score_temporal_structured`` and
    ``_score_temporal_from_json``: the cue's words longer than three characters (split at spaces
    and commas) found as substrings of ``text``, at least ``share`` of them and at least one."""
    wanted = [w.strip() for w in re.split(r"[\s,]+", cue) if len(w.strip()) > 3]
    hits = sum(1 for w in wanted if w in text)
    return bool(wanted) and hits >= max(1, len(wanted) * share)


# protocol.py, _parse_json_response: endings tried on a cut-off reply, in this order.
_REPAIRS = ('"}', '"}', "null}", "}", '"}\n}', "}\n}")


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def parse_reply(text: str) -> dict[str, Any] | None:
    """protocol.py ``_parse_json_response``: the JSON object in a reply, repairing a cut-off one.

    Fences are stripped; the span from the first ``{`` to the last ``}`` is tried; then the text
    from the first ``{`` with each ending of ``_REPAIRS``; then cut at its last comma and closed.
    An error marker (``[ERROR: ...``) or a reply with no ``{`` is None."""
    if not text or text.startswith(("[ERROR:", "[error:")):
        return None
    cleaned = re.sub(r"\s*```$", "", re.sub(r"^```(?:json)?\s*", "", text.strip()))
    span = re.search(r"\{[\s\S]*\}", cleaned)
    if span:
        found = _loads(span.group())
        if found is not None:
            return found if isinstance(found, dict) else None
    start = cleaned.find("{")
    if start == -1:
        return None
    fragment = cleaned[start:]
    for ending in _REPAIRS:
        found = _loads(fragment + ending)
        if isinstance(found, dict):
            return found
    comma = fragment.rfind(",")
    if comma > 0:
        found = _loads(fragment[:comma] + "}")
        if isinstance(found, dict):
            return found
    return None
