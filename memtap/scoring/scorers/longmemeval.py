"""``longmemeval:MODEL``: LongMemEval's judge (``xiaowu0162/LongMemEval``,
``src/evaluation/evaluate_qa.py`` ``get_anscheck_prompt`` and its main loop).

Each answer is put to a judge model (a ``model_name`` of the config's ``model_list``) with the
prompt LongMemEval uses for the question's type, at temperature 0 with at most 10 tokens; the
answer is correct when the judge's reply contains "yes" (any case). The prompts are LongMemEval's
in substance; memtap words them in its own code below, keeping every instruction the published
judge gives, because the judge's verdict depends on them:

- ``single-session-user``, ``single-session-assistant``, ``multi-session``: does the response
  contain the correct answer (equivalent, or all the intermediate steps, counts; a subset does not);
- ``temporal-reasoning``: the same, and off-by-one errors in a number of days (weeks, months) are
  not penalised;
- ``knowledge-update``: the same, and a response that also gives earlier information is correct
  as long as the updated answer is the required one;
- ``single-session-preference``: does the response satisfy a rubric of the desired personalised
  answer (it need not reflect every point, only recall and use the user's information correctly);
- abstention questions (``_abs`` ids, imported as ``abstention`` probes): does the model identify
  the question as unanswerable (saying the information is incomplete, or that other information is
  given but not the asked one), judged against LongMemEval's explanation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from memtap.probes.schema import Episode, Probe
from memtap.scoring.answer import Verdict
from memtap.scoring.scorers.base import answer_text

__all__ = ["PROMPTS", "LongMemEvalScorer", "judge_prompt"]

_CONTAINS = (
    "I will give you a question, a correct answer, and a response from a model. Please answer yes if the "
    "response contains the correct answer. Otherwise, answer no. "
)
_STEPS = (
    "If the response is equivalent to the correct answer or contains all the intermediate steps to get the "
    "correct answer, you should also answer yes. If the response only contains a subset of the information "
    "required by the answer, answer no. "
)
_QA = "\n\nQuestion: {question}\n\nCorrect Answer: {answer}\n\nModel Response: {response}\n\n"
_ASK = "Is the model response correct? Answer yes or no only."
_PLAIN = _CONTAINS + _STEPS + _QA + _ASK
PROMPTS: dict[str, str] = {
    "single-session-user": _PLAIN,
    "single-session-assistant": _PLAIN,
    "multi-session": _PLAIN,
    "temporal-reasoning": _CONTAINS + _STEPS + (
        "In addition, do not penalize off-by-one errors for the number of days. If the question asks for the "
        "number of days/weeks/months, etc., and the model makes off-by-one errors (e.g., predicting 19 days "
        "when the answer is 18), the model's response is still correct. "
    ) + _QA + _ASK,
    "knowledge-update": _CONTAINS + (
        "If the response contains some previous information along with an updated answer, the response "
        "should be considered as correct as long as the updated answer is the required answer."
    ) + _QA + _ASK,
    "single-session-preference": (
        "I will give you a question, a rubric for desired personalized response, and a response from a model. "  # noqa: E501
        "Please answer yes if the response satisfies the desired response. Otherwise, answer no. The model "
        "does not need to reflect all the points in the rubric. The response is correct as long as it recalls "  # noqa: E501
        "and utilizes the user's personal information correctly."
        "\n\nQuestion: {question}\n\nRubric: {answer}\n\nModel Response: {response}\n\n"
        "Is the model response correct? Answer yes or no only."
    ),
}  # fmt: skip
ABSTENTION_PROMPT = (
    "I will give you an unanswerable question, an explanation, and a response from a model. Please answer yes "  # noqa: E501
    "if the model correctly identifies the question as unanswerable. The model could say that the information "  # noqa: E501
    "is incomplete, or some other information is given but the asked information is not."
    "\n\nQuestion: {question}\n\nExplanation: {answer}\n\nModel Response: {response}\n\n"
    "Does the model correctly identify the question as unanswerable? Answer yes or no only."
)


def judge_prompt(probe: Probe, response: str) -> str | None:
    """The judge's prompt for a probe (None: a question type LongMemEval has no prompt for)."""
    if probe.type == "abstention":
        explanation = probe.metadata.get("published_answer") or ""
        return ABSTENTION_PROMPT.format(question=probe.question, answer=explanation, response=response)
    template = PROMPTS.get(str(probe.metadata.get("question_type")))
    if template is None:
        return None
    return template.format(question=probe.question, answer=probe.gold.answer or "", response=response)


class LongMemEvalScorer:
    name = "longmemeval"
    version = "1"
    reference = "xiaowu0162/LongMemEval src/evaluation/evaluate_qa.py get_anscheck_prompt"
    types: frozenset[str] | None = frozenset({"qa", "abstention"})

    def __init__(self, ask: Callable[[str], str], model: str) -> None:
        self.ask = ask  # prompt -> the judge's reply
        self.model = model

    def score(self, episode: Episode, probe: Probe, answer: dict[str, Any] | None) -> Verdict:
        prompt = judge_prompt(probe, answer_text(answer))
        if prompt is None:
            return Verdict(
                "skip",
                f"longmemeval has no judge prompt for question type {probe.metadata.get('question_type')!r}",
            )
        reply = self.ask(prompt).strip()
        ok = "yes" in reply.lower()
        return Verdict("correct" if ok else "incorrect", f"longmemeval judge {self.model}: {reply[:40]!r}")
