"""A small stdio MCP server that misbehaves on request, to test what memtap does when upstreams do.

Plain newline-delimited JSON-RPC, no SDK, so it can send what a well-behaved
server library refuses to: results of the wrong shape, no answer at all, or an
exit in the middle of a call, or a new tool at run time (``grow``). It also offers Mem0-style memory tools
(``add_memory``, ``search_memories``) kept in a list, and one prompt.
"""

from __future__ import annotations

import json
import os
import sys

TOOLS = [
    {"name": "echo", "description": "Echo the text back.", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
    {"name": "malformed", "description": "Answer with a result that is not a tool result.", "inputSchema": {"type": "object"}},
    {"name": "hang", "description": "Never answer.", "inputSchema": {"type": "object"}},
    {"name": "crash", "description": "Exit without answering.", "inputSchema": {"type": "object"}},
    {"name": "search_nodes", "description": "A tool whose name collides with the memory server's.", "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}}}},
    {"name": "grow", "description": "Offer a new tool, remember_fact, and say the tool list changed.", "inputSchema": {"type": "object"}},
    {
        "name": "add_memory",
        "description": "Remember a text for a user.",
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}, "user_id": {"type": "string"}}, "required": ["text"]},
    },
    {
        "name": "search_memories",
        "description": "Find a user's memories containing a text.",
        "inputSchema": {"type": "object", "properties": {"query": {"type": "string"}, "user_id": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["query"]},
        "annotations": {"readOnlyHint": True},
    },
]  # fmt: skip

# Offered only after a call to grow.
REMEMBER_FACT = {
    "name": "remember_fact",
    "description": "Remember a text for a user.",
    "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
}

memories: list[dict[str, str]] = []


def text_result(text: str) -> dict[str, object]:
    return {"content": [{"type": "text", "text": text}]}


def call(name: str, args: dict[str, object]) -> dict[str, object] | None:
    if name == "echo":
        return text_result(str(args.get("text", "")))
    if name == "malformed":
        return {"content": "this should have been a list of content blocks"}
    if name == "hang":
        return None
    if name == "crash":
        sys.exit(7)
    if name == "search_nodes":
        return text_result("odd search")
    if name == "grow":  # changes its tools at run time, as servers with plugins do
        if not any(t["name"] == "remember_fact" for t in TOOLS):
            TOOLS.append(REMEMBER_FACT)
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}) + "\n")
        return text_result("grown")
    if name in ("add_memory", "remember_fact"):
        memories.append({"text": str(args["text"]), "user_id": str(args.get("user_id", ""))})
        return text_result(f"stored memory {len(memories)}")
    if name == "search_memories":
        hits = [m for m in memories if str(args["query"]).lower() in m["text"].lower()]
        return {
            "content": [{"type": "text", "text": json.dumps(hits)}],
            "structuredContent": {"results": hits},
        }
    return {"content": [{"type": "text", "text": f"no tool {name}"}], "isError": True}


def answer(message: dict[str, object]) -> dict[str, object] | None:
    method = message.get("method")
    params = message.get("params") or {}
    assert isinstance(params, dict)
    if method == "initialize":
        return {
            "protocolVersion": params.get("protocolVersion", "2025-11-25"),
            "capabilities": {"tools": {}, "prompts": {}},
            "serverInfo": {"name": "misbehaving", "version": "1"},
        }
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "tools/call":
        return call(str(params["name"]), dict(params.get("arguments") or {}))
    if method == "prompts/list":
        return {"prompts": [{"name": "greet", "arguments": [{"name": "who", "required": True}]}]}
    if method == "prompts/get":
        who = (params.get("arguments") or {}).get("who", "you")
        return {"messages": [{"role": "user", "content": {"type": "text", "text": f"Say hello to {who}."}}]}
    return None


def main() -> None:
    if os.environ.get("EXIT_AT_START"):
        sys.stderr.write("misbehaving: refusing to start\n")
        sys.exit(int(os.environ["EXIT_AT_START"]))
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message or "method" not in message:
            continue
        result = answer(message)
        if result is None and message["method"] == "tools/call":
            continue  # "hang": never answer
        reply = (
            {"jsonrpc": "2.0", "id": message["id"], "result": result}
            if result is not None
            else {
                "jsonrpc": "2.0",
                "id": message["id"],
                "error": {"code": -32601, "message": "Method not found"},
            }
        )
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
