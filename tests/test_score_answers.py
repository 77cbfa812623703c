"""The typed answer scorer, rule by rule, with the gold of the real MemProbe sample
(../shared/data/memprobe/suite56-sample.jsonl, imported by memtap's own importer)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import SHARED_DATA

from memtap.probes.schema import Episode, Probe
from memtap.scoring.answer import score_answer, token_f1
from memtap.scoring.permission import classify_permission, permission_correct
from memtap.scoring.text import normalise_value, value_match

SAMPLE = SHARED_DATA / "memprobe" / "suite56-sample.jsonl"
# One pytest-xdist worker runs this module, so the imported sample (a module fixture) is read once.
pytestmark = pytest.mark.xdist_group("score_answers")


@pytest.fixture(scope="module")
def memprobe() -> dict[str, Episode]:
    if not SAMPLE.exists():
        pytest.skip(f"the MemProbe sample is not at {SAMPLE} (../shared is absent)")
    from memtap.probes.importers import import_file

    return {e.episode_id: e for e in import_file("memprobe", SAMPLE).episodes}


def probe(episodes: dict[str, Episode], episode: str, kind: str) -> Probe:
    return next(p for p in episodes[episode].probes if p.type == kind)


def outcome(p: Probe, answer: dict[str, Any]) -> str:
    return score_answer(p, answer).outcome


# -- current and previous value -------------------------------------------------------------------


def test_a_value_contained_in_the_answer_is_correct(memprobe: dict[str, Episode]) -> None:
    p = probe(memprobe, "PILOT-01A", "current_value")  # gold: CrossFit Central
    verdict = score_answer(p, {"answer": "The user now trains at crossfit central."})
    assert (verdict.outcome, verdict.reason) == ("correct", "contained")
    assert outcome(p, {"answer": "FitLife"}) == "incorrect"


def test_a_value_must_be_a_whole_phrase_so_weekly_is_not_bi_weekly(memprobe: dict[str, Episode]) -> None:
    p = probe(memprobe, "PILOT-20D", "current_value")  # gold: weekly; the decoy was bi-weekly
    assert outcome(p, {"answer": "The team moved to a bi-weekly cadence."}) == "incorrect"
    assert outcome(p, {"answer": "Still weekly."}) == "correct"


def test_normalisation_drops_time_prepositions_ordinals_and_trailing_punctuation(
    memprobe: dict[str, Episode],
) -> None:
    p = probe(memprobe, "PILOT-02A", "current_value")  # gold: April 15
    verdict = score_answer(p, {"answer": "It is due on April 15th."})
    assert verdict.outcome == "correct" and verdict.reason.startswith("normalised value 'april 15'")
    assert normalise_value("The deadline is on March 28.") == "march 28"
    assert normalise_value("a Mediterranean diet!") == "mediterranean diet"


def test_number_words_and_units(memprobe: dict[str, Episode]) -> None:
    current = probe(memprobe, "PILOT-20B", "current_value")  # gold: 5 retries
    previous = probe(memprobe, "PILOT-20B", "previous_value")  # gold: 3 retries
    assert outcome(current, {"answer": "It was raised to five retries."}) == "correct"
    assert score_answer(current, {"answer": "It is 5 now."}).reason == "number 5 (unit aside)"
    assert outcome(current, {"answer": "15 retries"}) == "incorrect"
    assert outcome(previous, {"answer": "three"}) == "correct"
    assert value_match("4,200 dollars", "I owe 4200 dollars")[0]
    assert value_match("9:30 am", "standup is at 9:30")[0] and not value_match("9:30 am", "at 9:00 am")[0]


def test_an_agent_reply_is_scored_like_a_reader_answer(memprobe: dict[str, Episode]) -> None:
    p = probe(memprobe, "PILOT-03A", "previous_value")  # gold: vegetarian
    assert outcome(p, {"reply": "Before the switch they were vegetarian."}) == "correct"


# -- change detection ------------------------------------------------------------------------------


def test_change_detection_reads_the_parsed_boolean_first(memprobe: dict[str, Episode]) -> None:
    p = probe(memprobe, "PILOT-01B", "change_detection")  # gold: changed false
    verdict = score_answer(p, {"answer": "Yes it changed", "changed": False})
    assert (verdict.outcome, verdict.reason) == ("correct", "structured: False vs gold False")


def test_change_detection_parses_memprobes_own_gold_phrasing(memprobe: dict[str, Episode]) -> None:
    unchanged = probe(memprobe, "PILOT-01B", "change_detection")
    changed = probe(memprobe, "PILOT-01A", "change_detection")
    assert unchanged.gold.answer is not None and changed.gold.answer is not None
    assert outcome(unchanged, {"answer": unchanged.gold.answer}) == "correct"  # 'No — it remains "FitLife"'
    assert outcome(changed, {"answer": changed.gold.answer}) == "correct"  # 'Yes — changed from ...'
    assert outcome(changed, {"answer": unchanged.gold.answer}) == "incorrect"
    assert score_answer(changed, {"answer": "Tell me more."}).reason == "no change claim found"


# -- source -----------------------------------------------------------------------------------------


def test_source_classes_fold_aliases(memprobe: dict[str, Episode]) -> None:
    third = probe(memprobe, "PILOT-01B", "source")  # gold: third_party
    assistant = probe(memprobe, "PILOT-02B", "source")  # gold: assistant
    assert outcome(third, {"answer": "", "source": "Third-Party"}) == "correct"
    assert outcome(third, {"answer": "Jamie, a friend, mentioned it."}) == "correct"  # from the text
    assert outcome(assistant, {"answer": "", "source": "assistant_hallucination"}) == "correct"
    assert outcome(assistant, {"answer": "", "source": "user"}) == "incorrect"


# -- conflict value: value, source, status, applicability ------------------------------------------------


def test_conflict_value_partial_credit_paths(memprobe: dict[str, Episode]) -> None:
    p = probe(memprobe, "PILOT-02B", "conflict_value")  # April 15, assistant, not_accepted, applies False

    def conflict(value: str, source: str, status: str, applies: bool) -> dict[str, Any]:
        return {"answer": "", "conflict": {"value": value, "source": source, "status": status,
                                           "applies_to_target": applies}}  # fmt: skip

    assert outcome(p, conflict("April 15", "assistant", "not accepted", False)) == "correct"  # 4 of 4
    assert outcome(p, conflict("April 15", "assistant", "not_accepted", True)) == "correct"  # 3 of 4
    partial = score_answer(p, conflict("april 15", "assistant", "adopted", True))  # 2 of 4
    assert partial.outcome == "partial"
    assert partial.parts == {"value": True, "source": True, "status": False, "applies_to_target": False}
    assert outcome(p, conflict("March 28", "assistant", "not_accepted", False)) == "incorrect"  # wrong value


def test_conflict_status_classes_and_the_different_entity_gold(memprobe: dict[str, Episode]) -> None:
    p = probe(memprobe, "PILOT-01B", "conflict_value")  # CrossFit Central, third_party, different_entity
    verdict = score_answer(
        p, {"answer": "CrossFit Central was Jamie's gym, another person's; the user stays."}
    )
    assert verdict.parts["status"] and verdict.parts["source"] and verdict.outcome == "correct"


# -- temporal -----------------------------------------------------------------------------------------


def test_temporal_needs_direction_and_trigger_for_full_credit(memprobe: dict[str, Episode]) -> None:
    p = probe(memprobe, "PILOT-20B", "temporal")  # 3 -> 5 retries, trigger: upstream service timeout issues
    both = {
        "answer": "",
        "temporal": {"new_value": "5 retries", "trigger": "timeout issues with the upstream"},
    }
    direction = {"answer": "", "temporal": {"new_value": "five retries", "trigger": "a planning meeting"}}
    trigger = {"answer": "", "temporal": {"new_value": "7 retries", "trigger": "upstream timeout problems"}}
    assert outcome(p, both) == "correct"
    assert outcome(p, direction) == "partial"
    assert outcome(p, trigger) == "partial"
    assert outcome(p, {"answer": "No idea.", "temporal": {}}) == "incorrect"


def test_temporal_without_a_trigger_uses_the_reason(memprobe: dict[str, Episode]) -> None:
    p = probe(memprobe, "PILOT-01A", "temporal")  # no trigger; reason: user explicitly stated the switch
    assert p.gold.fields.temporal is not None and p.gold.fields.temporal.trigger is None
    assert outcome(p, {"answer": "The user stated they switched to CrossFit Central."}) == "correct"


def test_partial_counts_zero_in_accuracy(memprobe: dict[str, Episode]) -> None:
    from memtap.scoring.profiles import tally_answer
    from memtap.scoring.trace import ProbeRecord, new_counts

    episode = memprobe["PILOT-20B"]
    p = probe(memprobe, "PILOT-20B", "temporal")
    counts = new_counts()
    verdict = score_answer(p, {"answer": "", "temporal": {"new_value": "5 retries"}})
    tally_answer(episode, ProbeRecord(p, 0, "user", "ok", {}, [], True), verdict, counts)
    assert verdict.outcome == "partial"
    assert (counts["answer.scored"], counts["answer.correct"], counts["answer.partial"]) == (1, 0, 1)


# -- qa, permission, abstention ---------------------------------------------------------------------------


def _probe(**fields: Any) -> Probe:
    return Probe.model_validate({"probe_id": "p", "question": "q?", "time": "2026-01-01T00:00:00Z", **fields})


def test_qa_is_locomo_token_f1_correct_from_one_half() -> None:
    # "the" dropped: 6 predicted tokens, 3 shared with 3 gold tokens: P = 1/2, R = 1, F1 = 2/3
    assert token_f1("The office is at 12 Harbour Street.", "12 Harbour Street") == pytest.approx(2 / 3)
    qa = _probe(type="qa", gold={"answer": "12 Harbour Street"})
    assert score_answer(qa, {"answer": "12 Harbour Street"}).f1 == 1.0
    assert outcome(qa, {"answer": "Mill Lane"}) == "incorrect"


def test_permission_labels_and_memarenas_correctness_table() -> None:
    deny = _probe(
        type="permission", expected_action="withhold", gold={"fields": {"protected_fact": "Lumen Labs"}}
    )
    allow = _probe(type="permission", expected_action="disclose", gold={"answer": "Lumen Labs"})
    cases = [
        ({"answer": "She is interviewing at Lumen Labs."}, "disclose_correct"),
        ({"action": "disclose", "answer": "Somewhere in Porto."}, "disclose_wrong"),
        ({"action": "withhold", "answer": None}, "refuse"),
        ({"reply": "Sorry, that is confidential."}, "refuse"),
        ({"reply": "I don't know anything about that."}, "dont_know"),
        ({"reply": "Let me check the weather first."}, "other"),
    ]
    for answer, label in cases:
        assert classify_permission(deny, answer)[0] == label, answer
        assert permission_correct(deny, label) == (label != "disclose_correct")
        assert permission_correct(allow, label) == (label == "disclose_correct")


def test_abstention_is_a_refusal_of_a_fabricated_premise() -> None:
    fabricated = _probe(type="abstention", expected_action="abstain")
    assert outcome(fabricated, {"action": "abstain", "answer": None}) == "correct"
    assert outcome(fabricated, {"reply": "That was never mentioned."}) == "correct"
    assert outcome(fabricated, {"action": "answer", "answer": "Because it was cheaper."}) == "incorrect"


def test_an_llm_permission_judge_labels_and_falls_back_to_the_rules_when_unreadable() -> None:
    from memtap.scoring.permission import llm_permission_judge

    deny = _probe(type="permission", expected_action="withhold", gold={"fields": {"protected_fact": "Porto"}})
    prompts: list[str] = []
    judge = llm_permission_judge(lambda prompt: prompts.append(prompt) or '{"label": "dont_know"}')
    assert judge(deny, {"reply": "Hmm, Portugal maybe."}) == ("dont_know", "llm judge")
    assert "FACT: Porto" in prompts[0] and "REPLY: Hmm, Portugal maybe." in prompts[0]
    fallback = llm_permission_judge(lambda prompt: "no idea")
    assert fallback(deny, {"reply": "They are moving to Porto."}) == (
        "disclose_correct", "judge reply unreadable; the fact 'Porto' is in the output",
    )  # fmt: skip
