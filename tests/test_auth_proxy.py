"""`memtap proxy` over the real reference memory server: which principals may call which upstream,
rights by the tool's lifecycle class, and the replay clock attributing forwarded calls."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from conftest import ServerProcess, http_client

from memtap.trace.store import TraceStore

pytestmark = pytest.mark.anyio

StartServer = Callable[..., ServerProcess]
ALICE, BOB = "k-alice-proxy", "k-bob-proxy"
ENTITY = {"entities": [{"name": "gym", "entityType": "place", "observations": ["FitLife on Tuesdays"]}]}


async def test_the_proxy_refuses_principals_not_allowed_on_an_upstream_and_records_it(
    tmp_path: Path, memory_server: dict[str, Any], start_http_server: StartServer
) -> None:
    config = tmp_path / "memtap.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {"memory": memory_server},
                "memtap": {
                    "principals": {
                        "alice": {"keys": [ALICE], "upstreams": ["memory"]},
                        "bob": {"keys": [BOB], "upstreams": ["files-*"]},
                    }
                },
            }
        )
    )
    server = start_http_server("--config", str(config), command="proxy")
    as_alice, as_bob = {"Authorization": f"Bearer {ALICE}"}, {"Authorization": f"Bearer {BOB}"}

    async with http_client(server.url, as_bob) as bob:
        assert (await bob.list_tools()).tools == []  # no upstream of his: nothing listed
        refused = await bob.call_tool("create_entities", ENTITY)
        assert refused.is_error
        assert refused.content[0].text == (  # type: ignore[union-attr]
            "principal 'bob' may not call upstream 'memory': no upstreams pattern of it matches that server"
        )
    async with httpx2.AsyncClient() as http:
        direct = await http.post(
            f"http://127.0.0.1:{server.port}/servers/memory/mcp", json={}, headers=as_bob
        )
    assert direct.status_code == 403 and direct.json()["error"]["type"] == "permission_error"

    async with http_client(server.url, {**as_alice, "X-Memtap-Namespace": "bob"}) as alice_on_bob:
        assert (await alice_on_bob.call_tool("create_entities", ENTITY)).is_error
        assert (await alice_on_bob.call_tool("search_nodes", {"query": "gym"})).is_error

    # Allowed: alice on her own namespace, attributed by the replay clock to the marked turn.
    async with httpx2.AsyncClient() as http:
        marked = await http.post(
            f"http://127.0.0.1:{server.port}/v1/memtap/replay/mark",
            json={"namespace": "alice", "session": "s3", "turn": "s3-t1", "role": "user"},
            headers=as_alice,
        )
        assert marked.status_code == 200
    async with http_client(server.url, as_alice) as alice:
        assert {t.name for t in (await alice.list_tools()).tools} >= {"create_entities", "read_graph"}
        assert not (await alice.call_tool("create_entities", ENTITY)).is_error
        graph = await alice.call_tool("read_graph", {})
        assert [e["name"] for e in graph.structured_content["entities"]] == ["gym"]  # type: ignore[index]
    assert server.stop() == 0

    store = TraceStore(server.db)
    events = store.list_events()
    store.close()
    refusals = [
        (e.context.principal, e.tool, e.op.value, e.context.namespace, e.error)
        for e in events
        if e.status == "error"
    ]
    assert refusals == [
        ("bob", "create_entities", "write", "bob",
         "principal 'bob' may not call upstream 'memory': no upstreams pattern of it matches that server"),
        ("bob", "servers/memory", "control", "bob",
         "principal 'bob' may not call upstream 'memory': no upstreams pattern of it matches that server"),
        ("alice", "create_entities", "write", "bob",
         "principal 'alice' may not write namespace 'bob': none of its grants matches that namespace"),
        ("alice", "search_nodes", "retrieve", "bob",
         "principal 'alice' may not read namespace 'bob': none of its grants matches that namespace"),
    ]  # fmt: skip
    [created] = [e for e in events if e.tool == "create_entities" and e.status == "ok"]
    assert (created.context.principal, created.context.namespace, created.context.upstream) == (
        "alice", "alice", "memory",
    )  # fmt: skip
    assert (created.context.session, created.context.turn) == ("s3", "s3-t1")  # the clock attributed it
    assert [eff.content_after for eff in created.effects] == ["gym (place)", "FitLife on Tuesdays"]
