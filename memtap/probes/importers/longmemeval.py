"""LongMemEval (``xiaowu0162/LongMemEval``) instances to memtap ``qa`` suites.

- one episode per instance (``question_id``), between ``user`` and ``assistant``;
- the haystack sessions become sessions named by ``haystack_session_ids``, at
  ``haystack_dates`` (``2023/05/20 (Sat) 02:21``, read as UTC), sorted by date (stable) so they
  are played in time order; a repeated session id gets a ``#n`` suffix; turn ``k`` of session
  ``S`` is ``S-t{k}``;
- turns with ``has_answer: true`` are the probe's ``evidence_turns``;
- the question is one probe asked at ``question_date``: ``qa`` with its answer, or, for
  ``_abs`` question ids, an ``abstention`` probe expecting ``abstain`` (the published answer,
  which explains why the question cannot be answered, stays in metadata);
- ``question_type`` and ``answer_session_ids`` stay in the probe's metadata.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memtap.probes.errors import Problem
from memtap.probes.importers._common import FORMAT, Malformed, Record, iso, read_json_records, require

__all__ = ["convert", "parse_time", "records"]

USER, ASSISTANT = "user", "assistant"


def records(path: Path) -> Iterator[Record]:
    yield from read_json_records(path)


def parse_time(value: Any, where: str) -> datetime:
    if isinstance(value, str):
        text = value.strip()
        for fmt in ("%Y/%m/%d (%a) %H:%M", "%Y/%m/%d %H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S"):
            try:
                return datetime.strptime(text, fmt).replace(tzinfo=UTC)
            except ValueError:
                continue
    raise Malformed(where, f"unreadable date {value!r}")


def convert(record: Any, where: str) -> list[dict[str, Any] | Problem]:
    qid = str(require(record, "question_id", (str, int)))
    ids = require(record, "haystack_session_ids", list)
    dates = require(record, "haystack_dates", list)
    haystack = require(record, "haystack_sessions", list)
    if not len(ids) == len(dates) == len(haystack):
        raise Malformed(
            "haystack_sessions",
            f"{len(haystack)} sessions, {len(ids)} ids and {len(dates)} dates; they must be as many",
        )
    order = sorted(range(len(ids)), key=lambda i: parse_time(dates[i], f"haystack_dates[{i}]"))
    sessions, evidence, seen = [], [], set()
    for i in order:
        sid = str(ids[i])
        if sid in seen:
            sid = f"{sid}#{i}"
        seen.add(sid)
        start = iso(parse_time(dates[i], f"haystack_dates[{i}]"))
        turns = []
        if not isinstance(haystack[i], list):
            raise Malformed(f"haystack_sessions[{i}]", "expected a list of turns")
        for k, turn in enumerate(haystack[i]):
            tw = f"haystack_sessions[{i}][{k}]"
            role = require(turn, "role", str, tw)
            if role not in (USER, ASSISTANT):
                raise Malformed(f"{tw}.role", f"expected user or assistant, got {role!r}")
            turn_id = f"{sid}-t{k}"
            if turn.get("has_answer") is True:
                evidence.append(turn_id)
            turns.append(
                {
                    "turn_id": turn_id,
                    "role": role,
                    "speaker": role,
                    "content": require(turn, "content", str, tw),
                    "time": start,
                }
            )
        if turns:
            sessions.append(
                {"session_id": sid, "time": start, "participants": [USER, ASSISTANT], "turns": turns}
            )
    if not sessions:
        raise Malformed("haystack_sessions", "no turns")
    abstain = qid.endswith("_abs")
    answer = record.get("answer")
    if answer is None and not abstain:
        raise Malformed("answer", "missing")
    probe: dict[str, Any] = {
        "probe_id": "q0",
        "type": "abstention" if abstain else "qa",
        "requester": USER,
        "question": require(record, "question", str),
        "time": iso(parse_time(record.get("question_date"), "question_date")),
        "expected_action": "abstain" if abstain else "answer",
        "gold": {"answer": None if abstain else answer},
        "evidence_turns": evidence,
        "metadata": {
            "question_type": record.get("question_type"),
            "answer_session_ids": record.get("answer_session_ids") or [],
        }
        | ({"published_answer": answer} if abstain else {}),
    }
    return [
        {
            "format": FORMAT,
            "episode_id": qid,
            "suite": "longmemeval",
            "paradigm": "qa",
            "condition": record.get("question_type"),
            "namespace": USER,
            "participants": [{"id": USER, "role": "user"}, {"id": ASSISTANT, "role": "assistant"}],
            "sessions": sessions,
            "probes": [probe],
            "metadata": {"source": "longmemeval", "source_record": where},
        }
    ]
