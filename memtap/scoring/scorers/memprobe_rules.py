"""MemProbe's ``score_answer``, ported rule by rule (``jq-ding/MemProbe`` at ``4ef09390``,
``src/eval/protocol.py``).

:func:`judge` takes what MemProbe's function takes: the reader's raw reply (``predicted``), the
probe's gold answer text, the probe type and the episode's latent spec (``condition``,
``canonical_initial``, ``canonical_new`` and ``gold`` with its optional ``conflict_gold`` and
``temporal_gold``), and returns MemProbe's label (``correct``, ``partial``, ``incorrect``,
``skip``, ``execution_error``, ``unknown``) with its reason and sub-scores. Each helper names the
published function it ports. The word lists are MemProbe's, as data: changing one changes the
labels, which is what ``docs/scoring.md`` lists as ``strict``'s departures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memtap.scoring.scorers.memprobe_text import keyword_hits, parse_reply, value_match

__all__ = ["Judgement", "gold_source_class", "gold_status_class", "judge"]


@dataclass(frozen=True)
class Judgement:
    match: str  # correct | partial | incorrect | skip | execution_error | unknown
    reason: str
    parts: dict[str, bool] = field(default_factory=dict)
    rule: str = ""  # which published path decided (for the rule table and the tests)


# -- word lists (protocol.py) ---------------------------------------------------------------------

# _score_change_detection_legacy
NOT_CHANGED = ("not changed", "hasn't changed", "did not change", "didn't change", "no change", "unchanged")
DENIAL = ("no", "remains", "did not change", "hasn't changed", "didn't change", "not changed", "unchanged",
          "no change")  # fmt: skip
# _score_temporal_structured (change words) and _score_temporal_legacy (which adds "new", lacks "migrat")
CHANGE_WORDS_STRUCTURED = ("change", "switch", "move", "transfer", "update", "adopt", "went to", "replace",
                           "took over", "cancel", "transition", "migrat")  # fmt: skip
CHANGE_WORDS_LEGACY = ("change", "switch", "move", "transfer", "update", "adopt", "went to", "new", "replace",
                       "took over", "cancel", "transition")  # fmt: skip
# _score_temporal_structured: a gold trigger word, and what in the answer stands for it
TRIGGER_SYNONYMS = (
    ("user", ("user", "they", "the person", "their", "i ")),
    ("stated", ("stated", "said", "told", "mentioned", "announced", "communicated", "explained", "noted")),
    ("organizers", ("organizers", "conference", "committee", "official")),
    ("team", ("team", "agreed", "decided", "consensus", "voted")),
)
# _score_temporal_legacy: the agent of the change named in the gold, and the answer's words for it
AGENT_USER = ("user", "they", "the person", "their")
AGENT_THIRD = ("third", "someone else", "colleague", "friend")
# _SOURCE_EQUIVALENCES: a concept of the gold source text and the answer's words for it
SOURCE_CONCEPTS = (
    ("user explicitly stated", ("user stated", "user said", "user communicated", "user told",
                                "user mentioned", "user announced", "from the user", "the user directly",
                                "user explicitly")),
    ("assistant", ("assistant stated", "assistant said", "assistant hallucinated", "assistant error",
                   "assistant introduced")),
    ("third_party", ("third party", "someone else", "colleague", "friend", "another person",
                     "external source")),
    ("reactivat", ("reactivat", "recall", "remember", "referred back", "brought up the old",
                   "mentioned the previous owner", "after first recalling", "after mentioning")),
)  # fmt: skip
# _score_source_legacy: the structural test
AGENT_WORDS = ("user", "assistant", "they", "the person", "colleague", "friend")
ACTION_WORDS = ("stated", "said", "mentioned", "communicated", "confirmed", "denied", "rejected", "corrected",
                "introduced", "error")  # fmt: skip
VERDICT_WORDS = ("remains", "still", "unchanged", "not", "did not", "switched", "changed", "transferred",
                 "took over")  # fmt: skip
# _SOURCE_SIGNALS, _STATUS_SIGNALS, _NONAPPLY_SIGNALS (free-text conflict answers)
SOURCE_SIGNALS = {
    "assistant_hallucination": ("assistant", "hallucin", "made up", "fabricat", "error", "incorrect",
                                "mistake", "wrong", "generated"),
    "third_party": ("colleague", "friend", "coworker", "teammate", "someone", "third party", "third-party",
                    "another person", "jamie", "they mentioned", "was mentioned by", "their", "new hire",
                    "suggested", "suggestion", "rumor", "speculation"),
    "stale_tool": ("stale", "outdated", "old", "cached", "dashboard", "onboarding doc", "out of date",
                   "out-of-date", "no longer"),
}  # fmt: skip
STATUS_SIGNALS = {
    "not_accepted": ("not accepted", "not adopted", "rejected", "didn't adopt", "did not adopt",
                     "didn't accept", "did not accept",
                     "not confirmed", "speculative", "rumor", "unverified", "suggested",
                     "proposed", "considered", "hypothetical", "not the user", "not yours", "not their",
                     "not his", "not her", "guest pass", "one-time", "temporary", "promo", "might take over",
                     "may take over", "helping with"),
    "different_entity": ("different", "separate", "another", "other", "not the user's", "not yours",
                         "not this", "their service", "their project", "their team", "a colleague's",
                         "a friend's", "a teammate's", "for a different", "for another", "for marcus", "not for your",  # noqa: E501
                         "not for the user", "not for this", "mock", "local test", "frontend"),
    "stale": ("stale", "outdated", "out of date", "out-of-date", "no longer valid", "no longer current",
              "deprecated", "old version", "old config", "cached", "was previously"),
}  # fmt: skip
NOT_APPLYING = (
    "not the user", "not yours", "not this service", "not this project", "not for your", "not for the user",
    "not for this", "remains", "still", "unchanged", "didn't change", "did not change", "hasn't changed",
    "not updated", "kept", "stuck with", "sticking with", "current", "is still", "stayed", "was not adopted",
    "not adopted", "separate service", "separate project", "different project", "different service",
    "another service", "another project", "not as the user's", "but not", "not the same",
)  # fmt: skip
ACCEPTING = (
    "accepted",
    "adopted",
    "confirmed",
    "switched",
    "changed to",
    "updated to",
    "moved to",
    "now using",
)
NO_CONFLICT = ("no", "none", "not", "no conflict", "wasn't", "were not")  # _score_conflict_legacy
# _score_source and _score_conflict_structured: structured source labels folded
SOURCE_ALIASES = {"third-party": "third_party", "thirdparty": "third_party", "hallucination": "assistant",
                  "assistant_hallucination": "assistant"}  # fmt: skip
# _score_conflict_structured: structured status labels folded
STATUS_ALIASES = {
    "different_entity": "other_entity",
    "not accepted": "not_accepted",
    "not_confirmed": "not_accepted",
}
# _get_gold_source_class: gold source class by conflict source, else by the episode's condition
_CONFLICT_SOURCE_CLASS = {"assistant_hallucination": "assistant", "third_party": "third_party",
                          "stale_tool": "stale_tool"}  # fmt: skip
CONDITION_SOURCE_CLASS = {
    "user_explicit": "user", "authoritative_update": "user", "reactivated": "user", "direct": "user",
    "assistant_noise": "assistant", "third_party_noise": "third_party", "decoy_no_update": "third_party",
    "stale_tool": "stale_tool", "high": "user", "low": "user", "high_weak_challenge": "third_party",
    "low_weak_challenge": "third_party", "reactivated_weak": "third_party", "direct_weak": "third_party",
}  # fmt: skip
# _get_gold_status_class
_STATUS_CLASS = {"not_accepted": "not_accepted", "different_entity": "other_entity", "stale": "stale"}


def _any(words: tuple[str, ...], text: str) -> bool:
    return any(w in text for w in words)


def _s(value: Any) -> str:
    """A gold field as text (``None`` is empty, where MemProbe's ``.get(k, "")`` would fail)."""
    return "" if value is None else str(value)


def _conflict_gold(spec: dict[str, Any]) -> dict[str, Any] | None:
    found = (spec.get("gold") or {}).get("conflict_gold")
    return found if isinstance(found, dict) and found else None


def gold_source_class(spec: dict[str, Any]) -> str:
    """protocol.py ``_get_gold_source_class``."""
    if not spec:
        return "unknown"
    cg = _conflict_gold(spec)
    if cg:
        return _CONFLICT_SOURCE_CLASS.get(_s(cg.get("source")), "unknown")
    return CONDITION_SOURCE_CLASS.get(_s(spec.get("condition")), "unknown")


def gold_status_class(spec: dict[str, Any]) -> str:
    """protocol.py ``_get_gold_status_class``."""
    cg = _conflict_gold(spec) if spec else None
    return _STATUS_CLASS.get(_s(cg.get("status")), "unknown") if cg else "unknown"


def _grade(parts: dict[str, bool], rule: str, label: str) -> Judgement:
    """Both required parts right: correct; one: partial; none: incorrect (temporal rules)."""
    first, second = list(parts.values())[:2]
    match = "correct" if first and second else "partial" if first or second else "incorrect"
    return Judgement(match, f"{label}: {parts}", parts, rule)


# -- change detection -----------------------------------------------------------------------------


def _change(predicted: str, gold: str, parsed: dict[str, Any] | None) -> Judgement:
    gold_changed = gold.lower().strip().startswith("yes")
    if parsed and "changed" in parsed:  # score_answer, structured branch
        said = bool(parsed["changed"])
        match = "correct" if said == gold_changed else "incorrect"
        return Judgement(
            match, f"structured: gold changed={gold_changed}, pred changed={said}", {}, "change.json"
        )
    # _score_change_detection_legacy
    low = predicted.lower().strip()
    affirm = ("yes" in low[:30] and "no" not in low[:15]) or ("changed" in low and not _any(NOT_CHANGED, low))
    deny = _any(DENIAL, low)
    ok = affirm if gold_changed else (deny or not affirm)
    reason = f"gold changed={gold_changed}, pred_affirm={affirm}, pred_deny={deny}"
    return Judgement("correct" if ok else "incorrect", reason, {}, "change.text")


# -- temporal -------------------------------------------------------------------------------------


def _temporal(predicted: str, gold: str, spec: dict[str, Any], parsed: dict[str, Any] | None) -> Judgement:
    tg = (spec.get("gold") or {}).get("temporal_gold") if spec else None
    if tg and isinstance(tg, dict):
        if parsed:
            return _temporal_json(parsed, tg)
        return _temporal_text(predicted.lower(), tg)
    return _temporal_legacy(predicted.lower(), gold.lower())


def _temporal_text(pred: str, tg: dict[str, Any]) -> Judgement:
    """protocol.py ``_score_temporal_structured``: direction (the new value or a change word) and
    trigger (40% of the trigger's long words, or a synonym of a trigger word) decide."""
    new, trigger = _s(tg.get("new_value")).lower(), _s(tg.get("trigger")).lower()
    direction = bool(new and value_match(new, pred)[0]) or _any(CHANGE_WORDS_STRUCTURED, pred)
    hit = False
    if trigger:
        hit = keyword_hits(trigger, pred, 0.4) or any(
            key in trigger and _any(words, pred) for key, words in TRIGGER_SYNONYMS
        )
    return _grade({"direction": direction, "trigger": hit}, "temporal.gold.text", "temporal structured")


def _temporal_json(parsed: dict[str, Any], tg: dict[str, Any]) -> Judgement:
    """protocol.py ``_score_temporal_from_json``: direction from ``new_value`` or ``changed: true``,
    trigger from 30% of the gold trigger's long words in the answer's ``trigger``."""
    gold_new, gold_trigger = _s(tg.get("new_value")).lower(), _s(tg.get("trigger")).lower()
    pred_new = str(parsed.get("new_value", ""))
    direction = (
        bool(gold_new and pred_new and value_match(gold_new, pred_new)[0]) or parsed.get("changed") is True
    )
    pred_trigger = str(parsed.get("trigger", "")).lower()
    hit = bool(gold_trigger and pred_trigger) and keyword_hits(gold_trigger, pred_trigger, 0.3)
    return _grade({"direction": direction, "trigger": hit}, "temporal.gold.json", "temporal JSON")


def _temporal_legacy(pred: str, gold: str) -> Judgement:
    """protocol.py ``_score_temporal_legacy``: without structured gold, the agent the gold text
    names (user, assistant, third party; anything else passes) and a change word."""
    if "user" in gold:
        agent = _any(AGENT_USER, pred)
    elif "assistant" in gold:
        agent = "assistant" in pred
    elif "third" in gold or "party" in gold:
        agent = _any(AGENT_THIRD, pred)
    else:
        agent = True
    parts = {"source_agent": agent, "change_direction": _any(CHANGE_WORDS_LEGACY, pred)}
    return _grade(parts, "temporal.legacy", "temporal legacy")


# -- source ---------------------------------------------------------------------------------------


def _source(predicted: str, gold: str, spec: dict[str, Any], parsed: dict[str, Any] | None) -> Judgement:
    if not (parsed and "source_class" in parsed):
        return _source_text(predicted, gold, spec)
    # protocol.py _score_source, structured branch
    gold_class = gold_source_class(spec)
    said = str(parsed.get("source_class", "unknown")).lower().strip()
    said = SOURCE_ALIASES.get(said, said)
    cg = _conflict_gold(spec)
    gold_accepted = cg.get("applies_to_target", False) if cg else True
    pred_accepted = parsed.get("accepted")
    accepted = (pred_accepted == gold_accepted) if pred_accepted is not None else None
    parts = {"class": said == gold_class, "accepted": accepted is True}
    if said == gold_class:
        return Judgement("correct", f"source_class match: {said}", parts, "source.json.class")
    if accepted is True and said != "unknown":
        return Judgement(
            "partial", f"source_class {said} vs {gold_class}, accepted right", parts, "source.json.accepted"
        )
    return Judgement("incorrect", f"source_class mismatch: {said} vs {gold_class}", parts, "source.json.miss")


def _source_text(predicted: str, gold: str, spec: dict[str, Any]) -> Judgement:
    """protocol.py ``_score_source_legacy``: the gold text inside the answer; else the gold's
    concepts by synonyms (all: correct; some: correct with the entity named, else partial); else
    the structure (two of agent, action, verdict: correct with the entity, else partial)."""
    pred, gold_l = predicted.lower(), gold.lower()
    if gold_l in pred:
        return Judgement("correct", "exact gold substring match", {}, "source.text.gold")
    named = [concept for concept, _ in SOURCE_CONCEPTS if concept in gold_l]
    found = [c for c, words in SOURCE_CONCEPTS if c in named and (_any(words, pred) or c in pred)]
    entities = [_s(spec.get("canonical_initial")), _s(spec.get("canonical_new"))] if spec else []
    entity = any(e and e.lower() in pred for e in entities)
    if named and len(found) == len(named):
        return Judgement("correct", f"all {len(named)} source concepts matched", {}, "source.text.concepts")
    if named and found:
        if entity:
            return Judgement(
                "correct", f"{len(found)}/{len(named)} concepts + entity", {}, "source.text.concepts_entity"
            )
        return Judgement(
            "partial", f"{len(found)}/{len(named)} source concepts", {}, "source.text.concepts_some"
        )
    parts = {
        "agent": _any(AGENT_WORDS, pred),
        "action": _any(ACTION_WORDS, pred),
        "verdict": _any(VERDICT_WORDS, pred),
    }
    hits = sum(parts.values())
    if hits >= 2 and entity:
        return Judgement("correct", f"structural {parts} + entity", parts, "source.text.structure_entity")
    if hits >= 2:
        return Judgement("partial", f"structural {parts}, no entity", parts, "source.text.structure")
    return Judgement("incorrect", f"source not identified (structural={hits}/3)", parts, "source.text.miss")


# -- conflict value -------------------------------------------------------------------------------


def _conflict_grade(parts: dict[str, bool], rule: str) -> Judgement:
    """A wrong value is incorrect; three or four parts right correct; otherwise partial."""
    right = sum(parts.values())
    match = "incorrect" if not parts["value"] else "correct" if right >= 3 else "partial"
    return Judgement(match, ", ".join(f"{k}={v}" for k, v in parts.items()), parts, rule)


def _conflict(predicted: str, gold: str, spec: dict[str, Any], parsed: dict[str, Any] | None) -> Judgement:
    cg = _conflict_gold(spec) if spec else None
    has_conflict = gold.lower().strip().startswith("yes")
    if parsed and "conflict_value_mentioned" in parsed:
        return _conflict_json(parsed, cg, has_conflict, spec)
    return _conflict_text(predicted.lower(), cg, has_conflict, spec)


def _conflict_json(
    parsed: dict[str, Any], cg: dict[str, Any] | None, has_conflict: bool, spec: dict[str, Any]
) -> Judgement:
    """protocol.py ``_score_conflict_structured``."""
    initial = _s(spec.get("canonical_initial")) if spec else ""
    mentioned = parsed.get("conflict_value_mentioned", False)
    # With a gold conflict, saying one was mentioned is enough (the value test can only add to it).
    value = bool(mentioned) if has_conflict else not parsed.get("conflict_value_mentioned", True)
    said_source = str(parsed.get("source_class", "unknown")).lower().strip()
    said_status = str(parsed.get("status_class", "unknown")).lower().strip()
    gold_applies = cg.get("applies_to_target", False) if cg else False
    said_applies = parsed.get("applies_to_target")
    applies = said_applies is not None and bool(said_applies) == bool(gold_applies)
    remains = _s(cg.get("target_remains")) if cg else initial
    current = str(parsed.get("current_value", "") or "")
    if remains and current and value_match(remains, current)[0] and not gold_applies:
        applies = True
    parts = {
        "value": value,
        "source": SOURCE_ALIASES.get(said_source, said_source) == gold_source_class(spec),
        "status": STATUS_ALIASES.get(said_status, said_status) == gold_status_class(spec),
        "applies_to_target": applies,
    }
    return _conflict_grade(parts, "conflict.json")


def _conflict_text(
    pred: str, cg: dict[str, Any] | None, has_conflict: bool, spec: dict[str, Any]
) -> Judgement:
    """protocol.py ``_score_conflict_legacy``: each part by signal words anywhere in the answer."""
    new, initial = (_s(spec.get("canonical_new")), _s(spec.get("canonical_initial"))) if spec else ("", "")
    if has_conflict:
        wanted = (_s(cg.get("conflict_value")) if cg else new).lower()
        value = bool(wanted and value_match(wanted, pred)[0]) or pred.strip().startswith("yes")
    else:
        value = _any(NO_CONFLICT, pred)
    # The published code tries the expected class's signals first, then every class's: the union decides.
    source = any(_any(words, pred) for words in SOURCE_SIGNALS.values())
    status = any(_any(words, pred) for words in STATUS_SIGNALS.values())
    expected_applies = cg.get("applies_to_target", False) if cg else False
    if not expected_applies:
        remains = (_s(cg.get("target_remains")) if cg else initial).lower()
        applies = _any(NOT_APPLYING, pred) or bool(remains and value_match(remains, pred)[0])
    else:
        applies = _any(ACCEPTING, pred)
    parts = {"value": value, "source": source, "status": status, "applies_to_target": applies}
    return _conflict_grade(parts, "conflict.text")


# -- the entry point ------------------------------------------------------------------------------


def judge(predicted: str, gold: str | None, probe_type: str, spec: dict[str, Any]) -> Judgement:
    """protocol.py ``score_answer``."""
    if not gold or gold == "None":
        return Judgement("skip", "no gold answer", {}, "skip")
    if predicted.startswith(("[ERROR:", "[error:")):
        return Judgement("execution_error", f"execution error: {predicted[:80]}", {}, "error")
    parsed = parse_reply(predicted)
    if probe_type in ("current_value", "previous_value"):
        said = parsed.get("answer", predicted) if parsed else predicted
        ok, why = value_match(gold, str(said))
        return Judgement("correct" if ok else "incorrect", why, {}, "value.json" if parsed else "value.text")
    if probe_type == "change_detection":
        return _change(predicted, gold, parsed)
    if probe_type == "temporal":
        return _temporal(predicted, gold, spec, parsed)
    if probe_type == "source":
        return _source(predicted, gold, spec, parsed)
    if probe_type == "conflict_value":
        return _conflict(predicted, gold, spec, parsed)
    return Judgement("unknown", f"unhandled probe type: {probe_type}", {}, "unknown")
