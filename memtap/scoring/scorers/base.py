"""What every answer scorer is, and how an answer is read back for the published ones.

An answer scorer turns one probe's answer into a :class:`~memtap.scoring.answer.Verdict`. It has
a ``name`` (what ``--answer-scorer`` takes), a ``version`` (of memtap's port: it changes when a
rule changes, so two scores with the same name and version used the same rules), the published
code it reproduces (``reference``), and the probe types it knows (``types``; None: all).
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from memtap.probes.schema import Episode, Probe
from memtap.scoring.answer import Verdict

__all__ = ["AnswerScorer", "answer_text", "raw_reply"]


class AnswerScorer(Protocol):
    name: str
    version: str
    reference: str
    types: frozenset[str] | None

    def score(self, episode: Episode, probe: Probe, answer: dict[str, Any] | None) -> Verdict: ...


def raw_reply(answer: dict[str, Any] | None) -> str:
    """The reply as a published scorer received its reader's: an LLM reader's reply as the model
    wrote it (``raw_reply``); else the reader's JSON object as text, the model's own words when its
    reply was not JSON (``unparsed``), or an agent's reply."""
    if not answer:
        return ""
    if isinstance(answer.get("raw_reply"), str):
        return str(answer["raw_reply"])
    if answer.get("unparsed"):
        return str(answer.get("answer") or "")
    structured = {k: v for k, v in answer.items() if k not in ("reply", "raw_reply")}
    if structured:
        return json.dumps(structured, ensure_ascii=False)
    return str(answer.get("reply") or "")


def answer_text(answer: dict[str, Any] | None) -> str:
    """The answer as free text (what LoCoMo, MemArena and LongMemEval score): the reader's
    ``answer`` field, else an agent's reply."""
    if not answer:
        return ""
    said = answer.get("answer")
    if isinstance(said, str | int | float) and not isinstance(said, bool) and str(said).strip():
        return str(said)
    reply = answer.get("reply")
    return str(reply) if isinstance(reply, str) else ""
