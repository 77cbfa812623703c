"""A small OpenAI-compatible endpoint in front of an agent, shared by the example agents.

It serves what ``memtap replay --target openai:URL`` calls:

- ``GET /v1/models``: the agent, as the one model listed;
- ``POST /v1/chat/completions``: one agent run over the conversation sent, answered as a
  ``chat.completion`` (no streaming);
- ``GET /healthz``: ``{"status": "ok", "agent": NAME}``.

The memtap context of a call travels in its ``X-Memtap-*`` headers (namespace, run, episode,
session, turn, role, requester, agent); :func:`memtap_headers` picks them out, and the agent
passes them on to its MCP connection to memtap, where they pin the context of every memory call
the agent makes in that run: the model's tool arguments cannot move a call to another
namespace or turn. A request without ``X-Memtap-Namespace`` uses the body's ``user`` field.

Bad input (no messages, a message without a role, ``stream: true``) is answered ``400`` with an
OpenAI error body; a failure of the agent (its model or memtap unreachable) ``502``.

With ``AGENT_NETWORK_LOG=FILE`` in the environment every connection the process opens to a host
that is not loopback is appended to FILE (an audit hook), so a test can check that neither the
framework nor its dependencies phone home.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

__all__ = ["Chat", "memtap_headers", "serve"]

log = logging.getLogger("agent-endpoint")

CONTEXT_HEADERS = (
    "X-Memtap-Namespace",
    "X-Memtap-Run",
    "X-Memtap-Episode",
    "X-Memtap-Session",
    "X-Memtap-Turn",
    "X-Memtap-Role",
    "X-Memtap-Requester",
    "X-Memtap-Agent",
)
ROLES = {"system", "developer", "user", "assistant"}


@dataclass
class Chat:
    """One chat call: the conversation (role and content of each message, ``tool`` messages
    dropped), the memtap headers to pin on the agent's memory connection, and the people who
    speak in it (the ``name`` of its user messages)."""

    messages: list[dict[str, str]]
    headers: dict[str, str] = field(default_factory=dict)
    people: list[str] = field(default_factory=list)

    def instructions(self, base: str) -> str:
        """``base``, and who takes part, so the model can tag what it stores for them: without
        access tags a memory is private to the namespace, and memtap's gate then flags every
        later retrieval of it for another requester (the conversation's user included)."""
        if not self.people:
            return base
        names = ", ".join(self.people)
        return (
            f"{base} The people in this conversation: {names}. Store each memory with access "
            f'{{"visibility": "participants", "participants": [{", ".join(map(json.dumps, self.people))}]}}.'
        )


Respond = Callable[[Chat], Awaitable[str]]


def memtap_headers(request_headers: Any, user: object = None) -> dict[str, str]:
    """The ``X-Memtap-*`` context headers of a request; the body's ``user`` names the namespace
    when no header does."""
    found = {name: str(request_headers[name]) for name in CONTEXT_HEADERS if request_headers.get(name)}
    if "X-Memtap-Namespace" not in found and isinstance(user, str) and user:
        found["X-Memtap-Namespace"] = user
    return found


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": None}}, status)


def _people(body: dict[str, Any]) -> list[str]:
    names = [m.get("name") for m in body["messages"] if isinstance(m, dict) and m.get("role") == "user"]
    return list(dict.fromkeys(n for n in names if isinstance(n, str) and n))


def _messages(body: dict[str, Any]) -> list[dict[str, str]] | str:
    """The conversation, or what is wrong with it."""
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        return "messages: give a non-empty list of chat messages"
    messages = []
    for i, message in enumerate(raw):
        if not isinstance(message, dict) or message.get("role") not in ROLES | {"tool"}:
            return f"messages[{i}]: role must be one of system, developer, user, assistant, tool"
        if message["role"] == "tool":
            continue
        content = message.get("content")
        if isinstance(content, list):  # content parts: keep the text ones
            texts = [p.get("text", "") for p in content if isinstance(p, dict)]
            if not all(isinstance(text, str) for text in texts):
                return f"messages[{i}].content: a part's text must be text"
            content = "".join(texts)
        if content is not None and not isinstance(content, str):
            return f"messages[{i}].content: give text"
        messages.append({"role": str(message["role"]), "content": content or ""})
    if not any(m["role"] == "user" for m in messages):
        return "messages: give at least one user message"
    return messages


def build_app(name: str, respond: Respond) -> Starlette:
    async def models(request: Request) -> JSONResponse:
        return JSONResponse(
            {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "example"}]}
        )

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok", "agent": name})

    async def completions(request: Request) -> JSONResponse:
        try:
            body = json.loads(await request.body())
        except ValueError:
            return _error(400, "the body is not JSON")
        if not isinstance(body, dict):
            return _error(400, "the body must be a JSON object")
        if body.get("stream"):
            return _error(400, "stream: this example agent answers without streaming")
        messages = _messages(body)
        if isinstance(messages, str):
            return _error(400, messages)
        chat = Chat(messages, memtap_headers(request.headers, body.get("user")), _people(body))
        try:
            reply = await respond(chat)
        except Exception as exc:  # the agent's model or memtap failed: say so, one line
            log.exception("agent run failed")
            return _error(502, f"the agent failed: {type(exc).__name__}: {exc}"[:500], "agent_error")
        message = {"role": "assistant", "content": reply}
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}
        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": name,
                "choices": [choice],
            }
        )

    routes = [
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/chat/completions", completions, methods=["POST"]),
        Route("/healthz", healthz, methods=["GET"]),
    ]
    return Starlette(routes=routes)


_LOOPBACK = {"127.0.0.1", "::1", "localhost", "0.0.0.0", ""}


def _log_network(path: str) -> None:
    """Append every non-loopback host the process resolves or connects to, to ``path``."""

    def hook(event: str, args: tuple[Any, ...]) -> None:
        host: object = None
        if event == "socket.getaddrinfo":
            host = args[0]
        elif event == "socket.connect" and isinstance(args[1], tuple):
            host = args[1][0]
        if host is None:
            return
        text = host.decode() if isinstance(host, bytes) else str(host)
        if text not in _LOOPBACK and not text.startswith("127."):
            with open(path, "a") as out:
                out.write(f"{event} {text}\n")

    sys.addaudithook(hook)


def serve(name: str, respond: Respond, *, host: str, port: int) -> None:
    """Serve the agent until interrupted."""
    import uvicorn

    if path := os.environ.get("AGENT_NETWORK_LOG"):
        _log_network(path)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    uvicorn.run(build_app(name, respond), host=host, port=port, log_level="warning")
