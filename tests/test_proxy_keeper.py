"""memtap proxy in front of the real ``mcp-memory-keeper`` (npm), driven by the official mcp client.

The effects come from the server's own SQLite database, read before and after each
write, and are asserted exactly: a key saved again is an update of the same item (the
server replaces the row), a save of the same value adds nothing, a batch delete by
pattern is found by reading the whole table, and retrievals are resolved to the
items of the session the server is in.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import ServerProcess, http_client, meta, write_config
from mcp import Client
from wrapped_servers import keeper_server

from memtap.adapters.keeper_server import item_id, keeper_file_for, listed_items, named_keys
from memtap.cli.main import cli
from memtap.config import StdioServerConfig
from memtap.trace.models import EffectKind, Op
from memtap.trace.store import TraceStore

pytestmark = pytest.mark.anyio

StartServer = Callable[..., ServerProcess]
A, D, U, R = EffectKind.ADD, EffectKind.DELETE, EffectKind.UPDATE, EffectKind.RETRIEVE


async def run_keeper_script(client: Client) -> list[str]:
    answers: list[str] = []

    async def call(turn: str, tool: str, arguments: dict[str, Any]) -> None:
        result = await client.call_tool(tool, arguments, meta=meta(session="s1", turn=turn, role="user"))
        assert not result.is_error, result
        answers.append(result.content[0].text)  # type: ignore[union-attr]

    await call("t1", "context_save", {"key": "city", "value": "lives in Oslo", "category": "note"})
    await call("t2", "context_save", {"key": "drink", "value": "likes tea"})
    await call("t3", "context_save", {"key": "city", "value": "lives in Bergen", "category": "note"})
    await call("t4", "context_save", {"key": "drink", "value": "likes tea"})
    await call(
        "t5", "context_batch_save", {"items": [{"key": "a", "value": "A1"}, {"key": "b", "value": "B1"}]}
    )
    await call("t6", "context_batch_update", {"updates": [{"key": "a", "value": "A2"}]})
    await call("t7", "context_batch_delete", {"keys": ["drink", "nope"]})
    await call("t8", "context_batch_delete", {"keyPattern": "b*"})
    await call("t9", "context_search", {"query": "Bergen"})
    await call("t10", "context_session_start", {"name": "second"})
    await call("t11", "context_save", {"key": "city", "value": "lives in Paris"})
    await call("t12", "context_get", {"key": "city"})
    return answers


async def test_keeper_server_through_proxy_records_real_effects_from_its_database(
    tmp_path: Path, start_http_server: StartServer
) -> None:
    config = write_config(tmp_path, {"keeper": keeper_server(tmp_path)})
    server = start_http_server("--config", str(config), command="proxy")
    async with http_client(server.url, {"X-Memtap-Namespace": "ns1", "X-Memtap-Run": "r1"}) as client:
        answers = await run_keeper_script(client)
    assert answers[8].startswith('Found 1 results for "Bergen"')
    assert server.stop() == 0
    with sqlite3.connect(tmp_path / "keeper" / "context.db") as conn:
        first, second = [s for (s,) in conn.execute("SELECT id FROM sessions ORDER BY created_at, rowid")]
        stored = {
            item_id(s, k): v for s, k, v in conn.execute("SELECT session_id, key, value FROM context_items")
        }
    city, drink, a, b = (item_id(first, k) for k in ("city", "drink", "a", "b"))
    paris = item_id(second, "city")
    store = TraceStore(server.db)
    try:
        events = store.list_events()
        items = {i.item_id: i for i in store.list_items(include_closed=True)}
    finally:
        store.close()
    got = [
        (e.tool, e.op, e.context.turn, [(f.kind, f.item_id, f.content_before, f.content_after) for f in e.effects])
        for e in events
    ]  # fmt: skip
    assert got == [
        ("context_save", Op.WRITE, "t1", [(A, city, None, "lives in Oslo")]),
        ("context_save", Op.WRITE, "t2", [(A, drink, None, "likes tea")]),
        ("context_save", Op.UPDATE, "t3", [(U, city, "lives in Oslo", "lives in Bergen")]),
        ("context_save", Op.WRITE, "t4", []),  # the same value again: the row is replaced, nothing changed
        ("context_batch_save", Op.WRITE, "t5", [(A, a, None, "A1"), (A, b, None, "B1")]),
        ("context_batch_update", Op.UPDATE, "t6", [(U, a, "A1", "A2")]),
        ("context_batch_delete", Op.DELETE, "t7", [(D, drink, "likes tea", None)]),
        ("context_batch_delete", Op.DELETE, "t8", [(D, b, "B1", None)]),  # by pattern: the whole table read
        ("context_search", Op.RETRIEVE, "t9", [(R, city, None, "lives in Bergen")]),
        ("context_session_start", Op.CONTROL, "t10", []),
        ("context_save", Op.WRITE, "t11", [(A, paris, None, "lives in Paris")]),  # a new session's own item
        # a key is read across sessions (items are public unless saved private): both cities come back,
        # in the answer's order (the server sorts by a timestamp of whole seconds: either may be first)
        ("context_get", Op.RETRIEVE, "t12", [t for _, t in sorted([
            (answers[11].index(first), (R, city, None, "lives in Bergen")),
            (answers[11].index(second), (R, paris, None, "lives in Paris")),
        ])]),
    ]  # fmt: skip
    assert all((e.status, e.backend, e.context.namespace, e.context.run) == ("ok", "keeper", "ns1", "r1")
               for e in events)  # fmt: skip
    assert [e.rank for e in events[8].effects + events[11].effects] == [1, 1, 2]
    assert [answers[11].count(session) for session in (first, second)] == [1, 1]
    # The trace's live items are exactly the server's rows, with their values.
    live = {i: item.content for i, item in items.items() if item.valid_to is None}
    assert live == stored == {city: "lives in Bergen", a: "A2", paris: "lives in Paris"}
    store = TraceStore(server.db)
    try:
        versions = store.get_item(city).history  # type: ignore[union-attr]
    finally:
        store.close()
    assert [v.content for v in versions] == ["lives in Oslo", "lives in Bergen"]


def test_explain_classifies_the_keeper_servers_tools_by_its_profile(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"keeper": keeper_server(tmp_path)})
    result = CliRunner().invoke(cli, ["proxy", "--explain", "--config", str(config)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    database = tmp_path / "keeper" / "context.db"
    assert lines[0] == f"keeper: server 'memory-keeper', profile memory-keeper, effects from file {database}"
    rows = {tuple(line.split()[1:4]) for line in lines[3:]}
    assert len(rows) == 38 and {source for _, _, source in rows} == {"profile"}
    assert {
        ("context_save", "write", "profile"),
        ("context_batch_update", "update", "profile"),
        ("context_batch_delete", "delete", "profile"),
        ("context_search", "retrieve", "profile"),
        ("context_get", "retrieve", "profile"),
        ("context_status", "read", "profile"),
        ("context_session_start", "other", "profile"),
    } <= rows


def test_keeper_database_is_found_from_the_servers_data_dir(tmp_path: Path) -> None:
    def entry(env: dict[str, str], cwd: str | None = None) -> StdioServerConfig:
        return StdioServerConfig.model_validate({"command": "x", "env": env, "cwd": cwd})

    assert keeper_file_for(entry({"DATA_DIR": str(tmp_path)})) == tmp_path / "context.db"
    assert keeper_file_for(entry({"DATA_DIR": "d"}, str(tmp_path))) == tmp_path / "d" / "context.db"
    home = keeper_file_for(entry({"HOME": str(tmp_path)}))
    assert home == tmp_path / "mcp-data" / "memory-keeper" / "context.db"


def test_keeper_names_keys_exactly_or_none_for_a_pattern() -> None:
    assert named_keys("context_batch_save", {"items": [{"key": "a"}, {"value": "x"}, {"key": "b"}]}) == [
        "a",
        "b",
    ]
    assert named_keys("context_batch_delete", {"keyPattern": "b*"}) is None
    assert named_keys("context_restore_checkpoint", {"name": "c"}) is None
    answer = {
        "content": [{"type": "text", "text": "Found 1 results:\n\n• [high] my key (x) (note)\n  value"}]
    }
    assert listed_items(answer) == [(None, "my key (x)")]
