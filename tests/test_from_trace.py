"""A/B replay of recorded traffic: memtap serve's recorded calls frozen into a suite and
re-issued against the reference MCP memory server and against mem0."""

from __future__ import annotations

import json
import sqlite3
import statistics
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
    """A live session on the builtin backend: writes in two sessions, retrievals, an update, deletes
    (one of an item that does not exist, which fails), and a write mem0's extraction cannot parse."""
    headers = {"X-Memtap-Namespace": "alice", "X-Memtap-Run": "live"}
    async with http_client(server.url, headers) as client:

        async def add(content: str, **context: str) -> str:
            done = await client.call_tool("memory_add", {"content": content}, meta=meta(**context))
            assert done.structured_content is not None
            return str(done.structured_content["id"])

        gym = await add("Alice trains at FitLife gym", session="s1", turn="1", role="user")
        await add("Alice drinks green tea", session="s1", turn="2")
        cat = await add("Alice owns a cat named Tom", session="s1", turn="3")
        await client.call_tool(
            "memory_search", {"query": "which gym", "requester": "alice"}, meta=meta(session="s1")
        )
        await client.call_tool("memory_update", {"id": gym, "content": "Alice trains at Iron gym"},
                               meta=meta(session="s2", turn="1"))  # fmt: skip
        await client.call_tool("memory_delete", {"id": cat}, meta=meta(session="s2", turn="2"))
        await client.call_tool("memory_delete", {"id": "mem_nope"}, meta=meta(session="s2", turn="3"))
        note = await add("[unparseable] Alice hums", session="s2", turn="4")
        await client.call_tool("memory_delete", {"id": note}, meta=meta(session="s2", turn="5"))
        hobbies = await add("Alice bakes bread. Alice plays piano", session="s2", turn="6")  # mem0: two facts
        await client.call_tool("memory_update", {"id": hobbies, "content": "Alice bakes rye bread"},
                               meta=meta(session="s2", turn="7"))  # fmt: skip
        await client.call_tool("memory_delete", {"id": hobbies}, meta=meta(session="s2", turn="8"))
        await client.call_tool("memory_search", {"query": "gym tea cat"}, meta=meta(session="s2", turn="9"))


def ab_replay(trace: Path, target: str, out: Path, run: str, *selection: str) -> dict[str, Any]:
    done = run_cli("replay", "--from-trace", str(trace), *selection, "--target", target, "--db", str(out),
                   "--run", run, "--json")  # fmt: skip
    assert done.exit_code == 0, done.output
    return dict(json.loads(done.output.splitlines()[-1]))


def actions(compared: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    return [(w["turn"], w["tool"], w["a"]["did"], w["b"]["did"]) for w in compared["writes"]]


def test_recorded_traffic_with_updates_and_deletes_replays_onto_the_reference_server_and_mem0(
    start_http_server: Any, memory_server: dict[str, Any], upstream: Any, tmp_path: Path
) -> None:
    server = start_http_server()
    anyio.run(record_live_traffic, server)
    server.stop()

    frozen = run_cli("suite", "from-trace", str(server.db), "--run", "live", "-o", str(tmp_path / "s.jsonl"))
    assert frozen.exit_code == 0, frozen.output
    assert "not carried as recorded: 1 failed calls" in frozen.output
    [episode] = load_suite(tmp_path / "s.jsonl").episodes
    assert [s.session_id for s in episode.sessions] == ["s1", "s2"]
    assert [[(t.metadata["recorded_tool"], t.content) for t in s.turns] for s in episode.sessions] == [
        [("memory_add", "Alice trains at FitLife gym"), ("memory_add", "Alice drinks green tea"),
         ("memory_add", "Alice owns a cat named Tom")],
        [("memory_update", "Alice trains at Iron gym"), ("memory_delete", ""),
         ("memory_add", "[unparseable] Alice hums"), ("memory_delete", ""),
         ("memory_add", "Alice bakes bread. Alice plays piano"), ("memory_update", "Alice bakes rye bread"),
         ("memory_delete", "")],
    ]  # fmt: skip
    assert [(p.question, p.requester) for p in episode.probes] == [
        ("which gym", "alice"),
        ("gym tea cat", "alice"),
    ]

    out = tmp_path / "ab.db"
    reference = write_config(tmp_path, {"memory": memory_server})
    onto_reference = ab_replay(server.db, f"mcp:{reference}:memory", out, "ab-ref", "--from-run", "live")
    assert (onto_reference["status"], onto_reference["turns"], onto_reference["probes"]) == (
        "completed",
        10,
        2,
    )
    assert onto_reference["recorded_writes"] == {"done": 10, "skipped": 0, "failed": 0}
    mem0_config = tmp_path / "mem0.json"
    mem0_config.write_text(json.dumps({"model_list": model_list(upstream),
                                       "memtap": {"backend": "mem0", "mem0": mem0_settings(upstream, tmp_path / "m")}}))  # fmt: skip
    onto_mem0 = ab_replay(server.db, f"mem0:{mem0_config}", out, "ab-mem0", "--from-run", "live")
    # mem0 refuses the write its extraction cannot parse; the run goes on, and the delete of that
    # write's item has nothing to delete on mem0; the update of the write mem0 split into two facts
    # cannot name one of them (skipped), and its delete deletes both
    assert onto_mem0["status"] == "completed" and onto_mem0["episodes_done"] == 1
    assert onto_mem0["recorded_writes"] == {"done": 7, "skipped": 2, "failed": 1}
    assert onto_mem0["probes_refused"] == 0
    onto_builtin = ab_replay(server.db, "builtin", out, "ab-builtin", "--from-run", "live")
    assert onto_builtin["recorded_writes"] == {"done": 10, "skipped": 0, "failed": 0}

    store = TraceStore(out)
    mem0_events = [e for e in store.list_events(run="ab-mem0") if e.op != Op.RETRIEVE]
    ref_events = [e for e in store.list_events(run="ab-ref") if e.op != Op.RETRIEVE]
    live_items = {i.content for i in store.list_items() if i.namespace.startswith("ab-mem0/")}
    first_probe = {
        run: {
            f.content_after
            for e in store.list_events(run=run)
            if e.context.turn == "q00000"
            for f in e.effects
        }
        for run in ("ab-builtin", "ab-mem0", "ab-ref")
    }
    store.close()
    # the update and the delete reached mem0's items created from the same recorded writes
    assert [(e.tool, e.context.session, [(f.kind.value, f.content_before, f.content_after) for f in e.effects])
            for e in mem0_events] == [
        ("memory_add", "s1", [("add", None, "Alice trains at FitLife gym")]),
        ("memory_add", "s1", [("add", None, "Alice drinks green tea")]),
        ("memory_add", "s1", [("add", None, "Alice owns a cat named Tom")]),
        ("memory_update", "s2", [("update", "Alice trains at FitLife gym", "Alice trains at Iron gym")]),
        ("memory_delete", "s2", [("delete", "Alice owns a cat named Tom", None)]),
        ("memory_add", "s2", []),
        ("memory_add", "s2", [("add", None, "Alice bakes bread"), ("add", None, "Alice plays piano")]),
        ("memory_delete", "s2", [("delete", "Alice bakes bread", None)]),
        ("memory_delete", "s2", [("delete", "Alice plays piano", None)]),
    ]  # fmt: skip
    assert mem0_events[5].status == "error"
    assert live_items == {"Alice trains at Iron gym", "Alice drinks green tea"}
    # the first retrieval is asked where it was recorded: after the first three writes, before the update
    assert all("Alice trains at FitLife gym" in found for found in first_probe.values()), first_probe
    assert not any("Alice trains at Iron gym" in found for found in first_probe.values()), first_probe
    # on the reference server an update is the observation's delete then the new one's add, which
    # memtap's derivation records as the update of the observation (before and after)
    assert [(e.tool, [f.kind.value for f in e.effects]) for e in ref_events] == [
        ("create_entities", ["add", "add"]), ("add_observations", ["add"]), ("add_observations", ["add"]),
        ("delete_observations", ["delete"]), ("add_observations", ["update"]), ("delete_observations", ["delete"]),
        ("add_observations", ["add"]), ("delete_observations", ["delete"]),
        ("add_observations", ["add"]), ("delete_observations", ["delete"]), ("add_observations", ["update"]),
        ("delete_observations", ["delete"]),
    ]  # fmt: skip

    compared = run_cli("compare", "ab-builtin", "ab-mem0", "--writes", "--retrievals", "--k", "3",
                       "--db", str(out), "--json")  # fmt: skip
    assert compared.exit_code == 0, compared.output
    both = json.loads(compared.output)
    writes = both["writes"]
    assert actions(writes) == [
        ("t00000", "memory_add", "added", "added"), ("t00001", "memory_add", "added", "added"),
        ("t00002", "memory_add", "added", "added"), ("t00003", "memory_update", "updated", "updated"),
        ("t00004", "memory_delete", "deleted", "deleted"), ("t00005", "memory_add", "added", "failed"),
        ("t00006", "memory_delete", "deleted", "skipped"), ("t00007", "memory_add", "added", "added"),
        ("t00008", "memory_update", "updated", "skipped"), ("t00009", "memory_delete", "deleted", "deleted"),
    ]  # fmt: skip
    assert writes["same_action"] == 7 and writes["actions"]["b"] == {
        "added": 4, "updated": 1, "deleted": 2, "failed": 1, "skipped": 2
    }  # fmt: skip
    split = writes["writes"][8]["b"]["why"]
    assert "stored source item mem_" in split and "as 2 items; a recorded update names one" in split
    assert writes["writes"][9]["b"]["removed"] == ["Alice bakes bread", "Alice plays piano"]
    failed, skipped = writes["writes"][5]["b"], writes["writes"][6]["b"]
    assert "could not parse" in failed["why"] and failed["ms"] is not None
    assert skipped["why"].startswith("source item mem_") and "has no item on the target" in skipped["why"]
    assert skipped["ms"] is None and all(w["a"]["ms"] is not None for w in writes["writes"])
    assert (
        writes["writes"][3]["a"]["after"] == writes["writes"][3]["b"]["after"] == ["Alice trains at Iron gym"]
    )
    # the median write time of each side leaves out the calls it never made (B's skipped ones)
    for side in ("a", "b"):
        timed = [w[side]["ms"] for w in writes["writes"] if w[side]["ms"] is not None]
        assert len(timed) == (10 if side == "a" else 8)
        assert writes["median_ms"][side] == statistics.median(timed)
    retrievals = both["retrievals"]
    assert [(p["probe"], p["gate_a"], p["gate_b"], p["refused_a"], p["refused_b"]) for p in retrievals["probes"]] == [
        ("q00000", "observe:allow", "observe:allow", None, None),
        ("q00001", "observe:allow", "observe:allow", None, None),
    ]  # fmt: skip

    ref = json.loads(
        run_cli("compare", "ab-builtin", "ab-ref", "--writes", "--db", str(out), "--json").output
    )
    assert actions(ref) == [
        ("t00000", "memory_add", "added", "added"), ("t00001", "memory_add", "added", "added"),
        ("t00002", "memory_add", "added", "added"), ("t00003", "memory_update", "updated", "updated"),
        ("t00004", "memory_delete", "deleted", "deleted"), ("t00005", "memory_add", "added", "added"),
        ("t00006", "memory_delete", "deleted", "deleted"), ("t00007", "memory_add", "added", "added"),
        ("t00008", "memory_update", "updated", "updated"), ("t00009", "memory_delete", "deleted", "deleted"),
    ]  # fmt: skip
    table = run_cli("compare", "ab-builtin", "ab-mem0", "--writes", "--retrievals", "--db", str(out)).output
    assert table.startswith(
        "writes of ab-builtin (A) and ab-mem0 (B): 10 recorded writes paired, 7 with the same"
    )
    assert "trace-alice t00003 memory_update: A updated (" in table
    assert "'Alice trains at Iron gym'" in table
    assert "trace-alice t00005 memory_add: A added" in table and "| B failed (" in table
    assert "\nretrievals of ab-builtin (A) and ab-mem0 (B): 2 probes paired" in table
    median_a, median_b = writes["median_ms"]["a"], writes["median_ms"]["b"]
    assert f"with the same action; median write ms A {median_a:.1f} B {median_b:.1f}\n" in table


def test_a_from_trace_selection_with_no_events_is_one_clear_line(tmp_path: Path, db_path: Path) -> None:
    store = TraceStore(db_path)
    store.close()
    empty = run_cli("replay", "--from-trace", str(db_path), "--from-run", "nope", "--target", "builtin",
                    "--db", str(tmp_path / "out.db"))  # fmt: skip
    assert empty.exit_code == 2
    assert "--from-trace selection holds no memory events" in empty.output and "run 'nope'" in empty.output
    both = run_cli("replay", str(tmp_path / "x.jsonl"), "--from-trace", str(db_path), "--target", "builtin")
    assert both.exit_code == 2 and "one of them" in both.output


async def record_two_namespaces(server: ServerProcess) -> None:
    """Run ``live``: alice writes, then bob writes and searches, then alice deletes her first write;
    run ``other``: one more write by alice."""
    async with http_client(server.url, {"X-Memtap-Namespace": "alice", "X-Memtap-Run": "live"}) as alice:
        first = await alice.call_tool(
            "memory_add", {"content": "Alice likes rowing"}, meta=meta(session="a1")
        )
        await alice.call_tool("memory_add", {"content": "Alice likes chess"}, meta=meta(session="a1"))
        async with http_client(server.url, {"X-Memtap-Namespace": "bob", "X-Memtap-Run": "live"}) as bob:
            await bob.call_tool("memory_add", {"content": "Bob sails"}, meta=meta(session="b1"))
            await bob.call_tool("memory_search", {"query": "sails"}, meta=meta(session="b1"))
        assert first.structured_content is not None
        await alice.call_tool(
            "memory_delete", {"id": first.structured_content["id"]}, meta=meta(session="a2")
        )
    async with http_client(server.url, {"X-Memtap-Namespace": "alice", "X-Memtap-Run": "other"}) as other:
        await other.call_tool("memory_add", {"content": "Alice likes golf"}, meta=meta(session="o1"))


def replayed(out: Path, run: str) -> list[tuple[str, str, str, str | None]]:
    """(episode, tool, status, why) of each recorded write the run replayed."""
    conn = sqlite3.connect(out)
    rows = conn.execute(
        "SELECT episode_id, tool, status, why FROM run_writes WHERE run_id = ? ORDER BY turn_id", [run]
    ).fetchall()
    conn.close()
    return [tuple(r) for r in rows]


def test_from_run_namespace_since_and_until_select_what_an_ab_replay_reissues(
    start_http_server: Any, tmp_path: Path
) -> None:
    server = start_http_server()
    anyio.run(record_two_namespaces, server)
    server.stop()
    store = TraceStore(server.db)
    times = [e.started_at.isoformat() for e in store.list_events(run="live")]
    store.close()
    out = tmp_path / "ab.db"

    bob = ab_replay(server.db, "builtin", out, "bob", "--from-run", "live", "--namespace", "bob")
    assert (bob["turns"], bob["probes"]) == (1, 1)
    assert replayed(out, "bob") == [("trace-bob", "memory_add", "done", None)]
    everything = ab_replay(server.db, "builtin", out, "all", "--namespace", "alice")
    assert [r[:3] for r in replayed(out, "all")] == [
        ("trace-alice", "memory_add", "done"), ("trace-alice", "memory_add", "done"),
        ("trace-alice", "memory_delete", "done"), ("trace-alice", "memory_add", "done"),
    ]  # fmt: skip
    assert everything["recorded_writes"] == {"done": 4, "skipped": 0, "failed": 0}
    # from alice's second write on: the delete names an item whose write is outside the selection
    later = ab_replay(server.db, "builtin", out, "later", "--from-run", "live", "--namespace", "alice",
                      "--since", times[1])  # fmt: skip
    assert later["recorded_writes"] == {"done": 1, "skipped": 1, "failed": 0}
    [(_, _, _, why)] = [r for r in replayed(out, "later") if r[2] == "skipped"]
    assert why is not None and "has no item on the target" in why
    early = ab_replay(server.db, "builtin", out, "early", "--from-run", "live", "--until", times[2])
    assert (early["turns"], early["probes"]) == (3, 0)
    assert sorted(r[:3] for r in replayed(out, "early")) == [
        ("trace-alice", "memory_add", "done"), ("trace-alice", "memory_add", "done"),
        ("trace-bob", "memory_add", "done"),
    ]  # fmt: skip
    bad = run_cli("replay", "--from-trace", str(server.db), "--since", "yesterday", "--target", "builtin",
                  "--db", str(out))  # fmt: skip
    assert bad.exit_code == 2 and "--since 'yesterday' is not an ISO 8601 time" in bad.output
    window = run_cli("replay", "--from-trace", str(server.db), "--from-run", "live", "--since", times[-1],
                     "--until", times[0], "--target", "builtin", "--db", str(out))  # fmt: skip
    assert window.exit_code == 2 and "holds no memory events" in window.output and "since" in window.output


async def record_long_and_short(server: ServerProcess) -> None:
    async with http_client(server.url, {"X-Memtap-Namespace": "alice", "X-Memtap-Run": "live"}) as client:
        for content in ("Alice rows", "Alice keeps a long diary of every rowing session"):
            await client.call_tool("memory_add", {"content": content}, meta=meta(session="s1"))
        for query in ("rows", "which sessions did Alice write about in her diary"):
            await client.call_tool("memory_search", {"query": query}, meta=meta(session="s1"))


def test_calls_the_target_refuses_are_recorded_and_counted_and_the_ab_run_goes_on(
    start_http_server: Any, tmp_path: Path
) -> None:
    source = start_http_server()
    anyio.run(record_long_and_short, source)
    source.stop()
    out = tmp_path / "ab.db"
    strict = start_http_server("--max-content-bytes", "24", db=out)  # refuses the long write and query

    done = run_cli("replay", "--from-trace", str(source.db), "--target", "builtin", "--server", strict.url,
                   "--db", str(out), "--run", "strict", "--json")  # fmt: skip
    assert done.exit_code == 0, done.output
    summary = json.loads(done.output.splitlines()[-1])
    assert (summary["status"], summary["episodes_done"], summary["probes"]) == ("completed", 1, 2)
    assert summary["recorded_writes"] == {"done": 1, "skipped": 0, "failed": 1}
    assert summary["probes_refused"] == 1
    [(_, _, status, why)] = [r for r in replayed(out, "strict") if r[2] != "done"]
    assert status == "failed" and why is not None and "memory_add refused" in why and "limit" in why
    text = run_cli("replay", "--from-trace", str(source.db), "--target", "builtin", "--server", strict.url,
                   "--db", str(out), "--run", "strict-text")  # fmt: skip
    assert (
        "recorded writes replayed: 1 done, 0 skipped, 1 refused by the target; 1 retrievals refused"
        in text.output
    )
    table = run_cli("compare", "strict", "strict-text", "--retrievals", "--db", str(out)).output
    assert "A refused: memory_search failed:" in table and "B refused: memory_search failed:" in table
