"""memtap as an OAuth 2.0 protected resource: the metadata document and the bearer challenges.

- ``GET /.well-known/oauth-protected-resource/mcp`` (RFC 9728 §3.1: the well-known prefix before
  the resource's path; also ``/servers/NAME/mcp`` under ``memtap proxy``, and the bare root form
  that MCP clients try next) serves the Protected Resource Metadata: the resource, the
  authorization servers that issue its tokens, the scopes it understands. The document is the MCP
  SDK's ``ProtectedResourceMetadata``.
- A refused request gets ``WWW-Authenticate: Bearer`` with ``resource_metadata`` pointing at that
  document (MCP authorization spec), and, when a token was presented, the RFC 6750 ``error``
  (``invalid_token``, 401; ``insufficient_scope``, 403 with the ``scope`` needed).

Without a configured ``resource`` the resource's origin is the request's own (fine on loopback;
set ``memtap.jwt.resource`` to the public URL behind a proxy).
"""

from __future__ import annotations

import json
import re
from typing import Any

from mcp.server.auth.json_response import PydanticJSONResponse
from mcp.server.auth.routes import cors_middleware
from mcp.shared.auth import ProtectedResourceMetadata
from pydantic import AnyHttpUrl
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Scope, Send

from memtap.auth.jwt import InvalidToken
from memtap.auth.jwt_config import JwtSettings
from memtap.errors import AuthError

__all__ = ["WELL_KNOWN", "ProtectedResource"]

WELL_KNOWN = "/.well-known/oauth-protected-resource"
# The resource paths memtap serves MCP at: /mcp, and /servers/NAME/mcp under `memtap proxy`.
_RESOURCE_PATH = re.compile(r"^/(?:servers/[^/]+/)?mcp$")


def _header_safe(text: str) -> str:
    """RFC 6750 §3: error_description is printable ASCII without ``"`` and ``\\``."""
    return "".join(
        ch if 0x20 <= ord(ch) <= 0x7E and ch not in '"\\' else "'" if ch == '"' else "?" for ch in text
    )


def _origin_of(scope: Scope) -> str:
    headers = dict(scope.get("headers") or [])
    host = headers.get(b"host", b"").decode("latin-1")
    if not host:
        server = scope.get("server") or ("127.0.0.1", 80)
        host = f"{server[0]}:{server[1]}"
    return f"{scope.get('scheme', 'http')}://{host}"


class ProtectedResource:
    """The metadata routes and the challenges for one server's JWT settings."""

    def __init__(self, settings: JwtSettings) -> None:
        self.settings = settings
        if settings.resource is not None:
            resource = AnyHttpUrl(settings.resource)
            port = f":{resource.port}" if resource.port not in (None, 80, 443) else ""
            self._origin: str | None = f"{resource.scheme}://{resource.host}{port}"
            self._default_path = (resource.path or "/mcp").rstrip("/") or "/mcp"
        else:
            self._origin = None
            self._default_path = "/mcp"

    def origin(self, scope: Scope) -> str:
        return self._origin if self._origin is not None else _origin_of(scope)

    def resource_path(self, path: str) -> str:
        """The protected resource a request path belongs to (``/mcp`` for the OpenAI front door)."""
        return path if _RESOURCE_PATH.match(path) else self._default_path

    def metadata_url(self, scope: Scope) -> str:
        return f"{self.origin(scope)}{WELL_KNOWN}{self.resource_path(scope.get('path', ''))}"

    def metadata(self, scope: Scope, resource_path: str) -> ProtectedResourceMetadata:
        settings = self.settings
        resource = (
            settings.resource
            if settings.resource is not None and resource_path == self._default_path
            else f"{self.origin(scope)}{resource_path}"
        )
        # Validated from strings, so the model keeps URLs as configured (an issuer without a path
        # stays without a trailing slash: clients compare issuer identifiers exactly, RFC 8414).
        return ProtectedResourceMetadata.model_validate(
            {
                "resource": resource,
                "authorization_servers": settings.issuers,
                "scopes_supported": list(settings.scopes),
                "bearer_methods_supported": ["header"],
                "resource_name": "memtap",
            }
        )

    def routes(self) -> list[Route]:
        async def document(request: Request) -> Response:
            suffix = request.url.path[len(WELL_KNOWN) :]
            if suffix and not _RESOURCE_PATH.match(suffix):
                return JSONResponse(
                    {"error": "not_found", "error_description": f"no protected resource at {suffix}"},
                    status_code=404,
                )
            return PydanticJSONResponse(
                content=self.metadata(request.scope, suffix or self._default_path),
                headers={"Cache-Control": "public, max-age=3600"},
            )

        endpoint = cors_middleware(document, ["GET", "OPTIONS"])
        return [
            Route(WELL_KNOWN, endpoint=endpoint, methods=["GET", "OPTIONS"]),
            Route(WELL_KNOWN + "/{path:path}", endpoint=endpoint, methods=["GET", "OPTIONS"]),
        ]

    def challenge(self, scope: Scope, error: InvalidToken | None) -> str:
        """The ``WWW-Authenticate`` value for a refused request (no token: no error code)."""
        parts: list[str] = []
        if error is not None:
            parts.append(f'error="{error.error}"')
            parts.append(f'error_description="{_header_safe(str(error))}"')
            if error.scope:
                parts.append(f'scope="{_header_safe(error.scope)}"')
        parts.append(f'resource_metadata="{self.metadata_url(scope)}"')
        return "Bearer " + ", ".join(parts)

    async def refuse(self, scope: Scope, send: Send, error: AuthError) -> None:
        """Answer ``error.status`` with the challenge and a JSON body that names the problem both
        ways: OAuth's ``error_description`` and the OpenAI clients' ``error.message``."""
        token_error = error if isinstance(error, InvalidToken) else None
        message = str(error)
        detail: dict[str, Any] = {"message": message, "type": "authentication_error"}
        if token_error is not None:
            detail["code"] = token_error.error
        data = json.dumps({"error": detail, "error_description": message}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": error.status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(data)).encode()),
                    (b"www-authenticate", self.challenge(scope, token_error).encode("latin-1")),
                ],
            }
        )
        await send({"type": "http.response.body", "body": data})
