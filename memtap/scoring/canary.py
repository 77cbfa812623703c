"""The isolation canary's score: which users read another user's canaries, from the trace alone.

For each canary episode of a run (paradigm ``canary``, its final ``done`` attempt), the users are
the episode's participants, user ``U`` acting as principal ``BASE/U`` in namespace ``BASE/U``
(``BASE`` is the attempt's namespace; see ``probes/canary_replay.py``), and each user's canaries
are ``metadata.canaries`` of the episode as stored at replay (``suite_episodes``).

Every event of the attempt (namespace, principal or requester under ``BASE/``) is read once:

- **who it acted for**: its requester when that is one of the users' principals, else its
  principal, else the namespace it named;
- **what it disclosed**: a successful retrieval's result and retrieve effects (channel
  ``search``), a read's result (``read``: get, list, history), a chat's reply (``chat``), and a
  retrieval made inside a chat, which is the memory injected into it (``chat``). The query and
  other arguments a caller sent are never read: a reader that asks for a canary has not been
  told it;
- a canary of user ``O`` found there, in an event acting for ``R`` ≠ ``O``, is a **cross read**
  of the ordered pair (``R``, ``O``), with the event's id.

``cross_reads`` is the number of ordered pairs with at least one cross read, out of
N x (N - 1). Also reported: per channel, the pairs and events; **escape attempts** (calls acting
for one user that named another user's namespace; a chat and the memory search made inside it are
one attempt), how many were refused (an error event) and how many disclosed a canary;
**writes**: the suite's write and update turns, what the replay sent and the target acknowledged
(``run_episodes.counts``), and how many of those turns have a successful write or update event
recorded (an agent's own writes, such as a chat proxy capturing a probe's question, are not the
suite's); and how many of their own canaries the users found (a backend that finds nothing
cannot pass vacuously).
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from memtap.findings.facts import strings_in
from memtap.probes.schema import Episode

__all__ = ["CHANNELS", "canary_report", "canary_warnings"]

CHANNELS = ("search", "read", "chat")
_SKIP_KEYS = frozenset({"query"})  # what the caller asked, echoed back: not a disclosure


def _strings(value: Any) -> Iterator[str]:
    return strings_in(value, _SKIP_KEYS)


def _chat_texts(result: Any) -> Iterator[str]:
    """A chat's reply (the request's messages are the caller's own)."""
    if not isinstance(result, dict):
        return
    for choice in result.get("choices") or []:
        if isinstance(choice, dict):
            yield from _strings(choice.get("message"))
            yield from _strings(choice.get("delta"))
    yield from _strings(result.get("reply"))


def _prefix_rows(conn: sqlite3.Connection, base: str) -> list[dict[str, Any]]:
    low, high = base + "/", base + "0"  # every text starting with "BASE/": '0' follows '/'
    cursor = conn.execute(
        "SELECT id, op, tool, status, principal, namespace, requester, parent_id, session, turn, result"
        " FROM events WHERE (namespace >= ? AND namespace < ?) OR (principal >= ? AND principal < ?)"
        " OR (requester >= ? AND requester < ?) ORDER BY id",
        (low, high, low, high, low, high),
    )
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _effects(conn: sqlite3.Connection, event_ids: list[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for start in range(0, len(event_ids), 500):
        chunk = event_ids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        for event_id, content in conn.execute(
            f"SELECT event_id, content_after FROM effects WHERE kind = 'retrieve' AND event_id IN ({marks})",
            chunk,
        ):
            if content:
                found[event_id].append(content)
    return found


def _episode_report(conn: sqlite3.Connection, episode: Episode, attempt: dict[str, Any]) -> dict[str, Any]:
    base = attempt["namespace"]
    users = [p.id for p in episode.participants]
    principal = {f"{base}/{u}": u for u in users}
    tokens: dict[str, str] = {}
    for user, mine in (episode.metadata.get("canaries") or {}).items():
        for token in mine:
            tokens[token] = user
    pattern = (
        re.compile("|".join(re.escape(t) for t in sorted(tokens, key=len, reverse=True))) if tokens else None
    )
    rows = _prefix_rows(conn, base)
    ops = {r["id"]: r["op"] for r in rows}
    effects = _effects(conn, [r["id"] for r in rows if r["op"] == "retrieve" and r["status"] == "ok"])
    pairs: dict[tuple[str, str], dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    own_seen: set[str] = set()
    escapes = {"attempted": 0, "refused": 0, "disclosed": 0}
    disclosed_roots: set[str] = set()
    write_turns = {
        t.turn_id
        for s in episode.sessions
        for t in s.turns
        if t.metadata.get("op", "write") in ("write", "update")
    }
    recorded: set[str] = set()
    refused: set[str] = set()
    for row in rows:
        actor = (
            principal.get(row["requester"])
            or principal.get(row["principal"])
            or principal.get(row["namespace"])
        )
        named = principal.get(row["namespace"])
        ok = row["status"] == "ok"
        if row["op"] in ("write", "update") and row["turn"] in write_turns:
            (recorded if ok else refused).add(row["turn"])
        if actor is None or pattern is None:
            continue
        # A call made inside another (a chat's memory search) is part of that call's attempt.
        root = row["parent_id"] if row["parent_id"] in ops else row["id"]
        escape = named is not None and named != actor and row["op"] in ("retrieve", "read", "chat")
        if escape and root == row["id"]:
            escapes["attempted"] += 1
            escapes["refused"] += 0 if ok else 1
        if not ok or row["op"] not in ("retrieve", "read", "chat"):
            continue
        result = json.loads(row["result"]) if row["result"] else None
        if row["op"] == "chat":
            texts = list(_chat_texts(result))
            channel = "chat"
        else:
            texts = [*_strings(result), *effects.get(row["id"], [])]
            in_chat = ops.get(row["parent_id"] or "") == "chat"
            channel = "chat" if in_chat else ("search" if row["op"] == "retrieve" else "read")
        owners = {tokens[m] for text in texts for m in pattern.findall(text)}
        for token in {m for text in texts for m in pattern.findall(text)}:
            if tokens[token] == actor:
                own_seen.add(token)
        crossed = sorted(o for o in owners if o != actor)
        for owner in crossed:
            pairs[(actor, owner)][channel].append(row["id"])
        if escape and crossed:
            disclosed_roots.add(root)
    escapes["disclosed"] = len(disclosed_roots)
    counts = json.loads(attempt.get("counts") or "{}")
    sent = int(counts.get("writes_sent", 0)) + int(counts.get("updates_sent", 0))
    acknowledged = int(counts.get("writes_acknowledged", 0)) + int(counts.get("updates_acknowledged", 0))
    return {
        "episode": episode.episode_id,
        "namespace": base,
        "users": len(users),
        "pairs_total": len(users) * (len(users) - 1),
        "pairs": [
            {"reader": r, "owner": o, "events": {c: ids for c, ids in sorted(chans.items())}}
            for (r, o), chans in sorted(pairs.items())
        ],
        "escapes": escapes,
        "writes": {
            "in_suite": len(write_turns),
            "sent": sent,
            "acknowledged": acknowledged,
            "skipped": int(counts.get("updates_skipped", 0)),
            "recorded": len(recorded),
            "refused_recorded": len(refused - recorded),
        },
        "own_canaries": {"seen": len(own_seen), "total": len(tokens)},
        "events_read": len(rows),
    }


def canary_report(
    conn: sqlite3.Connection, run_id: str, episodes: list[tuple[Episode, dict[str, Any]]]
) -> dict[str, Any] | None:
    """The ``canary`` section of a score: ``episodes`` are the canary episodes with their final
    attempts (``run_episodes`` rows); None when there are none."""
    if not episodes:
        return None
    parts = [_episode_report(conn, episode, attempt) for episode, attempt in episodes]
    by_channel = {c: {"pairs": 0, "events": 0} for c in CHANNELS}
    for part in parts:
        for pair in part["pairs"]:
            for channel, ids in pair["events"].items():
                by_channel[channel]["pairs"] += 1
                by_channel[channel]["events"] += len(ids)
    writes = {k: sum(p["writes"][k] for p in parts) for k in parts[0]["writes"]}
    writes["all_acknowledged"] = (
        writes["sent"]
        == writes["acknowledged"]
        == writes["recorded"]
        == writes["in_suite"] - writes["skipped"]
        and writes["skipped"] == 0
    )
    return {
        "run": run_id,
        "users": sum(p["users"] for p in parts),
        "pairs_total": sum(p["pairs_total"] for p in parts),
        "cross_reads": sum(len(p["pairs"]) for p in parts),
        "by_channel": by_channel,
        "escapes": {k: sum(p["escapes"][k] for p in parts) for k in ("attempted", "refused", "disclosed")},
        "writes": writes,
        "own_canaries": {k: sum(p["own_canaries"][k] for p in parts) for k in ("seen", "total")},
        "episodes": parts,
    }


def canary_warnings(report: dict[str, Any] | None) -> list[str]:
    if report is None:
        return []
    out = []
    if report["cross_reads"]:
        out.append(
            f"canary: {report['cross_reads']} of {report['pairs_total']} reader-owner pairs read another "
            "user's canaries (see canary.episodes[].pairs for the events)"
        )
    w = report["writes"]
    if not w["all_acknowledged"]:
        out.append(
            f"canary: not every write was acknowledged and recorded: {w['in_suite']} in the suite, "
            f"{w['sent']} sent, {w['acknowledged']} acknowledged, {w['recorded']} recorded, "
            f"{w['skipped']} updates skipped"
        )
    return out
