"""Replay on builtin with turns sent one by one and as batches: the same trace, event for event."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from memtap.cli.main import cli
from memtap.probes.generators import generate
from memtap.probes.suitefile import write_suite


def _replay(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, ["replay", *args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.output))


_ID = re.compile(r"\b(?:mem_)?[0-9A-HJKMNP-TV-Z]{26}\b")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:\+00:00|Z)?")
_VARYING = {"id", "started_at", "ended_at", "total_ms", "overhead_ms", "backend_ms", "run_id"}


def _trace(db: Path, run: str) -> list[str]:
    """The run's events, each with its effects and the item versions it made, in the order they were
    recorded; ids become their order of first appearance, times and the run's name placeholders."""
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        events = conn.execute("SELECT * FROM events WHERE run_id = ? ORDER BY id", [run]).fetchall()
        rows = []
        for event in events:
            effects = conn.execute("SELECT * FROM effects WHERE event_id = ? ORDER BY seq", [event["id"]])
            versions = conn.execute(
                "SELECT v.version, v.content, v.tags, v.op, v.valid_to IS NULL AS open, i.namespace, i.principal,"
                " i.episode, i.session, i.turn, i.role, i.retrieved_count FROM item_versions v JOIN items i"
                " ON i.backend = v.backend AND i.item_id = v.item_id WHERE v.event_id = ?",
                [event["id"]],
            )
            row = {k: v for k, v in dict(event).items() if k not in _VARYING}
            rows.append(
                json.dumps([row, [dict(e) for e in effects], [dict(v) for v in versions]], sort_keys=True)
            )
    finally:
        conn.close()
    text = _TIME.sub("TIME", "\n".join(rows)).replace(run, "RUN")
    seen: dict[str, str] = {}
    return _ID.sub(lambda m: seen.setdefault(m.group(0), f"ID{len(seen)}"), text).splitlines()


def test_a_suite_replayed_turn_by_turn_and_in_batches_leaves_the_same_events_effects_and_lineage(
    tmp_path: Path,
) -> None:
    suite = tmp_path / "suite.jsonl"
    write_suite(
        generate("paradigms", seed=11, episodes=3) + generate("permission", seed=11, episodes=1), suite
    )
    db = tmp_path / "trace.db"
    one = _replay(
        str(suite), "--target", "builtin", "--db", str(db), "--run", "run-turns", "--ingest", "turn"
    )
    batch = _replay(
        str(suite), "--target", "builtin", "--db", str(db), "--run", "run-batch", "--ingest", "batch"
    )
    for summary in (one, batch):
        assert (summary["status"], summary["episodes_failed"], summary["memory_events_without_context"]) == (
            "completed", 0, 0
        )  # fmt: skip
    per_turn, batched = _trace(db, "run-turns"), _trace(db, "run-batch")
    assert len(per_turn) == one["memory_events"] == batch["memory_events"] > 20
    assert [(i, b) for i, (b, t) in enumerate(zip(batched, per_turn, strict=True)) if b != t] == []
    conn = sqlite3.connect(db)
    tools = dict(conn.execute("SELECT tool, count(*) FROM events GROUP BY tool").fetchall())
    config = {r: json.loads(c)["ingest"] for r, c in conn.execute("SELECT id, config FROM runs")}
    conn.close()
    assert "memory_add_batch" not in tools and tools["memory_add"] == 2 * sum(
        1 for row in per_turn if json.loads(row)[0]["tool"] == "memory_add"
    )
    assert config == {"run-turns": "turn", "run-batch": "batch"}


def test_ingest_batch_is_refused_for_a_target_that_takes_turns_one_by_one(tmp_path: Path) -> None:
    suite = tmp_path / "suite.jsonl"
    write_suite(generate("paradigms", seed=1, episodes=1), suite)
    result = CliRunner().invoke(
        cli, ["replay", str(suite), "--target", "openai:http://127.0.0.1:9/v1#m", "--ingest", "batch",
              "--db", str(tmp_path / "t.db")],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "--ingest batch: the openai target takes turns one by one only" in result.output
    assert not (tmp_path / "t.db").exists()


def test_turns_go_in_batches_under_the_item_cap_and_about_a_mebibyte_of_content() -> None:
    from memtap.limits import MAX_BATCH_ITEMS
    from memtap.probes.targets.base import TurnCall
    from memtap.probes.targets.builtin import BATCH_BYTES, _chunks

    def turns(*sizes: int) -> list[tuple[int, TurnCall]]:
        return list(
            enumerate(
                TurnCall("s", f"t{i}", "user", "u", "x" * n, None, None, {}) for i, n in enumerate(sizes)
            )
        )

    assert [len(c) for c in _chunks(turns(*[10] * (2 * MAX_BATCH_ITEMS + 1)))] == [MAX_BATCH_ITEMS] * 2 + [1]
    big = BATCH_BYTES // 3
    chunks = _chunks(turns(big, big, big, 3 * BATCH_BYTES, 5))
    assert [[turn.turn for _, turn in c] for c in chunks] == [["t0", "t1"], ["t2"], ["t3"], ["t4"]]
