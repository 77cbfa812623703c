"""``POST /v1/chat/completions``: forward a chat call, record it, optionally act as its memory.

Hot path: the body is parsed once (model, stream flag, messages), sent upstream as it
came unless memory was injected or the model renamed, and the answer goes back as the
upstream's bytes: whole, or for a stream chunk by chunk as they arrive, cut only at
event boundaries so an error event can always follow cleanly. Parsing the answer for
the trace (content, tool calls, usage, time to first token) and capturing memories
happen after the caller has its last byte; a stream's summary, where nothing in the call
reads it (memory ``off``, no OpenTelemetry spans), is left to the recorder
(``CallRecord.deferred``): its thread makes it just before the event is stored, or in
durable mode the recording call, before the commit.

Latency decomposition recorded on the ``chat`` event (milliseconds, monotonic clock,
from the moment the request reached the endpoint):

- ``memory_ms``: searching memory and building the injected message (``auto`` mode);
- ``backend_ms``: the upstream model, from sending the request to its last byte;
- ``ttft_ms``: until the first content or tool-call token was sent on (non-streaming:
  until the answer was sent);
- ``total_ms``: until the caller had the last byte;
- ``overhead_ms``: what memtap itself added, ``total - backend - memory``.

With ``--durable`` the call's event is committed before the answer completes: the whole
response (non-streaming) or the ``data: [DONE]`` event and the end of the stream wait for
the commit (:mod:`memtap.proxy.held`); so does ``auto`` mode's memory capture, which runs
before the event is handed over.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import time
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from starlette.types import Receive, Scope, Send

from memtap.adapters.llm import LiteLLMClient, ModelRouter, PassThrough, Upstream, UpstreamError, error_body
from memtap.auth import (
    Caller,
    Policy,
    Right,
    best_context,
    caller_in,
    fields_from_headers,
    local_caller,
    resolve_context,
)
from memtap.errors import AccessDenied, InvalidArguments
from memtap.proxy.fields import CHAT_FIELDS, check_types, forwardable, recorded, refuse_redirects
from memtap.proxy.held import DONE, HeldReply
from memtap.proxy.http import (
    RequestProblem,
    headers_of,
    parse_object,
    read_body,
    refuse_unencodable,
    send_bytes,
)
from memtap.proxy.memory_layer import MemoryLayer, Recall
from memtap.proxy.sse import complete_prefix, summarise_stream
from memtap.trace.calls import CallRecord, recorded_call
from memtap.trace.models import Op, TraceEvent
from memtap.trace.otel import tracing
from memtap.trace.writer import Recorder

__all__ = ["MEMORY_HEADER", "ChatProxy", "context_layers"]

MEMORY_HEADER = "x-memtap-memory"
_UNWATCHED_BYTES = 32 * 1024  # half the transport's default write buffer limit (64 KiB)
_SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def context_layers(request: Mapping[str, Any], headers: Mapping[str, str]) -> tuple[dict[str, Any], ...]:
    """Context sources, weakest first: the request's ``user`` field names the namespace, and
    ``X-Memtap-*`` headers (namespace included) override it."""
    user = request.get("user")
    base = {"namespace": user} if isinstance(user, str) and user else {}
    return (base, fields_from_headers(headers))


def _validate(request: dict[str, Any]) -> str:
    model = request.get("model")
    if not isinstance(model, str) or not model:
        raise RequestProblem(
            400, "Missing required parameter: 'model'.", param="model", code="missing_required_parameter"
        )
    messages = request.get("messages")
    if messages is None:
        raise RequestProblem(
            400,
            "Missing required parameter: 'messages'.",
            param="messages",
            code="missing_required_parameter",
        )
    if not isinstance(messages, list) or not messages:
        raise RequestProblem(400, "'messages' must be a non-empty array.", param="messages")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise RequestProblem(400, f"messages[{index}] must be an object with a 'role'.", param="messages")
    if "stream" in request and not isinstance(request["stream"], bool):
        raise RequestProblem(400, "'stream' must be a boolean.", param="stream")
    return model


@dataclass
class _Forwarded:
    sent: list[tuple[float, bytes]] = field(default_factory=list)
    error: UpstreamError | None = None
    disconnected: bool = False
    ended_at: float = 0.0

    @property
    def cut(self) -> bool:
        """Whether the stream ended before the upstream finished it (the client left, or the
        upstream broke off): its completion is partial."""
        return self.disconnected or self.error is not None


async def _wait_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class ChatProxy:
    """The chat completions endpoint (an ASGI app; the principal is in the scope)."""

    def __init__(
        self,
        *,
        router: ModelRouter,
        passthrough: PassThrough,
        litellm: LiteLLMClient,
        memory: MemoryLayer,
        recorder: Recorder,
        default_mode: str,
        max_body_bytes: int,
        default_principal: str,
        policy: Policy | None = None,
    ) -> None:
        self.router = router
        self.passthrough = passthrough
        self.litellm = litellm
        self.memory = memory
        self.recorder = recorder
        self.default_mode = default_mode
        self.max_body_bytes = max_body_bytes
        self.default_principal = default_principal
        self.policy = policy or Policy()
        self._local = local_caller(default_principal)

    def _authorise(self, call: CallRecord, who: Caller, request: Mapping[str, Any], mode: str) -> None:
        """In ``auto`` mode the chat reads (injection) the namespace's memory on behalf of the
        request's ``user``: the caller must be allowed to act for that user and to read there
        (capture's write is checked on each write). A refusal is a 403 for the whole chat."""
        if mode != "auto" or not who.restricted or call.context is None:
            return
        try:
            user = request.get("user")
            if isinstance(user, str) and user:
                self.policy.check_act_for(who, user)
            self.policy.check(who, call.context.namespace, Right.READ)
        except AccessDenied as exc:
            raise RequestProblem(403, str(exc), type_="permission_error", code="forbidden") from None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        t0 = time.perf_counter()
        who = caller_in(scope, self._local)
        headers = headers_of(scope)
        problem: RequestProblem | None = None
        raw, request = b"", {}
        try:
            raw = await read_body(scope, receive, self.max_body_bytes)
            request = parse_object(raw)
        except RequestProblem as exc:
            problem = exc
        model = request.get("model")
        upstream = self.router.get(model) if isinstance(model, str) else None
        allowed = upstream.chat_fields if upstream is not None else CHAT_FIELDS
        request, dropped = forwardable(request, allowed)
        started = [False]
        held = HeldReply(send, hold=self.recorder.durable)
        async with recorded_call(
            self.recorder,
            tool="chat.completions",
            op=Op.CHAT,
            front_door="openai",
            backend=upstream.via if upstream is not None else "none",
            arguments=recorded(request, dropped),
            fallback_context=lambda: best_context(
                who, layers=context_layers(request, headers), client=headers.get("user-agent")
            ),
            model=model if isinstance(model, str) else "unknown",
            provider=upstream.provider if upstream is not None else None,
            started_at=t0,
        ) as call:
            try:
                if problem is not None:
                    raise problem
                _validate(request)
                refuse_redirects(dropped)
                check_types(request, allowed)
                if upstream is None:
                    raise RequestProblem(
                        404,
                        f"The model `{model}` does not exist or you do not have access to it.",
                        param="model",
                        code="model_not_found",
                    )
                layers = context_layers(request, headers)
                try:
                    call.context = resolve_context(
                        who, layers=layers, client=headers.get("user-agent"), policy=self.policy
                    )
                except InvalidArguments as exc:
                    raise RequestProblem(400, str(exc)) from None
                except AccessDenied as exc:
                    raise RequestProblem(403, str(exc), type_="permission_error", code="forbidden") from None
                mode = headers.get(MEMORY_HEADER) or upstream.memory or self.default_mode
                if mode not in ("off", "auto"):
                    raise RequestProblem(400, f"X-Memtap-Memory must be off or auto, not {mode!r}")
                self._authorise(call, who, request, mode)
                await self._serve(
                    call,
                    request,
                    raw if not dropped else b"",
                    upstream,
                    mode,
                    who,
                    layers,
                    receive,
                    send,
                    held,
                    started,
                )
            except (RequestProblem, UpstreamError) as exc:
                if not started[0]:
                    started[0] = True
                    await send_bytes(send, exc.status, exc.body)
                    call.total_ms = (time.perf_counter() - t0) * 1000
                raise
        await held.release(call, stream=request.get("stream") is True)
        if not started[0]:  # an unexpected failure, already logged and recorded
            await send_bytes(send, 500, error_body(f"internal error: {call.error}", "server_error"))

    async def _serve(
        self,
        call: CallRecord,
        request: dict[str, Any],
        raw: bytes,
        upstream: Upstream,
        mode: str,
        who: Caller,
        layers: tuple[dict[str, Any], ...],
        receive: Receive,
        send: Send,
        held: HeldReply,
        started: list[bool],
    ) -> None:
        t0 = call.started
        outgoing, recall = request, Recall()
        if mode == "auto":
            outgoing = dict(request)
            recall = await self.memory.recall(outgoing, caller=who, layers=layers)
            call.memory_ms = recall.ms
            if recall.event_id is not None:
                call.links.append(recall.event_id)
        stream = request.get("stream") is True
        passthrough = upstream.via == "passthrough"
        if not passthrough:  # litellm re-encodes the request: refuse what it cannot encode
            refuse_unencodable(outgoing)
        changed = bool(recall.memories) or not raw  # no raw bytes: fields were dropped from them
        body = upstream.prepare(outgoing, raw, changed=changed) if passthrough else b""
        reply: str | None = None
        complete = True
        if not stream:
            call.start_backend()
            if passthrough:
                status, data, content_type = await self.passthrough.request(
                    upstream, "/chat/completions", body
                )
            else:
                status, data, content_type = (
                    200,
                    await self.litellm.chat(upstream, outgoing),
                    "application/json",
                )
            call.end_backend()
            started[0] = True
            await send_bytes(held, status, data, content_type.encode("latin-1"))
            call.total_ms = call.ttft_ms = (time.perf_counter() - t0) * 1000
            result = _response_result(data)
        else:
            call.start_backend()
            async with self._open_stream(upstream, outgoing, body) as chunks:
                started[0] = True
                await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
                forwarded = await self._forward(chunks, receive, send, held)
            call.end_backend()
            call.total_ms = (forwarded.ended_at - t0) * 1000
            if forwarded.cut:
                complete = False
                call.error = (
                    "client disconnected mid-stream" if forwarded.disconnected else str(forwarded.error)
                )
            if mode == "off" and not tracing():
                # Nothing here reads the reply (no capture, no span): the stream's summary is left
                # to the recorder, which makes it on its thread, in a batch with other streams'
                # (about half the CPU it takes here, between requests), before the event is stored
                # (durable: before the commit the answer's end waits for). A whole answer's parse,
                # a tenth of the cost, stays here: moving it measured nothing.
                call.deferred = functools.partial(_finish_stream, forwarded, t0, {"mode": mode})
                return
            result, call.ttft_ms = _stream_result(forwarded, t0)
        tokens = _usage_tokens(result)
        if tokens is not None:
            call.input_tokens, call.output_tokens = tokens
        if result.get("choices"):
            reply = result["choices"][0].get("message", {}).get("content")
        result["memory"] = {"mode": mode}
        if mode == "auto":
            result["memory"].update(
                search_event=recall.event_id,
                injected=[m.get("id") for m in recall.memories],
                **({"search_error": recall.error} if recall.error else {}),
            )
            if complete:
                captured = await self.memory.capture(
                    request, reply, caller=who, layers=layers, model=upstream.alias
                )
                call.links.extend(captured.event_ids)
                result["memory"].update(
                    capture_events=captured.event_ids,
                    captured=captured.item_ids,
                    capture_errors=captured.errors,
                )
        call.value = result

    def _open_stream(
        self, upstream: Upstream, outgoing: dict[str, Any], body: bytes
    ) -> contextlib.AbstractAsyncContextManager[AsyncIterable[bytes]]:
        if upstream.via == "passthrough":  # its own context (no generator around it: one per stream)
            return self.passthrough.stream(upstream, "/chat/completions", body)
        return self._litellm_stream(upstream, outgoing)

    @contextlib.asynccontextmanager
    async def _litellm_stream(
        self, upstream: Upstream, outgoing: dict[str, Any]
    ) -> AsyncIterator[AsyncIterable[bytes]]:
        events = await self.litellm.chat_stream(upstream, outgoing)
        try:
            yield events
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()

    async def _forward(
        self, chunks: AsyncIterable[bytes], receive: Receive, send: Send, held: HeldReply
    ) -> _Forwarded:
        """Send chunks on as they arrive, cut at event boundaries; stop when the client leaves.

        ``held`` gets what ends the stream (``data: [DONE]``, the upstream's last bytes, the end
        of the body): in durable mode it is sent after the event's commit. Otherwise, when the
        upstream tells that a chunk was its last (:class:`~memtap.adapters.llm.StreamBody`),
        that chunk ends the body too (one write fewer). The chunks are pumped in this task; a
        second one waits for the client to leave and then cancels this one (one task and no
        wait set per stream: they cost more than the stream's own sends)."""
        forwarded = _Forwarded()
        sent = forwarded.sent
        this = asyncio.current_task()
        assert this is not None
        ended: Callable[[], bool] | None = None if held.hold else getattr(chunks, "ended", None)
        state = {"left": False, "finished": False}

        async def watch() -> None:
            await _wait_disconnect(receive)  # also returns once the answer is complete
            if not state["finished"]:
                state["left"] = True
                this.cancel()

        # A body that is all in and small (under the transport's write buffer limit, so no send
        # waits either) is forwarded without yielding to the loop: no client can be seen to
        # leave meanwhile, and a watcher would only be made and cancelled.
        arrived: Callable[[int], bool] | None = getattr(chunks, "arrived", None)
        watching = (
            None if arrived is not None and arrived(_UNWATCHED_BYTES) else asyncio.ensure_future(watch())
        )
        try:
            pending = b""
            async for chunk in chunks:
                data = pending + chunk if pending else chunk
                cut = complete_prefix(data)
                if cut:
                    out = data if cut == len(data) else data[:cut]
                    if ended is not None and cut == len(data) and ended():
                        state["finished"] = True
                        await send({"type": "http.response.body", "body": out, "more_body": False})
                        sent.append((time.perf_counter(), out))
                        pending = b""
                        continue
                    split = held.hold and out.endswith(DONE)
                    head, done = (out[: -len(DONE)], DONE) if split else (out, b"")
                    if head:
                        await send({"type": "http.response.body", "body": head, "more_body": True})
                    if done:
                        await held({"type": "http.response.body", "body": done, "more_body": True})
                    sent.append((time.perf_counter(), out))
                pending = data[cut:]
            if pending:  # the upstream's last bytes, as they are
                await held({"type": "http.response.body", "body": pending, "more_body": True})
                sent.append((time.perf_counter(), pending))
        except asyncio.CancelledError:
            if not state["left"]:
                raise
            this.uncancel()  # the client left: that cancellation was ours, and it is spent
            forwarded.disconnected = True
        except UpstreamError as error:
            forwarded.error = error
        finally:
            if watching is not None:
                watching.cancel()
        if forwarded.error is not None:
            event = b"data: " + forwarded.error.body + b"\n\n"
            await send({"type": "http.response.body", "body": event, "more_body": True})
            sent.append((time.perf_counter(), event))
        if not forwarded.disconnected and not state["finished"]:
            await held({"type": "http.response.body", "body": b"", "more_body": False})
        forwarded.ended_at = time.perf_counter()
        return forwarded


def _stream_result(forwarded: _Forwarded, t0: float) -> tuple[dict[str, Any], float | None]:
    """The completion a forwarded stream carried, as the trace keeps it, and the time to its
    first token (ms after ``t0``)."""
    summary = summarise_stream(forwarded.sent)
    result = summary.result()
    first = summary.first_token_at or (forwarded.sent[0][0] if forwarded.sent else None)
    if forwarded.cut:
        result["partial"] = True
    return result, (first - t0) * 1000 if first is not None else None


def _finish_stream(forwarded: _Forwarded, t0: float, memory: dict[str, Any], event: TraceEvent) -> None:
    """Fill a stream's event with what :meth:`ChatProxy._serve` would have put in it (the result,
    its usage and the time to first token), on the recorder's thread."""
    result, ttft_ms = _stream_result(forwarded, t0)
    tokens = _usage_tokens(result)
    if tokens is not None:
        event.input_tokens, event.output_tokens = tokens
    result["memory"] = memory
    event.result = result
    event.ttft_ms = None if ttft_ms is None else round(ttft_ms, 4)


def _usage_tokens(result: dict[str, Any]) -> tuple[Any, Any] | None:
    """The prompt and completion tokens of a result's usage, when it has a usage object."""
    usage = result.get("usage")
    return (usage.get("prompt_tokens"), usage.get("completion_tokens")) if isinstance(usage, dict) else None


def _response_result(data: bytes) -> dict[str, Any]:
    """The parts of a chat completion the trace keeps (the whole choices, the usage)."""
    try:
        parsed = json.loads(data)
    except ValueError:
        return {"unparsed": data[:2000].decode("utf-8", "replace")}
    if not isinstance(parsed, dict):
        return {"unparsed": parsed}
    choices = parsed.get("choices")
    if not isinstance(choices, list):
        choices = []
    return {
        "id": parsed.get("id"),
        "model": parsed.get("model"),
        "choices": choices,
        "usage": parsed.get("usage"),
        "finish_reasons": [
            c.get("finish_reason") for c in choices if isinstance(c, dict) and c.get("finish_reason")
        ],
    }
