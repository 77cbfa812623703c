"""``tools/call`` on the stdio front door of ``memtap proxy``, served without the SDK's server layers.

The SDK hands each request through its JSON-RPC dispatcher (a memory stream, a task, a cancel
scope), its per-request connection and session (2026-07-28 era), its middleware chain and its
typed handler before memtap's forwarding code runs, and the answer back through the same
layers to the transport. On the stdio front door that was about 0.2 ms of a forwarded call's
path (docs/upstream-proxy.md#performance). :class:`LeanCalls` takes a ``tools/call`` line
straight from the transport, makes the SDK's own checks with the SDK's own functions, calls
the same ``forward`` the SDK's handler calls, and writes the answer on the pipe itself as soon
as the upstream's result is in; the effects and the event come after, as on the SDK path.

It serves only what the SDK would serve: a request the SDK would refuse (not a well-formed
JSON-RPC request, before the handshake, the wrong era's envelope, a version or parameters its
surface rejects, a client name it would read differently) is handed to the SDK, which answers
it as always. Everything but ``tools/call`` goes to the SDK too, and so does every call while
a tracer is installed (the SDK's middleware opens a span per request that memtap's span nests in).

What the caller sees is the SDK's: the same result (the SDK's per-version result sieve and the
2026-07-28 ``serverInfo`` stamp), the same JSON-RPC errors, the same ``notifications/cancelled``
handling (the answer is dropped; the call runs to its end and is recorded), and at end of input
the same "Connection closed" error for calls not yet answered (none in durable mode, as none
comes from the SDK there). ``tests/test_lean_stdio.py`` runs
the same calls through both paths and compares answers and events.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import mcp.types as types
from mcp.server import Server
from mcp.server._otel import OpenTelemetryMiddleware
from mcp.server.runner import _has_modern_envelope, modern_error_data
from mcp.shared.dispatcher import as_request_id, coerce_request_id
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import InboundLadderRejection, classify_inbound_request
from mcp_types import (
    CLIENT_INFO_META_KEY,
    CONNECTION_CLOSED,
    INTERNAL_ERROR,
    SERVER_INFO_META_KEY,
    ErrorData,
    JSONRPCError,
    JSONRPCMessage,
    JSONRPCRequest,
    JSONRPCResponse,
)
from mcp_types import methods as spec_methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError
from pydantic_core import from_json, to_json

from memtap.auth import fields_from_meta
from memtap.proxy.forward import Forwarding, Inbound
from memtap.trace.otel import tracing

__all__ = ["LeanCalls"]

log = logging.getLogger("memtap.lean")

_METHOD = "tools/call"
_REQUEST_KEYS = frozenset({"jsonrpc", "id", "method", "params"})
_NOTIFICATION_KEYS = frozenset({"jsonrpc", "method", "params"})


def _message(line: bytes, keys: frozenset[str], method: str) -> dict[str, Any] | None:
    """``line`` as a JSON-RPC 2.0 object for ``method`` with no keys outside ``keys``; None
    otherwise (the SDK then reads it, and says what is wrong)."""
    try:
        message = from_json(line, allow_inf_nan=False)
    except ValueError:
        return None
    if (
        type(message) is not dict
        or message.keys() - keys
        or message.get("jsonrpc") != "2.0"
        or message.get("method") != method
    ):
        return None
    return message


def _nothing() -> None:
    pass


class _Call:
    """One ``tools/call`` in flight on the lean path."""

    __slots__ = ("answered", "cancelled", "id", "lean", "version")

    def __init__(self, lean: LeanCalls, request_id: int | str, version: str) -> None:
        self.lean = lean
        self.id = request_id
        self.version = version
        self.answered = False
        self.cancelled = False

    def open(self) -> bool:
        return not (self.answered or self.cancelled)

    async def give(self, result: types.CallToolResult) -> None:
        self.answered = True
        await self.lean.write(self.lean.result_line(self, result))

    async def fail(self, error: ErrorData) -> None:
        self.answered = True
        line = JSONRPCError(jsonrpc="2.0", id=self.id, error=error).model_dump_json(
            by_alias=True, exclude_unset=True
        )
        await self.lean.write(line.encode("utf-8") + b"\n")


class LeanCalls:
    """The lean path for one stdio connection (see the module's docstring)."""

    def __init__(self, forwarding: Forwarding) -> None:
        self.forwarding = forwarding
        self.server: Server[Any] = forwarding.server
        # The SDK path does more than this path mirrors when a server has cache hints for
        # tools/call or middleware besides its own (no-op without a tracer) span middleware.
        self.usable = _METHOD not in self.server.cache_hints and all(
            type(m) is OpenTelemetryMiddleware for m in self.server.middleware
        )
        self.writer: asyncio.StreamWriter | None = None
        self.era: str | None = None  # "modern" or "legacy", as the client's first request decided
        self.version: str | None = None  # legacy: the version the handshake agreed
        self.client: str | None = None  # legacy: the client's name from the handshake
        self._handshake: tuple[int | str, str | None] | None = None  # legacy: initialize in flight
        self.calls: dict[int | str, _Call] = {}

    def attach(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer

    # -- what the SDK sees and says (the era, the handshake) -------------------------------

    def opened(self, message: JSONRPCMessage) -> None:
        """A message handed to the SDK: the first request decides the era, as the SDK's does."""
        if not isinstance(message, JSONRPCRequest):
            return
        params = message.params
        if self.era is None:
            modern = message.method != "initialize" and _has_modern_envelope(params)
            self.era = "modern" if modern else "legacy"
        if self.era == "legacy" and message.method == "initialize":
            try:
                init = types.InitializeRequestParams.model_validate(params or {}, by_name=False)
            except ValidationError:
                return  # the SDK refuses it; the gate stays as it was
            self._handshake = (message.id, init.client_info.name)

    def sent(self, message: JSONRPCMessage) -> None:
        """A message the SDK writes: a legacy handshake's answer opens the lean path."""
        if self._handshake is None or not isinstance(message, JSONRPCResponse):
            return
        if message.id != self._handshake[0]:
            return
        version = message.result.get("protocolVersion")
        if isinstance(version, str):
            self.version, self.client = version, self._handshake[1]
        self._handshake = None

    # -- the lean path -------------------------------------------------------------------

    def take(self, line: bytes) -> bool:
        """Serve ``line`` here when it is a ``tools/call`` the SDK would serve; False: the SDK's."""
        if not self.usable or self.writer is None or (self.era != "modern" and self.version is None):
            return False
        if b'"tools/call"' not in line:
            return b'"notifications/cancelled"' in line and self._cancel(line)
        if tracing():
            return False
        message = _message(line, _REQUEST_KEYS, _METHOD)
        if (
            message is None
            or type(message.get("params")) is not dict
            or type(message.get("id")) not in (int, str)
        ):
            return False
        request_id: int | str = message["id"]
        params: dict[str, Any] = message["params"]
        if self.era == "modern":
            if not _has_modern_envelope(params):
                return False
            route = classify_inbound_request({"method": _METHOD, "params": params})
            if isinstance(route, InboundLadderRejection):
                return False
            version = route.protocol_version
        else:
            if _has_modern_envelope(params):
                return False
            version = self.version or ""
        try:
            spec_methods.validate_client_request(_METHOD, version, params)
            typed = types.CallToolRequestParams.model_validate(params, by_name=False)
        except (KeyError, ValueError):  # ValidationError is a ValueError
            return False
        meta = typed.meta
        try:
            client = self._client_name(meta)
        except LookupError:
            return False
        key = coerce_request_id(request_id)
        if key in self.calls:
            return False  # a duplicate id in flight: the SDK's rules
        call = self.calls[key] = _Call(self, request_id, version)
        forwarding = self.forwarding
        inbound = Inbound(
            forwarding.stdio_caller, "mcp-stdio", ({}, fields_from_meta(meta)), client, meta, _nothing
        )
        answer = None if forwarding.recorder.durable else call
        work = forwarding.forward(inbound, typed.name, dict(typed.arguments or {}), answer)
        forwarding.recorder.answered_first.spawn(self._serve(key, call, work))
        return True

    def _client_name(self, meta: Mapping[str, Any] | None) -> str | None:
        """The client's name as ``mcp_server.client_name`` reads it; LookupError where only the
        SDK's per-request session would tell."""
        info = meta.get(CLIENT_INFO_META_KEY) if isinstance(meta, Mapping) else None
        if isinstance(info, Mapping) and info.get("name"):
            return str(info["name"])
        if self.era == "legacy":
            return self.client
        if info is not None:
            raise LookupError("a client name only the SDK's session reads")
        return None

    def _cancel(self, line: bytes) -> bool:
        """``notifications/cancelled`` for a lean call: its answer is dropped (the call runs on)."""
        message = _message(line, _NOTIFICATION_KEYS, "notifications/cancelled")
        if message is None:
            return False
        params = message.get("params")
        request_id = as_request_id(params.get("requestId")) if isinstance(params, dict) else None
        call = self.calls.get(coerce_request_id(request_id)) if request_id is not None else None
        if call is None:
            return False  # not ours: the SDK's
        call.cancelled = True
        return True

    async def _serve(self, key: int | str, call: _Call, work: Any) -> None:
        try:
            try:
                result = await work
            except MCPError as exc:
                if call.open():
                    await call.fail(exc.error)
            except Exception as exc:  # a bug: answered as the SDK answers a handler's exception
                log.exception("tools/call failed")
                if call.open():
                    modern = call.version in MODERN_PROTOCOL_VERSIONS
                    await call.fail(modern_error_data(exc) if modern else ErrorData(code=0, message=str(exc)))
            else:
                if call.open():
                    await call.give(result)
        finally:
            if self.calls.get(key) is call:
                del self.calls[key]

    def result_line(self, call: _Call, result: types.CallToolResult) -> bytes:
        """The answer line, shaped as the SDK's ``ServerRunner._serialize`` shapes it."""
        dumped = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        try:
            dumped = spec_methods.serialize_server_result(_METHOD, call.version, dumped)
        except ValidationError:
            log.exception("handler for %r returned an invalid result", _METHOD)
            error = JSONRPCError(
                jsonrpc="2.0",
                id=call.id,
                error=ErrorData(code=INTERNAL_ERROR, message="Handler returned an invalid result"),
            )
            return error.model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8") + b"\n"
        if call.version in MODERN_PROTOCOL_VERSIONS:
            if dumped.get("resultType") is None:
                dumped["resultType"] = "complete"
            meta = dumped.get("_meta")
            if meta is None:
                dumped["_meta"] = {SERVER_INFO_META_KEY: self.server.server_info_stamp}
            elif isinstance(meta, dict) and meta.get(SERVER_INFO_META_KEY) is None:
                dumped["_meta"] = {**meta, SERVER_INFO_META_KEY: self.server.server_info_stamp}
        return to_json({"jsonrpc": "2.0", "id": call.id, "result": dumped}) + b"\n"

    async def write(self, line: bytes) -> None:
        writer = self.writer
        if writer is None or writer.is_closing():
            log.debug("dropped an answer: stdout is closed")
            return
        try:
            writer.write(line)
            await writer.drain()
        except (ConnectionError, RuntimeError):
            log.debug("dropped an answer: stdout is closed")

    async def close(self) -> None:
        """End of input. As the SDK's: calls not yet answered get its "Connection closed" error;
        in durable mode (where the SDK's handler runs on, shielded, and its answer is then
        dropped by the cancelled request) they get no answer. Either way each runs to its end
        and is recorded."""
        if self.forwarding.recorder.durable:
            for call in self.calls.values():
                call.cancelled = True
            return
        for call in list(self.calls.values()):
            if call.open():
                await call.fail(ErrorData(code=CONNECTION_CLOSED, message="Connection closed"))
