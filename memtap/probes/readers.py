"""Readers: answer a probe from what was retrieved for it, in the probe type's JSON shape.

- ``none``: no answer (the run is scored at the storage and retrieval levels only);
- ``extractive``: a deterministic baseline with no model. Every retrieved memory is split into
  sentences; the answer is the sentence sharing the most content words with the question
  (ties go to the better-ranked memory). Then, by probe type: ``change_detection`` says
  ``changed`` when a retrieved memory uses a change word (switched, changed, now, no longer,
  moved, updated, increased, ...); ``source`` gives the role that created the chosen memory
  (its provenance); ``permission`` discloses only when the chosen memory's access tags permit
  the requester, and withholds otherwise; ``abstention`` abstains when fewer than two content
  words match. It never invents a value: fields it cannot read off the memories are null;
- any other name is an LLM reader, which needs the chat proxy's upstream client (not in this
  build): asking for one is a ConfigError before anything is replayed.

Shapes: ``{"answer"}`` for current_value, previous_value, qa, cloze and metadata;
``{"answer", "changed"}``; ``{"answer", "source"}``; ``{"answer", "conflict": {value, source,
status, applies_to_target}}``; ``{"answer", "temporal": {old_value, new_value, trigger,
reason}}``; ``{"action": disclose|withhold, "answer"}``; ``{"action": answer|abstain, "answer"}``.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from memtap.errors import ConfigError
from memtap.probes.schema import Probe
from memtap.probes.targets.base import ProbeResult, Retrieved
from memtap.trace.models import AccessTags

__all__ = ["ExtractiveReader", "NoReader", "Reader", "make_reader"]

_WORD = re.compile(r"[a-z0-9][a-z0-9'.:-]*")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "at",
        "be",
        "been",
        "before",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "now",
        "of",
        "on",
        "or",
        "said",
        "say",
        "the",
        "their",
        "there",
        "this",
        "to",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "you",
        "your",
        "user",
        "user's",
        "team",
        "team's",
    ]
)
_CHANGE = frozenset(
    [
        "switched",
        "switch",
        "changed",
        "change",
        "now",
        "longer",
        "moved",
        "updated",
        "update",
        "increased",
        "decreased",
        "instead",
        "new",
    ]
)


def _all_words(text: str) -> set[str]:
    return {w.strip(".:-'") for w in _WORD.findall(text.lower())} - {""}


def _words(text: str) -> set[str]:
    """Content words: stop words (and the words every probe question uses) left out."""
    return _all_words(text) - _STOP


class Reader(Protocol):
    name: str

    def answer(self, probe: Probe, requester: str, result: ProbeResult) -> dict[str, Any] | None: ...


class NoReader:
    name = "none"

    def answer(self, probe: Probe, requester: str, result: ProbeResult) -> dict[str, Any] | None:
        return None


class ExtractiveReader:
    name = "extractive"

    def _best(self, question: str, retrieved: list[Retrieved]) -> tuple[str | None, Retrieved | None, int]:
        wanted = _words(question)
        best: tuple[int, int, str, Retrieved] | None = None
        for item in sorted(retrieved, key=lambda r: r.rank):
            for sentence in _SENTENCE.split(item.content.strip()):
                score = len(wanted & _words(sentence))
                if best is None or score > best[0]:
                    best = (score, item.rank, sentence, item)
        if best is None or best[0] == 0:
            return None, None, 0
        return best[2], best[3], best[0]

    def answer(self, probe: Probe, requester: str, result: ProbeResult) -> dict[str, Any] | None:
        text, item, overlap = self._best(probe.question, result.retrieved)
        role = (item.provenance.get("role") if item else None) or None
        kind = probe.type
        if kind == "change_detection":
            changed = any(_CHANGE & _all_words(r.content) for r in result.retrieved)
            return {"answer": text, "changed": changed}
        if kind == "source":
            return {"answer": text, "source": role}
        if kind == "conflict_value":
            return {
                "answer": text,
                "conflict": {"value": None, "source": role, "status": None, "applies_to_target": None},
            }
        if kind == "temporal":
            return {
                "answer": text,
                "temporal": {"old_value": None, "new_value": None, "trigger": None, "reason": None},
            }
        if kind == "permission":
            tags = AccessTags.model_validate(item.tags) if item is not None and item.tags else None
            allowed = item is not None and (tags is None or tags.permits(requester))
            return {"action": "disclose" if allowed else "withhold", "answer": text if allowed else None}
        if kind == "abstention":
            grounded = overlap >= 2
            return {"action": "answer" if grounded else "abstain", "answer": text if grounded else None}
        return {"answer": text}


def make_reader(spec: str) -> Reader:
    if spec == "none":
        return NoReader()
    if spec == "extractive":
        return ExtractiveReader()
    raise ConfigError(
        f"--reader {spec}: an LLM reader needs a configured chat upstream (the OpenAI-compatible chat "
        "proxy's upstream client), which this build does not have yet; use --reader extractive or none"
    )
