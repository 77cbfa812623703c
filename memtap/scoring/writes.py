"""``memtap compare RUN_A RUN_B --writes``: what each backend did with each recorded write.

Two A/B replays of the same recorded traffic (``replay --from-trace``) play the same turns;
each run's ``run_writes`` rows (the latest attempt of each episode) say whether the replay made
the call (``done``), could not (``skipped``, and why: an update or delete whose source item has
no item on that target) or had it refused (``failed``, with the target's error). For a call
made, the run's events at that episode and turn (their recorded effects) say what the backend
did:

- a write (``memory_add``): ``added`` (new items), ``merged`` (the content went into items already
  stored: update effects), or ``skipped`` when it stored nothing (mem0's reason when it gave one,
  such as a fact already stored);
- an update: ``updated`` (an update effect, or a delete and an add: the reference server);
- a delete: ``deleted``;
- a call that recorded no effect at all: ``no effect``.

Per write: the recorded tool and event, each side's action, the contents it left (``after``) or
removed, and its time as the replay measured it (``ms_a`` / ``ms_b``).
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from typing import Any

from memtap.scoring.errors import ScoringError
from memtap.scoring.retrievals import format_ms, median_ms

__all__ = ["WRITES_FORMAT", "compare_writes", "render_writes"]

WRITES_FORMAT = "memtap-compare-writes/1"


def _effects(conn: sqlite3.Connection, run: str, episode: str, turn: str, namespace: str) -> dict[str, Any]:
    kinds: Counter[str] = Counter()
    after: list[str] = []
    removed: list[str] = []
    reasons: list[str] = []
    for kind, before, content, result in conn.execute(
        "SELECT f.kind, f.content_before, f.content_after, e.result FROM events e"
        " LEFT JOIN effects f ON f.event_id = e.id WHERE e.run_id = ? AND e.episode = ? AND e.turn = ?"
        " AND e.namespace = ? AND e.op IN ('write', 'update', 'delete') ORDER BY e.id, f.rowid",
        [run, episode, turn, namespace],
    ):
        if kind is None:
            reasons.extend(_skip_reasons(result))
            continue
        kinds[kind] += 1
        if kind in ("add", "update") and content is not None:
            after.append(content)
        if kind == "delete" and before is not None:
            removed.append(before)
    return {"kinds": dict(kinds), "after": after, "removed": removed, "reasons": reasons}


def _skip_reasons(result: str | None) -> list[str]:
    """mem0's reasons for facts it did not store, from a write's recorded result."""
    try:
        value = json.loads(result) if result else None
    except ValueError:
        return []
    skipped = value.get("skipped") if isinstance(value, dict) else None
    return [str(s.get("reason")) for s in skipped or [] if isinstance(s, dict) and s.get("reason")]


def _action(tool: str, status: str, effects: dict[str, Any]) -> str:
    if status != "done":
        return status
    kinds = effects["kinds"]
    if tool == "memory_delete":
        return "deleted" if kinds.get("delete") else "no effect"
    if tool == "memory_update":
        return "updated" if kinds.get("update") or (kinds.get("delete") and kinds.get("add")) else "no effect"
    if kinds.get("add"):
        return "added"
    if kinds.get("update"):
        return "merged"
    return "skipped" if effects["reasons"] else "no effect"


def _writes(conn: sqlite3.Connection, run: str) -> dict[tuple[str, str], dict[str, Any]]:
    rows = conn.execute(
        "SELECT w.episode_id, w.attempt, w.turn_id, w.recorded_event, w.tool, w.status, w.why, w.ms,"
        " w.target_items, e.namespace FROM run_writes w JOIN run_episodes e ON e.run_id = w.run_id"
        " AND e.episode_id = w.episode_id AND e.attempt = w.attempt WHERE w.run_id = ? ORDER BY w.attempt",
        [run],
    ).fetchall()
    if not rows:
        raise ScoringError(
            f"run {run!r} has no replayed recorded writes in this database (replay --from-trace)"
        )
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for episode, _attempt, turn, event, tool, status, why, ms, items, namespace in rows:  # latest wins
        effects = _effects(conn, run, episode, turn, namespace) if status == "done" else None
        side = {"event": event, "tool": tool, "status": status, "ms": ms, "items": json.loads(items)}
        side["did"] = _action(tool, status, effects) if effects else status
        side["why"] = why or ("; ".join(effects["reasons"]) if effects and effects["reasons"] else None)
        side["effects"] = effects["kinds"] if effects else {}
        side["after"] = effects["after"] if effects else []
        side["removed"] = effects["removed"] if effects else []
        found[(episode, turn)] = side
    return found


def compare_writes(
    conn_a: sqlite3.Connection, run_a: str, conn_b: sqlite3.Connection, run_b: str
) -> dict[str, Any]:
    a, b = _writes(conn_a, run_a), _writes(conn_b, run_b)
    shared = [key for key in a if key in b]
    if not shared:
        raise ScoringError(f"runs {run_a} and {run_b} replayed no recorded write in common; nothing to pair")
    writes = []
    for episode, turn in sorted(shared):
        left, right = a[(episode, turn)], b[(episode, turn)]
        writes.append({
            "episode": episode, "turn": turn, "recorded_event": left["event"], "tool": left["tool"],
            "a": {k: v for k, v in left.items() if k not in ("event", "tool")},
            "b": {k: v for k, v in right.items() if k not in ("event", "tool")},
            "same": left["did"] == right["did"],
        })  # fmt: skip
    return {
        "format": WRITES_FORMAT,
        "runs": {"a": run_a, "b": run_b},
        "paired": len(writes),
        "unpaired": {"a": len(a) - len(shared), "b": len(b) - len(shared)},
        "actions": {side: dict(Counter(w[side]["did"] for w in writes)) for side in ("a", "b")},
        "same_action": sum(w["same"] for w in writes),
        "median_ms": {side: median_ms(w[side]["ms"] for w in writes) for side in ("a", "b")},
        "writes": writes,
    }


def render_writes(result: dict[str, Any]) -> str:
    runs, ms = result["runs"], result["median_ms"]
    lines = [
        f"writes of {runs['a']} (A) and {runs['b']} (B): {result['paired']} recorded writes paired, "
        f"{result['same_action']} with the same action; "
        f"median write ms A {format_ms(ms['a'])} B {format_ms(ms['b'])}",
    ]
    for side in ("a", "b"):
        counts = ", ".join(f"{n} {did}" for did, n in sorted(result["actions"][side].items()))
        lines.append(f"  {side.upper()}: {counts}")
    for w in result["writes"]:
        lines.append(f"{w['episode']} {w['turn']} {w['tool']}: A {_side(w['a'])} | B {_side(w['b'])}")
    return "\n".join(lines)


def _side(side: dict[str, Any]) -> str:
    text = f"{side['did']} ({format_ms(side['ms'])} ms)"
    if side["after"]:
        text += " " + "; ".join(repr(c) for c in side["after"])
    elif side["removed"]:
        text += " " + "; ".join(repr(c) for c in side["removed"])
    if side["why"]:
        text += f" [{side['why']}]"
    return text
