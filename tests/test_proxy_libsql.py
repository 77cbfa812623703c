"""memtap proxy in front of the real ``mcp-memory-libsql`` (npm), driven by the official mcp client.

The effects come from the server's own libSQL file, read before and after each write,
and are asserted exactly: the silent replacement of an entity's observations, the
sanitised text the server really stored, the entity a failed call stored anyway, a
duplicate relation that adds nothing, and what a search returned.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner
from conftest import HUNG_TIMEOUT_S, ServerProcess, http_client, meta, write_config
from mcp import Client, MCPError
from wrapped_servers import libsql_server

from memtap.adapters.libsql_server import libsql_file_for, named_entities, sanitize
from memtap.adapters.memory_server import entity_id, observation_id, relation_id
from memtap.cli.main import cli
from memtap.config import StdioServerConfig
from memtap.trace.models import EffectKind, Op, TraceEvent
from memtap.trace.store import TraceStore

pytestmark = pytest.mark.anyio

StartServer = Callable[..., ServerProcess]

OSLO, BERGEN = observation_id("alice", "lives in Oslo"), observation_id("alice", "lives in Bergen")
TEA, BOB_TEA = observation_id("alice", "likes tea"), observation_id("bob", "drinks tea")
SINGS, KNOWS = observation_id("carol", "sings"), relation_id(("alice", "knows", "bob"))
A, D, U, R = EffectKind.ADD, EffectKind.DELETE, EffectKind.UPDATE, EffectKind.RETRIEVE

# (tool, op, status, turn, [(kind, item, content before, content after, derived from)])
EXPECTED: list[tuple[str, Op, str, str, list[tuple[Any, ...]]]] = [
    ("create_entities", Op.WRITE, "ok", "t1", [
        (A, entity_id("alice"), None, "alice (person)", []),
        (A, TEA, None, "likes tea", []),
        (A, OSLO, None, "lives in Oslo", []),
        (A, entity_id("bob"), None, "bob (person)", []),
        (A, BOB_TEA, None, "drinks tea", []),
    ]),
    ("create_relations", Op.WRITE, "ok", "t2", [(A, KNOWS, None, "alice knows bob", [])]),
    ("create_relations", Op.WRITE, "ok", "t3", []),  # the same relation again: a second row, nothing new
    # "creating" alice again silently replaces her type and every observation: Oslo is gone.
    ("create_entities", Op.UPDATE, "ok", "t4", [
        (U, entity_id("alice"), "alice (person)", "alice (robot)", []),
        (D, OSLO, "lives in Oslo", None, []),
        (U, BERGEN, "lives in Oslo", "lives in Bergen", [OSLO]),
    ]),
    # dave is refused, but carol (her own transaction) was stored, sanitised: the call's effects say so.
    ("create_entities", Op.WRITE, "error", "t5", [
        (A, entity_id("carol"), None, "carol (person)", []),
        (A, SINGS, None, "sings", []),
    ]),
    ("delete_relation", Op.DELETE, "ok", "t6", [(D, KNOWS, "alice knows bob", None, [])]),
    ("delete_entity", Op.DELETE, "ok", "t7", [
        (D, entity_id("alice"), "alice (robot)", None, []),
        (D, TEA, "likes tea", None, []),
        (D, BERGEN, "lives in Bergen", None, []),
    ]),
    ("search_nodes", Op.RETRIEVE, "ok", "t8", [(R, BOB_TEA, None, "drinks tea", [])]),
]  # fmt: skip


async def run_libsql_script(client: Client) -> Any:
    async def call(turn: str, tool: str, arguments: dict[str, Any], *, error: bool = False) -> str:
        result = await client.call_tool(tool, arguments, meta=meta(session="s1", turn=turn, role="user"))
        assert result.is_error is error, result
        return result.content[0].text  # type: ignore[union-attr]

    await call("t1", "create_entities", {"entities": [
        {"name": "alice", "entityType": "person", "observations": ["likes tea", "lives in Oslo"]},
        {"name": "bob", "entityType": "person", "observations": ["drinks tea"]},
    ]})  # fmt: skip
    knows = {"relations": [{"source": "alice", "target": "bob", "type": "knows"}]}
    await call("t2", "create_relations", knows)
    await call("t3", "create_relations", knows)
    replaced = await call("t4", "create_entities", {"entities": [
        {"name": "alice", "entityType": "robot", "observations": ["likes tea", "lives in Bergen"]},
    ]})  # fmt: skip
    assert "created new or updated existing" in replaced
    refused = await call("t5", "create_entities", {"entities": [
        {"name": "carol", "entityType": "person", "observations": ["  sings\u0007 "]},
        {"name": "dave", "entityType": "person", "observations": []},
    ]}, error=True)  # fmt: skip
    assert "must have at least one observation" in refused
    await call("t6", "delete_relation", {"source": "alice", "target": "bob", "type": "knows"})
    await call("t7", "delete_entity", {"name": "alice"})
    return await call("t8", "search_nodes", {"query": "drinks"})


def trace_of(db: Path) -> tuple[list[TraceEvent], dict[str, Any]]:
    store = TraceStore(db)
    try:
        return store.list_events(), {i.item_id: i for i in store.list_items(include_closed=True)}
    finally:
        store.close()


async def test_libsql_server_through_proxy_records_real_effects_from_its_file(
    tmp_path: Path, start_http_server: StartServer
) -> None:
    entry = libsql_server(tmp_path)
    config = write_config(tmp_path, {"graph": entry})
    server = start_http_server("--config", str(config), command="proxy")
    async with http_client(server.url, {"X-Memtap-Namespace": "ns1", "X-Memtap-Run": "r1"}) as client:
        found = await run_libsql_script(client)
    assert '"name": "bob"' in found and "alice" not in found
    assert server.stop() == 0
    events, items = trace_of(server.db)
    got = [
        (e.tool, e.op, e.status, e.context.turn,
         [(f.kind, f.item_id, f.content_before, f.content_after, f.derived_from) for f in e.effects])
        for e in events
    ]  # fmt: skip
    assert got == EXPECTED
    assert {(e.backend, e.context.namespace, e.context.session, e.context.run) for e in events} == {
        ("graph", "ns1", "s1", "r1")
    }
    assert events[-1].effects[0].rank == 1
    # The trace's live items are exactly what the server's file holds.
    with sqlite3.connect(tmp_path / "graph.db") as conn:
        stored = {
            observation_id(n, c) for n, c in conn.execute("SELECT entity_name, content FROM observations")
        }
        stored |= {entity_id(n) for (n,) in conn.execute("SELECT name FROM entities")}
        stored |= {
            relation_id((s, t, o))
            for s, t, o in conn.execute("SELECT source, relation_type, target FROM relations")
        }
    assert {i for i, item in items.items() if item.valid_to is None} == stored
    assert stored == {entity_id("bob"), BOB_TEA, entity_id("carol"), SINGS}
    assert items[BERGEN].derived_from == [OSLO] and items[OSLO].valid_to is not None


def test_explain_classifies_the_libsql_servers_tools_by_its_profile(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"graph": libsql_server(tmp_path)})
    result = CliRunner().invoke(cli, ["proxy", "--explain", "--config", str(config)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == (
        f"graph: server 'mcp-memory-libsql', profile memory-libsql, effects from file {tmp_path / 'graph.db'}"
    )
    rows = {tuple(line.split()[:4]) for line in lines[3:]}
    assert rows == {
        ("graph", "create_entities", "write", "profile"),
        ("graph", "create_relations", "write", "profile"),
        ("graph", "delete_entity", "delete", "profile"),
        ("graph", "delete_relation", "delete", "profile"),
        ("graph", "search_nodes", "retrieve", "profile"),
        ("graph", "read_graph", "read", "profile"),
    }


def test_libsql_file_is_found_from_the_servers_own_url(tmp_path: Path) -> None:
    def entry(url: str | None, cwd: str | None = None) -> StdioServerConfig:
        env = {"LIBSQL_URL": url} if url is not None else {}
        return StdioServerConfig.model_validate({"command": "x", "env": env, "cwd": cwd})

    assert libsql_file_for(entry(f"file:{tmp_path}/a.db")) == tmp_path / "a.db"
    assert libsql_file_for(entry(f"file://{tmp_path}/a.db?mode=rwc")) == tmp_path / "a.db"
    assert libsql_file_for(entry("file:rel.db", str(tmp_path))) == tmp_path / "rel.db"
    assert libsql_file_for(entry(None, str(tmp_path))) == tmp_path / "memory-tool.db"
    assert libsql_file_for(entry("libsql://db.example.turso.io")) is None


def test_libsql_named_entities_include_the_names_as_the_server_stores_them() -> None:
    assert sanitize("  ca\u0007rol\u200b \n") == "carol"
    args = {"entities": [{"name": " carol\u0007", "entityType": "p", "observations": ["x"]}]}
    assert named_entities("create_entities", args) == [" carol\u0007", "carol"]
    assert named_entities("delete_relation", {"source": "a", "target": "b", "type": "t"}) == ["a", "b"]


@pytest.mark.serial  # SIGSTOPs its upstream: runs alone, after the parallel part
async def test_a_libsql_write_that_lands_after_its_timeout_is_reconciled_before_the_next_write(
    tmp_path: Path, start_http_server: StartServer
) -> None:
    entry = {**libsql_server(tmp_path), "memtap": {"timeout": HUNG_TIMEOUT_S}}
    config = write_config(tmp_path, {"graph": entry})
    server = start_http_server("--config", str(config), command="proxy")
    person = {"entities": [{"name": "erin", "entityType": "person", "observations": ["plays go"]}]}
    async with http_client(server.url) as client:
        first = {"entities": [{"name": "dora", "entityType": "person", "observations": ["rows"]}]}
        assert not (await client.call_tool("create_entities", first)).is_error  # the upstream is started
        pid = upstream_pid(server, "graph")
        os.kill(pid, signal.SIGSTOP)  # a hung upstream: the write waits in its input
        try:
            with pytest.raises(MCPError) as hung:
                await client.call_tool("create_entities", person)
        finally:
            os.kill(pid, signal.SIGCONT)
        with anyio.fail_after(20):  # the server resumes and stores the write memtap gave up on
            while "erin" not in stored_entities(tmp_path / "graph.db"):
                await anyio.sleep(0.02)
        later = {"entities": [{"name": "finn", "entityType": "person", "observations": ["sails"]}]}
        assert not (await client.call_tool("create_entities", later)).is_error
    assert hung.value.message == f"upstream 'graph' did not answer tools/call within {HUNG_TIMEOUT_S} s"
    assert server.stop() == 0
    events, _ = trace_of(server.db)
    [settled] = [e for e in events if e.tool == "upstream/reconcile"]  # recorded inside the next write
    _, timed_out, ok = [e for e in events if e.tool == "create_entities"]
    assert (timed_out.status, timed_out.effects) == ("error", [])  # nothing was stored when it failed
    assert (settled.tool, settled.status) == ("upstream/reconcile", "ok")
    assert [(e.kind, e.item_id, e.content_after, e.reconciled) for e in settled.effects] == [
        (A, entity_id("erin"), "erin (person)", True),
        (A, observation_id("erin", "plays go"), "plays go", True),
    ]
    evidence = settled.effects[0].evidence or {}
    assert evidence["event"] == timed_out.id and evidence["read"] == f"file {tmp_path / 'graph.db'}"
    assert [e.kind for e in ok.effects] == [A, A] and not any(e.reconciled for e in ok.effects)


def stored_entities(path: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return [name for (name,) in conn.execute("SELECT name FROM entities")]


def upstream_pid(server: ServerProcess, name: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=5) as resp:
        return int(json.load(resp)["upstreams"][name]["pid"])


def test_a_wrapped_libsql_command_is_read_where_its_own_environment_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As `memtap init-config` writes it: `memtap proxy --stdio -- COMMAND` with the server's env
    # on the entry, which memtap inherits and passes on; memtap reads the file that env names.
    command = libsql_server(tmp_path)["command"]
    monkeypatch.setenv("LIBSQL_URL", f"file:{tmp_path / 'elsewhere.db'}")
    result = CliRunner().invoke(cli, ["proxy", "--explain", "--", command])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].endswith(
        f"profile memory-libsql, effects from file {tmp_path / 'elsewhere.db'}"
    )
