"""What of a caller's request reaches an upstream model: an allow-list of OpenAI fields.

The chat proxy and the embeddings endpoint forward only the request fields of OpenAI's
API reference that describe the request itself (:data:`CHAT_FIELDS`,
:data:`EMBEDDING_FIELDS`), on the pass-through path and the litellm path alike. Every
other field is dropped before the upstream is called and its *name* (never its value)
is recorded on the event under ``arguments["memtap.dropped"]``. So no field a caller
sends can set where a call goes or with which credentials (``api_base``, ``api_key``,
``base_url``, ``model_list``, litellm's own parameters), nor make litellm copy a
configured secret into the request that memtap records.

Unknown fields are dropped and the call is served (clients and frameworks add harmless
vendor fields). A field whose name steers a connection or carries credentials
(:func:`is_forbidden`) is different: the request is refused with a 400 naming it and
recorded, because it is an attempt to redirect memtap's upstream call.

A route may forward vendor extensions its server understands (vLLM's ``top_k``, say)
with ``memtap.routes.ALIAS.extra_fields``; names that steer a connection or carry
credentials (:func:`is_forbidden`) are refused there when the config is loaded.

Forwarded fields are also checked for their JSON type, so a malformed value is a 400
naming the field rather than an upstream library's exception.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "CHAT_FIELDS",
    "DROPPED_KEY",
    "EMBEDDING_FIELDS",
    "allowed_fields",
    "check_types",
    "forwardable",
    "is_forbidden",
    "recorded",
    "refuse_redirects",
]

DROPPED_KEY = "memtap.dropped"

_OBJ, _LIST, _STR, _NUM, _INT, _BOOL = dict, list, str, (int, float), int, bool

# OpenAI's chat completions request body (platform.openai.com/docs/api-reference/chat/create),
# field by field, with the JSON types it takes. Left out on purpose (dropped like unknown
# fields): ``store`` and ``service_tier`` (retention and billing decisions on the operator's
# account, not the caller's; set them per deployment in litellm_params if wanted) and
# ``metadata`` (only meaningful with ``store``, and litellm reads it as its own logging
# parameter).
CHAT_FIELDS: dict[str, tuple[type | tuple[type, ...], ...]] = {
    "model": (_STR,),
    "messages": (_LIST,),
    "stream": (_BOOL,),
    "stream_options": (_OBJ,),
    "temperature": (_NUM,),
    "top_p": (_NUM,),
    "n": (_INT,),
    "stop": (_STR, _LIST),
    "max_tokens": (_INT,),
    "max_completion_tokens": (_INT,),
    "presence_penalty": (_NUM,),
    "frequency_penalty": (_NUM,),
    "logit_bias": (_OBJ,),
    "logprobs": (_BOOL,),
    "top_logprobs": (_INT,),
    "user": (_STR,),
    "safety_identifier": (_STR,),
    "prompt_cache_key": (_STR,),
    "seed": (_INT,),
    "tools": (_LIST,),
    "tool_choice": (_STR, _OBJ),
    "parallel_tool_calls": (_BOOL,),
    "functions": (_LIST,),  # deprecated by OpenAI, still sent by older clients
    "function_call": (_STR, _OBJ),  # deprecated likewise
    "response_format": (_OBJ,),
    "reasoning_effort": (_STR,),
    "verbosity": (_STR,),
    "modalities": (_LIST,),
    "audio": (_OBJ,),
    "prediction": (_OBJ,),
    "web_search_options": (_OBJ,),
}

# OpenAI's embeddings request body (platform.openai.com/docs/api-reference/embeddings/create).
EMBEDDING_FIELDS: dict[str, tuple[type | tuple[type, ...], ...]] = {
    "model": (_STR,),
    "input": (_STR, _LIST),
    "dimensions": (_INT,),
    "encoding_format": (_STR,),
    "user": (_STR,),
}

# Names that choose where a call goes, with which credentials, or how litellm behaves:
# never forwarded, and refused in a route's extra_fields.
_FORBIDDEN = frozenset(
    {
        "api_base",
        "base_url",
        "api_key",
        "api_version",
        "api_type",
        "organization",
        "project",
        "model_list",
        "custom_llm_provider",
        "headers",
        "extra_headers",
        "extra_body",
        "client",
        "mock_response",
        "metadata",
        "proxy_server_request",
        "deployment_id",
        "timeout",
        "max_retries",
        "num_retries",
        "fallbacks",
        "callbacks",
        "input_cost_per_token",
        "output_cost_per_token",
    }
)
_FORBIDDEN_PREFIXES = ("litellm", "aws_", "vertex_", "azure_", "watsonx_", "api_", "secret")


def is_forbidden(name: str) -> bool:
    """Whether a field name could steer a connection or carry credentials."""
    lowered = name.lower()
    return lowered in _FORBIDDEN or lowered.startswith(_FORBIDDEN_PREFIXES) or "key" in lowered


def allowed_fields(
    base: Mapping[str, tuple[type | tuple[type, ...], ...]], extra: Iterable[str] = ()
) -> dict[str, tuple[type | tuple[type, ...], ...]]:
    """``base`` plus a route's ``extra_fields`` (any JSON type)."""
    return {**base, **{name: () for name in extra if name not in base}}


def _type_name(types: tuple[type | tuple[type, ...], ...]) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer"}
    out = []
    for t in types:
        out.append("a number" if isinstance(t, tuple) else names.get(t, t.__name__))
    return " or ".join(out)


def _matches(value: Any, types: tuple[type | tuple[type, ...], ...]) -> bool:
    if not types or value is None:
        return True
    for t in types:
        if t is bool:
            if isinstance(value, bool):
                return True
        elif not isinstance(value, bool) and isinstance(value, t):
            return True
    return False


def forwardable(
    request: dict[str, Any], allowed: Mapping[str, tuple[type | tuple[type, ...], ...]]
) -> tuple[dict[str, Any], list[str]]:
    """The request as it may be forwarded, and the names of the fields dropped from it.

    Returns ``request`` itself when nothing is dropped (the common case, no copy)."""
    dropped = [name for name in request if name not in allowed]
    if not dropped:
        return request, []
    return {k: v for k, v in request.items() if k in allowed}, dropped


def check_types(
    request: Mapping[str, Any], allowed: Mapping[str, tuple[type | tuple[type, ...], ...]]
) -> None:
    """A forwarded field of the wrong JSON type is a 400 naming it."""
    for name, value in request.items():
        types = allowed.get(name)
        if types and not _matches(value, types):
            # Imported here, on the refusal only: the config module imports this one, and an
            # import statement on every call costs more than the check itself.
            from memtap.proxy.http import RequestProblem

            raise RequestProblem(
                400, f"'{name}' must be {_type_name(types)}, not {type(value).__name__}.", param=name
            )


def refuse_redirects(dropped: list[str]) -> None:
    """A request naming a connection or credential field is refused (400), not quietly served:
    trying to steer memtap's upstream call is worth an error the caller sees and the trace keeps."""
    steering = [name for name in dropped if is_forbidden(name)]
    if steering:
        from memtap.proxy.http import RequestProblem  # see check_types

        raise RequestProblem(
            400,
            f"request field{'s' if len(steering) > 1 else ''} {', '.join(repr(n) for n in steering)} "
            "may not be set by a request: memtap chooses the upstream, its address and its credentials",
            param=steering[0],
            code="forbidden_parameter",
        )


def recorded(request: dict[str, Any], dropped: list[str]) -> dict[str, Any]:
    """What the trace keeps of a request: the forwarded fields, and the dropped ones' names."""
    return {**request, DROPPED_KEY: dropped} if dropped else request
