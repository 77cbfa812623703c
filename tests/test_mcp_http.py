"""The MCP front door over streamable HTTP on a free port, driven by the official mcp client."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx2
import pytest
from conftest import ServerProcess, http_client, meta, run_memory_script
from mcp import MCPError
from mcp.types import PARSE_ERROR
from secrets_check import assert_absent

from memtap.trace.models import EffectKind, Op, Role
from memtap.trace.store import TraceStore

pytestmark = pytest.mark.anyio

StartServer = Callable[..., ServerProcess]


class _Rewrite(httpx2.AsyncBaseTransport):
    """A real HTTP transport that rewrites bytes of request bodies on the wire, to send what
    a well-behaved client library refuses to encode (lone surrogates, invalid UTF-8)."""

    def __init__(self, replacements: dict[bytes, bytes]) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.replacements = replacements

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        for old, new in self.replacements.items():
            body = body.replace(old, new)
        headers = [(k, v) for k, v in request.headers.raw if k.lower() != b"content-length"]
        rewritten = httpx2.Request(request.method, request.url, headers=headers, content=body)
        return await self.inner.handle_async_request(rewritten)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_http_calls_are_recorded_with_context_from_headers(start_http_server: StartServer) -> None:
    server = start_http_server()
    headers = {"X-Memtap-Namespace": "user-7", "X-Memtap-Agent": "hdr-agent", "X-Memtap-Run": "hdr-run"}
    async with http_client(server.url, headers) as client:
        ids = await run_memory_script(client)
        escape = await client.call_tool("memory_search", {"query": "gym", "namespace": "user-8"})
    assert escape.is_error
    assert server.stop() == 0
    store = TraceStore(server.db)
    events = store.list_events()
    items = store.list_items(include_closed=True)
    store.close()
    assert [e.op for e in events] == [
        Op.WRITE,
        Op.WRITE,
        Op.UPDATE,
        Op.DELETE,
        Op.RETRIEVE,
        Op.READ,
        Op.RETRIEVE,
    ]
    add = events[0]
    assert add.front_door == "mcp-http"
    # _meta wins over headers; arguments fill what neither gives, and may not contradict them.
    assert (add.context.namespace, add.context.run, add.context.session, add.context.turn) == (
        "user-7", "r1", "s0", "s0-t0",
    )  # fmt: skip
    assert add.context.role == Role.USER
    assert add.effects[0].namespace == "user-7"
    assert events[-2].context.agent_id == "hdr-agent"
    assert events[-1].status == "error" and events[-1].context.namespace == "user-8"
    assert events[-1].error is not None and "contradicts namespace='user-7'" in events[-1].error
    assert events[2].effects[0].kind == EffectKind.UPDATE
    by_id = {item.item_id: item for item in items}
    assert (
        by_id[ids["gym"]].content == "The user switched to CrossFit Central."
        and by_id[ids["gym"]].version == 2
    )
    assert by_id[ids["colour"]].valid_to is not None


async def test_healthz_reports_the_recorder(start_http_server: StartServer) -> None:
    server = start_http_server()
    async with http_client(server.url) as client:
        await client.call_tool("memory_add", {"content": "x"})
    async with httpx2.AsyncClient() as http:
        health = (await http.get(f"http://127.0.0.1:{server.port}/healthz")).json()
    assert health["status"] == "ok" and health["backend"] == "builtin"
    assert health["recorder"]["submitted"] == 1


async def test_bad_calls_get_clear_tool_errors_are_recorded_and_the_server_stays_up(
    start_http_server: StartServer,
) -> None:
    server = start_http_server("--max-content-bytes", "64")
    async with http_client(server.url, transport=_Rewrite({b"LONE_SURROGATE": b"\\ud800"})) as client:
        unknown = await client.call_tool("memory_frobnicate", {"x": 1})
        malformed = await client.call_tool("memory_add", {"content": 42, "extra": True})
        missing_field = await client.call_tool("memory_update", {"id": "mem_x"})
        big = await client.call_tool("memory_add", {"content": "x" * 65})
        bad_utf8 = await client.call_tool("memory_add", {"content": "broken LONE_SURROGATE text"})
        bad_role = await client.call_tool("memory_add", {"content": "ok"}, meta=meta(role="alien"))
        missing = await client.call_tool("memory_delete", {"id": "mem_missing"})
        ok = await client.call_tool("memory_add", {"content": "still here"})
    errors = [unknown, malformed, missing_field, big, bad_utf8, bad_role, missing]
    assert all(r.is_error for r in errors) and not ok.is_error
    texts = [r.content[0].text for r in errors]  # type: ignore[union-attr]
    assert "unknown tool 'memory_frobnicate'" in texts[0] and "memory_add" in texts[0]
    assert "content: Input should be a valid string" in texts[1] and "extra: Extra inputs" in texts[1]
    assert "give at least one of content, metadata or access" in texts[2]
    assert "content is 65 bytes; the limit is 64 bytes" in texts[3]
    assert "content: not valid UTF-8 text" in texts[4]
    assert "invalid context: role" in texts[5]
    assert "no memory item 'mem_missing'" in texts[6]
    assert server.stop() == 0
    store = TraceStore(server.db)
    events = store.list_events()
    store.close()
    assert len(events) == 8
    assert [e.status for e in events] == ["error"] * 7 + ["ok"]
    assert events[0].op == Op.CONTROL and events[0].tool == "memory_frobnicate"
    assert [e.error for e in events[:7]] == texts
    assert all(e.effects == [] for e in events[:7])


async def test_a_body_that_is_not_utf8_is_refused_and_the_server_stays_up(
    start_http_server: StartServer,
) -> None:
    server = start_http_server()
    async with http_client(server.url, transport=_Rewrite({b"RAW_BYTES": b"\xff\xfe"})) as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("memory_add", {"content": "RAW_BYTES"})
        ok = await client.call_tool("memory_add", {"content": "fine"})
    assert refused.value.error.code == PARSE_ERROR
    assert not ok.is_error
    server.stop()
    store = TraceStore(server.db)
    refusal, added = store.list_events()
    store.close()
    assert refusal.op == Op.CONTROL and refusal.tool == "POST /mcp" and refusal.status == "error"
    assert refusal.error is not None and refusal.error.startswith("HTTP 400: Parse error")
    assert added.arguments["content"] == "fine"


async def test_api_keys_map_to_principals_and_never_enter_the_trace(start_http_server: StartServer) -> None:
    server = start_http_server("--api-key", "sekrit-alice=alice", env={"MEMTAP_API_KEYS": "sekrit-bob=bob"})
    async with httpx2.AsyncClient() as http:
        denied = await http.post(server.url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert denied.status_code == 401 and "API key" in denied.json()["error"]["message"]
    async with http_client(server.url, {"Authorization": "Bearer sekrit-alice"}) as client:
        await client.call_tool("memory_add", {"content": "alice's note"})
    async with http_client(
        server.url, {"Authorization": "Bearer sekrit-bob", "X-Memtap-Principal": "alice"}
    ) as c:
        await c.call_tool("memory_add", {"content": "bob's note"})
    assert server.stop() == 0
    store = TraceStore(server.db)
    events = store.list_events()
    store.close()
    assert [(e.context.principal, e.context.namespace) for e in events] == [
        ("alice", "alice"),
        ("bob", "bob"),
    ]
    assert_absent(server.db, "sekrit", writer_open=False)  # stopped: its WAL is checkpointed
    assert "sekrit" not in json.dumps([e.model_dump(mode="json") for e in events])


async def test_enforce_gate_withholds_items_the_requester_may_not_see(start_http_server: StartServer) -> None:
    server = start_http_server("--gate", "enforce")
    async with http_client(server.url) as client:
        private = await client.call_tool("memory_add", {"content": "private diagnosis flu"})
        shared = await client.call_tool(
            "memory_add", {"content": "team flu outbreak", "access": {"visibility": "participants",
                                                                     "participants": ["bob"]}}
        )  # fmt: skip
        as_bob = await client.call_tool("memory_search", {"query": "flu", "requester": "bob"})
        as_owner = await client.call_tool("memory_search", {"query": "flu"})
        listed = await client.call_tool("memory_list", {"requester": "bob"})
        private_id = private.structured_content["id"]  # type: ignore[index]
        got = await client.call_tool("memory_get", {"id": private_id, "requester": "bob"})
        history = await client.call_tool("memory_history", {"id": private_id, "requester": "bob"})
        owner_get = await client.call_tool("memory_get", {"id": private_id})
    shared_id = shared.structured_content["id"]  # type: ignore[index]
    assert as_bob.structured_content is not None and as_owner.structured_content is not None
    assert [r["id"] for r in as_bob.structured_content["results"]] == [shared_id]
    assert as_bob.structured_content["withheld"] == 1
    assert len(as_owner.structured_content["results"]) == 2
    assert listed.structured_content is not None
    assert [i["id"] for i in listed.structured_content["items"]] == [shared_id]
    assert listed.structured_content["withheld"] == 1
    for refused in (got, history):
        assert refused.is_error
        assert f"memory item '{private_id}' may not be disclosed to 'bob'" in refused.content[0].text  # type: ignore[union-attr]
    assert not owner_get.is_error
    server.stop()
    store = TraceStore(server.db)
    bob_search = store.list_events(op="retrieve")[0]
    reads = store.list_events(op="read")
    store.close()
    assert bob_search.gate == f"enforce:withheld={private_id}"
    assert [e.item_id for e in bob_search.effects] == [shared_id]
    assert [e.gate for e in reads] == [f"enforce:withheld={private_id}"] * 3 + ["enforce:allow"]
