"""Named answer scorers: memtap's own (``strict``) and ports of the published ones.

``memtap score RUN --answer-scorer NAME`` picks one; without the option, a run whose episodes all
come from one benchmark with a published scorer (the suite's origin: ``metadata.source``, which
memtap's importers write) is scored with that benchmark's scorer, and anything else with
``strict``. The score file records the scorer's name, version and reference, and why it was used.

| name | reproduces |
| --- | --- |
| ``strict`` | memtap's own rules (``memtap/scoring/answer.py``) |
| ``memprobe`` | MemProbe ``src/eval/protocol.py`` ``score_answer`` |
| ``locomo`` | LoCoMo ``task_eval/evaluation.py`` ``eval_question_answering`` |
| ``memarena`` | MemArena ``eval/src/scoring_core.py`` ``score`` |
| ``longmemeval:MODEL`` | LongMemEval ``src/evaluation/evaluate_qa.py``, judged by MODEL |
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memtap.errors import ConfigError
from memtap.probes.schema import Episode, Probe
from memtap.scoring.scorers.base import AnswerScorer, answer_text, raw_reply
from memtap.scoring.scorers.locomo import LoCoMoScorer
from memtap.scoring.scorers.memarena import MemArenaScorer
from memtap.scoring.scorers.memprobe import MemProbeScorer
from memtap.scoring.scorers.strict import StrictScorer

__all__ = [
    "NAMES",
    "PUBLISHED",
    "AnswerScorer",
    "Choice",
    "answer_text",
    "choose_scorer",
    "make_scorer",
    "origin_of",
    "raw_reply",
]

NAMES = ("strict", "memprobe", "locomo", "memarena", "longmemeval")
PUBLISHED = {"memprobe": "memprobe", "locomo": "locomo", "memarena": "memarena", "longmemeval": "longmemeval"}
"""A suite origin -> the name of its benchmark's published scorer."""
PermissionJudge = Callable[[Probe, dict[str, Any] | None], tuple[str, str]]


@dataclass(frozen=True)
class Choice:
    scorer: AnswerScorer
    how: str  # option | origin | fallback
    note: str

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.scorer.name,
            "version": self.scorer.version,
            "reference": self.scorer.reference,
            "chosen_by": self.how,
            "note": self.note,
        }


def origin_of(episode: Episode) -> str | None:
    """The benchmark a suite episode was imported from (``metadata.source``), if it names one."""
    source = episode.metadata.get("source")
    return source if isinstance(source, str) and source else None


def make_scorer(spec: str, config: Path | None = None, judge: PermissionJudge | None = None) -> AnswerScorer:
    """The scorer ``--answer-scorer SPEC`` names (``longmemeval:MODEL`` needs ``config``)."""
    name, _, model = spec.partition(":")
    if name == "strict" and not model:
        return StrictScorer(judge)
    if name == "memprobe" and not model:
        return MemProbeScorer()
    if name == "locomo" and not model:
        return LoCoMoScorer()
    if name == "memarena" and not model:
        return MemArenaScorer()
    if name == "longmemeval":
        if not model:
            raise ConfigError(
                "--answer-scorer longmemeval: LongMemEval's scorer is an LLM judge; name its model: "
                "--answer-scorer longmemeval:MODEL --config FILE"
            )
        from functools import partial

        from memtap.adapters.model_endpoint import resolve_model
        from memtap.scoring.scorers.longmemeval import LongMemEvalScorer

        return LongMemEvalScorer(partial(resolve_model(model, config).chat, max_tokens=10), model)
    raise ConfigError(
        f"--answer-scorer {spec!r}: use one of strict, memprobe, locomo, memarena, longmemeval:MODEL"
    )


def choose_scorer(
    spec: str | None,
    episodes: Iterable[Episode],
    config: Path | None = None,
    judge: PermissionJudge | None = None,
) -> Choice:
    """The scorer for a run: the one named, else the published scorer of the suite's origin,
    else ``strict``; the note says which and why."""
    if spec:
        scorer = make_scorer(spec, config, judge)
        return Choice(scorer, "option", f"answer scorer {scorer.name} {scorer.version} (--answer-scorer)")
    origins = sorted({origin_of(e) or "" for e in episodes})
    strict = StrictScorer(judge)
    if len(origins) != 1:
        named = ", ".join(o or "none" for o in origins) or "none"
        return Choice(
            strict,
            "fallback",
            f"answer scorer strict: the run's episodes come from several origins ({named})",
        )
    origin = origins[0]
    if not origin:
        return Choice(strict, "fallback", "answer scorer strict: the suite records no origin (not imported)")
    published = PUBLISHED.get(origin)
    if published is None:
        return Choice(
            strict, "fallback", f"answer scorer strict: the suite's origin {origin} has no published scorer"
        )
    if published == "longmemeval":
        return Choice(
            strict, "fallback",
            "answer scorer strict: LongMemEval's published scorer is an LLM judge; "
            "use --answer-scorer longmemeval:MODEL --config FILE to score with it",
        )  # fmt: skip
    scorer = make_scorer(published, config, judge)
    return Choice(
        scorer, "origin", f"answer scorer {scorer.name} {scorer.version} (the suite's origin, {origin})"
    )
