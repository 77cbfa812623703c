"""The MCP front door: memory tools over stdio and streamable HTTP.

Built on the SDK's low-level ``Server``: ``tools/list`` serves the tool specs,
``tools/call`` hands the call to the memory service with the context the request
carries. A tool failure is an MCP tool error (``is_error``), never a dropped
connection, so the server stays up.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import mcp.types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning

from memtap import __version__
from memtap.auth import Caller, caller_in, fields_from_headers, fields_from_meta, headers_of
from memtap.jsontext import json_text
from memtap.proxy.service import MemoryService, ToolOutcome
from memtap.proxy.tools import TOOLS

__all__ = ["LOG_LEVEL_ATTR", "build_mcp_server", "caller", "client_name", "new_server"]

_CLIENT_INFO_META = "io.modelcontextprotocol/clientInfo"
# The level a client asked for with logging/setLevel, kept on its session.
LOG_LEVEL_ATTR = "memtap_log_level"


async def _set_logging_level(
    ctx: ServerRequestContext[Any, Any], params: types.SetLevelRequestParams
) -> types.EmptyResult:
    """``logging/setLevel``: the level is kept for the client's session. memtap sends no
    ``notifications/message`` of its own (its events are the record), so no level changes what
    a client receives; the method is answered so clients that set a level work."""
    if ctx.session is not None:
        setattr(ctx.session, LOG_LEVEL_ATTR, params.level)
    return types.EmptyResult()


def new_server(name: str, **options: Any) -> Server[Any]:
    """An SDK ``Server`` that also answers ``logging/setLevel`` (protocol versions before
    2026-07-28 define it; the SDK warns that newer ones deprecate it, which we know)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        return Server(name, on_set_logging_level=_set_logging_level, **options)


def _tool_list(context_args: bool) -> list[types.Tool]:
    return [
        types.Tool(
            name=spec.name,
            title=spec.title,
            description=spec.description,
            input_schema=spec.input_schema(context_args),
            annotations=types.ToolAnnotations(
                title=spec.title,
                read_only_hint=spec.read_only,
                destructive_hint=spec.destructive,
                idempotent_hint=spec.idempotent,
                open_world_hint=False,
            ),
        )
        for spec in TOOLS.values()
    ]


def client_name(ctx: ServerRequestContext[Any, Any]) -> str | None:
    """The MCP client's name, from the handshake or from the request's _meta."""
    meta = ctx.meta or {}
    info = meta.get(_CLIENT_INFO_META) if isinstance(meta, Mapping) else None
    if isinstance(info, Mapping) and info.get("name"):
        return str(info["name"])
    params = ctx.session.client_params if ctx.session is not None else None
    return params.client_info.name if params is not None else None


def caller(
    ctx: ServerRequestContext[Any, Any], stdio_caller: Caller
) -> tuple[Caller, str, tuple[dict[str, Any], ...]]:
    """Who is calling (the caller the HTTP gate made; over stdio, the process's own caller),
    through which front door, and the context layers the request carries (headers, decoded
    once per request, then ``_meta``)."""
    request = ctx.request
    scope = getattr(request, "scope", None)
    if scope is None:
        return stdio_caller, "mcp-stdio", ({}, fields_from_meta(ctx.meta))
    layers = (fields_from_headers(headers_of(scope)), fields_from_meta(ctx.meta))
    return caller_in(scope, stdio_caller), "mcp-http", layers


def to_call_result(outcome: ToolOutcome) -> types.CallToolResult:
    if outcome.is_error:
        message = outcome.error or json_text(outcome.value)
        # A failure that says more than its error (a batch's per-item outcomes) keeps it structured.
        more = isinstance(outcome.value, dict) and len(outcome.value) > 1
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=message)],
            structured_content=outcome.value if more else None,
            is_error=True,
        )
    text = json_text(outcome.value)
    structured = outcome.value if isinstance(outcome.value, dict) else {"result": outcome.value}
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=structured
    )


def build_mcp_server(service: MemoryService, *, default_principal: str = "local") -> Server[Any]:
    """An MCP server exposing the memory tools over ``service``; over stdio every call is the
    ``local`` caller ``default_principal``."""
    tools = _tool_list(service.context_args)
    stdio_caller = Caller(default_principal, "local")
    # The SDK checks a call's arguments against the tool's schema before dispatching; without
    # this lookup it would run tools/list on every call to find it (about 1 ms each).
    schemas = {tool.name: tool.input_schema for tool in tools}

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        who, front_door, layers = caller(ctx, stdio_caller)
        outcome = await service.call_tool(
            params.name,
            params.arguments,
            caller=who,
            front_door=front_door,
            client=client_name(ctx),
            layers=layers,
        )
        return to_call_result(outcome)

    return new_server(
        "memtap",
        version=__version__,
        instructions=(
            "Long-term memory. Store facts with memory_add, find them with memory_search, "
            "correct them with memory_update, remove them with memory_delete. Every call is recorded."
        ),
        get_tool_input_schema=schemas.get,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
