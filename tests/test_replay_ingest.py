"""Replay on builtin with turns sent one by one and as batches: the same trace, event for event."""

from __future__ import annotations

import functools
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
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


def test_per_turn_calls_over_stdio_go_pipelined_and_a_refused_turn_fails_its_episode_at_that_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import anyio

    from memtap.adapters.connections import StdioConnection
    from memtap.probes.readers import make_reader
    from memtap.probes.replay import ReplayPlan, replay_suite
    from memtap.probes.runs import RunStore
    from memtap.probes.suitefile import load_suite
    from memtap.probes.targets.builtin import BuiltinTarget

    episodes = generate("paradigms", seed=8, episodes=2)
    session = episodes[1].sessions[2]
    session.turns[0].content = "x" * 500  # over the child's cap: memory_add refuses it
    path = tmp_path / "suite.jsonl"
    write_suite(episodes, path)
    suite, db = load_suite(path), tmp_path / "trace.db"
    store = RunStore(db)
    store.create_run("r", suite_path=suite.path, suite_sha256=suite.sha256, episodes=suite.episodes,
                     target="builtin", config={}, reader="none")  # fmt: skip
    written: list[int] = []  # how many calls each write carried (the real method does the work)
    real = StdioConnection.request_many

    async def counted(self: StdioConnection, method: str, params: list[Any], *, timeout: float) -> Any:
        written.append(len(params))
        return await real(self, method, params, timeout=timeout)

    monkeypatch.setattr(StdioConnection, "request_many", counted)
    target = BuiltinTarget(db, serve_args=("--max-content-bytes", "300"))
    plan = ReplayPlan("r", suite.episodes, {}, 1, 5, "turn")
    summary = anyio.run(
        lambda: replay_suite(suite, plan, target, store, make_reader("none"), show_progress=False)
    )
    assert (summary["episodes_done"], summary["episodes_failed"]) == (1, 1)
    [(error, done)] = store.conn.execute(
        "SELECT error, sessions_done FROM run_episodes WHERE status = 'failed'"
    ).fetchall()
    store.close()
    assert "memory_add failed" in error and "300 bytes" in error and done == 2
    assert max(written) > 1  # several turns' calls in one write
    conn = sqlite3.connect(db)
    adds = conn.execute(
        "SELECT json_extract(context, '$.episode'), json_extract(context, '$.session'),"
        " json_extract(context, '$.turn'), status FROM events WHERE tool = 'memory_add' ORDER BY id"
    ).fetchall()
    conn.close()
    failed = [(e, s, t) for e, s, t, status in adds if status != "ok"]
    assert failed == [(episodes[1].episode_id, session.session_id, session.turns[0].turn_id)]
    # the turns in flight with the refused one were served and recorded, each its own call, in order
    mine = [(s, t) for e, s, t, _ in adds if e == episodes[1].episode_id]
    sent = [(s.session_id, t.turn_id) for s in episodes[1].sessions for t in s.turns if t.content.strip()]
    assert (
        mine == sent[: len(mine)]
        and len(mine) > sent.index((session.session_id, session.turns[0].turn_id)) + 1
    )


def test_pipelined_requests_come_back_in_the_order_sent_each_with_its_own_result_or_rpc_error(
    tmp_path: Path,
) -> None:
    import anyio

    from memtap.errors import UpstreamRPCError
    from memtap.probes.targets._stdio import StdioServe

    async def run() -> list[Any]:
        child = StdioServe(tmp_path / "trace.db")
        await child.start()
        try:
            call = {"name": "memory_add", "_meta": {"memtap": {"namespace": "ns"}}}
            params = [
                {**call, "arguments": {"content": "first"}},
                {"arguments": {"content": "no tool name"}},  # invalid params: a JSON-RPC error
                {**call, "arguments": {"content": "third"}},
            ]
            assert child._conn is not None
            return list(await child._conn.request_many("tools/call", params, timeout=60))
        finally:
            await child.aclose()

    first, bad, third = anyio.run(run)
    assert isinstance(bad, UpstreamRPCError) and bad.code == -32602
    assert [first["structuredContent"]["content"], third["structuredContent"]["content"]] == [
        "first",
        "third",
    ]
    conn = sqlite3.connect(tmp_path / "trace.db")
    stored = [json.loads(r)["content"] for (r,) in conn.execute("SELECT arguments FROM events ORDER BY id")]
    conn.close()
    assert stored == ["first", "third"]


def test_pipelined_turns_and_probes_leave_the_trace_and_retrievals_of_calls_made_one_at_a_time(
    tmp_path: Path,
) -> None:
    import anyio

    from memtap.probes.readers import make_reader
    from memtap.probes.replay import ReplayPlan, replay_suite
    from memtap.probes.runs import RunStore
    from memtap.probes.suitefile import load_suite
    from memtap.probes.targets.builtin import BuiltinTarget

    path = tmp_path / "suite.jsonl"
    write_suite(
        generate("paradigms", seed=12, episodes=3) + generate("permission", seed=12, episodes=1), path
    )
    suite, db = load_suite(path), tmp_path / "trace.db"
    for run, pipelined in (("one-at-a-time", False), ("pipelined", True)):
        store = RunStore(db)
        store.create_run(run, suite_path=suite.path, suite_sha256=suite.sha256, episodes=suite.episodes,
                         target="builtin", config={}, reader="none")  # fmt: skip
        target = BuiltinTarget(db)
        target.pipelined = pipelined
        plan = ReplayPlan(run, suite.episodes, {}, 1, 5, "turn")
        play = functools.partial(
            replay_suite, suite, plan, target, store, make_reader("none"), show_progress=False
        )
        summary = anyio.run(play)
        store.close()
        assert (summary["episodes_done"], summary["episodes_failed"]) == (len(suite.episodes), 0)
    one, many = _trace(db, "one-at-a-time"), _trace(db, "pipelined")
    assert len(one) > 20 and sum('"memory_search"' in row for row in one) >= 4
    assert [(i, a, b) for i, (a, b) in enumerate(zip(one, many, strict=True)) if a != b] == []
    conn = sqlite3.connect(db)
    probes = {
        run: conn.execute(
            "SELECT episode_id, probe_id, retrieved FROM run_probes WHERE run_id = ? ORDER BY episode_id, probe_id",
            [run],
        ).fetchall()
        for run in ("one-at-a-time", "pipelined")
    }
    conn.close()
    assert len(probes["pipelined"]) >= 4

    def contents(rows: list[tuple[str, str, str]]) -> list[tuple[str, str, list[str]]]:
        conn = sqlite3.connect(db)
        try:
            return [
                (e, p, [conn.execute("SELECT content FROM item_versions WHERE item_id = ?", [i]).fetchone()[0]
                        for i in json.loads(r)])
                for e, p, r in rows
            ]  # fmt: skip
        finally:
            conn.close()

    assert contents(probes["one-at-a-time"]) == contents(probes["pipelined"])
