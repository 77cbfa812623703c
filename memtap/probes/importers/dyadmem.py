"""DyadMem episodes (the paper's format; no public data) to memtap ``lifecycle`` suites.

- each session's ``time_anchor`` and turn ``timestamp`` (``Jan 06, 2026, 13:35:57``, UTC) are
  its times; turn ``k`` of session ``i`` is ``s{i}-t{k}``;
- ``capture_memories`` become gold memories ``m{memory_index}`` created in that session and
  listed in its ``gold.capture``;
- ``update_memories`` (``delete_memories`` / ``add_memories``, or the prompt's ``delete_indices`` /
  ``adds``) become ``gold.update``: a deleted memory is invalidated in that session; an added one
  is created there, and ``replaces`` links it to what it supersedes (which is invalidated too);
  an added memory without an index is named ``s{i}-add{k}``;
- ``QA_list`` becomes ``qa`` probes asked one day after the last session, with the
  ``recall_memories`` as support. A recalled memory no shown session captured (the paper's
  excerpts elide sessions) is added to the gold bank with ``created_in`` unset and
  ``metadata.from: recall_memories``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memtap.probes.errors import Problem
from memtap.probes.importers._common import FORMAT, Malformed, Record, iso, read_json_records, require

__all__ = ["convert", "parse_time", "records"]

USER, ASSISTANT = "user", "assistant"
_FORMATS = ("%b %d, %Y, %H:%M:%S", "%b %d, %Y %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S")
_TYPES = ("episodic", "user_profile", "fact", "agent_identity", "agent_method", "agent_knowledge")


def records(path: Path) -> Iterator[Record]:
    yield from read_json_records(path)


def parse_time(value: Any, where: str) -> datetime:
    if isinstance(value, str):
        text = value.strip().removesuffix("Z")
        for fmt in _FORMATS:
            try:
                return datetime.strptime(text, fmt).replace(tzinfo=UTC)
            except ValueError:
                continue
    raise Malformed(where, f"unreadable time {value!r}")


def _memory(raw: Any, where: str) -> tuple[int | None, str, str]:
    index = raw.get("memory_index") if isinstance(raw, dict) else None
    kind = require(raw, "memory_type", str, where)
    if kind not in _TYPES:
        raise Malformed(f"{where}.memory_type", f"unknown memory type {kind!r}")
    content = require(raw, "memory_content", str, where)
    return (index if isinstance(index, int) else None), kind, content


def convert(record: Any, where: str) -> list[dict[str, Any] | Problem]:
    episode_id = require(record, "episode_id", str)
    bank: dict[str, dict[str, Any]] = {}
    sessions: list[dict[str, Any]] = []
    for i, raw in enumerate(require(record, "sessions", list)):
        at = f"sessions[{i}]"
        sid = f"s{i}"
        start = parse_time(require(raw, "time_anchor", str, at), f"{at}.time_anchor")
        turns = []
        for k, turn in enumerate(require(raw, "dialogue_turns", list, at)):
            tw = f"{at}.dialogue_turns[{k}]"
            role = require(turn, "role", str, tw)
            if role not in (USER, ASSISTANT):
                raise Malformed(f"{tw}.role", f"expected user or assistant, got {role!r}")
            moment = parse_time(turn["timestamp"], f"{tw}.timestamp") if turn.get("timestamp") else start
            turns.append(
                {
                    "turn_id": f"{sid}-t{k}",
                    "role": role,
                    "speaker": role,
                    "content": require(turn, "content", str, tw),
                    "time": iso(moment),
                }
            )
        capture = []
        for k, memory in enumerate(raw.get("capture_memories") or []):
            index, kind, content = _memory(memory, f"{at}.capture_memories[{k}]")
            key = f"m{index}" if index is not None else f"{sid}-m{k}"
            bank[key] = {"content": content, "type": kind, "created_in": sid}
            capture.append(key)
        deleted, added = _updates(raw.get("update_memories") or {}, sid, at, bank)
        sessions.append(
            {
                "session_id": sid,
                "time": iso(start),
                "participants": [USER, ASSISTANT],
                "turns": turns,
                "gold": {"capture": capture, "update": {"delete": deleted, "add": added}},
                "metadata": {"memory_hints": raw.get("memory_hints") or []},
            }
        )
    if not sessions:
        raise Malformed("sessions", "no sessions")
    ask_at = iso(parse_time(sessions[-1]["turns"][-1]["time"], "time") + timedelta(days=1))
    probes = []
    for q, item in enumerate(record.get("QA_list") or []):
        qw = f"QA_list[{q}]"
        support = []
        for k, memory in enumerate(item.get("recall_memories") or []):
            index, kind, content = _memory(memory, f"{qw}.recall_memories[{k}]")
            if index is None:
                raise Malformed(f"{qw}.recall_memories[{k}].memory_index", "missing")
            key = f"m{index}"
            bank.setdefault(key, {"content": content, "type": kind, "metadata": {"from": "recall_memories"}})
            support.append(key)
        probes.append(
            {
                "probe_id": f"q{q}",
                "type": "qa",
                "requester": USER,
                "question": require(item, "query", str, qw),
                "time": ask_at,
                "gold": {"answer": item.get("answer")},
                "support": support,
            }
        )
    keep = ("data_type", "lang", "user_profile_init", "agent_profile_init", "seed_summary", "trace_summary")
    return [
        {
            "format": FORMAT,
            "episode_id": episode_id,
            "suite": "dyadmem",
            "paradigm": "lifecycle",
            "condition": record.get("data_type"),
            "namespace": USER,
            "participants": [{"id": USER, "role": "user"}, {"id": ASSISTANT, "role": "assistant"}],
            "sessions": sessions,
            "gold_memory": bank,
            "probes": probes,
            "metadata": {"source": "dyadmem", "source_record": where}
            | {key: record[key] for key in keep if key in record},
        }
    ]


def _updates(raw: Any, sid: str, at: str, bank: dict[str, dict[str, Any]]) -> tuple[list[str], list[str]]:
    if not isinstance(raw, dict):
        raise Malformed(f"{at}.update_memories", "expected an object")
    deletes = raw.get("delete_memories", raw.get("delete_indices")) or []
    adds = raw.get("add_memories", raw.get("adds")) or []
    deleted: list[str] = []

    def close(index: Any, where: str) -> str:
        if isinstance(index, dict):
            index = index.get("memory_index")
        if not isinstance(index, int):
            raise Malformed(where, "expected a memory index")
        key = f"m{index}"
        if key not in bank:
            raise Malformed(where, f"memory {index} was never captured")
        bank[key]["invalidated_in"] = sid
        if key not in deleted:
            deleted.append(key)
        return key

    for k, index in enumerate(deletes):
        close(index, f"{at}.update_memories.delete_memories[{k}]")
    added = []
    for k, memory in enumerate(adds):
        mw = f"{at}.update_memories.add_memories[{k}]"
        index, kind, content = _memory(memory, mw)
        key = f"m{index}" if index is not None else f"{sid}-add{k}"
        replaces = [close(old, f"{mw}.replaces") for old in memory.get("replaces") or []]
        bank[key] = {"content": content, "type": kind, "created_in": sid, "replaces": replaces}
        added.append(key)
    return deleted, added
