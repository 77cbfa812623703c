"""A framework agent whose model tries to leave its user's namespace.

A scripted local model (a tiny OpenAI-compatible server in this test) answers with tool calls
that name ``"namespace": "bob"``; a small agent loop, with the official openai client and the
official MCP client, executes them against `memtap serve` on a connection pinned to alice by
her key. alice cannot leave her namespace, and each attempt is a recorded refusal.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import openai
import pytest
from conftest import ServerProcess, http_client

from memtap.trace.store import TraceStore

pytestmark = pytest.mark.anyio

StartServer = Callable[..., ServerProcess]

SCRIPT = [
    ("memory_search", {"query": "vault code", "namespace": "bob"}),
    ("memory_add", {"content": "bob owes alice 100 euros", "namespace": "bob"}),
]


class ScriptedModel:
    """Answers the n-th chat request with the n-th scripted tool call, then with plain text."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                model.received.append(body)
                step = len(model.received) - 1
                message: dict[str, Any] = {"role": "assistant", "content": "Done."}
                if step < len(SCRIPT):
                    name, args = SCRIPT[step]
                    call = {"id": f"call_{step}", "type": "function",
                            "function": {"name": name, "arguments": json.dumps(args)}}  # fmt: skip
                    message = {"role": "assistant", "content": None, "tool_calls": [call]}
                data = json.dumps({
                    "id": f"chatcmpl-{step}", "object": "chat.completion", "created": 0, "model": body["model"],
                    "choices": [{"index": 0, "message": message,
                                 "finish_reason": "tool_calls" if "tool_calls" in message else "stop"}],
                }).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"


@pytest.fixture
def scripted_model() -> Iterator[ScriptedModel]:
    model = ScriptedModel()
    model.thread.start()
    yield model
    model.server.shutdown()
    model.server.server_close()


CONTRADICTS = (
    "argument namespace='bob' contradicts namespace='alice' fixed by the credential (context arguments are "
    "off) (principal 'alice'); context the connection sets cannot be changed by a tool argument"
)
NO_GRANT = (
    "principal 'alice' may not {} namespace 'bob': it has no grants configured, so it may use only the "
)


@pytest.mark.parametrize(
    ("flags", "refusals"),
    [
        ((), [CONTRADICTS, CONTRADICTS]),
        # With the context arguments offered, the namespace argument is taken, and the grants refuse it.
        (("--context-args",), [NO_GRANT.format("read") + "namespace named like it",
                               NO_GRANT.format("write") + "namespace named like it"]),
    ],
)  # fmt: skip
async def test_a_model_naming_another_namespace_cannot_leave_alices(
    start_http_server: StartServer, scripted_model: ScriptedModel, flags: tuple[str, ...], refusals: list[str]
) -> None:
    server = start_http_server("--api-key", "k-alice=alice", "--api-key", "k-bob=bob", *flags)
    async with http_client(server.url, {"Authorization": "Bearer k-bob"}) as bob:
        assert not (await bob.call_tool("memory_add", {"content": "the vault code is 4412"})).is_error

    llm = openai.AsyncOpenAI(api_key="unused", base_url=scripted_model.base_url, max_retries=0)
    seen: list[str] = []
    async with http_client(server.url, {"Authorization": "Bearer k-alice"}) as mcp:
        tools = [
            {"type": "function",
             "function": {"name": t.name, "description": t.description or "", "parameters": t.input_schema}}
            for t in (await mcp.list_tools()).tools
        ]  # fmt: skip
        messages: list[Any] = [{"role": "user", "content": "What is bob's vault code? Also note he owes me."}]
        for _ in range(5):  # the agent loop
            reply = await llm.chat.completions.create(model="scripted", messages=messages, tools=tools)
            message = reply.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                break
            for call in message.tool_calls:
                result = await mcp.call_tool(call.function.name, json.loads(call.function.arguments))
                text = " ".join(getattr(c, "text", "") for c in result.content)
                assert result.is_error, text
                seen.append(text)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
    assert server.stop() == 0

    # The model was offered the context fields only with --context-args, and never saw bob's memory.
    offered = ["namespace" in t["function"]["parameters"]["properties"] for t in tools]
    assert offered == [bool(flags)] * len(tools)
    assert len(scripted_model.received) == 3
    assert "4412" not in json.dumps(scripted_model.received)
    assert seen == refusals

    store = TraceStore(server.db)
    events = store.list_events()
    items = store.list_items(include_closed=True)
    store.close()
    assert [(e.context.principal, e.tool, e.context.namespace, e.status) for e in events] == [
        ("bob", "memory_add", "bob", "ok"),
        ("alice", "memory_search", "bob", "error"),
        ("alice", "memory_add", "bob", "error"),
    ]
    assert [(i.namespace, i.content) for i in items] == [("bob", "the vault code is 4412")]
