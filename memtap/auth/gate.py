"""The HTTP authentication gate: one :class:`Caller` per request, made before any front door runs.

Authenticators are tried in order; each either returns a caller, returns ``None`` (no
credentials it understands) or raises :class:`AuthError` (credentials it understands and
refuses). When none accepts, the gate answers ``401`` with ``WWW-Authenticate: Bearer``.
API keys are one authenticator; a JWT verifier is another; the keyless loopback mode is
a third, which accepts everyone as a ``local`` caller. Keys and ``Authorization`` headers
never leave the authenticators: nothing here is logged or recorded.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Protocol

from starlette.types import ASGIApp, Receive, Scope, Send

from memtap.auth.caller import CALLER_SCOPE_KEY, Caller
from memtap.errors import AuthError

__all__ = [
    "ApiKeyAuthenticator",
    "Authentication",
    "Authenticator",
    "Gate",
    "LocalAuthenticator",
    "bearer_token",
    "headers_of",
]

_HEADERS_KEY = "memtap.headers"


def headers_of(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name, decoded once per request (kept in the scope)."""
    found: dict[str, str] | None = scope.get(_HEADERS_KEY)
    if found is None:
        found = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        scope[_HEADERS_KEY] = found
    return found


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of ``Authorization: Bearer TOKEN``, or None."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class Authenticator(Protocol):
    """Turns a request's headers (lower-case names) into a caller."""

    def authenticate(self, headers: Mapping[str, str]) -> Caller | None:
        """The caller, ``None`` for no credentials this authenticator understands, or
        :class:`AuthError` for credentials it understands and refuses."""
        ...


class ApiKeyAuthenticator:
    """``Authorization: Bearer KEY`` against the configured keys.

    The offered token is hashed (SHA-256) and looked up by its digest, then compared with the
    key found in constant time: one hash per request however many keys there are (comparing
    against each of 1,000 keys cost about 125 µs), and the lookup's timing depends on the
    digest, which a caller cannot steer towards a key. ``pinned`` holds, by principal, the
    context fields the operator fixed for its keys."""

    def __init__(
        self, keys: Mapping[str, str], pinned: Mapping[str, Mapping[str, Any]] | None = None
    ) -> None:
        self._keys = {hashlib.sha256(key.encode()).digest(): (key.encode(), p) for key, p in keys.items()}
        fixed = pinned or {}
        self._callers = {
            principal: Caller(principal, "api-key", pinned=MappingProxyType(dict(fixed.get(principal, {}))))
            for principal in keys.values()
        }

    def authenticate(self, headers: Mapping[str, str]) -> Caller | None:
        token = bearer_token(headers)
        if token is None:
            return None
        offered = token.encode()
        found = self._keys.get(hashlib.sha256(offered).digest())
        if found is None or not hmac.compare_digest(found[0], offered):
            return None
        return self._callers[found[1]]


class LocalAuthenticator:
    """The keyless single-user mode (loopback only): everyone is a ``local`` caller, named by
    ``X-Memtap-Principal`` or the default principal."""

    def __init__(self, default_principal: str = "local") -> None:
        self.default_principal = default_principal
        self._default = Caller(default_principal, "local")

    def authenticate(self, headers: Mapping[str, str]) -> Caller | None:
        named = headers.get("x-memtap-principal")
        return Caller(named, "local") if named else self._default


Refusal = Callable[[Scope, Send, AuthError], Awaitable[None]]
"""Answers (and may record) a refused request in place of the plain 401 (bearer JWTs: the
RFC 6750 challenge with the resource metadata URL; see memtap/proxy/refusals.py)."""


class Authentication:
    """The authenticators of one process, tried in order."""

    def __init__(
        self,
        authenticators: Sequence[Authenticator],
        *,
        on_refusal: Refusal | None = None,
    ) -> None:
        self.authenticators = tuple(authenticators)
        self.on_refusal = on_refusal

    def authenticate(self, headers: Mapping[str, str]) -> Caller:
        """The request's caller, or :class:`AuthError` (401 when nobody accepts it)."""
        for each in self.authenticators:
            caller = each.authenticate(headers)
            if caller is not None:
                return caller
        raise AuthError("missing or unknown API key or token (Authorization: Bearer KEY)", status=401)

    def caller_or_none(self, headers: Mapping[str, str]) -> Caller | None:
        try:
            return self.authenticate(headers)
        except AuthError:
            return None

    def gate(self, app: ASGIApp) -> Gate:
        return Gate(app, self)


class Gate:
    """ASGI middleware: authenticates each HTTP request and puts its caller into the scope
    under :data:`CALLER_SCOPE_KEY`, or answers 401/403 with a JSON error body."""

    def __init__(self, app: ASGIApp, authentication: Authentication) -> None:
        self.app = app
        self.authentication = authentication

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                scope[CALLER_SCOPE_KEY] = self.authentication.authenticate(headers_of(scope))
            except AuthError as exc:
                if self.authentication.on_refusal is not None:
                    await self.authentication.on_refusal(scope, send, exc)
                else:
                    await _refuse(send, exc)
                return
        await self.app(scope, receive, send)


async def _refuse(send: Send, exc: AuthError) -> None:
    kind = "authentication_error" if exc.status == 401 else "permission_error"
    body = json.dumps({"error": {"message": str(exc), "type": kind}}).encode()
    headers = [(b"content-type", b"application/json")]
    if exc.status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": exc.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
