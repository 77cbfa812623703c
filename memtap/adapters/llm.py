"""Upstream LLM clients: a fast pass-through for OpenAI-compatible servers, litellm for the rest.

A model alias from ``model_list`` resolves to an :class:`Upstream`. Providers that speak
the OpenAI HTTP API themselves (``openai``, ``hosted_vllm``, ``lm_studio``, ...) go
through :class:`PassThrough`: the request body is sent as it came (only the model name
rewritten when the alias differs) over kept-alive connections (a lean HTTP/1.1 client,
:mod:`memtap.adapters.upstream_http`), and the response bytes come back untouched,
streamed chunks as they arrive. Every other provider goes
through :class:`LiteLLMClient`, which imports litellm on first use only (it takes seconds
and tries the network unless ``LITELLM_LOCAL_MODEL_COST_MAP`` is set, which we set).

Failures become :class:`UpstreamError` with the HTTP status and OpenAI error body the
caller should get: 502 when the upstream cannot be reached or breaks off, 504 when it
times out, and the upstream's own status and body when it answers with an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
import json
import os
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from memtap.adapters.upstream_http import HTTPClient, Response
from memtap.config import ModelEntry, RouteSettings, resolve_secret
from memtap.errors import ConfigError, ProxyError
from memtap.jsontext import json_body
from memtap.proxy.fields import CHAT_FIELDS, EMBEDDING_FIELDS, allowed_fields

__all__ = [
    "OPENAI_COMPATIBLE",
    "REQUEST_DEFAULTS",
    "LiteLLMClient",
    "ModelRouter",
    "PassThrough",
    "StreamBody",
    "Upstream",
    "UpstreamError",
    "clean_message",
    "error_body",
]

# litellm provider prefixes whose servers speak the OpenAI HTTP API as it is.
OPENAI_COMPATIBLE = frozenset(
    {"openai", "hosted_vllm", "custom_openai", "openai_like", "lm_studio", "llamafile", "sglang"}
)
OPENAI_API_BASE = "https://api.openai.com/v1"
# litellm_params that are chat request parameters: on the pass-through path they fill in
# what the caller did not set. LiteLLM's own keys (rpm, weight, drop_params, ...) are not
# sent to an OpenAI-compatible server, which may refuse unknown fields.
REQUEST_DEFAULTS = frozenset(
    {
        "temperature",
        "top_p",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "presence_penalty",
        "frequency_penalty",
        "seed",
        "n",
        "response_format",
        "reasoning_effort",
        "logit_bias",
        "parallel_tool_calls",
    }
)


def error_body(message: str, type_: str, code: str | int | None = None, param: str | None = None) -> bytes:
    """An OpenAI error body."""
    return json.dumps({"error": {"message": message, "type": type_, "param": param, "code": code}}).encode()


class UpstreamError(ProxyError):
    """The upstream failed; ``status`` and ``body`` are what the caller gets."""

    def __init__(
        self, status: int, message: str, *, type_: str = "upstream_error", body: bytes | None = None
    ):
        super().__init__(message)
        self.status = status
        self.body = body if body is not None else error_body(message, type_, code=status)


@dataclass
class Upstream:
    """One deployment behind a model alias."""

    alias: str
    provider: str
    model: str
    via: Literal["passthrough", "litellm"]
    api_base: str | None
    api_key: str | None
    timeout: float
    stream_timeout: float
    defaults: dict[str, Any] = field(default_factory=dict)
    litellm_params: dict[str, Any] = field(default_factory=dict)
    memory: str | None = None
    # The request fields forwarded to this deployment (memtap.proxy.fields), with their types.
    chat_fields: dict[str, Any] = field(default_factory=lambda: dict(CHAT_FIELDS))
    embedding_fields: dict[str, Any] = field(default_factory=lambda: dict(EMBEDDING_FIELDS))

    def key(self) -> str | None:
        """The API key, resolving ``os.environ/NAME`` now (the variable may be set after start)."""
        return resolve_secret(self.api_key, f"model {self.alias!r}: api_key")

    def url(self, path: str) -> str:
        return (self.api_base or OPENAI_API_BASE).rstrip("/") + path

    def prepare(self, request: dict[str, Any], raw: bytes, *, changed: bool = False) -> bytes:
        """The body to send upstream: the caller's bytes, unless the request was ``changed``
        (memories injected) or the model name or request defaults differ."""
        missing = {k: v for k, v in self.defaults.items() if k not in request}
        if not changed and request.get("model") == self.model and not missing:
            return raw
        return json_body({**missing, **request, "model": self.model})  # lone surrogates stay escaped


def upstream_from_entry(entry: ModelEntry, route: RouteSettings | None, default_timeout: float) -> Upstream:
    params = entry.litellm_params
    provider = params.provider
    via = route.via if route is not None else "auto"
    if via == "auto":
        via = "passthrough" if provider in OPENAI_COMPATIBLE else "litellm"
    if via == "passthrough" and provider != "openai" and not params.api_base:
        raise ConfigError(f"model {entry.model_name!r}: provider {provider} needs api_base for pass-through")
    extra = params.model_extra or {}
    timeout = params.timeout or default_timeout
    return Upstream(
        alias=entry.model_name,
        provider=provider,
        model=params.upstream_model,
        via=via,
        api_base=params.api_base,
        api_key=params.api_key,
        timeout=timeout,
        stream_timeout=params.stream_timeout or timeout,
        defaults={k: v for k, v in extra.items() if k in REQUEST_DEFAULTS},
        litellm_params=params.model_dump(exclude_none=True),
        memory=route.memory if route is not None else None,
        chat_fields=allowed_fields(CHAT_FIELDS, route.extra_fields if route is not None else ()),
        embedding_fields=allowed_fields(EMBEDDING_FIELDS, route.extra_fields if route is not None else ()),
    )


class ModelRouter:
    """Model aliases to deployments; several deployments of one alias take turns."""

    def __init__(
        self, entries: list[ModelEntry], routes: dict[str, RouteSettings], default_timeout: float
    ) -> None:
        grouped: dict[str, list[Upstream]] = {}
        for entry in entries:
            upstream = upstream_from_entry(entry, routes.get(entry.model_name), default_timeout)
            grouped.setdefault(entry.model_name, []).append(upstream)
        self.aliases = list(grouped)
        self._cycles: dict[str, Iterator[Upstream]] = {k: itertools.cycle(v) for k, v in grouped.items()}
        self.needs_litellm = any(u.via == "litellm" for group in grouped.values() for u in group)

    def get(self, alias: str) -> Upstream | None:
        cycle = self._cycles.get(alias)
        return next(cycle) if cycle is not None else None


def _http_error(status: int, body: bytes) -> UpstreamError:
    """An upstream's own error answer, passed on: its status, and its body if it is an OpenAI error."""
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
        message = str(parsed["error"].get("message") or f"upstream answered {status}")
        return UpstreamError(status, message, body=body)
    text = body.decode("utf-8", "replace").strip()[:500]
    return UpstreamError(
        status, f"upstream answered {status}: {text}" if text else f"upstream answered {status}"
    )


class StreamBody:
    """A streamed answer's chunks (iterate over it: each as it arrives; a stall or a break mid-stream
    raises :class:`UpstreamError`), and whether the upstream has finished it: ``ended()`` is true
    once nothing more will come, so the caller may end its own answer with the last chunk instead of
    after it; ``arrived(limit)`` once the whole body is in with at most ``limit`` bytes of it not yet
    taken (so reading it on waits for nothing). Its own iterator, not an async generator (one per
    stream, made, registered with the event loop and finalised, cost more than the stream's reads)."""

    __slots__ = ("_alias", "_response", "_timeout")

    def __init__(self, response: Response, alias: str, read_timeout: float) -> None:
        self._response = response
        self._alias = alias
        self._timeout = read_timeout

    def __aiter__(self) -> StreamBody:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self._response.next_chunk(self._timeout)
        except TimeoutError:
            raise UpstreamError(504, f"upstream {self._alias!r} stalled mid-stream") from None
        except OSError as exc:
            raise UpstreamError(502, f"upstream {self._alias!r} broke off mid-stream: {exc}") from None

    def ended(self) -> bool:
        return self._response.ended()

    def arrived(self, limit: int) -> bool:
        return self._response.arrived(limit)


class _OpenStream:
    """:meth:`PassThrough.stream`'s context: the call made on entry, its connection released on exit
    (a class: a generator-based context manager costs an async generator more per stream)."""

    __slots__ = ("_body", "_passthrough", "_path", "_response", "_upstream", "_url")

    def __init__(self, passthrough: PassThrough, upstream: Upstream, path: str, body: bytes) -> None:
        self._passthrough = passthrough
        self._upstream = upstream
        self._path = path
        self._body = body
        self._url = ""
        self._response: Response | None = None

    async def __aenter__(self) -> StreamBody:
        upstream, passthrough = self._upstream, self._passthrough
        url = self._url = upstream.url(self._path)
        loop = asyncio.get_running_loop()
        timeout = upstream.stream_timeout
        response = await passthrough._post(upstream, url, self._body, True, loop.time() + timeout)
        self._response = response
        if response.status >= 400:
            try:
                data = await passthrough._body(upstream, response, loop.time() + timeout)
            finally:
                self._release()
            raise _http_error(response.status, data)
        return StreamBody(response, upstream.alias, timeout)

    async def __aexit__(self, *exc_info: object) -> None:
        self._release()

    def _release(self) -> None:
        response, self._response = self._response, None
        if response is not None:
            self._passthrough._release(self._url, response)


class PassThrough:
    """OpenAI-compatible upstreams over kept-alive connections (:mod:`memtap.adapters.upstream_http`)."""

    def __init__(self, connect_timeout: float = 10.0) -> None:
        self.connect_timeout = connect_timeout
        self._client: HTTPClient | None = None

    async def start(self) -> None:
        if self._client is None:
            self._client = HTTPClient(self.connect_timeout)

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

    def _headers(self, upstream: Upstream, stream: bool) -> bytes:
        head = _STREAM_HEADERS if stream else _HEADERS
        try:
            key = upstream.key()
        except ConfigError as exc:
            raise UpstreamError(500, str(exc), type_="server_error") from None
        if not key:
            return head
        try:
            if "\r" in key or "\n" in key:
                raise ValueError("a line break")
            return head + b"Authorization: Bearer " + key.encode("latin-1") + b"\r\n"
        except (UnicodeEncodeError, ValueError):
            raise UpstreamError(
                500, f"model {upstream.alias!r}: api_key is not a valid header value", type_="server_error"
            ) from None

    async def _post(
        self, upstream: Upstream, url: str, body: bytes, stream: bool, deadline: float
    ) -> Response:
        if self._client is None:
            await self.start()
        assert self._client is not None
        try:
            return await self._client.post(url, self._headers(upstream, stream), body, deadline)
        except TimeoutError:
            raise UpstreamError(504, f"upstream {upstream.alias!r} timed out", type_="timeout") from None
        except OSError as exc:  # CannotConnect, BrokeOff
            raise UpstreamError(502, f"cannot reach upstream {upstream.alias!r}: {exc}") from None

    @staticmethod
    async def _body(upstream: Upstream, response: Response, deadline: float) -> bytes:
        try:
            return await response.read(deadline)
        except TimeoutError:
            raise UpstreamError(504, f"upstream {upstream.alias!r} timed out", type_="timeout") from None
        except OSError as exc:
            raise UpstreamError(502, f"upstream {upstream.alias!r} broke off: {exc}") from None

    async def request(self, upstream: Upstream, path: str, body: bytes) -> tuple[int, bytes, str]:
        """One non-streaming call: status, body bytes, content type (error answers raise)."""
        url = upstream.url(path)
        deadline = asyncio.get_running_loop().time() + upstream.timeout
        response = await self._post(upstream, url, body, False, deadline)
        try:
            data = await self._body(upstream, response, deadline)
        finally:
            self._release(url, response)
        if response.status >= 400:
            raise _http_error(response.status, data)
        return response.status, data, response.content_type

    def _release(self, url: str, response: Response) -> None:
        if self._client is not None:
            self._client.release(url, response)
        else:
            response.close()

    def stream(
        self, upstream: Upstream, path: str, body: bytes
    ) -> contextlib.AbstractAsyncContextManager[StreamBody]:
        """A streaming call: an async context whose value is the response body's chunks as they
        arrive (:class:`StreamBody`).

        An error answer raises on entry, before anything is yielded; a failure mid-stream raises
        UpstreamError from the iterator. Leaving early closes the upstream connection,
        which cancels the upstream's generation. Each wait for the upstream (its answer's
        start, then each read) may take the route's ``stream_timeout``.
        """
        return _OpenStream(self, upstream, path, body)


_HEADERS = b"Content-Type: application/json\r\nAccept-Encoding: identity\r\n"
_STREAM_HEADERS = _HEADERS + b"Accept: text/event-stream\r\n"


def _import_litellm() -> Any:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_LOG", "ERROR")
    import litellm

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    return litellm


_TRACEBACK = re.compile(r"\s*(Traceback \(most recent call last\)|File \"|\n)")


def clean_message(message: str, limit: int = 500) -> str:
    """An upstream library's error message fit for a caller: its first line, no traceback,
    at most ``limit`` characters."""
    cut = _TRACEBACK.search(message)
    text = (message[: cut.start()] if cut else message).strip()
    return text[:limit] + ("…" if len(text) > limit else "") or "no message"


def _litellm_error(exc: Exception, upstream: Upstream) -> UpstreamError:
    """A litellm exception as the caller's answer: the upstream's own 4xx passed on, a 5xx or a
    failure to connect as 502, a timeout as 504; one clean line, never a traceback."""
    status = getattr(exc, "status_code", None)
    message = clean_message(str(getattr(exc, "message", None) or exc))
    name = type(exc).__name__
    if isinstance(exc, asyncio.TimeoutError) or name == "Timeout":
        return UpstreamError(504, f"upstream {upstream.alias!r} timed out: {message}", type_="timeout")
    if isinstance(status, int) and 400 <= status < 500 and name != "APIConnectionError":
        return UpstreamError(status, message)
    return UpstreamError(502, f"upstream {upstream.alias!r} failed: {message}")


class LiteLLMClient:
    """Providers that do not speak the OpenAI API, translated by litellm (imported on first use)."""

    def __init__(self) -> None:
        self._litellm: Any = None

    def load(self) -> Any:
        if self._litellm is None:
            self._litellm = _import_litellm()
        return self._litellm

    def _kwargs(self, upstream: Upstream, request: dict[str, Any]) -> dict[str, Any]:
        params = {k: v for k, v in upstream.litellm_params.items() if k not in {"rpm", "tpm"}}
        try:
            params["api_key"] = upstream.key()
        except ConfigError as exc:
            raise UpstreamError(500, str(exc), type_="server_error") from None
        if params["api_key"] is None:
            del params["api_key"]
        params.setdefault("timeout", upstream.timeout)
        # The caller's request has been cut to the route's allow-list already (chat.py); cut
        # again here so no other caller of this client can pass litellm a connection setting.
        # A deep copy: litellm may change what it is given, and the trace holds the caller's request.
        safe = copy.deepcopy(
            {k: v for k, v in request.items() if k in upstream.chat_fields or k in upstream.embedding_fields}
        )
        return {**safe, **params}

    async def chat(self, upstream: Upstream, request: dict[str, Any]) -> bytes:
        litellm = self.load()
        try:
            response = await litellm.acompletion(**self._kwargs(upstream, {**request, "stream": False}))
        except Exception as exc:
            raise _litellm_error(exc, upstream) from None
        return json.dumps(response.model_dump(exclude_none=True), ensure_ascii=False).encode()

    async def chat_stream(self, upstream: Upstream, request: dict[str, Any]) -> AsyncIterator[bytes]:
        """Server-sent events in OpenAI's format, ``[DONE]`` last; raises before the first event
        when the call fails to start."""
        litellm = self.load()
        try:
            response = await litellm.acompletion(**self._kwargs(upstream, {**request, "stream": True}))
        except Exception as exc:
            raise _litellm_error(exc, upstream) from None

        async def events() -> AsyncIterator[bytes]:
            try:
                async for chunk in response:
                    data = chunk.model_dump_json(exclude_none=True)
                    yield b"data: " + data.encode() + b"\n\n"
            except Exception as exc:
                raise _litellm_error(exc, upstream) from None
            yield b"data: [DONE]\n\n"

        return events()

    async def embed(self, upstream: Upstream, request: dict[str, Any]) -> bytes:
        litellm = self.load()
        try:
            response = await litellm.aembedding(**self._kwargs(upstream, request))
        except Exception as exc:
            raise _litellm_error(exc, upstream) from None
        return json.dumps(response.model_dump(exclude_none=True), ensure_ascii=False).encode()
