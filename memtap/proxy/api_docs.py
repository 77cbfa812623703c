"""The OpenAPI description of memtap's HTTP API, generated from the code.

The ``/v1`` front door and the MCP endpoints are plain ASGI endpoints (``FastRoutesApp``
hands them requests past the framework, for speed), so FastAPI cannot see them. They are
described here as schema-only routes — pydantic models of what they take and answer — and
merged with the framework's own routes (``/healthz``, the replay clock) into the document
served at ``/openapi.json`` and checked in as ``docs/openapi.json`` (``scripts/gen_docs.py``).
The models describe; they do not validate: the endpoints keep their own checks and error
messages (``proxy/chat.py``, ``proxy/openai_api.py``), and accept the OpenAI fields not listed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Header
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field

from memtap import __version__
from memtap.limits import current

__all__ = ["API_DESCRIPTION", "Health", "install_openapi", "openapi_document"]

API_DESCRIPTION = (
    "memtap records every memory write, update, delete and retrieval of AI agents. Its HTTP API: "
    "the MCP front door (streamable HTTP, JSON-RPC) at `/mcp` (and `/servers/{name}/mcp` for one "
    "wrapped server under `memtap proxy`), an OpenAI-compatible chat proxy at `/v1`, the replay "
    "clock and `/healthz`. With API keys configured every endpoint but `/healthz` needs "
    "`Authorization: Bearer KEY`; without keys memtap serves loopback only and takes any token. "
    "Client input over memtap's caps is refused with a 4xx naming the cap (docs/limits.md), and "
    "every call, refused or not, is recorded."
)


# -- shared ----------------------------------------------------------------------------------------


class ErrorDetail(BaseModel):
    message: str
    type: str = Field(description="invalid_request_error, authentication_error, upstream_error, ...")
    param: str | None = None
    code: str | int | None = None


class ErrorResponse(BaseModel):
    """OpenAI's error shape, used by every ``/v1`` refusal and the header caps."""

    error: ErrorDetail


_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorResponse, "description": "Malformed request: bad JSON, too deep, a bad field"},
    401: {"model": ErrorResponse, "description": "Missing or unknown API key (keys configured)"},
    404: {"model": ErrorResponse, "description": "Unknown model"},
    413: {"model": ErrorResponse, "description": "Body over memtap.max_body_bytes"},
    431: {"model": ErrorResponse, "description": "A header over --max-header-bytes or --max-field-chars"},
    502: {"model": ErrorResponse, "description": "The upstream model could not be reached or broke off"},
    504: {"model": ErrorResponse, "description": "The upstream model timed out"},
}


def _header(alias: str, text: str) -> Any:
    return Header(alias=alias, description=text, max_length=current().max_field_chars)


# The X-Memtap-* context headers every front door reads (memtap/auth/resolve.py HEADERS).
NamespaceH = Annotated[str | None, _header("X-Memtap-Namespace", "Whose memory (default: the principal)")]
SessionH = Annotated[str | None, _header("X-Memtap-Session", "Conversation session id")]
TurnH = Annotated[str | None, _header("X-Memtap-Turn", "Turn id within the session")]
RoleH = Annotated[
    Literal["user", "assistant", "tool", "third_party", "system"] | None,
    Header(alias="X-Memtap-Role", description="Who said what is remembered"),
]
RunH = Annotated[str | None, _header("X-Memtap-Run", "Experiment or replay run id")]
MemoryH = Annotated[
    Literal["off", "auto"] | None,
    Header(alias="X-Memtap-Memory", description="Chat memory mode for this call (default: config)"),
]


# -- /v1/chat/completions --------------------------------------------------------------------------


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: str = Field(description="text, image_url, input_audio, file, ...")
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str = Field(description="system, developer, user, assistant or tool")
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[dict[str, Any]] | None = None


class ChatCompletionRequest(BaseModel):
    """OpenAI's chat completion request; fields not listed here are forwarded as they are."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, description="A model_name of the config's model_list")
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = Field(False, description="Answer as server-sent events (chat.completion.chunk)")
    user: str | None = Field(None, description="Names the namespace unless X-Memtap-Namespace does")
    temperature: float | None = None
    max_tokens: int | None = None
    tools: list[dict[str, Any]] | None = None


class ChatChoice(BaseModel):
    model_config = ConfigDict(extra="allow")

    index: int
    message: ChatMessage
    finish_reason: str | None = None


class Usage(BaseModel):
    model_config = ConfigDict(extra="allow")

    prompt_tokens: int
    completion_tokens: int | None = None
    total_tokens: int


class ChatCompletion(BaseModel):
    """The upstream's answer, passed through unchanged."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage | None = None


class ChunkChoice(BaseModel):
    model_config = ConfigDict(extra="allow")

    index: int
    delta: dict[str, Any]
    finish_reason: str | None = None


class ChatCompletionChunk(BaseModel):
    """One ``data:`` event of a streamed answer; the stream ends with ``data: [DONE]``."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice]
    usage: Usage | None = None


async def chat_completions(
    body: ChatCompletionRequest,
    x_memtap_namespace: NamespaceH = None,
    x_memtap_session: SessionH = None,
    x_memtap_turn: TurnH = None,
    x_memtap_role: RoleH = None,
    x_memtap_run: RunH = None,
    x_memtap_memory: MemoryH = None,
) -> ChatCompletion:
    """Forward a chat completion to the model's upstream and record it as one ``chat`` event; in
    ``auto`` memory mode, search the namespace's memories first, inject them as a system
    message, and capture the user turn after the answer. A memory failure never fails the chat."""
    raise NotImplementedError  # schema only: FastRoutesApp serves the path (proxy/chat.py)


# -- /v1/embeddings, /v1/models --------------------------------------------------------------------


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, description="A local embedder alias or a model_name of model_list")
    input: str | list[str] | list[int] | list[list[int]] = Field(
        description="Text, texts, or token arrays (token arrays: upstream models only)"
    )
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: int | None = Field(None, ge=1)
    user: str | None = None


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str = Field(description="Floats, or base64 of little-endian float32")


class EmbeddingResponse(BaseModel):
    model_config = ConfigDict(extra="allow")

    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: Usage


async def embeddings(
    body: EmbeddingRequest, x_memtap_namespace: NamespaceH = None, x_memtap_run: RunH = None
) -> EmbeddingResponse:
    """Embed with a local embedder (memtap.embeddings) or the model's upstream; one ``embed`` event."""
    raise NotImplementedError  # schema only (proxy/openai_api.py)


class Model(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Model]


async def models() -> ModelList:
    """The chat model aliases of the config's model_list, then the local embedders."""
    raise NotImplementedError  # schema only (proxy/openai_api.py)


# -- /healthz, the replay clock ------------------------------------------------------------------


class Health(BaseModel):
    """Liveness; the details only for callers with a key (or when no keys are configured)."""

    status: Literal["ok"]
    version: str | None = None
    db: str | None = None
    durable: bool | None = None
    backend: str | None = None
    uptime_s: float | None = None
    recorder: dict[str, Any] | None = Field(None, description="The recorder's counters")
    upstreams: dict[str, Any] | None = Field(None, description="memtap proxy: each wrapped server's state")


# -- MCP over streamable HTTP ----------------------------------------------------------------------


class JsonRpcMessage(BaseModel):
    """One JSON-RPC 2.0 message of the Model Context Protocol (a request or a notification)."""

    model_config = ConfigDict(extra="allow")

    jsonrpc: Literal["2.0"]
    method: str = Field(description="initialize, tools/list, tools/call, ping, logging/setLevel, ...")
    id: str | int | None = Field(None, description="Absent for a notification")
    params: dict[str, Any] | None = None


_MCP_HEADERS = (
    "Send `Accept: application/json, text/event-stream`, and after `initialize` the "
    "`Mcp-Session-Id` it returned and `MCP-Protocol-Version`. memtap answers in JSON."
)


async def mcp_post(
    body: JsonRpcMessage,
    x_memtap_namespace: NamespaceH = None,
    x_memtap_session: SessionH = None,
    x_memtap_run: RunH = None,
) -> dict[str, Any]:
    """An MCP message: memtap's memory tools (``memtap serve``) or the wrapped servers' tools
    (``memtap proxy``). Each ``tools/call`` is recorded as one event; a malformed message is a
    JSON-RPC error with a 4xx status, and is recorded too."""
    raise NotImplementedError  # schema only (the MCP SDK's session manager)


async def mcp_delete() -> None:
    """End the MCP session named by ``Mcp-Session-Id``."""
    raise NotImplementedError  # schema only


async def upstream_mcp_post(name: str, body: JsonRpcMessage) -> dict[str, Any]:
    """``memtap proxy`` only: the MCP endpoint of one wrapped server, its tools unprefixed."""
    raise NotImplementedError  # schema only (proxy/forward.py, ByUpstream)


def _route(path: str, endpoint: Callable[..., Any], method: str, **options: Any) -> APIRoute:
    return APIRoute(path, endpoint, methods=[method], **options)


def schema_routes() -> list[APIRoute]:
    """The endpoints FastAPI does not serve itself, as routes that only describe them."""
    mcp_errors = {
        400: {"description": "Malformed JSON-RPC (parse error, invalid message, too deep)"},
        404: {"description": "Unknown session"},
        406: {"description": "Accept does not name application/json and text/event-stream"},
        413: {"description": "Body too large"},
        421: {"description": "Host or Origin not allowed (DNS-rebinding protection)"},
        **{k: _ERRORS[k] for k in (401, 431)},
    }
    stream = {
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/ChatCompletion"}},
            "text/event-stream": {
                "schema": {
                    "type": "string",
                    "description": "`data: {ChatCompletionChunk}` events, then `data: [DONE]`",
                },
                "x-event-schema": {"$ref": "#/components/schemas/ChatCompletionChunk"},
            },
        },
        "description": "The completion (JSON), or with `stream: true` server-sent events",
    }
    tags = {"v1": ["OpenAI-compatible"], "mcp": ["MCP"]}
    return [
        _route(
            "/v1/chat/completions",
            chat_completions,
            "POST",
            tags=tags["v1"],
            responses={200: stream, **_ERRORS},
        ),
        _route("/v1/embeddings", embeddings, "POST", tags=tags["v1"], responses=dict(_ERRORS)),
        _route("/v1/models", models, "GET", tags=tags["v1"], responses={401: _ERRORS[401]}),
        _route("/mcp", mcp_post, "POST", tags=tags["mcp"], description=_MCP_HEADERS, responses=mcp_errors),
        _route("/mcp", mcp_delete, "DELETE", tags=tags["mcp"], responses=mcp_errors),
        _route("/servers/{name}/mcp", upstream_mcp_post, "POST", tags=tags["mcp"], responses=mcp_errors),
    ]


def openapi_document(app: FastAPI) -> dict[str, Any]:
    """The whole description: the app's own routes and the schema-only ones, with bearer auth."""
    document = get_openapi(
        title="memtap",
        version=__version__,
        description=API_DESCRIPTION,
        routes=[*app.routes, *schema_routes()],
    )
    components = document.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    chunk = ChatCompletionChunk.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, sub in chunk.pop("$defs", {}).items():
        schemas.setdefault(name, sub)
    schemas["ChatCompletionChunk"] = chunk
    components["securitySchemes"] = {
        "bearer": {"type": "http", "scheme": "bearer", "description": "memtap API key (--api-key)"}
    }
    document["security"] = [{}, {"bearer": []}]  # optional: required only when keys are configured
    return document


def install_openapi(app: FastAPI) -> None:
    """Serve :func:`openapi_document` at ``/openapi.json`` (built once, on first request)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = openapi_document(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
