"""Scoring replayed runs at three levels (storage, retrieval, answer), with behavioural profiles,
failure attribution, shortcut baselines and episode-bootstrap statistics (``docs/scoring.md``).

Reached through ``memtap score`` and ``memtap compare``; these are the names to use it as a library.
"""

from __future__ import annotations

from memtap.scoring.align import Aligner, Decision, DefaultMatcher, EmbeddingMatcher, JudgeMatcher, Matcher
from memtap.scoring.answer import Verdict, score_answer
from memtap.scoring.compare import COMPARE_FORMAT, compare_scores
from memtap.scoring.errors import ScoringError, ScoringStrict
from memtap.scoring.measures import HEADLINE
from memtap.scoring.score import FORMAT, Scored, latest_score, score_run, score_trace, store_score
from memtap.scoring.scorers import AnswerScorer, Choice, choose_scorer, make_scorer
from memtap.scoring.trace import RunTrace, load_run

__all__ = [
    "COMPARE_FORMAT",
    "FORMAT",
    "HEADLINE",
    "Aligner",
    "AnswerScorer",
    "Choice",
    "Decision",
    "DefaultMatcher",
    "EmbeddingMatcher",
    "JudgeMatcher",
    "Matcher",
    "RunTrace",
    "Scored",
    "ScoringError",
    "ScoringStrict",
    "Verdict",
    "choose_scorer",
    "compare_scores",
    "latest_score",
    "load_run",
    "make_scorer",
    "score_answer",
    "score_run",
    "score_trace",
    "store_score",
]
