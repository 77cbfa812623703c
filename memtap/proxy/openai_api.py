"""The OpenAI-compatible front door: ``/v1/chat/completions``, ``/v1/embeddings``, ``/v1/models``.

Upstreams come from LiteLLM's ``model_list`` in the config file; memtap's own settings
(memory mode, top k, capture, local embedders, limits) from its ``memtap`` section.
Requests are authenticated by the same gate (:mod:`memtap.auth.gate`) as the MCP front
door: a configured bearer key names the principal; with no keys (loopback only) any token
is accepted and none is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from memtap.adapters.embeddings import Embedder, count_tokens, encode_vector, load_embedder
from memtap.adapters.llm import LiteLLMClient, ModelRouter, PassThrough, UpstreamError, error_body
from memtap.auth import Policy, best_context, caller_in, local_caller, resolve_context
from memtap.config import ConfigFile
from memtap.errors import AccessDenied, InvalidArguments
from memtap.proxy.chat import ChatProxy, context_layers
from memtap.proxy.fields import EMBEDDING_FIELDS, check_types, forwardable, recorded, refuse_redirects
from memtap.proxy.held import HeldReply
from memtap.proxy.http import (
    RequestProblem,
    headers_of,
    parse_object,
    read_body,
    refuse_unencodable,
    send_bytes,
)
from memtap.proxy.memory_layer import MemoryLayer
from memtap.proxy.service import MemoryService
from memtap.trace.calls import recorded_call
from memtap.trace.models import Op
from memtap.trace.writer import Recorder

__all__ = ["OpenAIFrontDoor"]

log = logging.getLogger("memtap.openai")


class OpenAIFrontDoor:
    """The OpenAI-compatible endpoints over one runtime's service and recorder."""

    def __init__(
        self,
        config: ConfigFile,
        service: MemoryService,
        recorder: Recorder,
        *,
        default_principal: str = "local",
        policy: Policy | None = None,
    ) -> None:
        settings = config.memtap
        self.config = config
        self.recorder = recorder
        self._local = local_caller(default_principal)  # who calls where no gate ran
        self.max_body_bytes = settings.max_body_bytes
        self.router = ModelRouter(config.model_list, settings.routes, settings.upstream_timeout_s)
        self.passthrough = PassThrough(settings.connect_timeout_s)
        self.litellm = LiteLLMClient()
        self.embedders: dict[str, Embedder] = {
            alias: load_embedder(alias, embedder) for alias, embedder in settings.embeddings.items()
        }
        self.chat = ChatProxy(
            router=self.router,
            passthrough=self.passthrough,
            litellm=self.litellm,
            memory=MemoryLayer(service, top_k=settings.top_k, capture=list(settings.capture)),
            recorder=recorder,
            default_mode=settings.memory,
            max_body_bytes=settings.max_body_bytes,
            default_principal=default_principal,
            policy=policy,
        )
        self._warming: asyncio.Future[Any] | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Open the upstream session; start importing litellm (if a route needs it) and loading
        slow local embedders in a thread, so the first request does not wait for them."""
        await self.passthrough.start()
        loaders: list[Callable[[], Any]] = [self.litellm.load] if self.router.needs_litellm else []
        loaders += [e.warm for e in self.embedders.values() if callable(getattr(e, "warm", None))]  # type: ignore[attr-defined]
        if loaders:
            self._warming = asyncio.ensure_future(asyncio.to_thread(lambda: [load() for load in loaders]))
        try:
            yield
        finally:
            await self.passthrough.close()
            if self._warming is not None:
                with contextlib.suppress(Exception):
                    await self._warming

    def routes(self, gate: Callable[[ASGIApp], ASGIApp]) -> list[Route]:
        """The endpoints, each behind ``gate`` (authentication)."""
        return [
            Route("/v1/chat/completions", endpoint=gate(self.chat), methods=["POST"]),
            Route("/v1/embeddings", endpoint=gate(self.embeddings), methods=["POST"]),
            Route("/v1/models", endpoint=gate(self.models), methods=["GET"]),
        ]

    async def models(self, scope: Scope, receive: Receive, send: Send) -> None:
        data = [
            {"id": alias, "object": "model", "created": 0, "owned_by": "memtap"}
            for alias in [*self.router.aliases, *(a for a in self.embedders if a not in self.router.aliases)]
        ]
        await send_bytes(send, 200, json.dumps({"object": "list", "data": data}).encode())

    async def embeddings(self, scope: Scope, receive: Receive, send: Send) -> None:
        t0 = time.perf_counter()
        who = caller_in(scope, self._local)
        headers = headers_of(scope)
        problem: RequestProblem | None = None
        request: dict[str, Any] = {}
        try:
            request = parse_object(await read_body(scope, receive, self.max_body_bytes))
        except RequestProblem as exc:
            problem = exc
        model = request.get("model")
        alias = model if isinstance(model, str) else "unknown"
        embedder = self.embedders.get(alias)
        upstream = None if embedder is not None else self.router.get(alias)
        provider = "local" if embedder is not None else (upstream.provider if upstream is not None else None)
        allowed = upstream.embedding_fields if upstream is not None else EMBEDDING_FIELDS
        request, dropped = forwardable(request, allowed)
        answered = False
        held = HeldReply(send, hold=self.recorder.durable)  # durable: the answer waits for the commit
        async with recorded_call(
            self.recorder,
            tool="embeddings",
            op=Op.EMBED,
            front_door="openai",
            backend="local" if embedder is not None else (upstream.via if upstream is not None else "none"),
            arguments=recorded(request, dropped),
            fallback_context=lambda: best_context(
                who, layers=context_layers(request, headers), client=headers.get("user-agent")
            ),
            model=alias,
            provider=provider,
            started_at=t0,
        ) as call:
            try:
                if problem is not None:
                    raise problem
                _check_embedding_request(request, local=embedder is not None)
                refuse_redirects(dropped)
                check_types(request, allowed)
                if embedder is not None or (upstream is not None and upstream.via != "passthrough"):
                    refuse_unencodable(request["input"], "input")
                try:
                    call.context = resolve_context(
                        who, layers=context_layers(request, headers), client=headers.get("user-agent")
                    )
                except InvalidArguments as exc:
                    raise RequestProblem(400, str(exc)) from None
                except AccessDenied as exc:
                    raise RequestProblem(403, str(exc), type_="permission_error", code="forbidden") from None
                call.start_backend()
                if embedder is not None:
                    body = await self._embed_locally(embedder, alias, request)
                elif upstream is not None:
                    if upstream.via == "passthrough":
                        raw = json.dumps({**request, "model": upstream.model}).encode()
                        _, body, _ = await self.passthrough.request(upstream, "/embeddings", raw)
                    else:
                        body = await self.litellm.embed(upstream, request)
                else:
                    raise RequestProblem(
                        404,
                        f"The model `{alias}` does not exist or you do not have access to it.",
                        param="model",
                        code="model_not_found",
                    )
                call.end_backend()
                answered = True
                await send_bytes(held, 200, body)
                call.total_ms = (time.perf_counter() - t0) * 1000
                usage = _usage_of(body)
                call.input_tokens = usage.get("prompt_tokens")
                inputs = request["input"]
                call.value = {"count": 1 if isinstance(inputs, str) else len(inputs), "usage": usage}
            except (RequestProblem, UpstreamError) as exc:
                answered = True
                await send_bytes(send, exc.status, exc.body)
                raise
        await held.release(call, stream=False)
        if not answered:
            await send_bytes(send, 500, error_body(f"internal error: {call.error}", "server_error"))

    async def _embed_locally(self, embedder: Embedder, alias: str, request: dict[str, Any]) -> bytes:
        inputs = request["input"]
        texts = [inputs] if isinstance(inputs, str) else list(inputs)
        dimensions = request.get("dimensions")
        if dimensions is not None and dimensions != embedder.dimensions:
            raise RequestProblem(
                400,
                f"model {alias!r} makes {embedder.dimensions}-dimensional embeddings; dimensions={dimensions}"
                " is not supported",
                param="dimensions",
            )
        encoding = request.get("encoding_format") or "float"
        if encoding not in ("float", "base64"):
            raise RequestProblem(400, "encoding_format must be float or base64", param="encoding_format")
        vectors = await asyncio.to_thread(embedder.embed, texts)
        tokens = count_tokens(texts)
        data = [
            {"object": "embedding", "index": i, "embedding": encode_vector(v, encoding)}
            for i, v in enumerate(vectors)
        ]
        return json.dumps(
            {
                "object": "list",
                "data": data,
                "model": alias,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        ).encode()


def _check_embedding_request(request: dict[str, Any], *, local: bool) -> None:
    if not isinstance(request.get("model"), str):
        raise RequestProblem(
            400, "Missing required parameter: 'model'.", param="model", code="missing_required_parameter"
        )
    value = request.get("input")
    if value is None:
        raise RequestProblem(
            400, "Missing required parameter: 'input'.", param="input", code="missing_required_parameter"
        )
    if isinstance(value, str) or (
        isinstance(value, list) and value and all(isinstance(v, str) for v in value)
    ):
        return
    if local:  # token arrays need the model's own tokenizer: only an upstream takes them
        raise RequestProblem(400, "'input' must be a string or a non-empty array of strings.", param="input")
    if not isinstance(value, list) or not value:
        raise RequestProblem(400, "'input' must be a string or a non-empty array.", param="input")


def _usage_of(body: bytes) -> dict[str, Any]:
    try:
        usage = json.loads(body).get("usage")
    except (ValueError, AttributeError):
        return {}
    return usage if isinstance(usage, dict) else {}
