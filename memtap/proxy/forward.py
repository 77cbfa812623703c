"""The forwarding MCP server: upstream tools, resources and prompts, served unchanged and recorded.

Tool names, schemas, descriptions and annotations pass through as the upstream
lists them. When two upstreams offer a tool (or prompt) of the same name, both are
exposed as ``UPSTREAM__NAME``; names offered once keep their name. A server built
for one upstream (``/servers/NAME/mcp``) never prefixes.

Every ``tools/call`` becomes exactly one event (errors included): op from the
tool's classification, context from the request's ``_meta`` and headers plus the
client's name and the upstream's, effects from the upstream's profile (real
state differences for the reference memory server). Failures memtap detects (an
unknown tool, an upstream that is down, crashed, timed out or answered nonsense)
are MCP error responses; a tool error the upstream itself reports (``isError``)
passes through as the upstream sent it.

A client that disconnects mid-call does not cut the call short: the forwarded
call runs to its end (bounded by the upstream's timeout) in a shielded scope, so
the upstream is not left with a half-observed write and the event is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import mcp.types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from memtap import __version__
from memtap.adapters.pool import UpstreamPool
from memtap.adapters.upstream import State, Upstream
from memtap.auth import Caller, Policy, best_context, caller_in, local_caller, resolve_context
from memtap.auth.grants import right_for
from memtap.auth.resolve import META_KEY, Clock
from memtap.errors import (
    AccessDenied,
    InvalidArguments,
    MemtapError,
    UnknownTool,
    UnknownUpstream,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamRPCError,
)
from memtap.proxy.guard import RECORDED_SCOPE_KEY, mark_recorded
from memtap.proxy.mcp_server import caller as mcp_caller
from memtap.proxy.mcp_server import client_name, new_server
from memtap.trace.calls import recorded_call
from memtap.trace.models import Op
from memtap.trace.writer import Recorder

__all__ = [
    "PREFIX_SEPARATOR",
    "Answer",
    "ByUpstream",
    "Forwarding",
    "Inbound",
    "build_forward_server",
    "build_forwarding",
    "exposed_name",
]

_LOCAL = local_caller()  # who calls /servers/NAME/mcp where no gate ran

log = logging.getLogger("memtap.forward")

PREFIX_SEPARATOR = "__"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def exposed_name(upstream: str, name: str) -> str:
    """The name a colliding tool or prompt is offered under."""
    return f"{_UNSAFE.sub('-', upstream)}{PREFIX_SEPARATOR}{name}"


def _error_code(exc: MemtapError) -> int:
    if isinstance(exc, UnknownTool | InvalidArguments):
        return types.INVALID_PARAMS
    if isinstance(exc, UpstreamError):
        return exc.code
    return types.INTERNAL_ERROR


def _upstream_meta(meta: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The request's ``_meta`` minus what belongs to this hop (SDK-managed keys, memtap's own block)."""
    if not meta:
        return None
    kept = {
        k: v
        for k, v in meta.items()
        if k != META_KEY and k != "progressToken" and not k.startswith("io.modelcontextprotocol/")
    }
    return kept or None


def _recorded_value(result: dict[str, Any]) -> dict[str, Any]:
    """What the trace keeps of a result: the structured content when there is one, else the content."""
    if result.get("structuredContent") is not None:
        return {"structuredContent": result["structuredContent"]}
    return {"content": result.get("content")}


# The longest the work after an answer waits for the answer to be written: a caller that does not
# read its answers must not hold an upstream's write lock for long.
ANSWER_OUT_S = 0.05


async def _answer_out(handler: asyncio.Task[Any] | None) -> None:
    """Wait until the SDK's task serving the request has ended (it has then handed the answer to
    the transport: on stdio, written it), within ``ANSWER_OUT_S``.

    Without this the work after an answer (the state read again, the diff, the event) would run on
    the event loop before the answer's own turns do, and the caller would wait for it after all."""
    if handler is None or handler.done():
        return
    out = asyncio.get_running_loop().create_future()

    def ended(_: object) -> None:
        if not out.done():
            out.set_result(None)

    handler.add_done_callback(ended)
    try:
        async with asyncio.timeout(ANSWER_OUT_S):
            await out
    except TimeoutError:
        pass
    finally:
        handler.remove_done_callback(ended)


def _pass_on(task: asyncio.Task[Any], answer: asyncio.Future[types.CallToolResult]) -> None:
    """A forwarded call's task has ended: its outcome is the answer, unless it answered already."""
    error = None if task.cancelled() else task.exception()
    if answer.done():
        if error is not None:  # answered, then not recorded (a recorder closed under it)
            log.error("a forwarded call was answered but not recorded: %s", error)
        return
    if task.cancelled():
        answer.cancel()
    elif error is not None:
        answer.set_exception(error)
    else:
        answer.set_result(task.result())


@dataclass(frozen=True)
class Inbound:
    """Who sent a ``tools/call`` and what it carried besides the tool's name and arguments."""

    who: Caller
    front_door: str
    layers: tuple[dict[str, Any], ...]  # context from headers, then from ``_meta``
    client: str | None
    meta: Mapping[str, Any] | None  # the request's ``_meta``
    recorded: Callable[[], None]  # a JSON-RPC error is answered for a recorded call: say so


class Answer(Protocol):
    """Where a call answered first sends its answer."""

    def open(self) -> bool:
        """Whether the caller still waits for an answer."""

    async def give(self, result: types.CallToolResult) -> None:
        """Answer; returns once the answer is on its way out."""


class _FutureAnswer:
    """The SDK path: the answer goes to the handler's future; the SDK's task writes it."""

    def __init__(self, future: asyncio.Future[types.CallToolResult], handler: asyncio.Task[Any] | None):
        self.future = future
        self.handler = handler

    def open(self) -> bool:
        return not self.future.done()

    async def give(self, result: types.CallToolResult) -> None:
        self.future.set_result(result)
        await _answer_out(self.handler)


Forward = Callable[[Inbound, str, dict[str, Any], Answer | None], Awaitable[Any]]


@dataclass(frozen=True)
class Forwarding:
    """The forwarding server, and its ``forward`` for front doors that bypass the SDK's layers."""

    server: Server[Any]
    forward: Forward
    recorder: Recorder
    stdio_caller: Caller  # who calls over stdio


class _Router:
    """Names offered to the agent -> (upstream, the upstream's own name)."""

    def __init__(self, pool: UpstreamPool, only: str | None) -> None:
        self.pool = pool
        self.only = only
        self.tools: dict[str, tuple[Upstream, str]] = {}
        self.prompts: dict[str, tuple[Upstream, str]] = {}
        self.resources: dict[str, Upstream] = {}

    def upstreams(self) -> list[Upstream]:
        return [self.pool.get(self.only)] if self.only else list(self.pool.upstreams.values())

    async def _each(self, method: str, key: str) -> dict[str, list[dict[str, Any]]]:
        """``method`` on every upstream (tools from the start-up listing), skipping those that are down."""
        found: dict[str, list[dict[str, Any]]] = {}
        errors: list[str] = []

        async def one(upstream: Upstream) -> None:
            # An upstream that is down is not asked: asking would spend the crash report that belongs
            # to the next tool call, or wait out a restart backoff. Its last tool listing stands.
            if method == "tools/list" and upstream.tools and upstream.state != State.READY:
                found[upstream.name] = upstream.tools
                return
            down = upstream.state == State.CRASHED or (
                upstream.state == State.FAILED and upstream.next_attempt > time.monotonic()
            )
            if down:
                errors.append(str(upstream.last_error))
                return
            try:
                if method == "tools/list":
                    found[upstream.name] = await upstream.list_tools()
                    return
                if upstream.state == State.READY and not upstream.capable(key):
                    return
                page = await upstream.request(method, {})
                items = page.get(key)
                found[upstream.name] = items if isinstance(items, list) else []
            except UpstreamError as exc:
                errors.append(str(exc))
                log.warning("%s", exc)

        async with anyio.create_task_group() as tg:
            for upstream in self.upstreams():
                tg.start_soon(one, upstream)
        if not found and errors:
            raise MCPError(types.INTERNAL_ERROR, "no upstream is available: " + "; ".join(errors))
        return {u.name: found[u.name] for u in self.upstreams() if u.name in found}

    def _expose(
        self, listing: dict[str, list[dict[str, Any]]], table: dict[str, tuple[Upstream, str]]
    ) -> list[dict[str, Any]]:
        counts = Counter(str(item.get("name")) for items in listing.values() for item in items)
        table.clear()
        out = []
        for upstream_name, items in listing.items():
            upstream = self.pool.get(upstream_name)
            for item in items:
                name = str(item.get("name"))
                exposed = name if self.only or counts[name] == 1 else exposed_name(upstream_name, name)
                table[exposed] = (upstream, name)
                out.append({**item, "name": exposed})
        return out

    async def list_tools(self) -> list[types.Tool]:
        listed = self._expose(await self._each("tools/list", "tools"), self.tools)
        return [types.Tool.model_validate(tool) for tool in listed]

    def input_schema(self, name: str) -> dict[str, Any] | None:
        """A listed tool's input schema, without asking any upstream.

        On 2026-07-28 HTTP sessions the SDK checks ``Mcp-Param-*`` headers against the
        schema before every ``tools/call``; without this it would run ``tools/list``
        (and so reach every upstream) for each call.
        """
        route = self.tools.get(name) if not self.only else (self.pool.get(self.only), name)
        if route is None:
            return None
        spec = next((t for t in route[0].tools if t.get("name") == route[1]), None)
        schema = spec.get("inputSchema") if spec is not None else None
        return schema if isinstance(schema, dict) else None

    def unready(self) -> str:
        """For an unknown tool's error: the upstreams whose tools are not listed because they are
        not up (still starting within the call's timeout, failed, crashed), which may offer it."""
        down = [
            f"{u.name!r} is {u.state}" + (f" ({u.last_error})" if u.last_error else "")
            for u in self.upstreams()
            if u.state != State.READY and not u.tools
        ]
        return f"; not listed yet: {'; '.join(down)}" if down else ""

    async def resolve_tool(self, name: str) -> tuple[Upstream, str] | None:
        if self.only:
            return self.pool.get(self.only), name
        if name not in self.tools:
            prefix, sep, rest = name.partition(PREFIX_SEPARATOR)
            for upstream in self.pool.upstreams.values():
                if sep and exposed_name(upstream.name, "") == prefix + sep:
                    return upstream, rest
            with contextlib.suppress(MCPError):  # no upstream up: the call is recorded as unknown
                await self.list_tools()  # a name the agent did not list through us (yet)
        return self.tools.get(name)

    async def list_prompts(self) -> list[dict[str, Any]]:
        return self._expose(await self._each("prompts/list", "prompts"), self.prompts)

    async def list_resources(self, method: str, key: str) -> list[dict[str, Any]]:
        out = []
        for upstream_name, items in (await self._each(method, key)).items():
            for item in items:
                if key == "resources" and isinstance(item.get("uri"), str):
                    self.resources.setdefault(item["uri"], self.pool.get(upstream_name))
                out.append(item)
        return out


def build_forward_server(
    pool: UpstreamPool,
    recorder: Recorder,
    *,
    only: str | None = None,
    default_principal: str = "local",
    policy: Policy | None = None,
    clock: Clock | None = None,
) -> Server[Any]:
    """The forwarding MCP server (see :func:`build_forwarding`)."""
    return build_forwarding(
        pool, recorder, only=only, default_principal=default_principal, policy=policy, clock=clock
    ).server


def build_forwarding(
    pool: UpstreamPool,
    recorder: Recorder,
    *,
    only: str | None = None,
    default_principal: str = "local",
    policy: Policy | None = None,
    clock: Clock | None = None,
) -> Forwarding:
    """An MCP server offering the tools, resources and prompts of ``pool``'s upstreams (or one).

    Each call is checked: the caller must be allowed on the upstream (its ``upstreams``
    patterns) and hold the right the tool's lifecycle class needs on the call's namespace
    (read for retrievals and reads, write for writes, updates and tools memtap cannot
    classify, delete for deletes). A refusal is a tool error and a recorded event.

    The server comes with its ``forward``: one ``tools/call`` served and recorded, which the
    lean stdio path (``proxy/lean.py``) calls without the SDK's server layers."""
    if only is not None:
        pool.get(only)  # an unknown name is refused here, not at the first call
    router = _Router(pool, only)
    rules = policy or Policy()
    stdio_caller = local_caller(default_principal)

    def caller(ctx: ServerRequestContext[Any, Any]) -> tuple[Caller, str, tuple[dict[str, Any], ...]]:
        return mcp_caller(ctx, stdio_caller)

    def authorise(who: Caller, upstream: Upstream, op: Op, context: Any) -> None:
        if not who.restricted:
            return
        rules.check_upstream(who, upstream.name)
        right = right_for(op)
        if right is not None:
            rules.check(who, context.namespace, right)

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        tools = await router.list_tools()
        who = caller(ctx)[0]
        if who.restricted:  # only the tools of upstreams the caller may call
            tools = [t for t in tools if rules.may_call_upstream(who, router.tools[t.name][0].name)]
        return types.ListToolsResult(tools=tools)

    async def forward(
        inbound: Inbound, name: str, arguments: dict[str, Any], answer: Answer | None = None
    ) -> Any:
        """Serve one call and record it; with ``answer``, answer it there as soon as the
        upstream's well-formed result is in (effects derived and event recorded once the
        answer is on its way out)."""
        who, front_door, layers, client = inbound.who, inbound.front_door, inbound.layers, inbound.client
        route = await router.resolve_tool(name)
        upstream = route[0] if route is not None else None
        code = types.INTERNAL_ERROR
        data: Any = None
        parsed: types.CallToolResult | None = None
        denied = False
        async with recorded_call(
            recorder,
            tool=route[1] if route is not None else name,  # the upstream's own name; backend says which
            op=upstream.kind_of(route[1]).op if route is not None and upstream is not None else Op.CONTROL,
            front_door=front_door,
            backend=upstream.name if upstream is not None else "proxy",
            arguments=arguments,
            fallback_context=lambda: best_context(
                who, layers=layers, client=client, upstream=upstream.name if upstream else None, clock=clock
            ),
        ) as call:

            async def answered(result: dict[str, Any]) -> None:
                nonlocal parsed
                if answer is None or not answer.open():
                    return
                try:
                    parsed = types.CallToolResult.model_validate(result)
                except ValidationError:
                    return  # answered at the end, with the protocol error, as before
                call.total_ms = (time.perf_counter() - call.started) * 1000  # the caller's wait
                await answer.give(parsed)

            try:
                context = call.context = resolve_context(
                    who,
                    layers=layers,
                    client=client,
                    upstream=upstream.name if upstream is not None else None,
                    clock=clock,
                    policy=rules,
                )
                if route is None or upstream is None:
                    offered = ", ".join(sorted(router.tools)) or "none"
                    raise UnknownTool(
                        f"unknown tool {name!r}; the upstreams offer: {offered}{router.unready()}"
                    )
                tool = route[1]
                authorise(who, upstream, upstream.kind_of(tool).op, context)
                await upstream.connection()
                call.op = upstream.kind_of(tool).op  # again: a lazy upstream's profile is known only now
                authorise(who, upstream, call.op, context)
                meta = _upstream_meta(inbound.meta)
                if upstream.tap is not None:
                    result, call.effects, refined = await upstream.tap.call(
                        tool, arguments, meta, context, call, answered
                    )
                    call.op = refined or call.op
                else:
                    call.start_backend()
                    result = await upstream.call_tool(tool, arguments, meta)
                    call.end_backend()
                    await answered(result)
                try:
                    if parsed is None:
                        parsed = types.CallToolResult.model_validate(result)
                except ValidationError as exc:
                    problem = exc.errors()[0]
                    where = ".".join(str(p) for p in problem["loc"])
                    raise UpstreamProtocolError(
                        f"upstream {upstream.name!r} returned a malformed result for {tool}: {where}: "
                        f"{problem['msg']}",
                        upstream=upstream.name,
                    ) from None
                call.value = _recorded_value(result)
                if parsed.is_error:
                    texts = [c.text for c in parsed.content if isinstance(c, types.TextContent)]
                    call.error = "upstream tool error: " + (" ".join(texts) or "(no text)")
            except MemtapError as exc:
                code = _error_code(exc)
                data = exc.data if isinstance(exc, UpstreamRPCError) else None
                denied = isinstance(exc, AccessDenied)
                raise
        if denied:  # a refusal is the caller's tool error, as for memtap's own tools
            text = types.TextContent(type="text", text=call.error or "refused")
            return types.CallToolResult(content=[text], is_error=True)
        if parsed is not None and call.commit_error is None:
            return parsed
        inbound.recorded()  # the guard must not record this JSON-RPC error a second time
        raise MCPError(code, call.error or "error", data)  # durable: an uncommitted event is an error

    def inbound_of(ctx: ServerRequestContext[Any, Any]) -> Inbound:
        who, front_door, layers = caller(ctx)
        return Inbound(who, front_door, layers, client_name(ctx), ctx.meta, lambda: mark_recorded(ctx))

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        arguments = dict(params.arguments or {})
        if recorder.durable:  # recorded (committed) before the answer, as durable mode promises
            with anyio.CancelScope(shield=True):
                result: types.CallToolResult = await forward(inbound_of(ctx), params.name, arguments)
            return result
        # Answered first: the call runs in a task of its own (so a caller that goes away does not
        # cut it short), which answers here once the upstream's result is in and then derives
        # the effects and records the event (memtap/trace/after.py).
        answer: asyncio.Future[types.CallToolResult] = asyncio.get_running_loop().create_future()
        handler = asyncio.current_task()  # the SDK's task for this request: it writes the answer
        work = forward(inbound_of(ctx), params.name, arguments, _FutureAnswer(answer, handler))
        task = recorder.answered_first.spawn(work)
        task.add_done_callback(lambda done: _pass_on(done, answer))
        return await answer

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        items = await router.list_resources("resources/list", "resources")
        return types.ListResourcesResult.model_validate({"resources": items})

    async def list_resource_templates(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        items = await router.list_resources("resources/templates/list", "resourceTemplates")
        return types.ListResourceTemplatesResult.model_validate({"resourceTemplates": items})

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        if uri not in router.resources:
            await router.list_resources("resources/list", "resources")
        candidates = [router.resources[uri]] if uri in router.resources else router.upstreams()
        who, front_door, layers = caller(ctx)
        last: MemtapError = UnknownTool(f"no upstream offers resource {uri!r}")
        read: types.ReadResourceResult | None = None
        for upstream in candidates:
            async with recorded_call(
                recorder,
                tool="resources/read",
                op=Op.READ,
                front_door=front_door,
                backend=upstream.name,
                arguments={"uri": uri},
                fallback_context=lambda: best_context(who, layers=layers, client=client_name(ctx)),
            ) as call:
                call.context = resolve_context(
                    who,
                    layers=layers,
                    client=client_name(ctx),
                    upstream=upstream.name,
                    clock=clock,
                    policy=rules,
                )
                try:
                    authorise(who, upstream, Op.READ, call.context)
                except AccessDenied as exc:
                    last = exc
                    raise
                call.start_backend()
                try:
                    result = await upstream.request("resources/read", {"uri": uri})
                except UpstreamError as exc:
                    last = exc
                    raise
                finally:
                    call.end_backend()
                contents = result.get("contents") or []
                call.value = {"contents": len(contents)}
                read = types.ReadResourceResult.model_validate(result)
            if read is not None:
                if call.commit_error is not None:  # durable: an uncommitted event is an error
                    mark_recorded(ctx)
                    raise MCPError(types.INTERNAL_ERROR, call.commit_error)
                return read
        mark_recorded(ctx)
        raise MCPError(_error_code(last), str(last))

    async def list_prompts(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        return types.ListPromptsResult.model_validate({"prompts": await router.list_prompts()})

    async def get_prompt(
        ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> types.GetPromptResult:
        if params.name not in router.prompts:
            await router.list_prompts()
        route = router.prompts.get(params.name)
        if route is None:
            raise MCPError(types.INVALID_PARAMS, f"unknown prompt {params.name!r}")
        try:
            result = await route[0].request(
                "prompts/get", {"name": route[1], "arguments": params.arguments or {}}
            )
        except UpstreamError as exc:
            raise MCPError(_error_code(exc), str(exc)) from None
        return types.GetPromptResult.model_validate(result)

    server = new_server(
        "memtap" if only is None else f"memtap/{only}",
        version=__version__,
        get_tool_input_schema=router.input_schema,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_resource_templates,
        on_read_resource=read_resource,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )
    return Forwarding(server, forward, recorder, stdio_caller)


class ByUpstream:
    """``/servers/{name}/mcp``: that upstream's own MCP endpoint, or a 404 naming the ones there are.

    Mounted behind the principal gate, so upstream names are not told to callers without
    a key; a request for an unknown upstream is recorded as an error event.
    """

    def __init__(
        self, endpoints: Mapping[str, ASGIApp], recorder: Recorder, policy: Policy | None = None
    ) -> None:
        self.endpoints = endpoints
        self.recorder = recorder
        self.policy = policy or Policy()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name = scope["path_params"]["name"]
        who = caller_in(scope, _LOCAL)
        endpoint = self.endpoints.get(name)
        refusal: MemtapError | None = None
        status = 404
        if endpoint is None:
            refusal = UnknownUpstream(
                f"unknown upstream {name!r}; this proxy wraps: {', '.join(self.endpoints)}"
            )
        elif not self.policy.may_call_upstream(who, name):
            try:
                self.policy.check_upstream(who, name)
            except AccessDenied as exc:
                refusal, status = exc, 403
        if refusal is None and endpoint is not None:
            await endpoint(scope, receive, send)
            return
        if scope.get("method") == "POST":
            scope[RECORDED_SCOPE_KEY] = True  # the guard records refusals that are not recorded here
            async with recorded_call(
                self.recorder,
                tool=f"servers/{name}",
                op=Op.CONTROL,
                front_door="mcp-http",
                backend=name if endpoint is not None else "proxy",
                arguments={},
                fallback_context=lambda: best_context(who, upstream=name if endpoint is not None else None),
            ):
                raise refusal  # type: ignore[misc]
        body = {
            "error": {"message": str(refusal), "type": "permission_error" if status == 403 else "not_found"}
        }
        await JSONResponse(body, status_code=status)(scope, receive, send)
