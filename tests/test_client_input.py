"""No 5xx for any client input: regression tests for each input that once answered 500 or went
uncapped, through the real front doors, and the check that every refusal is a recorded event."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from conftest import ServerProcess, http_client, meta
from fuzzing import mcp_session
from served import ServedMemtap, chats

from memtap.trace.models import Op
from memtap.trace.store import TraceStore

Serve = Callable[..., ServedMemtap]
StartServer = Callable[..., ServerProcess]
DEEP = "[" * 1000 + "]" * 1000


def _events(db: Path) -> list[Any]:
    store = TraceStore(db)
    try:
        return store.list_events()
    finally:
        store.close()


# -- /v1: bounded parsing, unencodable text, auto memory -------------------------------------------


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (
            "/chat/completions",
            '{"model": "gpt-fake", "messages": [{"role": "user", "content": ' + DEEP + "}]}",
        ),
        ("/embeddings", '{"model": "gpt-fake", "input": ' + DEEP + "}"),
    ],
)
def test_json_nested_1000_deep_on_v1_is_a_recorded_400_not_a_500(
    serve_memtap: Serve, path: str, body: str
) -> None:
    memtap = serve_memtap()
    answer = httpx.post(memtap.base_url + path, content=body, headers={"X-Memtap-Session": "s-deep"})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "json_too_deep" and "more than 64 deep" in error["message"]
    events = memtap.events(lambda found: len(found) == 1)
    assert events[0].status == "error" and "more than 64 deep" in (events[0].error or "")
    assert events[0].context.session == "s-deep"  # recorded with the context the request carried
    assert httpx.get(memtap.base_url.removesuffix("/v1") + "/healthz").status_code == 200


def test_a_lone_surrogate_is_forwarded_as_sent_when_memtap_rebuilds_the_body(
    serve_memtap: Serve, upstream: Any
) -> None:
    memtap = serve_memtap()  # the alias gpt-fake is openai/fake-1 upstream: the body is rebuilt
    raw = b'{"model": "gpt-fake", "messages": [{"role": "user", "content": "odd \\ud800 text"}]}'
    answer = httpx.post(memtap.base_url + "/chat/completions", content=raw)
    assert answer.status_code == 200
    assert upstream.state.received[-1]["model"] == "fake-1"
    assert upstream.state.received[-1]["messages"][0]["content"] == "odd \ud800 text"
    (event,) = memtap.events(chats(1))
    assert event.status == "ok" and event.arguments["messages"][0]["content"] == "odd \ud800 text"


def test_auto_memory_injects_past_a_lone_surrogate_and_a_memory_failure_never_fails_the_chat(
    serve_memtap: Serve, upstream: Any
) -> None:
    memtap = serve_memtap({"memory": "auto"})
    url = memtap.base_url + "/chat/completions"
    said = {
        "model": "gpt-fake",
        "user": "alice",
        "messages": [{"role": "user", "content": "I go to FitLife"}],
    }
    assert httpx.post(url, json=said).status_code == 200
    memtap.events(lambda found: any(e.op == Op.WRITE for e in found))
    # An earlier message holds a lone surrogate; the last one finds the memory, which is injected.
    asked = (
        b'{"model": "gpt-fake", "user": "alice", "messages": [{"role": "user", "content": "\\udfff"},'
        b' {"role": "assistant", "content": "ok"}, {"role": "user", "content": "Which gym? FitLife"}]}'
    )
    answer = httpx.post(url, content=asked)
    assert answer.status_code == 200
    sent = upstream.state.received[-1]["messages"]
    assert sent[0]["role"] == "system" and "FitLife" in sent[0]["content"] and sent[1]["content"] == "\udfff"
    # The last user message itself holds one: its search and capture fail, the chat does not.
    broken = (
        b'{"model": "gpt-fake", "user": "alice", "messages": [{"role": "user", "content": "gym \\ud800"}]}'
    )
    answer = httpx.post(url, content=broken)
    assert answer.status_code == 200 and answer.json()["choices"][0]["message"]["content"]
    events = memtap.events(chats(3))
    last = [e for e in events if e.op == Op.CHAT][-1]
    assert last.status == "ok"
    memory = last.result["memory"]
    assert "unpaired surrogate" in memory["search_error"] and memory["injected"] == []
    assert memory["captured"] == [] and "unpaired surrogate" in memory["capture_errors"][0]


def test_text_a_litellm_upstream_cannot_encode_is_a_400_naming_the_field(serve_memtap: Serve) -> None:
    memtap = serve_memtap(
        {"routes": {"via-litellm": {"via": "litellm"}}},
        models=[{"model_name": "via-litellm", "litellm_params": {"model": "openai/x", "api_base": "http://127.0.0.1:9"}}],
    )  # fmt: skip
    raw = b'{"model": "via-litellm", "messages": [{"role": "user", "content": "\\ud800"}]}'
    answer = httpx.post(memtap.base_url + "/chat/completions", content=raw)
    assert answer.status_code == 400
    assert answer.json()["error"]["message"].startswith("messages[0].content is not valid Unicode text")
    (event,) = memtap.events(chats(1))
    assert event.status == "error" and "messages[0].content" in (event.error or "")


def test_text_a_local_embedder_cannot_encode_is_a_400_and_a_passed_through_one_is_forwarded(
    serve_memtap: Serve, upstream: Any
) -> None:
    memtap = serve_memtap({"embeddings": {"tiny": {"provider": "hashing", "options": {"dimensions": 8}}}})
    local = httpx.post(
        memtap.base_url + "/embeddings", content=b'{"model": "tiny", "input": ["ok", "\\ud800"]}'
    )
    assert local.status_code == 400 and local.json()["error"]["message"].startswith(
        "input[1] is not valid Unicode"
    )
    forwarded = httpx.post(
        memtap.base_url + "/embeddings", content=b'{"model": "gpt-fake", "input": "\\ud800"}'
    )
    assert forwarded.status_code == 200
    events = memtap.events(lambda found: len(found) == 2)
    assert [e.status for e in events] == ["error", "ok"]


# -- MCP tools: numeric bounds and caps ------------------------------------------------------------


@pytest.mark.anyio
async def test_tool_inputs_over_the_caps_are_refused_by_name_and_recorded(
    start_http_server: StartServer,
) -> None:
    server = start_http_server()
    async with http_client(server.url) as client:
        listed = await client.call_tool("memory_list", {"offset": 2**63})
        metadata = await client.call_tool("memory_add", {"content": "x", "metadata": {"a": "y" * 3_000_000}})
        namespace = await client.call_tool("memory_add", {"content": "x", "namespace": "n" * 200_000})
        session = await client.call_tool("memory_add", {"content": "x"}, meta=meta(session="s" * 200_000))
        item_id = await client.call_tool("memory_get", {"id": "m" * 5000})
        deep = await client.call_tool(
            "memory_add", {"content": "x", "metadata": json.loads('{"a":' * 100 + "1" + "}" * 100)}
        )
        fine = await client.call_tool("memory_list", {"offset": 1_000_000_000})
    texts = [r.content[0].text for r in (listed, metadata, namespace, session, item_id, deep)]  # type: ignore[union-attr]
    assert (
        all(r.is_error for r in (listed, metadata, namespace, session, item_id, deep)) and not fine.is_error
    )
    assert "offset: Input should be less than or equal to 1000000000" in texts[0]
    assert "OverflowError" not in texts[0]
    assert "metadata: 3000008 bytes as JSON; the limit is 65536 bytes (--max-metadata-bytes)" in texts[1]
    assert "context.namespace: 200000 characters; the limit is 1024 (--max-field-chars)" in texts[2]
    assert "context.session: 200000 characters" in texts[3]
    assert "memory_get: id: 5000 characters; the limit is 1024" in texts[4]
    assert "memory_add: metadata: nested more than 64 deep (--max-json-depth)" in texts[5], texts[5]
    assert server.stop() == 0
    events = _events(server.db)
    assert [e.error for e in events[:6]] == texts and all(e.status == "error" for e in events[:6])
    assert events[0].arguments == {"offset": 2**63}


@pytest.mark.anyio
async def test_the_caps_are_configurable_and_shown_in_the_tool_schemas(
    start_http_server: StartServer,
) -> None:
    server = start_http_server("--max-field-chars", "32", "--max-metadata-bytes", "100")
    async with http_client(server.url) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        long_ns = await client.call_tool("memory_add", {"content": "x", "namespace": "n" * 33})
        ok_ns = await client.call_tool("memory_add", {"content": "x", "namespace": "n" * 32})
        big = await client.call_tool("memory_add", {"content": "x", "metadata": {"a": "b" * 100}})
    schema = tools["memory_add"].input_schema
    assert schema["$defs"]["AccessArg"]["properties"]["deny"]["items"] == {"type": "string", "maxLength": 32}
    assert tools["memory_get"].input_schema["properties"]["id"]["maxLength"] == 32
    assert "maxLength" not in schema["properties"]["content"]  # content is capped in bytes, not here
    assert tools["memory_list"].input_schema["properties"]["offset"]["maximum"] == 1_000_000_000
    assert long_ns.is_error and "the limit is 32 (--max-field-chars)" in long_ns.content[0].text  # type: ignore[union-attr]
    assert not ok_ns.is_error
    assert big.is_error and "the limit is 100 bytes" in big.content[0].text  # type: ignore[union-attr]


# -- HTTP: headers and refusals outside the front doors --------------------------------------------


def test_oversized_headers_are_a_recorded_431_on_every_endpoint(start_http_server: StartServer) -> None:
    server = start_http_server()
    base = f"http://127.0.0.1:{server.port}"
    long_namespace = {"X-Memtap-Namespace": "n" * 200_000, "X-Memtap-Run": "r1"}
    answers = [
        httpx.post(f"{base}/v1/chat/completions", json={}, headers=long_namespace),
        httpx.post(f"{base}/mcp", json={}, headers={"X-Memtap-Session": "s" * 2000, "X-Memtap-Run": "r1"}),
        httpx.get(f"{base}/healthz", headers={"User-Agent": "u" * 20_000}),
    ]
    assert [a.status_code for a in answers] == [431, 431, 431]
    assert "header x-memtap-namespace is 200000 bytes; the limit is 16384 bytes" in answers[0].text
    assert (
        "header x-memtap-session is 2000 characters; the limit is 1024 (--max-field-chars)" in answers[1].text
    )
    assert httpx.get(f"{base}/healthz").json()["status"] == "ok"
    assert server.stop() == 0
    events = _events(server.db)
    assert [(e.op, e.tool, e.status) for e in events] == [
        (Op.CONTROL, "POST /v1/chat/completions", "error"),
        (Op.CONTROL, "POST /mcp", "error"),
        (Op.CONTROL, "GET /healthz", "error"),
    ]
    assert all((e.error or "").startswith("HTTP 431: header ") for e in events)
    assert events[1].context.run == "r1"  # the headers within the caps are kept as context


def test_malformed_mcp_requests_are_refused_with_4xx_and_recorded_with_their_context(
    start_http_server: StartServer,
) -> None:
    server = start_http_server()
    url = server.url
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
               "X-Memtap-Namespace": "ns-fuzz", "X-Memtap-Session": "s-fuzz"}  # fmt: skip
    bodies = [
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":' + DEEP + "}}",  # too deep
        '{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\\ud800"}}',  # a lone surrogate
        '[{"jsonrpc":"2.0","id":1,"method":"ping"}]',  # a batch
        "{",
    ]
    statuses = [httpx.post(url, content=body, headers=headers).status_code for body in bodies]
    assert all(400 <= status < 500 for status in statuses), statuses
    assert httpx.get(f"http://127.0.0.1:{server.port}/healthz").status_code == 200
    assert server.stop() == 0
    events = _events(server.db)
    assert len(events) == len(bodies)
    assert all(
        e.op == Op.CONTROL and e.tool == "POST /mcp" and (e.error or "").startswith("HTTP 4") for e in events
    )
    assert {(e.context.namespace, e.context.session) for e in events} == {("ns-fuzz", "s-fuzz")}


def test_json_rpc_errors_without_a_call_are_recorded_once(
    start_http_server: StartServer, memory_server: dict[str, Any], tmp_path: Path
) -> None:
    served = start_http_server()
    config = tmp_path / "proxy.json"
    config.write_text(json.dumps({"mcpServers": {"memory": memory_server}}))
    proxied = start_http_server("--config", str(config), command="proxy", db=tmp_path / "proxy.db")
    for server in (served, proxied):
        with httpx.Client() as client:
            headers = {**mcp_session(client, server.url), "X-Memtap-Session": "s-rpc"}
            for rid, method, params in [(1, "tools/call", {"arguments": {}}), (2, "no/such/method", {}),
                                        (3, "tools/call", {"name": "no_such_tool", "arguments": {}})]:  # fmt: skip
                answer = client.post(server.url, headers=headers,
                                     json={"jsonrpc": "2.0", "id": rid, "method": method, "params": params})  # fmt: skip
                assert answer.status_code == 200 and answer.status_code < 500
        assert server.stop() == 0
    for server in (served, proxied):
        events = _events(server.db)
        rpc = [e for e in events if (e.error or "").startswith("JSON-RPC error: ")]
        assert [e.tool for e in rpc] == ["POST /mcp", "POST /mcp"]  # no name; unknown method
        assert all(e.context.session == "s-rpc" for e in rpc)
        unknown = [e for e in events if e.tool == "no_such_tool"]  # recorded by the tool call itself
        assert len(unknown) == 1 and "unknown tool" in (unknown[0].error or "")
        assert len(events) == 3


def test_a_replay_mark_with_text_that_cannot_be_encoded_is_a_recorded_422(
    start_http_server: StartServer,
) -> None:
    server = start_http_server()
    url = f"http://127.0.0.1:{server.port}/v1/memtap/replay/mark"
    answers = [
        httpx.post(url, content=b'{"namespace": "\\ud800"}', headers={"content-type": "application/json"}),
        httpx.post(url, json={"namespace": "n" * 2000}),
        httpx.post(url, content=('{"namespace": "n", "run": ' + DEEP + "}").encode(),
                   headers={"content-type": "application/json"}),
    ]  # fmt: skip
    assert [a.status_code for a in answers] == [422, 422, 400]
    assert "unpaired surrogate" in answers[0].text and "the limit is 1024" in answers[1].text
    assert server.stop() == 0
    assert len(_events(server.db)) == 3


def test_logging_set_level_is_answered_on_protocol_versions_that_define_it(
    start_http_server: StartServer,
) -> None:
    server = start_http_server()
    with httpx.Client() as client:
        headers = mcp_session(client, server.url)  # protocol 2025-06-18
        answer = client.post(server.url, headers=headers,
                             json={"jsonrpc": "2.0", "id": 7, "method": "logging/setLevel", "params": {"level": "debug"}})  # fmt: skip
        bad = client.post(server.url, headers=headers,
                          json={"jsonrpc": "2.0", "id": 8, "method": "logging/setLevel", "params": {"level": "loud"}})  # fmt: skip
    assert answer.status_code == 200 and answer.json() == {"jsonrpc": "2.0", "id": 7, "result": {}}
    assert bad.json()["error"]["code"] == -32602  # an unknown level is invalid params
    assert server.stop() == 0


# -- OpenAPI ---------------------------------------------------------------------------------------


def test_openapi_json_describes_every_endpoint_and_matches_the_checked_in_copy(
    start_http_server: StartServer,
) -> None:
    server = start_http_server()
    served = httpx.get(f"http://127.0.0.1:{server.port}/openapi.json").json()
    checked_in = json.loads((Path(__file__).parent.parent / "docs" / "openapi.json").read_text())
    assert served == checked_in
    paths = served["paths"]
    assert {"/v1/chat/completions", "/v1/embeddings", "/v1/models", "/mcp", "/healthz",
            "/v1/memtap/replay/mark", "/servers/{name}/mcp"} <= set(paths)  # fmt: skip
    chat = paths["/v1/chat/completions"]["post"]
    assert chat["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/ChatCompletionRequest"
    )
    assert set(chat["responses"]["200"]["content"]) == {"application/json", "text/event-stream"}
    assert "ChatCompletionChunk" in served["components"]["schemas"]
