"""A replayed run read back from the trace database, in the shape the scorers need.

Everything comes from the database: the run (``runs``), its final attempts (``run_episodes``),
the gold (``suite_episodes``, stored at replay), the answers (``run_probes``) and what the
backend did (``events`` and ``effects`` in each final attempt's namespace). Nothing is read from
the suite file except its hash, to say whether it changed since the replay.

Positions: a session's position is its index in the episode; a probe's is the number of
sessions played before it was asked. An event names its session (the replay sends it); an event
that names none (an agent's own call the replay clock did not reach) takes the position of the
event before it in the namespace, so every write has a place on the gold timeline.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memtap.probes.schema import Episode, Probe
from memtap.scoring.errors import ScoringError
from memtap.trace.models import AccessTags

__all__ = [
    "Counts",
    "EpisodeTrace",
    "Hit",
    "ProbeRecord",
    "RunTrace",
    "WriteOp",
    "load_run",
    "new_counts",
    "suite_file_sha256",
]

PROBE_SESSION = "probes"  # memtap.probes.replay.PROBE_SESSION: where a probe's memory calls are recorded
Counts = defaultdict[str, float]
"""Per-episode counts (``capture.tp_pred``, ``recall_n.sum``, ...) that the measures are sums of."""


def new_counts() -> Counts:
    return defaultdict(float)


@dataclass(frozen=True)
class WriteOp:
    """One add, update or delete effect, placed on the episode's timeline."""

    kind: str  # add | update | delete
    item_id: str
    removed: str | None  # the item whose content this op took away: update (its source) and delete
    before: str | None
    after: str | None
    pos: int
    session: str | None
    role: str | None
    event_id: str
    tags: AccessTags | None


@dataclass(frozen=True)
class Hit:
    item_id: str
    rank: int
    content: str | None
    tags: AccessTags | None


@dataclass
class ProbeRecord:
    probe: Probe
    pos: int
    requester: str
    status: str | None  # None: the run has no row for this probe
    answer: dict[str, Any] | None
    hits: list[Hit]
    linked: bool  # hits come from retrieve effects at probe time (else from run_probes ids)


@dataclass
class EpisodeTrace:
    episode: Episode
    namespace: str
    attempt: int
    ops: list[WriteOp]
    probes: list[ProbeRecord]

    @property
    def session_index(self) -> dict[str, int]:
        return {s.session_id: i for i, s in enumerate(self.episode.sessions)}


@dataclass
class RunTrace:
    run: dict[str, Any]
    episodes: list[EpisodeTrace]
    coverage: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    latency: dict[str, Any] = field(default_factory=dict)
    # Canary episodes (scored by scoring/canary.py, not by the three levels) and their final attempts.
    canary_attempts: list[tuple[Episode, dict[str, Any]]] = field(default_factory=list)
    canary: dict[str, Any] | None = None

    @property
    def answered(self) -> bool:
        """Whether the run has answers to score (a reader, or an agent that replies)."""
        return self.run.get("reader") != "none" or any(
            p.answer for e in self.episodes for p in e.probes if p.answer
        )


def _tags(text: str | None) -> AccessTags | None:
    if not text:
        return None
    try:
        return AccessTags.model_validate_json(text)
    except ValueError:
        return None


def _rows(conn: sqlite3.Connection, sql: str, args: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    cursor = conn.execute(sql, args)
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _tags_from_elsewhere(
    conn: sqlite3.Connection,
    run_id: str,
    hits: dict[str, list[Hit]],
    content: dict[str, tuple[str | None, AccessTags | None]],
) -> None:
    """Give a retrieved item the episode never wrote (a backend that serves one namespace's items
    to another) the tags its last write in the run carried, so its owner is judged against the
    requester instead of the item passing as untagged."""
    for found in hits.values():
        for n, hit in enumerate(found):
            if hit.tags is not None or hit.item_id in content:
                continue
            row = conn.execute(
                "SELECT f.tags_after FROM effects f JOIN events e ON e.id = f.event_id"
                " WHERE f.item_id = ? AND e.run_id = ? AND f.kind IN ('add', 'update')"
                " ORDER BY e.id DESC LIMIT 1",
                (hit.item_id, run_id),
            ).fetchone()
            tags = _tags(row[0]) if row else None
            if tags is not None:
                found[n] = Hit(hit.item_id, hit.rank, hit.content, tags)


def _probe_position(episode: Episode, probe: Probe) -> int:
    return sum(1 for s in episode.sessions if s.time <= probe.time)


def _episode_trace(
    conn: sqlite3.Connection, run_id: str, episode: Episode, attempt: dict[str, Any]
) -> tuple[EpisodeTrace, Counter[str]]:
    namespace = attempt["namespace"]
    index = {s.session_id: i for i, s in enumerate(episode.sessions)}
    probes = {p.probe_id: p for p in episode.probes}
    positions = {p.probe_id: _probe_position(episode, p) for p in episode.probes}
    ops: list[WriteOp] = []
    hits: dict[str, list[Hit]] = {}
    seen: dict[str, set[str]] = {}
    content: dict[str, tuple[str | None, AccessTags | None]] = {}
    counts: Counter[str] = Counter()
    pos = 0
    rows = _rows(
        conn,
        "SELECT e.id, e.op, e.session, e.turn, e.role, f.kind, f.item_id, f.content_before,"
        " f.content_after, f.tags_after, f.rank, f.derived_from FROM events e"
        " LEFT JOIN effects f ON f.event_id = e.id WHERE e.namespace = ? ORDER BY e.id, f.seq",
        (namespace,),
    )
    # A delete whose item an update of the same call derives from (a server that rewrote it) is
    # that update's removal: the update takes it away, as an update.
    rewritten = {
        (row["id"], json.loads(row["derived_from"])[0])
        for row in rows
        if row["kind"] == "update" and row["derived_from"] and json.loads(row["derived_from"])
    }
    for row in rows:
        session, turn = row["session"], row["turn"]
        if session in index:
            pos = index[session]
        elif session == PROBE_SESSION and turn in positions:
            pos = positions[turn]
        kind = row["kind"]
        if row["op"] == "retrieve" and session == PROBE_SESSION and turn in probes:
            hits.setdefault(turn, [])
        if kind is None:
            continue
        tags = _tags(row["tags_after"])
        item = row["item_id"]
        if kind == "retrieve":
            if session == PROBE_SESSION and turn in probes:
                got = seen.setdefault(turn, set())
                if item not in got:
                    got.add(item)
                    text = (
                        row["content_after"]
                        if row["content_after"] is not None
                        else content.get(item, (None,))[0]
                    )
                    known_tags = tags or content.get(item, (None, None))[1]
                    hits.setdefault(turn, []).append(Hit(item, len(got), text, known_tags))
            else:
                counts["retrievals_outside_probes"] += 1
            continue
        if kind == "delete" and (row["id"], item) in rewritten:
            continue
        derived = json.loads(row["derived_from"]) if row["derived_from"] else []
        removed = None
        if kind == "delete":
            removed = item
        elif kind == "update":
            removed = derived[0] if derived else item
        ops.append(
            WriteOp(
                kind,
                item,
                removed,
                row["content_before"],
                row["content_after"],
                pos,
                session if session in index else None,
                row["role"],
                row["id"],
                tags,
            )
        )
        if kind != "delete":
            content[item] = (row["content_after"], tags)
    _tags_from_elsewhere(conn, run_id, hits, content)
    records: list[ProbeRecord] = []
    answered = {
        r["probe_id"]: r
        for r in _rows(
            conn,
            "SELECT * FROM run_probes WHERE run_id = ? AND episode_id = ? AND attempt = ?",
            (run_id, episode.episode_id, attempt["attempt"]),
        )
    }
    for probe in episode.probes:
        found_row = answered.get(probe.probe_id)
        answer = json.loads(found_row["answer"]) if found_row and found_row["answer"] else None
        linked = probe.probe_id in hits
        found = hits.get(probe.probe_id, [])
        if not linked and found_row is not None:
            ids = [str(i) for i in json.loads(found_row["retrieved"] or "[]")]
            found = [
                Hit(i, rank, content.get(i, (None, None))[0], content.get(i, (None, None))[1])
                for rank, i in enumerate(ids, 1)
            ]
            counts["probes_retrieval_from_run_probes"] += 1
        if found_row is None:
            counts["probes_without_row"] += 1
        requester = (found_row["requester"] if found_row else None) or episode.requester_of(probe)
        records.append(
            ProbeRecord(
                probe,
                positions[probe.probe_id],
                requester,
                found_row["status"] if found_row else None,
                answer if isinstance(answer, dict) else ({"answer": answer} if answer else None),
                found,
                linked,
            )
        )
    trace = EpisodeTrace(episode, namespace, attempt["attempt"], ops, records)
    return trace, counts


def _percentiles(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"p50": None, "p95": None, "n": 0}
    ordered = sorted(values)

    def pick(q: float) -> float:
        k = (len(ordered) - 1) * q
        lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
        return round(ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo), 3)

    return {"p50": pick(0.5), "p95": pick(0.95), "n": len(ordered)}


def _latency(conn: sqlite3.Connection, run_id: str, namespaces: list[str]) -> dict[str, Any]:
    """Search time, write time, proxy overhead and (where the chat proxy recorded it) time to first
    token, p50/p95 in milliseconds, over the events of the run's final attempts."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(events)")}
    marks = ",".join("?" * len(namespaces)) or "NULL"
    where = f"namespace IN ({marks})"

    def values(sql: str, args: tuple[Any, ...] = ()) -> list[float]:
        return [float(r[0]) for r in conn.execute(sql, args) if r[0] is not None]

    args = tuple(namespaces)
    out = {
        "search_ms": _percentiles(
            values(f"SELECT backend_ms FROM events WHERE op = 'retrieve' AND {where}", args)
        ),
        "write_ms": _percentiles(
            values(
                f"SELECT backend_ms FROM events WHERE op IN ('write', 'update', 'delete') AND {where}", args
            )
        ),
        "proxy_overhead_ms": _percentiles(
            values(
                "SELECT overhead_ms FROM events WHERE op IN"
                f" ('write', 'update', 'delete', 'retrieve', 'read') AND {where}",
                args,
            )
        ),
        "probe_retrieve_ms": _percentiles(
            values("SELECT retrieve_ms FROM run_probes WHERE run_id = ?", (run_id,))
        ),
    }
    if "ttft_ms" in columns:
        out["time_to_first_token_ms"] = _percentiles(
            values("SELECT ttft_ms FROM events WHERE op = 'chat' AND run_id = ?", (run_id,))
        )
    else:
        out["time_to_first_token_ms"] = {"p50": None, "p95": None, "n": 0}
    return out


def load_run(conn: sqlite3.Connection, run_id: str, *, current_sha256: str | None) -> RunTrace:
    """Read ``run_id`` back. ``current_sha256`` is the hash of the suite file as it is now (None
    when the file is gone), to report a suite changed since the replay."""
    found = _rows(conn, "SELECT * FROM runs WHERE id = ?", (run_id,))
    if not found:
        known = [r["id"] for r in _rows(conn, "SELECT id FROM runs ORDER BY started_at")]
        hint = f"; runs here: {', '.join(known[-5:])}" if known else "; it holds no runs"
        raise ScoringError(f"no run {run_id!r} in this database{hint}")
    run = found[0]
    sha = run["suite_sha256"]
    suite = {
        r["episode_id"]: Episode.model_validate_json(r["episode"])
        for r in _rows(
            conn,
            "SELECT episode_id, episode FROM suite_episodes WHERE suite_sha256 = ? ORDER BY position",
            (sha,),
        )
    }
    if not suite:
        raise ScoringError(
            f"run {run_id}: the suite it replayed (sha256 {sha[:12]}) is not stored in this database, so "
            "there is no gold to score against"
        )
    warnings: list[str] = []
    if current_sha256 is None:
        suite_state = "missing"
    elif current_sha256 != sha:
        suite_state = "changed"
        warnings.append(
            f"the suite file {run['suite_path']} changed since the replay (sha256 {sha[:12]} then, "
            f"{current_sha256[:12]} now); scored against the gold stored at replay"
        )
    else:
        suite_state = "unchanged"
    latest: dict[str, dict[str, Any]] = {}
    for row in _rows(conn, "SELECT * FROM run_episodes WHERE run_id = ? ORDER BY attempt", (run_id,)):
        latest[row["episode_id"]] = row
    episodes: list[EpisodeTrace] = []
    counts: Counter[str] = Counter()
    failed, unfinished, not_played = [], [], []
    canary: list[tuple[Episode, dict[str, Any]]] = []
    for episode_id, episode in suite.items():
        attempt = latest.get(episode_id)
        if attempt is None:
            not_played.append(episode_id)
        elif attempt["status"] == "failed":
            failed.append({"episode": episode_id, "error": attempt["error"]})
        elif attempt["status"] != "done":
            unfinished.append(episode_id)
        elif episode.paradigm == "canary":
            canary.append((episode, attempt))
        else:
            trace, more = _episode_trace(conn, run_id, episode, attempt)
            episodes.append(trace)
            counts.update(more)
    if failed:
        warnings.append(
            f"{len(failed)} episode(s) failed in the replay and are excluded from every measure: "
            + ", ".join(f["episode"] for f in failed[:10])
        )
    if unfinished or not_played:
        warnings.append(
            f"{len(unfinished) + len(not_played)} episode(s) were not finished and are excluded: "
            + ", ".join((unfinished + not_played)[:10])
        )
    probes = [p for e in episodes for p in e.probes]
    coverage = {
        "episodes_total": len(suite),
        "episodes_scored": len(episodes),
        "episodes_canary": len(canary),
        "episodes_failed": failed,
        "episodes_unfinished": unfinished,
        "episodes_not_played": not_played,
        "probes_total": len(probes),
        "probes_answered": sum(1 for p in probes if p.status == "ok" and p.answer is not None),
        "probes_errored": sum(1 for p in probes if p.status not in (None, "ok")),
        "probes_without_row": counts["probes_without_row"],
        "probes_retrieval_from_run_probes": counts["probes_retrieval_from_run_probes"],
        "retrievals_outside_probes": counts["retrievals_outside_probes"],
        "suite_file": suite_state,
    }
    run_info = {
        "id": run_id,
        "status": run["status"],
        "target": run["target"],
        "reader": run["reader"],
        "suite_path": run["suite_path"],
        "suite_sha256": sha,
        "started_at": run["started_at"],
        "ended_at": run["ended_at"],
    }
    latency = _latency(conn, run_id, [e.namespace for e in episodes])
    return RunTrace(run_info, episodes, coverage, warnings, latency, canary)


def suite_file_sha256(path: str) -> str | None:
    from memtap.probes.suitefile import file_sha256

    try:
        return file_sha256(Path(path))
    except OSError:
        return None
