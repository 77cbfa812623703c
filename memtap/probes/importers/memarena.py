"""MemArena (``memarena2026/MemArena-NeurIPS2026-anon``, CC BY 4.0 data) to memtap suites.

Input: the release folder (``corpus_sessions.jsonl[.gz]``, ``ego_session_map.json``,
``eval_instances/*.jsonl``), or one JSON file ``{"sessions": [...], "ego_session_map": {...},
"instances": [...]}``.

- one episode per ego agent that has evaluation instances; its sessions are the ones the
  ego witnessed (``ego_session_map``), in time order; the namespace is the ego;
- times are MemArena's simulation days (a float; day 0 is 2025-01-01 UTC, as in MemArena's
  own loader) or ISO strings;
- a turn's role is ``user`` when the ego speaks, ``assistant`` for ``assistant_*`` agents,
  ``third_party`` for everyone else; every session's access is ``participants``;
- instances become probes asked by ``asker_agent_id`` (an empty asker, or
  ``anonymous_querier``, is ``anonymous``): ``d4_permission`` items are ``permission`` probes
  whose action comes from ``expected_action`` (disclose | withhold), ``expected_answer_mode``
  (disclose; deny and abstain mean withhold), ``expected_disclosure`` or
  ``permission_granted`` — the three published versions name it differently — with the
  protected ``fact`` as ``protected_fact`` when withheld; ``d3_confabulation`` items whose
  expected response is ``abstain`` are ``abstention`` probes; ``d5_cloze`` ``cloze``;
  ``d6_metadata`` ``metadata``; the rest ``qa``. ``evidence_session_ids`` stay in metadata.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memtap.probes.errors import Problem, SuiteError
from memtap.probes.importers._common import FORMAT, Malformed, Record, iso, read_json_records, require
from memtap.probes.importers._common import object_or_empty as _object
from memtap.probes.schema import ANONYMOUS

__all__ = ["convert", "records", "sim_time"]

SIM_START = datetime(2025, 1, 1, tzinfo=UTC)
_TYPES = {"d4_permission": "permission", "d5_cloze": "cloze", "d6_metadata": "metadata"}
_ANSWER_KEYS = ("answer", "correct_answer", "resolved_text", "value", "fact", "correct_fact", "real_fact")


def sim_time(value: Any, where: str) -> datetime:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return SIM_START + timedelta(days=float(value))
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    raise Malformed(where, f"unreadable time {value!r}")


def _first(folder: Path, *names: str) -> Path | None:
    for name in names:
        if (folder / name).exists():
            return folder / name
    return None


def _load(path: Path) -> tuple[list[Record], dict[str, Any], list[Record]]:
    if path.is_dir():
        corpus = _first(path, "corpus_sessions.jsonl", "corpus_sessions.jsonl.gz", "sessions.jsonl")
        ego_map = _first(path, "ego_session_map.json")
        if corpus is None or ego_map is None:
            raise SuiteError(f"{path} holds no corpus_sessions.jsonl[.gz] and ego_session_map.json")
        try:
            mapping = json.loads(ego_map.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SuiteError(f"cannot read {ego_map}: {exc}") from None
        instances: list[Record] = []
        for file in sorted((path / "eval_instances").glob("*.jsonl*")):
            instances.extend(read_json_records(file))
        return list(read_json_records(corpus)), mapping, instances
    records_ = list(read_json_records(path))
    if len(records_) != 1 or not isinstance(records_[0][1], dict):
        raise SuiteError(f"{path}: expected one object with sessions, ego_session_map and instances")
    where, bundle = records_[0]
    for key in ("sessions", "ego_session_map", "instances"):
        if key not in bundle:
            raise SuiteError(f"{where}: the bundle has no {key!r}")
    return (
        [(f"{where} sessions[{i}]", s) for i, s in enumerate(bundle["sessions"])],
        bundle["ego_session_map"],
        [(f"{where} instances[{i}]", s) for i, s in enumerate(bundle["instances"])],
    )


def records(path: Path) -> Iterator[Record]:
    """One record per ego agent with instances: its witnessed sessions and its instances."""
    sessions, mapping, instances = _load(path)
    by_id: dict[str, Record] = {}
    for where, session in sessions:
        if isinstance(session, Problem):
            yield where, session
        elif isinstance(session, dict) and isinstance(session.get("session_id"), str):
            by_id[session["session_id"]] = (where, session)
        else:
            yield where, Problem(where, "malformed session: no session_id")
    per_ego: dict[str, list[Record]] = defaultdict(list)
    for where, instance in instances:
        if isinstance(instance, Problem):
            yield where, instance
        elif isinstance(instance, dict) and isinstance(instance.get("ego_agent_id"), str):
            per_ego[instance["ego_agent_id"]].append((where, instance))
        else:
            yield where, Problem(where, "malformed instance: no ego_agent_id", None, "ego_agent_id")
    for ego, items in per_ego.items():
        witnessed = mapping.get(ego)
        if not isinstance(witnessed, list):
            yield items[0][0], Problem(items[0][0], f"ego {ego!r} has no entry in ego_session_map")
            continue
        missing = [sid for sid in witnessed if sid not in by_id]
        found = [by_id[sid] for sid in witnessed if sid in by_id]
        yield items[0][0], {"ego": ego, "sessions": found, "instances": items, "missing_sessions": missing}


def _role(speaker: str, ego: str) -> str:
    if speaker == ego:
        return "user"
    return "assistant" if speaker.startswith("assistant") or speaker == "__assistant__" else "third_party"


def _session(where: str, raw: Any, ego: str) -> dict[str, Any]:
    sid = require(raw, "session_id", str)
    start = sim_time(raw.get("start_time", raw.get("timestamp")), f"{where}.start_time")
    turns = []
    for k, turn in enumerate(require(raw, "turns", list, where)):
        tw = f"{where}.turns[{k}]"
        speaker = require(turn, "speaker_id", str, tw)
        moment = sim_time(turn["timestamp"], f"{tw}.timestamp") if "timestamp" in turn else start
        meta = {key: turn[key] for key in ("listener_id", "extracted_facts") if turn.get(key)}
        turns.append(
            {
                "turn_id": str(turn.get("turn_id") or f"{sid}_t{k}"),
                "role": _role(speaker, ego),
                "speaker": speaker,
                "content": require(turn, "text", str, tw),
                "time": iso(max(moment, start)),
                "metadata": meta,
            }
        )
    keep = ("location_id", "group_id", "modality", "session_type", "interest_domain")
    return {
        "session_id": sid,
        "time": iso(start),
        "participants": [str(p) for p in raw.get("participants") or []],
        "access": {"visibility": "participants"},
        "turns": turns,
        "metadata": {key: raw[key] for key in keep if raw.get(key)},
    }


def _action(instance: dict[str, Any], gt: dict[str, Any]) -> str:
    meta = _object(instance.get("metadata"))
    for value in (gt.get("expected_action"), instance.get("expected_action")):
        if value in ("disclose", "withhold"):
            return str(value)
    for value in (gt.get("expected_answer_mode"), meta.get("expected_answer_mode")):
        if value in ("disclose", "answer"):
            return "disclose"
        if value in ("deny", "abstain", "withhold"):
            return "withhold"
    for key in ("expected_disclosure", "permission_granted"):
        if isinstance(gt.get(key), bool):
            return "disclose" if gt[key] else "withhold"
    raise Malformed("ground_truth.expected_action", "no disclose/withhold in any of the known fields")


def _probe(where: str, instance: Any, ask_default: datetime) -> dict[str, Any]:
    instance_id = require(instance, "instance_id", str)
    gt = _object(instance.get("ground_truth"))
    meta = _object(instance.get("metadata"))
    asker = instance.get("asker_agent_id", gt.get("query_agent"))
    anonymous = not asker or gt.get("anonymous_querier") or meta.get("anonymous_querier")
    dimension = str(instance.get("dimension") or "")
    kind = _TYPES.get(dimension, "qa")
    answer = next((str(gt[k]) for k in _ANSWER_KEYS if isinstance(gt.get(k), str) and gt[k].strip()), None)
    action, fields = "answer", {}
    if kind == "permission":
        action = _action(instance, gt)
        fact = str(gt.get("fact") or "") or None
        if action == "withhold":
            answer, fields = None, {"protected_fact": fact} if fact else {}
        else:
            answer = fact
    elif dimension == "d3_confabulation" and str(gt.get("expected_response", "")).lower() == "abstain":
        kind, action, answer = "abstention", "abstain", None
    asked = meta.get("query_timestamp")
    kinds = ("known_requester", "anonymous_querier", "autonomous_privacy")
    return {
        "probe_id": instance_id,
        "type": kind,
        "requester": ANONYMOUS if anonymous else str(asker),
        "question": require(instance, "query", str),
        "time": iso(sim_time(asked, "metadata.query_timestamp") if asked is not None else ask_default),
        "expected_action": action,
        "gold": {"answer": answer, "fields": fields},
        "metadata": {
            "dimension": dimension,
            "difficulty": instance.get("difficulty"),
            "context_tier": instance.get("context_tier"),
            "evidence_sessions": instance.get("evidence_session_ids") or [],
            "source_record": where,
            "ground_truth": gt,  # what MemArena's scorer reads (memtap score --answer-scorer memarena)
        }
        | {k: True for k in kinds if gt.get(k) or meta.get(k)},
    }


def convert(record: Any, where: str) -> list[dict[str, Any] | Problem]:
    ego = str(record["ego"])
    sessions = sorted((_session(w, raw, ego) for w, raw in record["sessions"]), key=lambda s: str(s["time"]))
    if not sessions:
        raise Malformed("ego_session_map", f"ego {ego!r} witnessed no session in the corpus")
    ask_default = datetime.fromisoformat(sessions[-1]["turns"][-1]["time"]) + timedelta(days=1)
    probes: list[dict[str, Any]] = []
    out: list[dict[str, Any] | Problem] = []
    for iw, instance in record["instances"]:
        try:
            probes.append(_probe(iw, instance, ask_default))
        except Malformed as exc:
            out.append(Problem(iw, f"malformed instance: {exc.message}", ego, exc.field))
    roles: dict[str, str] = {ego: "user"}
    for session in sessions:
        for person in session["participants"] + [t["speaker"] for t in session["turns"]]:
            roles.setdefault(person, "assistant" if _role(person, ego) == "assistant" else "third_party")
        session["participants"] = list(dict.fromkeys(session["participants"]))
    for probe in probes:
        if probe["requester"] != ANONYMOUS:
            roles.setdefault(probe["requester"], "requester")
    out.insert(
        0,
        {
            "format": FORMAT,
            "episode_id": f"memarena-{ego}",
            "suite": "memarena",
            "paradigm": "permission" if any(p["type"] == "permission" for p in probes) else "qa",
            "namespace": ego,
            "participants": [{"id": person, "role": role} for person, role in roles.items()],
            "sessions": sessions,
            "probes": probes,
            "metadata": {"source": "memarena", "missing_sessions": record["missing_sessions"]},
        },
    )
    return out
