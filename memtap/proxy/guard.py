"""The outermost layer of the HTTP app: header caps, and a recorded event for every refusal.

:class:`RequestGuard` sees every HTTP request before anything else in memtap does:

- a request whose headers are over the caps (one value over ``max_header_bytes``, all of them
  over 64 times that, an ``X-Memtap-*`` value over ``max_field_chars``) is answered ``431``
  with an error naming the header and the cap, and never reaches a front door;
- a request that an endpoint refuses without recording it itself (the MCP transport's
  ``400``/``404``/``406``/``413``/``421`` for a malformed body, an unknown session or a
  forbidden host; the replay clock's ``4xx``), and a JSON-RPC error the MCP server answers
  inside a ``200`` without having recorded a call (an unknown method, ``params`` that do not
  fit it), becomes one ``control`` event with the status, the message and the context the
  headers carry. A handler that recorded its call before answering a JSON-RPC error says so
  with :func:`mark_recorded`.

The ``/v1`` front doors record their own refusals, and ``401`` (no valid key) is never
recorded: a caller that cannot authenticate cannot write to the trace. Nor is a ``GET`` that
found nothing (``404``: no replay mark for that key), which is an answer, not a refusal. Requests for paths
memtap does not serve are answered ``404`` and not recorded either.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memtap.adapters.llm import error_body
from memtap.auth import CALLER_SCOPE_KEY, Caller, best_context, fields_from_headers, local_caller
from memtap.errors import ProxyError
from memtap.limits import Limits, current
from memtap.proxy.http import headers_of, send_bytes
from memtap.trace.calls import recorded_call
from memtap.trace.models import Op
from memtap.trace.writer import Recorder

__all__ = ["RECORDED_SCOPE_KEY", "RequestGuard", "RequestRefused", "mark_recorded"]

# An endpoint that recorded a refusal itself sets this in the scope, so it is not recorded twice.
RECORDED_SCOPE_KEY = "memtap.recorded"
_KEEP_BODY = 4096


class RequestRefused(ProxyError):
    """An HTTP request memtap refused before any front door served it."""


def mark_recorded(ctx: Any) -> None:
    """An MCP handler that recorded its call and answers a JSON-RPC error says so here (through
    the HTTP request the SDK hands it), so the guard does not record the error again."""
    scope = getattr(getattr(ctx, "request", None), "scope", None)
    if isinstance(scope, dict):
        scope[RECORDED_SCOPE_KEY] = True


def _recorded_path(path: str) -> bool:
    """The endpoints whose refusals the guard records (the /v1 front doors record their own)."""
    return path == "/mcp" or path.startswith(("/servers/", "/v1/memtap/"))


def header_problem(scope: Scope, limits: Limits) -> str | None:
    """What is wrong with the request's headers, or None."""
    total = 0
    smallest = min(limits.max_header_bytes, limits.max_field_chars)
    for raw_name, raw_value in scope.get("headers", []):
        size = len(raw_value)
        total += len(raw_name) + size
        if size <= smallest:  # every request pays for this loop: decode names only when needed
            continue
        name = raw_name.decode("latin-1")
        if size > limits.max_header_bytes:
            return (
                f"header {name} is {size} bytes; the limit is {limits.max_header_bytes} bytes "
                "(--max-header-bytes)"
            )
        if size > limits.max_field_chars and name.lower().startswith("x-memtap-"):
            return (
                f"header {name} is {size} characters; the limit is {limits.max_field_chars} "
                "(--max-field-chars)"
            )
    if total > limits.max_headers_bytes:
        return (
            f"the headers are {total} bytes together; the limit is {limits.max_headers_bytes} bytes "
            "(64 x --max-header-bytes)"
        )
    return None


def _message_of(body: bytes) -> str:
    """The error message of a refusal's body: OpenAI, JSON-RPC or FastAPI shape, else the text."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return body[:300].decode("utf-8", "replace")
    if isinstance(parsed, dict):
        error = parsed.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])[:1000]
        if "detail" in parsed:
            detail = parsed["detail"]
            return (detail if isinstance(detail, str) else json.dumps(detail, default=str))[:1000]
    return body[:300].decode("utf-8", "replace")


def _is_rpc_error(chunk: bytes) -> bool:
    """A JSON-RPC error answer (the SDK writes ``{"jsonrpc":"2.0","id":...,"error":{...}}``)."""
    head = chunk[:160]
    return head.startswith(b'{"jsonrpc"') and b'"error":{' in head and b'"result"' not in head


def _refused(scope: Scope, status: int) -> bool:
    """A refusal to record: a 4xx, except 401 (no valid key), a lookup that found nothing
    (``GET`` 404), and what the endpoint recorded itself."""
    if status < 400 or status == 401 or scope.get(RECORDED_SCOPE_KEY):
        return False
    return not (status == 404 and scope.get("method") == "GET")


class RequestGuard:
    """ASGI middleware: header caps first, then a recorded event for each unrecorded refusal."""

    def __init__(
        self,
        app: ASGIApp,
        recorder: Recorder,
        caller_of: Callable[[Mapping[str, str]], Caller | None],
        default_principal: str = "local",
    ) -> None:
        self.app = app
        self.recorder = recorder
        self.caller_of = caller_of
        self.default_principal = default_principal

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        problem = header_problem(scope, current())
        if problem is not None:
            await self._refuse_headers(scope, send, problem)
            return
        path = scope["path"]
        if not _recorded_path(path):
            await self.app(scope, receive, send)
            return
        status = 0
        body = bytearray()
        rpc_error = False

        async def watching(message: Message) -> None:
            nonlocal status, rpc_error
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and len(body) < _KEEP_BODY:
                chunk = message.get("body", b"")
                if status >= 400:
                    body.extend(chunk[: _KEEP_BODY - len(body)])
                elif status == 200 and not body and _is_rpc_error(chunk):
                    rpc_error = True
                    body.extend(chunk[:_KEEP_BODY])
            await send(message)

        await self.app(scope, receive, watching)
        if _refused(scope, status):
            await self._record(scope, f"HTTP {status}: {_message_of(bytes(body))}")
        elif rpc_error and not scope.get(RECORDED_SCOPE_KEY):
            await self._record(scope, f"JSON-RPC error: {_message_of(bytes(body))}")

    def _caller(self, scope: Scope) -> Caller | None:
        """The request's caller (the gate's, else authenticated here); ``None``: no valid key.
        A principal over the field cap (an ``X-Memtap-Principal``) is recorded as the default."""
        caller = scope.get(CALLER_SCOPE_KEY)  # the guard runs outside the gate: it may not have run
        if not isinstance(caller, Caller):
            caller = self.caller_of(headers_of(scope))
        if caller is not None and len(caller.principal) > current().max_field_chars:
            caller = local_caller(self.default_principal)
        return caller

    async def _refuse_headers(self, scope: Scope, send: Send, problem: str) -> None:
        caller = self._caller(scope)
        if caller is None:  # no valid key: refused as the authentication gate would, not recorded
            body = error_body(
                "missing or unknown API key or token (Authorization: Bearer KEY)", "authentication_error"
            )
            await send_bytes(send, 401, body)
            return
        await send_bytes(send, 431, error_body(problem, "invalid_request_error", code="header_too_large"))
        await self._record(scope, f"HTTP 431: {problem}", caller)

    async def _record(self, scope: Scope, message: str, caller: Caller | None = None) -> None:
        headers = headers_of(scope)
        who = caller or self._caller(scope) or local_caller(self.default_principal)
        method = scope.get("method", "")
        path = scope["path"]
        async with recorded_call(
            self.recorder,
            tool=f"{method} {path}"[:200],
            op=Op.CONTROL,
            front_door="http",
            backend="none",
            arguments=_request_summary(scope),
            fallback_context=lambda: best_context(
                who, layers=(fields_from_headers(headers),), client=headers.get("user-agent")
            ),
        ):
            raise RequestRefused(message)


def _request_summary(scope: Scope) -> dict[str, Any]:
    """What the trace keeps of a refused request: method, path, query and content type."""
    headers = headers_of(scope)
    query = scope.get("query_string", b"").decode("latin-1")
    return {
        "method": scope.get("method"),
        "path": scope["path"][:1000],
        **({"query": query[:1000]} if query else {}),
        **({"content_type": headers["content-type"][:200]} if "content-type" in headers else {}),
    }


async def validation_error(request: Any, exc: Exception) -> Any:
    """FastAPI's 422 for a request that fails its model, without echoing the input back (which
    may be large, or hold text that cannot be encoded as UTF-8)."""
    from starlette.responses import Response

    errors: list[dict[str, Any]] = getattr(exc, "errors", list)()
    detail = [
        {"loc": list(err.get("loc", ())), "msg": str(err.get("msg", "")), "type": str(err.get("type", ""))}
        for err in errors
    ]
    return Response(json.dumps({"detail": detail}), status_code=422, media_type="application/json")
