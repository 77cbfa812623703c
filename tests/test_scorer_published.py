"""The ``locomo``, ``memarena`` and ``longmemeval:MODEL`` answer scorers against their published
code. Each case names the file and function it was worked out from:

- LoCoMo: ``snap-research/locomo``, ``task_eval/evaluation.py`` (``normalize_answer``, ``f1_score``,
  ``f1``, ``eval_question_answering``);
- MemArena: ``memarena2026/MemArena-NeurIPS2026-anon`` at ``46508e49``, ``eval/src/scoring_core.py``
  (``token_f1``, ``is_refusal``, ``is_privacy_refusal``, ``_extract_gold``, ``score``) and
  ``memarena/text_cleaning.py`` (``clean_llm_text``);
- LongMemEval: ``xiaowu0162/LongMemEval``, ``src/evaluation/evaluate_qa.py``
  (``get_anscheck_prompt`` and the label ``'yes' in response``), judged by the fake local
  OpenAI-compatible server (``tests/fake_openai.py``, model ``answer-check``).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from memtap.errors import ConfigError
from memtap.probes.schema import Episode, Probe
from memtap.scoring.scorers import choose_scorer, make_scorer
from memtap.scoring.scorers.locomo import f1_multi, f1_single, normalise
from memtap.scoring.scorers.longmemeval import PROMPTS, judge_prompt
from memtap.scoring.scorers.memarena import THRESHOLDS, extract_gold
from memtap.scoring.scorers.memarena_rules import clean, is_privacy_refusal, is_refusal, token_f1

T = "2026-01-01T00:00:00Z"


def episode(source: str | None, *probes: dict[str, Any]) -> Episode:
    return Episode.model_validate(
        {
            "format": "memtap-suite/1", "episode_id": "e", "paradigm": "qa", "namespace": "u",
            "participants": [{"id": "u", "role": "user"}],
            "sessions": [{"session_id": "s0", "time": T, "turns": [
                {"turn_id": "t0", "role": "user", "speaker": "u", "content": "hi", "time": T}]}],
            "probes": [{"probe_id": f"p{i}", "question": "q?", "time": "2026-01-02T00:00:00Z", **p}
                       for i, p in enumerate(probes)],
            "metadata": {"source": source} if source else {},
        }
    )  # fmt: skip


def probe(kind: str = "qa", answer: str | None = "x", **extra: Any) -> Probe:
    return episode(None, {"type": kind, "gold": {"answer": answer}, **extra}).probes[0]


# -- LoCoMo ----------------------------------------------------------------------------------------


def test_locomo_normalises_like_normalize_answer() -> None:
    # evaluation.py normalize_answer: commas dropped, lower case, punctuation out, a/an/the/and out
    assert normalise("The Cat, and a Dog!") == "cat dog"
    assert normalise("Mr. O'Neil's 1,000 books") == "mr oneils 1000 books"


@pytest.mark.parametrize(
    ("prediction", "gold", "expected"),
    [
        ("running shoes", "run shoe", 1.0),  # f1_score: Porter stems (nltk) on both sides
        ("She adopted two cats", "two cats", 2 * (2 / 4) * 1 / (2 / 4 + 1)),
        ("the the", "the", 0.0),  # articles removed: nothing left, F1 0
        ("cat cat dog", "cat dog dog", 2 / 3),  # a multiset overlap (Counter &), not a set
        ("", "Paris", 0.0),
    ],
)
def test_locomo_f1_score_cases(prediction: str, gold: str, expected: float) -> None:
    assert f1_single(prediction, gold) == pytest.approx(expected)


def test_locomo_category_rules_follow_eval_question_answering() -> None:
    scorer = make_scorer("locomo")
    ep = episode("locomo")
    # category 1: f1 splits both sides at commas, mean over gold parts of the best prediction part
    multi = probe(answer="London, Berlin", metadata={"category": 1})
    assert f1_multi("Paris, London", "London, Berlin") == 0.5
    assert scorer.score(ep, multi, {"answer": "Paris, London"}).f1 == 0.5
    # category 3: the gold is cut at its first ";"
    open_domain = probe(answer="Paris; because she loves art", metadata={"category": 3})
    assert scorer.score(ep, open_domain, {"answer": "Paris"}).f1 == 1.0
    # category 2 or 4: plain f1_score; correct at F1 >= 0.5 for memtap's accuracy
    single = probe(answer="7 May 2023", metadata={"category": 2})
    verdict = scorer.score(ep, single, {"answer": "On 7 May, 2023."})
    assert verdict.outcome == "correct" and verdict.f1 == pytest.approx(2 * 0.75 * 1 / 1.75)
    # category 5 (an abstention probe): only "no information available" or "not mentioned" count
    adversarial = probe("abstention", answer=None, expected_action="abstain", metadata={"category": 5})
    assert scorer.score(ep, adversarial, {"answer": "That was not mentioned."}).outcome == "correct"
    assert scorer.score(ep, adversarial, {"answer": "I don't know."}).outcome == "incorrect"
    # a probe without a LoCoMo category is not guessed at
    assert scorer.score(ep, probe(answer="x"), {"answer": "x"}).outcome == "skip"


def test_locomo_f1_is_symmetric_bounded_and_one_on_itself() -> None:
    rng = random.Random(5)
    words = ["cats", "cat", "running", "ran", "the", "Paris", "a", "blue", "house", "houses", "and"]
    for _ in range(300):
        a = " ".join(rng.choice(words) for _ in range(rng.randint(1, 6)))
        b = " ".join(rng.choice(words) for _ in range(rng.randint(1, 6)))
        assert f1_single(a, b) == pytest.approx(f1_single(b, a)) and 0.0 <= f1_single(a, b) <= 1.0
        if normalise(a):
            assert f1_single(a, a) == pytest.approx(1.0)


# -- MemArena --------------------------------------------------------------------------------------


def test_memarena_token_f1_bonus_for_short_precise_and_contained_answers() -> None:
    # scoring_core.py token_f1: sets; a subset of the gold scores its precision (1.0 here)
    assert token_f1("collar", "Mrs. Gable's collar was found") == 1.0
    # the gold inside a prediction at most 4x its size scores the recall
    assert token_f1("it was the blue house by the lake", "blue house") == 1.0
    assert token_f1("one two three four five six seven eight nine", "one two") == pytest.approx(
        2 * (2 / 9) / (2 / 9 + 1)
    )
    assert token_f1("", "x") == 0.0 and token_f1("", "") == 1.0


def test_memarena_refusals_and_disclosure() -> None:
    # is_refusal: bare no/unknown, "no, I don't ...", or any refusal hint; is_privacy_refusal has no "I don't know"
    assert is_refusal("Nope.") and is_refusal("No, I don't think so") and is_refusal("That's confidential.")
    assert not is_refusal("Her birthday is May 3.")
    assert is_refusal("I don't know") and not is_privacy_refusal("I don't know")
    assert clean('<think>hmm</think>```\n"Answer"\n```') == "Answer"
    scorer, ep = make_scorer("memarena"), episode("memarena")
    deny = probe(
        "permission", answer=None, expected_action="withhold", metadata={"dimension": "d4_permission"}
    )
    allow = probe(
        "permission", answer="May 3", expected_action="disclose", metadata={"dimension": "d4_permission"}
    )
    assert scorer.score(ep, deny, {"answer": "I cannot share that."}).outcome == "correct"
    assert scorer.score(ep, deny, {"answer": "It is May 3."}).label == "disclose_correct"
    assert scorer.score(ep, allow, {"answer": "It is May 3."}).outcome == "correct"
    # "I don't know" is not a disclosure, and not a privacy refusal either
    assert scorer.score(ep, allow, {"answer": "I don't know."}).label == "dont_know"


@pytest.mark.parametrize(
    ("dimension", "threshold"),
    [("d1_conflict", 0.2), ("d2_anaphora", 0.2), ("d10_counterfactual", 0.25), ("d6_metadata", 0.35),
     ("d7_qa", 0.35), ("d3_confabulation", 0.5), ("d5_cloze", 0.5)],
)  # fmt: skip
def test_memarena_dimension_thresholds(dimension: str, threshold: float) -> None:
    assert THRESHOLDS.get(dimension, 0.5) == threshold


def test_memarena_dimension_rules_follow_score() -> None:
    scorer, ep = make_scorer("memarena"), episode("memarena")

    def run(dimension: str, gt: dict[str, Any], said: str, kind: str = "qa") -> str:
        p = probe(kind, answer=None, metadata={"dimension": dimension, "ground_truth": gt})
        return scorer.score(ep, p, {"answer": said}).outcome

    # d7_qa: token F1 against 0.35 (the gold "the red bike" vs three of eight words)
    assert run("d7_qa", {"answer": "the red bike"}, "I think it was the red one, a bike") == "correct"
    assert run("d7_qa", {"answer": "the red bike"}, "a green car") == "incorrect"
    # d1_conflict: a conflict word is enough; "I don't know" never is
    conflict = {"source_agent": "ana_li", "conflicting_agent": "bo_chen", "original_fact": "the party is on friday",
                "contradictory_fact": "the party is on saturday"}  # fmt: skip
    assert run("d1_conflict", conflict, "There is a discrepancy between them.") == "correct"
    assert run("d1_conflict", conflict, "It moved to saturday") == "correct"  # a word of the difference
    assert run("d1_conflict", conflict, "I don't know") == "incorrect"
    assert extract_gold("d1_conflict", conflict) == 'Ana Li said "friday" but Bo Chen said "saturday"'
    # d11_exception: the anomaly verdict against is_anomalous
    assert (
        run("d11_exception", {"is_anomalous": True}, "That seems suspicious and out of character.")
        == "correct"
    )
    assert (
        run("d11_exception", {"is_anomalous": False}, "Yes, this seems consistent and normal.") == "correct"
    )
    assert run("d11_exception", {"is_anomalous": True}, "I don't know") == "incorrect"
    # d9_negation answered: anything but not-knowing
    assert (
        run("d9_negation", {"expected_response": "answer", "actual_fact": "x"}, "She has no pets.")
        == "correct"
    )
    assert (
        run("d9_negation", {"expected_response": "answer", "actual_fact": "x"}, "I'm not aware of that")
        == "incorrect"
    )
    # d8_temporal: a leading before/after of the gold said
    assert run("d8_temporal", {"answer": "Before the trip to Rome"}, "It was before that.") == "correct"
    # d5_cloze with choices: the right letter per blank
    cloze = {"choices": {"blank_1": {"answer_letter": "B", "options": ["cat", "dog"]},
                         "blank_2": {"answer_letter": "A", "options": ["red", "blue"]}}}  # fmt: skip
    assert extract_gold("d5_cloze", cloze) == "1B 2A"
    assert run("d5_cloze", cloze, "1B 2C", "cloze") == "correct"  # half the blanks: score 0.5
    assert run("d5_cloze", cloze, "1A 2C", "cloze") == "incorrect"
    # d6_metadata: underscores in the value become spaces (no session suffix without the corpus)
    assert extract_gold("d6_metadata", {"value": "coffee_shop"}) == "coffee shop"


# -- LongMemEval -----------------------------------------------------------------------------------


@pytest.fixture
def judge_config(tmp_path: Path, fake_upstream: Any) -> Path:
    fake_upstream.state.reset()
    config = tmp_path / "memtap.yaml"
    config.write_text(
        "model_list:\n"
        f"  - model_name: judge\n    litellm_params: {{model: openai/answer-check, api_base: '{fake_upstream.base_url}'}}\n"
    )
    return config


def test_longmemeval_asks_the_judge_with_the_prompt_of_the_question_type(
    judge_config: Path, fake_upstream: Any
) -> None:
    scorer, ep = make_scorer("longmemeval:judge", judge_config), episode("longmemeval")
    update = probe(answer="Austin", metadata={"question_type": "knowledge-update"})
    verdict = scorer.score(ep, update, {"answer": "She moved from Denver to Austin."})
    assert verdict.outcome == "correct" and "judge" in verdict.reason
    sent = fake_upstream.state.received[-1]
    assert (sent["temperature"], sent["max_tokens"]) == (
        0,
        10,
    )  # evaluate_qa.py: temperature 0, max_tokens 10
    prompt = sent["messages"][-1]["content"]
    assert prompt == PROMPTS["knowledge-update"].format(question="q?", answer="Austin",
                                                        response="She moved from Denver to Austin.")  # fmt: skip
    assert "as long as the updated answer is the required answer" in prompt
    assert scorer.score(ep, update, {"answer": "Denver"}).outcome == "incorrect"
    # temporal-reasoning forgives off-by-one day counts in its prompt
    temporal = probe(answer="18 days", metadata={"question_type": "temporal-reasoning"})
    assert "do not penalize off-by-one errors" in (judge_prompt(temporal, "19 days") or "")
    # an unanswerable (_abs) question is judged against LongMemEval's explanation
    unanswerable = probe("abstention", answer=None, expected_action="abstain",
                         metadata={"question_type": "multi-session", "published_answer": "No pet was named."})  # fmt: skip
    assert scorer.score(ep, unanswerable, {"answer": "That was not mentioned."}).outcome == "correct"
    assert "Explanation: No pet was named." in fake_upstream.state.received[-1]["messages"][-1]["content"]
    # a question type LongMemEval has no prompt for is skipped, not guessed
    assert scorer.score(ep, probe(metadata={"question_type": "trivia"}), {"answer": "x"}).outcome == "skip"


def test_default_scorer_follows_the_suites_origin_and_falls_back_to_strict_saying_why() -> None:
    assert choose_scorer(None, [episode("locomo")]).scorer.name == "locomo"
    assert choose_scorer(None, [episode("memarena")]).how == "origin"
    fallback = choose_scorer(None, [episode("dyadmem")])
    assert (fallback.scorer.name, fallback.how) == ("strict", "fallback")
    assert fallback.note == "answer scorer strict: the suite's origin dyadmem has no published scorer"
    assert "longmemeval:MODEL" in choose_scorer(None, [episode("longmemeval")]).note
    assert "several origins" in choose_scorer(None, [episode("locomo"), episode("memarena")]).note
    assert (
        choose_scorer(None, [episode(None)]).note
        == "answer scorer strict: the suite records no origin (not imported)"
    )
    with pytest.raises(ConfigError, match="pass --config FILE"):
        make_scorer("longmemeval:judge", None)


def test_bad_answers_get_a_verdict_never_an_exception() -> None:
    ep = episode("memprobe")
    value = probe("current_value", answer="CrossFit Central")
    for name in ("strict", "memprobe", "locomo", "memarena"):
        scorer = make_scorer(name)
        kind_known = scorer.types is None or value.type in scorer.types
        for answer in (
            {"answer": "CrossFit Central", "bogus": {"x": [1]}},
            {"answer": ""},
            {},
            {"reply": "{not json"},
        ):
            verdict = scorer.score(ep, value, answer) if kind_known else None
            assert verdict is None or verdict.outcome in ("correct", "incorrect", "partial", "skip")
    # unknown keys are ignored; a reply that is not JSON where JSON is expected is read as text
    assert (
        make_scorer("memprobe").score(ep, value, {"answer": "CrossFit Central", "bogus": 1}).outcome
        == "correct"
    )
    assert (
        make_scorer("strict").score(ep, value, {"answer": "CrossFit Central", "bogus": 1}).outcome
        == "correct"
    )
    assert make_scorer("memprobe").score(ep, value, {"reply": "{Now CrossFit Central"}).outcome == "correct"
    assert make_scorer("memprobe").score(ep, value, {"answer": ""}).outcome == "incorrect"
