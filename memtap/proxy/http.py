"""Plain ASGI helpers for the OpenAI-compatible front door: bodies, JSON answers, errors.

The front door speaks ASGI directly rather than through a framework's request and
response objects: on the pass-through path every microsecond is the caller's.
"""

from __future__ import annotations

from typing import Any

from starlette.types import Receive, Scope, Send

from memtap.adapters.llm import error_body
from memtap.auth.gate import headers_of
from memtap.errors import ProxyError
from memtap.limits import TooDeep, first_unencodable, load_json

__all__ = [
    "RequestProblem",
    "headers_of",
    "parse_object",
    "read_body",
    "refuse_unencodable",
    "send_bytes",
]


class RequestProblem(ProxyError):
    """A request the front door refuses, with the HTTP status and OpenAI error it answers."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type_: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = error_body(message, type_, code=code, param=param)


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The request body, refusing one over ``limit`` bytes (by Content-Length or as it arrives)."""
    for name, value in scope.get("headers", []):
        if name == b"content-length" and value.isdigit() and int(value) > limit:
            raise _too_large(int(value), limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise RequestProblem(499, "the client disconnected before sending the whole body")
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise _too_large(size, limit)
            chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _too_large(size: int, limit: int) -> RequestProblem:
    return RequestProblem(
        413,
        f"the request body is {size}+ bytes; this server takes at most {limit} bytes (memtap.max_body_bytes)",
        code="request_too_large",
    )


def parse_object(raw: bytes) -> dict[str, Any]:
    """A JSON object body, or a 400 saying what is wrong with it."""
    try:
        value = load_json(raw)
    except TooDeep as exc:
        raise RequestProblem(400, f"{exc} (--max-json-depth)", code="json_too_deep") from None
    except UnicodeDecodeError:
        raise RequestProblem(400, "the request body is not UTF-8 text") from None
    except ValueError as exc:
        raise RequestProblem(
            400, f"We could not parse the JSON body of your request ({exc}). The body must be a JSON object."
        ) from None
    if not isinstance(value, dict):
        raise RequestProblem(400, f"the request body must be a JSON object, not {type(value).__name__}")
    return value


def refuse_unencodable(value: Any, where: str = "") -> None:
    """A 400 naming the first string of ``value`` that holds an unpaired surrogate. For paths that
    cannot forward such a string as the client wrote it (litellm, local embedders); the
    pass-through path forwards it escaped instead (``memtap.jsontext.json_body``)."""
    found = first_unencodable(value, where)
    if found is not None:
        raise RequestProblem(
            400,
            f"{found} is not valid Unicode text (it holds an unpaired surrogate, such as \\ud800)",
            param=found.partition(".")[0].partition("[")[0] or None,
            code="invalid_unicode",
        )


async def send_bytes(send: Send, status: int, body: bytes, content_type: bytes = b"application/json") -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
