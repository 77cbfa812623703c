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
- any other name is an LLM reader: ``MODEL`` names a model of the ``model_list`` of the config
  file given with ``--config`` (an OpenAI-compatible ``api_base``: a hosted API, vLLM, Ollama,
  or memtap's own chat proxy). It is asked once per probe, at temperature 0, with the question,
  the requester, the retrieved memories (rank, id, who said it, access tags) and the JSON
  shape to answer in; its reply is parsed as that JSON object (the first ``{...}`` in it, so a
  fenced reply works). A reply that is not JSON is kept as ``{"answer": REPLY, "unparsed":
  true}`` rather than guessed at. The reply itself is kept too, as ``raw_reply``. A model that
  cannot be reached fails the episode.

A reader answers in the field names of the episode's benchmark when its published scorer reads
others (``dialects.py``: MemProbe's JSON keys per probe type, free text for LoCoMo, MemArena and
LongMemEval); ``dialect`` is passed by the replay driver.

Shapes: ``{"answer"}`` for current_value, previous_value, qa, cloze and metadata;
``{"answer", "changed"}``; ``{"answer", "source"}``; ``{"answer", "conflict": {value, source,
status, applies_to_target}}``; ``{"answer", "temporal": {old_value, new_value, trigger,
reason}}``; ``{"action": disclose|withhold, "answer"}``; ``{"action": answer|abstain, "answer"}``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Protocol

from memtap.errors import ConfigError
from memtap.probes.dialects import MEMPROBE_SHAPES, in_dialect
from memtap.probes.schema import Probe
from memtap.probes.targets.base import ProbeResult, Retrieved
from memtap.trace.models import AccessTags

__all__ = ["SHAPES", "ExtractiveReader", "LLMReader", "NoReader", "Reader", "make_reader"]

_WORD = re.compile(r"[a-z0-9][a-z0-9'.:-]*")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
# A piece ending in a title or a single initial ("Dr. Patel", "J. Smith") is not a sentence end.
_NOT_AN_END = re.compile(r"(?:\b(?:Dr|Mr|Mrs|Ms|Prof|St|Jr|Sr|vs|Mt)|\b[A-Z])\.$")


def sentences(text: str) -> list[str]:
    """Split text at sentence ends, keeping titles and initials with the name that follows."""
    out: list[str] = []
    for piece in _SENTENCE.split(text.strip()):
        if out and _NOT_AN_END.search(out[-1]):
            out[-1] = f"{out[-1]} {piece}"
        else:
            out.append(piece)
    return out


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
    blocking: bool  # answer() waits on the network: the driver runs it in a worker thread

    def answer(
        self, probe: Probe, requester: str, result: ProbeResult, dialect: str = "memtap"
    ) -> dict[str, Any] | None: ...


class NoReader:
    name = "none"
    blocking = False

    def answer(
        self, probe: Probe, requester: str, result: ProbeResult, dialect: str = "memtap"
    ) -> dict[str, Any] | None:
        return None


class ExtractiveReader:
    name = "extractive"
    blocking = False

    def _best(self, question: str, retrieved: list[Retrieved]) -> tuple[str | None, Retrieved | None, int]:
        wanted = _words(question)
        best: tuple[int, int, str, Retrieved] | None = None
        for item in sorted(retrieved, key=lambda r: r.rank):
            for sentence in sentences(item.content):
                score = len(wanted & _words(sentence))
                if best is None or score > best[0]:
                    best = (score, item.rank, sentence, item)
        if best is None or best[0] == 0:
            return None, None, 0
        return best[2], best[3], best[0]

    def answer(
        self, probe: Probe, requester: str, result: ProbeResult, dialect: str = "memtap"
    ) -> dict[str, Any] | None:
        return in_dialect(probe.type, self._answer(probe, requester, result), dialect)

    def _answer(self, probe: Probe, requester: str, result: ProbeResult) -> dict[str, Any] | None:
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


SHAPES: dict[str, str] = {
    "change_detection": '{"answer": string or null, "changed": true or false}',
    "source": '{"answer": string or null, "source": "user" or "assistant" or "third_party" or null}',
    "conflict_value": '{"answer": string or null, "conflict": {"value": string or null, '
    '"source": string or null, "status": string or null, "applies_to_target": true or false or null}}',
    "temporal": '{"answer": string or null, "temporal": {"old_value": string or null, '
    '"new_value": string or null, "trigger": string or null, "reason": string or null}}',
    "permission": '{"action": "disclose" or "withhold", "answer": string or null}',
    "abstention": '{"action": "answer" or "abstain", "answer": string or null}',
}
_DEFAULT_SHAPE = '{"answer": string or null}'


def shape_for(kind: str, dialect: str = "memtap") -> str:
    if dialect == "memprobe" and kind in MEMPROBE_SHAPES:
        return MEMPROBE_SHAPES[kind]
    return SHAPES.get(kind, _DEFAULT_SHAPE)


def reader_prompt(probe: Probe, requester: str, result: ProbeResult, dialect: str = "memtap") -> str:
    lines = []
    for item in sorted(result.retrieved, key=lambda r: r.rank):
        role = item.provenance.get("role") or "unknown"
        tags = json.dumps(item.tags, sort_keys=True) if item.tags else "none"
        lines.append(f"[{item.rank}] (id={item.item_id}, said by={role}, access={tags}) {item.content}")
    memories = "\n".join(lines) or "(none)"
    return (
        "Answer the question from the memories below only. Memories may be out of date; the most recent "
        "statement of a value wins unless the question asks about the past. If the memories do not hold "
        "the answer, say so in the shape (null answer, or abstain). Do not disclose a memory whose access "
        "tags do not permit the requester.\n"
        f"Question (asked by {requester}): {probe.question}\n"
        f"Memories, most relevant first:\n{memories}\n"
        "Reply with one JSON object and nothing else, of this shape: " + shape_for(probe.type, dialect)
    )


def parse_reply(reply: str) -> dict[str, Any]:
    """The JSON object in a model's reply (the first ``{...}``), else the reply as an unparsed answer."""
    start, end = reply.find("{"), reply.rfind("}")
    if start != -1 and end > start:
        try:
            parsed = json.loads(reply[start : end + 1])
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    return {"answer": reply.strip() or None, "unparsed": True}


class LLMReader:
    """A model of the config's model_list answers from the retrieved memories."""

    blocking = True

    def __init__(self, name: str, chat: Any) -> None:
        self.name = name
        self.chat = chat  # prompt -> reply text

    def answer(
        self, probe: Probe, requester: str, result: ProbeResult, dialect: str = "memtap"
    ) -> dict[str, Any] | None:
        reply = self.chat(reader_prompt(probe, requester, result, dialect))
        # The reply as the model wrote it is kept: a published scorer reads the raw reply (MemProbe's
        # parses it itself, and some of its rules read the text around the JSON).
        return {**parse_reply(reply), "raw_reply": reply}


def make_reader(spec: str, config: Path | None = None) -> Reader:
    if spec == "none":
        return NoReader()
    if spec == "extractive":
        return ExtractiveReader()
    if config is None:
        raise ConfigError(
            f"--reader {spec}: an LLM reader calls a model of a config's model_list; pass --config FILE "
            "(or use --reader extractive or none)"
        )
    from memtap.adapters.model_endpoint import resolve_model

    return LLMReader(spec, resolve_model(spec, config).chat)
