"""A/B replay of recorded traffic: memtap serve's recorded calls frozen into a suite and
re-issued against the reference MCP memory server and against mem0."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
from click.testing import CliRunner, Result
from conftest import ServerProcess, http_client, meta, write_config
from test_mem0 import mem0_settings, model_list

from memtap.cli.main import cli
from memtap.probes.suitefile import load_suite
from memtap.trace.models import Op
from memtap.trace.store import TraceStore


def run_cli(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


async def record_live_traffic(server: ServerProcess) -> None:
    """A short live session on the builtin backend: writes in two sessions, retrievals, an update, a delete."""
    headers = {"X-Memtap-Namespace": "alice", "X-Memtap-Run": "live"}
    async with http_client(server.url, headers) as client:
        gym = await client.call_tool("memory_add", {"content": "Alice trains at FitLife gym"},
                                     meta=meta(session="s1", turn="1", role="user"))  # fmt: skip
        await client.call_tool(
            "memory_add", {"content": "Alice drinks green tea"}, meta=meta(session="s1", turn="2")
        )
        await client.call_tool(
            "memory_search", {"query": "which gym", "requester": "alice"}, meta=meta(session="s1")
        )
        assert gym.structured_content is not None
        await client.call_tool("memory_update", {"id": gym.structured_content["id"], "content": "Alice trains at Iron gym"},
                               meta=meta(session="s2", turn="1"))  # fmt: skip
        await client.call_tool("memory_delete", {"id": "mem_nope"}, meta=meta(session="s2", turn="2"))
        await client.call_tool("memory_search", {"query": "gym tea"}, meta=meta(session="s2", turn="3"))


def test_recorded_traffic_freezes_into_a_suite_and_replays_onto_two_other_backends(
    start_http_server: Any, memory_server: dict[str, Any], upstream: Any, tmp_path: Path
) -> None:
    server = start_http_server()
    anyio.run(record_live_traffic, server)
    server.stop()

    frozen = run_cli("suite", "from-trace", str(server.db), "--run", "live", "-o", str(tmp_path / "s.jsonl"))
    assert frozen.exit_code == 0, frozen.output
    assert "not carried as recorded: 1 failed calls" in frozen.output
    assert "not carried as recorded: 1 updates replayed as writes" in frozen.output
    [episode] = load_suite(tmp_path / "s.jsonl").episodes
    assert [s.session_id for s in episode.sessions] == ["s1", "s2"]
    assert [[t.content for t in s.turns] for s in episode.sessions] == [
        ["Alice trains at FitLife gym", "Alice drinks green tea"], ["Alice trains at Iron gym"],
    ]  # fmt: skip
    assert [(p.question, p.requester) for p in episode.probes] == [
        ("which gym", "alice"),
        ("gym tea", "alice"),
    ]

    reference = write_config(tmp_path, {"memory": memory_server})
    out = tmp_path / "ab.db"
    onto_reference = run_cli("replay", "--from-trace", str(server.db), "--from-run", "live",
                             "--target", f"mcp:{reference}:memory", "--db", str(out), "--run", "ab-ref", "--json")  # fmt: skip
    assert onto_reference.exit_code == 0, onto_reference.output
    summary = json.loads(onto_reference.output.splitlines()[-1])
    assert (summary["status"], summary["turns"], summary["probes"]) == ("completed", 3, 2)

    mem0_config = tmp_path / "mem0.json"
    mem0_config.write_text(json.dumps({"model_list": model_list(upstream),
                                       "memtap": {"backend": "mem0", "mem0": mem0_settings(upstream, tmp_path / "m")}}))  # fmt: skip
    onto_mem0 = run_cli("replay", "--from-trace", str(server.db), "--from-run", "live",
                        "--target", f"mem0:{mem0_config}", "--db", str(out), "--run", "ab-mem0", "--json")  # fmt: skip
    assert onto_mem0.exit_code == 0, onto_mem0.output
    store = TraceStore(out)
    by_run = {
        run: [e for e in store.list_events(run=run) if e.op == Op.WRITE] for run in ("ab-ref", "ab-mem0")
    }
    store.close()
    assert [e.arguments["content"] for e in by_run["ab-mem0"]] == [
        "Alice trains at FitLife gym", "Alice drinks green tea", "Alice trains at Iron gym",
    ]  # fmt: skip
    assert {e.backend for e in by_run["ab-mem0"]} == {"mem0"}
    assert len(by_run["ab-ref"]) >= 3 and {e.context.upstream for e in by_run["ab-ref"]} == {"memory"}

    onto_builtin = run_cli("replay", "--from-trace", str(server.db), "--from-run", "live", "--target", "builtin",
                           "--db", str(out), "--run", "ab-builtin", "--json")  # fmt: skip
    assert onto_builtin.exit_code == 0, onto_builtin.output
    compared = run_cli(
        "compare", "ab-builtin", "ab-mem0", "--retrievals", "--k", "3", "--db", str(out), "--json"
    )
    assert compared.exit_code == 0, compared.output
    result = json.loads(compared.output)
    assert (result["paired"], result["unpaired"]) == (2, {"a": 0, "b": 0})
    # the same three texts come back from BM25 (builtin) and from mem0's vectors, in the same order
    assert [(p["probe"], p["overlap_at_k"], p["same_first"], p["only_a"], p["only_b"]) for p in result["probes"]] == [
        ("q00000", 1.0, True, [], []), ("q00001", 1.0, True, [], []),
    ]  # fmt: skip
    assert all(p["ms_a"] is not None and p["ms_b"] is not None for p in result["probes"])
    ref = json.loads(run_cli("compare", "ab-builtin", "ab-ref", "--retrievals", "--k", "3", "--db", str(out),
                             "--json").output)  # fmt: skip
    # the reference server finds the same observations for "gym tea" but ranks another first
    assert [(p["overlap_at_k"], p["same_first"]) for p in ref["probes"]] == [(1.0, True), (1.0, False)]
    assert ref["same_first_rate"] == 0.5
    top1 = json.loads(run_cli("compare", "ab-builtin", "ab-ref", "--retrievals", "--k", "1", "--db", str(out),
                              "--json").output)["probes"][1]  # fmt: skip
    assert top1["overlap_at_k"] == 0.0 and len(top1["only_a"]) == len(top1["only_b"]) == 1
    assert top1["only_a"] != top1["only_b"]
    table = run_cli("compare", "ab-builtin", "ab-mem0", "--retrievals", "--db", str(out))
    assert table.output.startswith("retrievals of ab-builtin (A) and ab-mem0 (B): 2 probes paired")


def test_a_from_trace_selection_with_no_events_is_one_clear_line(tmp_path: Path, db_path: Path) -> None:
    store = TraceStore(db_path)
    store.close()
    empty = run_cli("replay", "--from-trace", str(db_path), "--from-run", "nope", "--target", "builtin",
                    "--db", str(tmp_path / "out.db"))  # fmt: skip
    assert empty.exit_code == 2
    assert "--from-trace selection holds no memory events" in empty.output and "run 'nope'" in empty.output
    both = run_cli("replay", str(tmp_path / "x.jsonl"), "--from-trace", str(db_path), "--target", "builtin")
    assert both.exit_code == 2 and "one of them" in both.output
