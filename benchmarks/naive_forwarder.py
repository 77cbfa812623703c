"""The floor for a Python MCP proxy over stdio: forward every call, record nothing, derive nothing.

``mcp_proxy_overhead.py`` runs this as its ``floor`` path: the SDK's low-level
``Server`` on memtap's stdio transport, forwarding ``tools/list`` and ``tools/call``
to the upstream through memtap's stdio client. What ``memtap proxy --stdio`` costs
beyond this is what its classification, context, state diff and recording cost.

Usage: ``python benchmarks/naive_forwarder.py COMMAND [ARGS...]`` (environment passed on).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
import mcp.types as types
from mcp.server import Server

from memtap.adapters.connections import open_stdio
from memtap.proxy.stdio import stdio_streams


async def main(command: list[str]) -> None:
    async with open_stdio("upstream", command[0], command[1:], dict(os.environ), None, timeout=30) as conn:

        async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
            return types.ListToolsResult.model_validate(await conn.request("tools/list", {}, timeout=30))

        async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
            request = {"name": params.name, "arguments": params.arguments or {}}
            return types.CallToolResult.model_validate(await conn.request("tools/call", request, timeout=30))

        server = Server("naive", on_list_tools=list_tools, on_call_tool=call_tool)
        async with stdio_streams() as (read, write):
            await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main, sys.argv[1:])
