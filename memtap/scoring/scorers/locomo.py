"""``locomo``: LoCoMo's QA scoring (``snap-research/locomo``, ``task_eval/evaluation.py``).

Ported from ``eval_question_answering``, ``f1_score``, ``f1`` and ``normalize_answer``:

- an answer is normalised: commas dropped, lower case, punctuation removed, the words a, an, the
  and "and" removed, spaces collapsed; each word is Porter-stemmed (``nltk``'s ``PorterStemmer``,
  the stemmer LoCoMo imports);
- categories 2, 3 and 4: token F1 of the stemmed words (a multiset overlap); for category 3 the
  gold is cut at its first ``;``;
- category 1 (multi-hop): prediction and gold are split at commas; each gold part takes its best
  F1 over the prediction's parts, and the mean over gold parts is the score;
- category 5 (adversarial, imported as ``abstention`` probes): 1 when the answer says "no
  information available" or "not mentioned", else 0.

LoCoMo reports the mean score; memtap keeps it as the verdict's F1 (``qa_f1``) and counts an
answer correct at F1 >= 0.5 for accuracy, as ``strict`` does.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from functools import lru_cache
from typing import Any

from memtap.probes.schema import Episode, Probe
from memtap.scoring.answer import Verdict
from memtap.scoring.scorers.base import answer_text

__all__ = ["LoCoMoScorer", "f1_multi", "f1_single", "normalise"]

_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_PUNCTUATION = frozenset(string.punctuation)
_ABSTAINS = ("no information available", "not mentioned")


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    from nltk.stem import PorterStemmer  # type: ignore[import-untyped]  # LoCoMo's stemmer; needs no downloaded data

    return PorterStemmer()


def normalise(text: str) -> str:
    """evaluation.py ``normalize_answer``."""
    text = "".join(ch for ch in text.replace(",", "").lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _stems(text: str) -> list[str]:
    stem = _stemmer().stem
    return [stem(w) for w in normalise(text).split()]


def f1_single(prediction: str, gold: str) -> float:
    """evaluation.py ``f1_score``: F1 of the stemmed words, counted with multiplicity."""
    said, wanted = _stems(prediction), _stems(gold)
    same = sum((Counter(said) & Counter(wanted)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(said), same / len(wanted)
    return 2 * precision * recall / (precision + recall)


def f1_multi(prediction: str, gold: str) -> float:
    """evaluation.py ``f1``: the mean over the gold's comma parts of the best part of the prediction."""
    said = [p.strip() for p in prediction.split(",")]
    wanted = [g.strip() for g in gold.split(",")]
    return sum(max(f1_single(p, g) for p in said) for g in wanted) / len(wanted)


class LoCoMoScorer:
    name = "locomo"
    version = "1"
    reference = "snap-research/locomo task_eval/evaluation.py eval_question_answering"
    types: frozenset[str] | None = frozenset({"qa", "abstention"})

    def score(self, episode: Episode, probe: Probe, answer: dict[str, Any] | None) -> Verdict:
        output = answer_text(answer)
        category = probe.metadata.get("category")
        if probe.type == "abstention" or category == 5:
            ok = any(p in output.lower() for p in _ABSTAINS)
            return Verdict("correct" if ok else "incorrect", f"locomo category 5: {'abstained' if ok else 'answered'}",  # noqa: E501
                           f1=float(ok))  # fmt: skip
        gold = probe.gold.answer
        if not gold:
            return Verdict("skip", "no gold answer")
        if category not in (1, 2, 3, 4):
            return Verdict(
                "skip", f"locomo scores LoCoMo categories 1-5; this probe has category {category!r}"
            )
        if category == 3:
            gold = gold.split(";")[0].strip()
        f1 = f1_multi(output, gold) if category == 1 else f1_single(output, gold)
        return Verdict(
            "correct" if f1 >= 0.5 else "incorrect", f"locomo category {category}: F1 {f1:.3f}", f1=f1
        )
