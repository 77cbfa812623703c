"""LoCoMo (``snap-research/LoCoMo``, ``data/locomo10.json``) to memtap ``qa`` suites.

- one episode per conversation (``sample_id``); both speakers are participants with role
  ``user``; the namespace is the conversation (``locomo-{sample_id}``, owned by speaker A);
- sessions are the ``session_N`` lists that exist (the file has more ``session_N_date_time``
  keys than sessions), in the order of N, at ``session_N_date_time`` (``1:56 pm on 8 May,
  2023``, read as UTC); turn ids are LoCoMo's ``dia_id``; an image's ``blip_caption`` stays
  in the turn's metadata;
- ``qa`` items become probes asked by speaker A one day after the last session: categories
  1-4 are ``qa`` probes with their answer (integers become text); category 5 (adversarial) are
  ``abstention`` probes expecting ``abstain``, their ``adversarial_answer`` kept in metadata;
- ``evidence`` dia_ids become ``evidence_turns``; malformed ids (``D8:6; D9:17``, ``D``) are
  split and repaired where possible, and ids that name no turn are listed in the probe's
  ``metadata.dropped_evidence`` instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memtap.probes.errors import Problem
from memtap.probes.importers._common import FORMAT, Malformed, Record, iso, read_json_records, require

__all__ = ["convert", "parse_time", "records"]

_SESSION = re.compile(r"^session_(\d+)$")
_DIA = re.compile(r"D\d+:\d+")
_CATEGORY = {1: "multi_hop", 2: "temporal", 3: "open_domain", 4: "single_hop", 5: "adversarial"}


def records(path: Path) -> Iterator[Record]:
    yield from read_json_records(path)


def parse_time(value: Any, where: str) -> datetime:
    if isinstance(value, str):
        text = " ".join(value.replace(",", ", ").split())
        for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%Y-%m-%d %H:%M:%S"):
            try:
                return datetime.strptime(text, fmt).replace(tzinfo=UTC)
            except ValueError:
                continue
    raise Malformed(where, f"unreadable date {value!r}")


def _speaker_id(name: str) -> str:
    return name.strip() or "unknown"


def convert(record: Any, where: str) -> list[dict[str, Any] | Problem]:
    sample = str(require(record, "sample_id", (str, int)))
    conversation = require(record, "conversation", dict)
    a = _speaker_id(require(conversation, "speaker_a", str, "conversation"))
    b = _speaker_id(require(conversation, "speaker_b", str, "conversation"))
    numbers = sorted(
        int(m.group(1))
        for key, value in conversation.items()
        if (m := _SESSION.match(key)) and isinstance(value, list)
    )
    if not numbers:
        raise Malformed("conversation", "no session_N lists")
    sessions: list[dict[str, Any]] = []
    turn_ids: set[str] = set()
    for n in numbers:
        sw = f"conversation.session_{n}"
        start = parse_time(conversation.get(f"session_{n}_date_time"), f"{sw}_date_time")
        turns = []
        for k, turn in enumerate(conversation[f"session_{n}"]):
            tw = f"{sw}[{k}]"
            speaker = _speaker_id(require(turn, "speaker", str, tw))
            if speaker not in (a, b):
                raise Malformed(f"{tw}.speaker", f"{speaker!r} is neither speaker_a nor speaker_b")
            dia = str(turn.get("dia_id") or f"D{n}:{k + 1}")
            if dia in turn_ids:
                dia = f"{dia}#{k}"
            turn_ids.add(dia)
            meta = {key: turn[key] for key in ("blip_caption", "img_url", "query") if turn.get(key)}
            turns.append(
                {
                    "turn_id": dia,
                    "role": "user",
                    "speaker": speaker,
                    "content": str(turn.get("text", "")),
                    "time": iso(start),
                    "metadata": meta,
                }
            )
        if turns:
            sessions.append(
                {"session_id": f"session_{n}", "time": iso(start), "participants": [a, b], "turns": turns}
            )
    ask_at = iso(max(datetime.fromisoformat(s["time"]) for s in sessions) + timedelta(days=1))
    probes = [_probe(i, item, a, ask_at, turn_ids) for i, item in enumerate(record.get("qa") or [])]
    return [
        {
            "format": FORMAT,
            "episode_id": f"locomo-{sample}",
            "suite": "locomo",
            "paradigm": "qa",
            "namespace": a,
            "participants": [{"id": a, "role": "user"}, {"id": b, "role": "user"}],
            "sessions": sessions,
            "probes": probes,
            "metadata": {"source": "locomo", "source_record": where, "sample_id": sample},
        }
    ]


def _probe(i: int, item: Any, asker: str, ask_at: str, turn_ids: set[str]) -> dict[str, Any]:
    qw = f"qa[{i}]"
    question = require(item, "question", str, qw)
    category = item.get("category")
    evidence: list[str] = []
    dropped: list[Any] = []
    for raw in item.get("evidence") or []:
        found = _DIA.findall(str(raw))
        if not found:
            dropped.append(raw)
        for dia in found:
            (evidence if dia in turn_ids else dropped).append(dia)
    metadata: dict[str, Any] = {"category": category, "category_name": _CATEGORY.get(category)}
    if dropped:
        metadata["dropped_evidence"] = dropped
    probe: dict[str, Any] = {
        "probe_id": f"q{i}",
        "type": "qa",
        "requester": asker,
        "question": question,
        "time": ask_at,
        "evidence_turns": list(dict.fromkeys(evidence)),
        "metadata": metadata,
    }
    if category == 5:
        probe["type"], probe["expected_action"] = "abstention", "abstain"
        metadata["adversarial_answer"] = item.get("adversarial_answer", item.get("answer"))
        probe["gold"] = {"answer": None}
    else:
        if "answer" not in item:
            raise Malformed(f"{qw}.answer", "missing")
        probe["gold"] = {"answer": item["answer"]}
    return probe
