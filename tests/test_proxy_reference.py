"""memtap proxy in front of the real reference memory server, driven by the official mcp client.

The same session goes through the streamable HTTP front (memtap on a free port)
and the stdio front (memtap launched as a subprocess, as a desktop client would),
and the recorded ops and effects are asserted exactly.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import ServerProcess, http_client, meta, write_config
from mcp import Client, StdioServerParameters

from memtap.adapters.memory_server import entity_id, observation_id, relation_id
from memtap.trace.models import EffectKind, Op, Role, TraceEvent
from memtap.trace.store import TraceStore

pytestmark = pytest.mark.anyio

StartServer = Callable[..., ServerProcess]

OSLO, BERGEN = observation_id("alice", "lives in Oslo"), observation_id("alice", "lives in Bergen")
TEA, CAT = observation_id("alice", "likes tea"), observation_id("alice", "has a cat")
BOB_TEA, KNOWS = observation_id("bob", "drinks tea"), relation_id(("alice", "knows", "bob"))
A, D, U, R = EffectKind.ADD, EffectKind.DELETE, EffectKind.UPDATE, EffectKind.RETRIEVE

# (tool, op, turn, [(kind, item, content before, content after, derived from)])
EXPECTED: list[tuple[str, Op, str, list[tuple[Any, ...]]]] = [
    ("create_entities", Op.WRITE, "t1", [
        (A, entity_id("alice"), None, "alice (person)", []),
        (A, TEA, None, "likes tea", []),
        (A, OSLO, None, "lives in Oslo", []),
        (A, entity_id("bob"), None, "bob (person)", []),
        (A, BOB_TEA, None, "drinks tea", []),
    ]),
    ("create_entities", Op.WRITE, "t2", []),  # alice exists: the server skips her silently
    ("create_relations", Op.WRITE, "t3", [(A, KNOWS, None, "alice knows bob", [])]),
    ("add_observations", Op.WRITE, "t4", [(A, CAT, None, "has a cat", [])]),
    ("delete_observations", Op.DELETE, "t5", [(D, OSLO, "lives in Oslo", None, [])]),
    ("add_observations", Op.UPDATE, "t5", [(U, BERGEN, "lives in Oslo", "lives in Bergen", [OSLO])]),
    ("delete_observations", Op.DELETE, "t6", []),  # nothing to delete, though the server says success
    ("delete_entities", Op.DELETE, "t7", [
        (D, entity_id("alice"), "alice (person)", None, []),
        (D, TEA, "likes tea", None, []),
        (D, CAT, "has a cat", None, []),
        (D, BERGEN, "lives in Bergen", None, []),
        (D, KNOWS, "alice knows bob", None, []),
    ]),
    ("search_nodes", Op.RETRIEVE, "t8", [(R, BOB_TEA, None, "drinks tea", [])]),
]  # fmt: skip


async def run_reference_script(client: Client) -> Any:
    """Create, add, replace (delete + add), delete what is not there, delete the entity, search."""

    async def call(turn: str, tool: str, arguments: dict[str, Any]) -> Any:
        result = await client.call_tool(tool, arguments, meta=meta(session="s1", turn=turn, role="user"))
        assert not result.is_error, result
        return result.structured_content

    await call("t1", "create_entities", {"entities": [
        {"name": "alice", "entityType": "person", "observations": ["likes tea", "lives in Oslo"]},
        {"name": "bob", "entityType": "person", "observations": ["drinks tea"]},
    ]})  # fmt: skip
    skipped = await call(
        "t2",
        "create_entities",
        {"entities": [{"name": "alice", "entityType": "robot", "observations": ["is a robot"]}]},
    )
    assert skipped == {"entities": []}
    await call(
        "t3", "create_relations", {"relations": [{"from": "alice", "to": "bob", "relationType": "knows"}]}
    )
    await call(
        "t4", "add_observations", {"observations": [{"entityName": "alice", "contents": ["has a cat"]}]}
    )
    await call(
        "t5",
        "delete_observations",
        {"deletions": [{"entityName": "alice", "observations": ["lives in Oslo"]}]},
    )
    await call(
        "t5", "add_observations", {"observations": [{"entityName": "alice", "contents": ["lives in Bergen"]}]}
    )
    claimed = await call(
        "t6", "delete_observations", {"deletions": [{"entityName": "alice", "observations": ["owns a boat"]}]}
    )
    assert claimed == {"success": True, "message": "Observations deleted successfully"}
    await call("t7", "delete_entities", {"entityNames": ["alice"]})
    return await call("t8", "search_nodes", {"query": "tea"})


def assert_reference_trace(db: Path, *, front_door: str, namespace: str) -> list[TraceEvent]:
    store = TraceStore(db)
    try:
        events = [e for e in store.list_events() if e.tool != "resources/read"]
        items = {item.item_id: item for item in store.list_items(include_closed=True)}
    finally:
        store.close()
    got = [
        (e.tool, e.op, e.context.turn, [(f.kind, f.item_id, f.content_before, f.content_after, f.derived_from)
                                        for f in e.effects])
        for e in events
    ]  # fmt: skip
    assert got == EXPECTED
    for event in events:
        assert (event.status, event.front_door, event.backend) == ("ok", front_door, "memory")
        ctx = event.context
        assert (ctx.upstream, ctx.client, ctx.session, ctx.role, ctx.namespace) == (
            "memory", "mcp", "s1", Role.USER, namespace,
        )  # fmt: skip
        assert event.backend_ms is not None and event.overhead_ms is not None
    assert events[-1].effects[0].rank == 1
    # Items span the whole trace: the entity deletion closed every observation alice held,
    # the replacement's lineage points at what it replaced, and bob's memory is still valid.
    closed = {TEA, CAT, OSLO, BERGEN, KNOWS, entity_id("alice")}
    assert {i for i, item in items.items() if item.valid_to is not None} == closed
    assert {i for i, item in items.items() if item.valid_to is None} == {entity_id("bob"), BOB_TEA}
    assert items[BERGEN].derived_from == [OSLO] and items[BERGEN].content == "lives in Bergen"
    assert items[BOB_TEA].provenance.turn == "t1" and items[BOB_TEA].namespace == namespace
    return events


async def test_reference_server_through_http_front_records_real_effects_exactly(
    tmp_path: Path, memory_server: dict[str, Any], start_http_server: StartServer
) -> None:
    config = write_config(tmp_path, {"memory": memory_server})
    server = start_http_server("--config", str(config), command="proxy")
    headers = {"X-Memtap-Namespace": "alice-ns", "X-Memtap-Run": "r1"}
    async with http_client(server.url, headers) as client:
        proxied = {t.name: t for t in (await client.list_tools()).tools}
        found = await run_reference_script(client)
    assert found == {
        "entities": [{"name": "bob", "entityType": "person", "observations": ["drinks tea"]}],
        "relations": [],
    }
    direct_params = StdioServerParameters(command=memory_server["command"], env=memory_server["env"])
    async with Client(direct_params) as direct:
        upstream = {t.name: t for t in (await direct.list_tools()).tools}
    assert proxied.keys() == upstream.keys()
    for name, tool in upstream.items():  # names, schemas, descriptions, annotations: unchanged
        # (`execution` exists only up to protocol 2025-11-25; the client speaks 2026-07-28 to memtap.)
        assert proxied[name].model_dump(exclude={"execution"}) == tool.model_dump(exclude={"execution"}), name
    assert server.stop() == 0
    events = assert_reference_trace(server.db, front_door="mcp-http", namespace="alice-ns")
    assert {e.context.run for e in events} == {"r1"}


async def test_reference_server_through_stdio_front_records_the_same(
    tmp_path: Path, memory_server: dict[str, Any], db_path: Path
) -> None:
    config = write_config(tmp_path, {"memory": memory_server})
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memtap", "proxy", "--stdio", "--config", str(config), "--db", str(db_path)],
        env=dict(os.environ),
    )
    async with Client(params) as client:
        await run_reference_script(client)
        resources = (await client.list_resources()).resources
        graph = await client.read_resource("memory://knowledge-graph")
    assert [str(r.uri) for r in resources] == ["memory://knowledge-graph"]
    assert '"bob"' in graph.contents[0].text  # type: ignore[union-attr]
    store = TraceStore(db_path)
    reads = store.list_events(op="read")
    store.close()
    assert [(e.tool, e.arguments, e.backend) for e in reads] == [
        ("resources/read", {"uri": "memory://knowledge-graph"}, "memory")
    ]
    assert_reference_trace(db_path, front_door="mcp-stdio", namespace="local")
