"""The ``memprobe`` answer scorer against MemProbe's published code and labels.

Every case is worked out from ``jq-ding/MemProbe`` at ``4ef09390``, ``src/eval/protocol.py``; the
function each case exercises is named in the case. ``tests/data/memprobe_published_labels.json``
holds 72 probes MemProbe published with its own label (``results/suite56/reports``), which the
port must reproduce exactly. Property tests check the port against the rule table of
``docs/scoring.md`` on generated answers.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from memtap.probes.readers import parse_reply as reader_parse
from memtap.probes.schema import Episode
from memtap.scoring.scorers import make_scorer, raw_reply
from memtap.scoring.scorers.memprobe import latent_spec
from memtap.scoring.scorers.memprobe_rules import (
    CHANGE_WORDS_LEGACY,
    DENIAL,
    NOT_CHANGED,
    judge,
)
from memtap.scoring.scorers.memprobe_text import extract_number, parse_reply, value_match

PUBLISHED = json.loads((Path(__file__).parent / "data" / "memprobe_published_labels.json").read_text())

UPDATE = {"condition": "authoritative_update", "canonical_initial": "FitLife", "canonical_new": "CrossFit Central",
          "gold": {}}  # fmt: skip
DECOY = {
    "condition": "decoy_no_update", "canonical_initial": "FitLife", "canonical_new": "CrossFit Central",
    "gold": {"conflict_gold": {"conflict_value": "CrossFit Central", "source": "third_party",
                               "status": "different_entity", "applies_to_target": False, "target_remains": "FitLife"}},
}  # fmt: skip
RETRIES = {
    "condition": "direct", "canonical_initial": "3 retries", "canonical_new": "5 retries",
    "gold": {"temporal_gold": {"old_value": "3 retries", "new_value": "5 retries",
                               "trigger": "upstream service timeout issues",
                               "reason": "needed more retry headroom for flaky upstream"}},
}  # fmt: skip
YES = 'Yes \u2014 "CrossFit Central" was mentioned, but from an invalid source. The user\'s gym remains "FitLife".'
SOURCE_GOLD = "CrossFit Central was mentioned by a third party (Jamie) as their gym."


def test_every_published_label_is_reproduced() -> None:
    agree: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for case in PUBLISHED["probes"]:
        # the prediction as memtap's LLM reader stores it: parsed, with the reply kept as written
        stored = {**reader_parse(case["predicted"]), "raw_reply": case["predicted"]}
        found = judge(raw_reply(stored), case["gold"], case["type"], PUBLISHED["specs"][case["episode"]])
        total[case["type"]] += 1
        agree[case["type"]] += found.match == case["match"]
        assert found.match == case["match"], (case["episode"], case["type"], case["system"], found.reason)
    assert sum(total.values()) == 72 and agree == total
    assert Counter(c["match"] for c in PUBLISHED["probes"]) == {"correct": 56, "incorrect": 8, "partial": 8}


# (function in protocol.py, predicted, gold, probe type, spec, expected label)
# fmt: off
RULES: list[tuple[str, str, str | None, str, dict[str, Any], str]] = [
    # score_answer: no gold, the string "None", an error marker, a type it does not handle
    ("score_answer", "CrossFit Central", None, "current_value", UPDATE, "skip"),
    ("score_answer", "CrossFit Central", "None", "current_value", UPDATE, "skip"),
    ("score_answer", "[ERROR: Timeout]", "CrossFit Central", "current_value", UPDATE, "execution_error"),
    ("score_answer", "anything", "gold", "qa", UPDATE, "unknown"),
    # _value_match: a plain substring, so "weekly" is inside "bi-weekly" (strict refuses this)
    ("_value_match", "We moved to bi-weekly deploys", "weekly", "current_value", {}, "correct"),
    ("_value_match", '{"answer": "crossfit central", "reason": "x"}', "CrossFit Central", "current_value", {}, "correct"),
    ("_value_match", '{"answer": "FitLife"}', "CrossFit Central", "current_value", {}, "incorrect"),
    # JSON without "answer": the whole reply is searched
    ("_value_match", '{"value": "CrossFit Central"}', "CrossFit Central", "current_value", {}, "correct"),
    # _normalize_value: "the X is" and trailing punctuation dropped from the gold
    ("_value_match", "It's CrossFit Central now", "The gym is CrossFit Central.", "current_value", {}, "correct"),
    # _extract_number: a number word is read only as the first word
    ("_value_match", "five", "5 retries", "current_value", {}, "correct"),
    ("_value_match", "it is five now", "5 retries", "current_value", {}, "incorrect"),
    ("_value_match", "They now retry 5 times", "5 retries", "current_value", {}, "correct"),
    # reverse numeric match: a bare number inside the gold
    ("_value_match", "15", "April 15", "current_value", {}, "correct"),
    # change detection, structured: bool() of the field, so the string "false" counts as a change
    ("score_answer", '{"changed": "false"}', "Yes \u2014 changed", "change_detection", {}, "correct"),
    ("score_answer", '{"changed": false}', "No \u2014 it remains", "change_detection", {}, "correct"),
    # _score_change_detection_legacy: "yes" in the first 30 characters and no "no" in the first 15
    ("_score_change_detection_legacy", "Yes, it changed.", "Yes \u2014 changed", "change_detection", {}, "correct"),
    ("_score_change_detection_legacy", "Not sure; yes", "Yes \u2014 changed", "change_detection", {}, "incorrect"),
    ("_score_change_detection_legacy", "It has not changed", "Yes \u2014 changed", "change_detection", {}, "incorrect"),
    # ... and for a "no" gold anything that does not affirm is right, even silence
    ("_score_change_detection_legacy", "Tell me more.", "No \u2014 it remains", "change_detection", {}, "correct"),
    ("_score_change_detection_legacy", "They switched gyms.", "No \u2014 it remains", "change_detection", {},
     "correct"),
    # _score_temporal_legacy: no structured gold: the agent named in the gold, and a change word
    ("_score_temporal_legacy", "The user changed from FitLife to CrossFit Central",
     "user explicitly stated the switch", "temporal", UPDATE, "correct"),
    ("_score_temporal_legacy", "Their gym is different now", "user explicitly stated the switch",
     "temporal", UPDATE, "partial"),
    ("_score_temporal_legacy", "It increased to 5", "assistant noise", "temporal", UPDATE, "incorrect"),
    ("_score_temporal_legacy", "a new gym", "because of crowding", "temporal", UPDATE, "correct"),
    ("_score_temporal_legacy", "a friend moved it", "third party said so", "temporal", UPDATE, "correct"),
    # _score_temporal_structured: free text against temporal_gold: direction and 40% of the trigger
    ("_score_temporal_structured", "It went to 5 retries after upstream timeout issues", "Changed",
     "temporal", RETRIES, "correct"),
    ("_score_temporal_structured", "It went to 5 retries", "Changed", "temporal", RETRIES, "partial"),
    ("_score_temporal_structured", "Because of service timeout trouble", "Changed", "temporal", RETRIES,
     "partial"),
    ("_score_temporal_structured", "Still 3", "Changed", "temporal", RETRIES, "incorrect"),
    # _score_temporal_from_json: direction from new_value or changed: true; 30% of the trigger words
    ("_score_temporal_from_json", '{"changed": true, "trigger": "timeout issues"}', "Changed", "temporal",
     RETRIES, "correct"),
    # ... where "five retries" is read as 5 (the leading number word) and so matches "5 retries"
    ("_score_temporal_from_json", '{"new_value": "five retries", "trigger": "load"}', "Changed", "temporal",
     RETRIES, "partial"),
    ("_score_temporal_from_json", '{"new_value": "six retries", "trigger": "load"}', "Changed", "temporal",
     RETRIES, "incorrect"),
    ("_score_temporal_from_json", '{"new_value": "5 retries", "trigger": null}', "Changed", "temporal",
     RETRIES, "partial"),
    # _score_source (structured): class match; else accepted right and a class named: partial
    ("_score_source", '{"source_class": "third-party"}', SOURCE_GOLD, "source", DECOY, "correct"),
    ("_score_source", '{"source_class": "user", "accepted": false}', SOURCE_GOLD, "source", DECOY, "partial"),
    ("_score_source", '{"source_class": "unknown", "accepted": false}', SOURCE_GOLD, "source", DECOY, "incorrect"),
    ("_score_source", '{"source_class": "user", "accepted": true}', SOURCE_GOLD, "source", DECOY, "incorrect"),
    ("_get_gold_source_class", '{"source_class": "user"}', "user explicitly stated the switch", "source",
     UPDATE, "correct"),
    # _score_source_legacy: the gold inside the answer; the gold's concepts by synonyms
    ("_score_source_legacy", "I think " + SOURCE_GOLD.lower(), SOURCE_GOLD, "source", DECOY, "correct"),
    ("_score_source_legacy", "The user said so directly.", "user explicitly stated the switch", "source",
     UPDATE, "correct"),
    ("_score_source_legacy", "The user said so.", "user explicitly stated after reactivating the old memory",
     "source", UPDATE, "partial"),
    ("_score_source_legacy", "The user said so about FitLife.",
     "user explicitly stated after reactivating the old memory", "source", UPDATE, "correct"),
    # ... else structure (agent, action, verdict): a speaker, article or blog is none of them
    ("_score_source_legacy", "A speaker mentioned it; the user did not switch to CrossFit Central.",
     SOURCE_GOLD, "source", DECOY, "correct"),
    ("_score_source_legacy", "A blog post mentioned it.", SOURCE_GOLD, "source", DECOY, "incorrect"),
    ("_score_source_legacy", "Jamie mentioned it; the user did not switch.", SOURCE_GOLD, "source", DECOY,
     "partial"),
    # _score_conflict_structured: mentioned is enough for the value; statuses folded; "unknown" equals
    # an unknown gold status
    ("_score_conflict_structured", '{"conflict_value_mentioned": true, "source_class": "third_party", '
     '"status_class": "different_entity", "applies_to_target": false}', YES, "conflict_value", DECOY,
     "correct"),
    ("_score_conflict_structured", '{"conflict_value_mentioned": true, "conflict_value": "Planet Fitness"}',
     YES, "conflict_value", DECOY, "partial"),
    ("_score_conflict_structured", '{"conflict_value_mentioned": false, "source_class": "third_party", '
     '"status_class": "other_entity", "applies_to_target": false}', YES, "conflict_value", DECOY,
     "incorrect"),
    ("_score_conflict_structured", '{"conflict_value_mentioned": true, "source_class": "third_party", '
     '"applies_to_target": true}', YES, "conflict_value", DECOY, "partial"),
    ("_score_conflict_structured", '{"conflict_value_mentioned": true, "source_class": "third_party", '
     '"applies_to_target": true}', YES, "conflict_value",
     {**DECOY, "gold": {"conflict_gold": {**DECOY["gold"]["conflict_gold"], "status": "hypothetical"}}},
     "correct"),
    # ... and a current value equal to the target's makes applicability right whatever applies_to_target says
    ("_score_conflict_structured", '{"conflict_value_mentioned": true, "source_class": "third_party", '
     '"applies_to_target": true, "current_value": "FitLife"}', YES, "conflict_value", DECOY, "correct"),
    ("_score_conflict_structured", '{"conflict_value_mentioned": false}', "No \u2014 nothing else", "conflict_value",
     UPDATE, "partial"),
    # _score_conflict_legacy: "Yes" opens the value; any source or status signal word of any class
    ("_score_conflict_legacy", "Yes, a friend suggested it but it was not adopted; still FitLife.", YES,
     "conflict_value", DECOY, "correct"),
    ("_score_conflict_legacy", "Yes.", YES, "conflict_value", DECOY, "partial"),
    ("_score_conflict_legacy", "Nothing was said about that.", YES, "conflict_value", DECOY, "incorrect"),
    ("_score_conflict_legacy", "A speaker at a talk suggested it once.", YES, "conflict_value", DECOY, "incorrect"),
    ("_score_conflict_legacy", "No, nothing else came up.", "No \u2014 nothing", "conflict_value", UPDATE, "partial"),
]
# fmt: on


@pytest.mark.parametrize(("function", "predicted", "gold", "kind", "spec", "label"), RULES)
def test_rule_case_gets_memprobes_label(
    function: str, predicted: str, gold: str | None, kind: str, spec: dict[str, Any], label: str
) -> None:
    found = judge(predicted, gold, kind, spec)
    assert found.match == label, f"{function}: {found.reason}"


def test_parse_reply_repairs_what_memprobe_repairs() -> None:
    """protocol.py _parse_json_response: fences, the first-to-last brace span, cut-off replies
    closed with one of its endings or at their last comma, and nothing from an error marker."""
    assert parse_reply('```json\n{"answer": "x"}\n```') == {"answer": "x"}
    assert parse_reply('Sure: {"answer": "x"} hope that helps') == {"answer": "x"}
    assert parse_reply('{"answer": "CrossFit Cen') == {"answer": "CrossFit Cen"}
    assert parse_reply('{"changed": true, "current_value": ') == {"changed": True, "current_value": None}
    assert parse_reply('{"a": 1, "b": tru') == {"a": 1}
    assert parse_reply('{"a": 1, "b": [1, 2') is None
    assert parse_reply("[ERROR: RateLimit]") is None and parse_reply("no braces") is None


def test_number_reading_follows_extract_number() -> None:
    assert [extract_number(s) for s in ("3 retries", "9.5%", "twelve monkeys", "thirteen", "3rd", "")] == [
        "3", "9.5", "12", None, None, None,
    ]  # fmt: skip
    assert value_match("3 retries", "They now allow 3.")[0] and not value_match("weekly", "daily")[0]


def test_latent_spec_is_read_from_an_imported_episode_and_rebuilt_for_older_suites() -> None:
    episode = Episode.model_validate(
        {
            "format": "memtap-suite/1", "episode_id": "e", "paradigm": "interference", "condition": "decoy_no_update",
            "namespace": "u", "participants": [{"id": "u", "role": "user"}],
            "sessions": [{"session_id": "s0", "time": "2026-01-01T00:00:00Z", "turns": [
                {"turn_id": "t0", "role": "user", "speaker": "u", "content": "hi", "time": "2026-01-01T00:00:00Z"}]}],
            "probes": [{"probe_id": "p0", "type": "conflict_value", "question": "q", "time": "2026-01-02T00:00:00Z",
                        "gold": {"answer": YES, "fields": {"conflict": {
                            "value": "CrossFit Central", "source": "third_party", "status": "different_entity",
                            "applies_to_target": False}}}}],
            "metadata": {"source": "memprobe", "memprobe": {"canonical_initial": "FitLife",
                                                           "canonical_new": "CrossFit Central"}},
        }
    )  # fmt: skip
    spec = latent_spec(episode, episode.probes[0])
    assert spec["gold"]["conflict_gold"] == DECOY["gold"]["conflict_gold"]
    assert spec["condition"] == "decoy_no_update"
    verdict = make_scorer("memprobe").score(
        episode, episode.probes[0], {"reply": "Yes, but a friend's gym, still FitLife."}
    )
    assert verdict.outcome == "correct" and verdict.parts["value"]


# -- property tests: the port against the rule table of docs/scoring.md ------------------------------

WORDS = ("yes", "no", "changed", "not changed", "remains", "switched", "the", "gym", "user", "unchanged", "did not change",
         "maybe", "new", "FitLife", "now", ",", "didn't change", "it", "moved", "still")  # fmt: skip


def _texts(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 8))) for _ in range(n)]


def _table_change(text: str, gold_yes: bool) -> bool:
    """docs/scoring.md, memprobe, change detection without a ``changed`` field."""
    low = text.lower().strip()
    affirms = ("yes" in low[:30] and "no" not in low[:15]) or (
        "changed" in low and not any(n in low for n in NOT_CHANGED)
    )
    denies = any(d in low for d in DENIAL)
    return affirms if gold_yes else denies or not affirms


def test_change_detection_agrees_with_the_rule_table_on_generated_answers() -> None:
    for text in _texts(20261201, 400):
        for gold in ("Yes \u2014 changed", "No \u2014 it remains"):
            expected = _table_change(text, gold.startswith("Yes"))
            assert (judge(text, gold, "change_detection", {}).match == "correct") == expected, text


def test_legacy_temporal_agrees_with_the_rule_table_on_generated_answers() -> None:
    for text in _texts(7, 400):
        low = text.lower()
        agent = any(w in low for w in ("user", "they", "the person", "their"))
        change = any(w in low for w in CHANGE_WORDS_LEGACY)
        expected = "correct" if agent and change else "partial" if agent or change else "incorrect"
        assert judge(text, "user explicitly stated the switch", "temporal", UPDATE).match == expected, text


def test_a_wrong_conflict_value_is_never_better_than_incorrect_and_three_parts_are_correct() -> None:
    rng = random.Random(3)
    for _ in range(300):
        fields = {
            "conflict_value_mentioned": rng.choice([True, False]),
            "source_class": rng.choice(["third_party", "assistant", "unknown"]),
            "status_class": rng.choice(["other_entity", "different_entity", "not_accepted", "unknown"]),
            "applies_to_target": rng.choice([True, False, None]),
        }
        found = judge(json.dumps(fields), YES, "conflict_value", DECOY)
        parts = found.parts
        right = sum(parts.values())
        expected = "incorrect" if not parts["value"] else "correct" if right >= 3 else "partial"
        assert found.match == expected and parts["value"] == fields["conflict_value_mentioned"]
        assert parts["source"] == (fields["source_class"] == "third_party")
        assert parts["status"] == (fields["status_class"] in ("other_entity", "different_entity"))


def test_a_value_inside_the_answer_is_always_found() -> None:
    rng = random.Random(11)
    for _ in range(300):
        gold = rng.choice(["weekly", "CrossFit Central", "5 retries", "April 15", "9:30 am"])
        text = f"{' '.join(rng.choice(WORDS) for _ in range(3))} {gold.upper()} {rng.choice(WORDS)}"
        assert judge(text, gold, "current_value", {}).match == "correct"
