"""Refused credentials, answered and recorded: the gate's hook for requests it turns away.

A request that presented credentials memtap refuses (an unknown API key, an expired or forged
JWT, a token for an unknown principal) reaches memtap, so it becomes one event: tool
``authenticate``, op ``control``, status ``error`` with the reason, principal and namespace
``unauthenticated``, and as arguments the path, the scheme and what a JWT said about itself
(subject, issuer, kid: unverified, truncated). Never the credential. A request with no
``Authorization`` header at all is answered the same way but not recorded: every MCP client
probes without a token first.

The answer carries the RFC 6750 / RFC 9728 challenge of the bearer JWT settings
(:class:`memtap.auth.resource.ProtectedResource`). Installed when JWTs are configured.
"""

from __future__ import annotations

from typing import Any

from starlette.types import Scope, Send

from memtap.auth.gate import headers_of
from memtap.auth.jwt import InvalidToken
from memtap.auth.resource import ProtectedResource
from memtap.errors import AuthError
from memtap.proxy.guard import RECORDED_SCOPE_KEY
from memtap.trace.calls import recorded_call
from memtap.trace.models import Context, Op
from memtap.trace.writer import Recorder

__all__ = ["UNAUTHENTICATED", "Refusals"]

UNAUTHENTICATED = "unauthenticated"


def _front_door(path: str) -> str:
    return "openai" if path.startswith("/v1/") else "mcp-http"


class Refusals:
    """Answers and records the gate's refusals (module docstring)."""

    def __init__(self, recorder: Recorder, resource: ProtectedResource) -> None:
        self.recorder = recorder
        self.resource = resource

    async def __call__(self, scope: Scope, send: Send, error: AuthError) -> None:
        """Record the refusal (when credentials were presented), then answer it."""
        headers = headers_of(scope)
        presented = headers.get("authorization", "")
        if presented:
            await self.record(scope, error, presented.partition(" ")[0][:20])
            scope[RECORDED_SCOPE_KEY] = True  # the request guard must not record it a second time
        await self.resource.refuse(scope, send, error)

    async def record(self, scope: Scope, error: AuthError, scheme: str) -> None:
        path = str(scope.get("path", ""))
        arguments: dict[str, Any] = {"path": path, "method": scope.get("method"), "scheme": scheme}
        if isinstance(error, InvalidToken):
            arguments["via"] = "jwt"
            if error.claimed:
                arguments["claimed"] = error.claimed
        context = Context(principal=UNAUTHENTICATED, namespace=UNAUTHENTICATED)
        async with recorded_call(
            self.recorder,
            tool="authenticate",
            op=Op.CONTROL,
            front_door=_front_door(path),
            backend="memtap",
            arguments=arguments,
            fallback_context=lambda: context,
        ) as record:
            record.context = context
            record.error = f"HTTP {error.status}: {error}"
            record.value = {"error": record.error}
