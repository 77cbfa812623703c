"""The ASGI app ``memtap serve`` runs: the MCP front door at ``/mcp``, the OpenAI-compatible
front door at ``/v1/...``, the replay clock and ``/healthz``.

With upstreams (``memtap proxy``), ``/mcp`` serves the tools of every wrapped server
and ``/servers/NAME/mcp`` those of one.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.routing import Mount, Route

from memtap import __version__
from memtap.proxy.api_docs import Health, install_openapi
from memtap.proxy.fast_routes import FastRoutesApp
from memtap.proxy.guard import RequestGuard, validation_error
from memtap.proxy.mcp_server import build_mcp_server
from memtap.proxy.openai_api import OpenAIFrontDoor
from memtap.proxy.replay_clock import mount_replay_clock
from memtap.proxy.runtime import Runtime, is_loopback

if TYPE_CHECKING:  # imported when bearer JWTs are configured: PyJWT and cryptography load with it
    from starlette.applications import Starlette

    from memtap.auth.resource import ProtectedResource

__all__ = ["create_app"]


def create_app(runtime: Runtime, *, host: str = "127.0.0.1") -> FastAPI:
    """The app over an open runtime; its lifespan runs the MCP session manager."""
    settings = runtime.settings
    pool = runtime.upstreams if runtime.forwarding else None
    if pool is None:
        server = build_mcp_server(runtime.service, default_principal=settings.default_principal)
    else:
        from memtap.proxy.forward import build_forward_server

        server = build_forward_server(
            pool,
            runtime.recorder,
            default_principal=settings.default_principal,
            policy=settings.policy,
            clock=runtime.clock.attribute,
        )
    security = (
        TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        )
        if is_loopback(host)
        else TransportSecuritySettings(enable_dns_rebinding_protection=False)
    )

    def session_manager(server: Any) -> StreamableHTTPSessionManager:
        return StreamableHTTPSessionManager(
            app=server,
            json_response=True,
            security_settings=security,
            max_request_body_size=max(4 << 20, 2 * settings.max_content_bytes + (64 << 10)),
        )

    manager = session_manager(server)
    per_upstream: dict[str, StreamableHTTPSessionManager] = {}
    if pool is not None:
        for name in pool.upstreams:
            per_upstream[name] = session_manager(
                build_forward_server(
                    pool,
                    runtime.recorder,
                    only=name,
                    default_principal=settings.default_principal,
                    policy=settings.policy,
                    clock=runtime.clock.attribute,
                )
            )
    started = time.monotonic()
    openai = OpenAIFrontDoor(
        settings.config,
        runtime.service,
        runtime.recorder,
        default_principal=settings.default_principal,
        policy=settings.policy,
    )
    authentication = runtime.authentication
    protected = _protected_resource(runtime)
    if protected is not None:  # bearer JWTs: RFC 6750 challenges, refusals recorded
        from memtap.proxy.refusals import Refusals

        authentication.on_refusal = Refusals(runtime.recorder, protected)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            if runtime.upstreams is not None:  # a no-op when `memtap serve` runs it
                await stack.enter_async_context(runtime.upstreams.run())
            for each in (manager, *per_upstream.values()):
                await stack.enter_async_context(each.run())
            await stack.enter_async_context(openai.running())
            yield

    app = FastRoutesApp(title="memtap", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None)
    app.add_exception_handler(RequestValidationError, validation_error)
    install_openapi(app)  # the /v1 and MCP endpoints too (proxy/api_docs.py)

    @app.get("/healthz", responses={200: {"model": Health}})
    async def healthz(request: Request) -> dict[str, Any]:
        """Liveness for anyone; the details (paths, counters) only for callers with a key."""
        if settings.authenticated and authentication.caller_or_none(request.headers) is None:
            return {"status": "ok"}
        return {
            "status": "ok",
            "version": __version__,
            "db": str(settings.db),
            "durable": settings.durable,
            "backend": runtime.backend.name,
            "uptime_s": round(time.monotonic() - started, 3),
            "recorder": runtime.recorder.stats_dict(),
            **({"findings": runtime.findings.stats_dict()} if runtime.findings is not None else {}),
            **({"upstreams": runtime.upstreams.status()} if runtime.upstreams is not None else {}),
        }

    if protected is not None:
        app.router.routes.extend(protected.routes())
    # A Route, not a Mount: a Mount answers POST /mcp with a redirect to /mcp/, an extra
    # round trip on every call for clients that follow it, and an error for those that do not.
    mcp_endpoint = authentication.gate(manager.handle_request)
    app.router.routes.append(Route("/mcp", endpoint=mcp_endpoint, methods=["GET", "POST", "DELETE"]))
    mount_replay_clock(app, runtime.clock, authentication, settings.policy, runtime.recorder)
    openai_routes = openai.routes(authentication.gate)
    app.router.routes.extend(openai_routes)
    guard = {
        "recorder": runtime.recorder,
        "caller_of": authentication.caller_or_none,
        "default_principal": settings.default_principal,
    }
    # outermost: header caps, and an event for every refusal (proxy/guard.py)
    app.add_middleware(RequestGuard, **guard)  # type: ignore[arg-type]
    # /v1 in front of the stack, behind the same guard (proxy/fast_routes.py)
    app.serve_fast(openai_routes, lambda endpoint: RequestGuard(endpoint, **guard))  # type: ignore[arg-type]
    if pool is not None:
        from memtap.proxy.forward import ByUpstream

        by_upstream = ByUpstream(
            {name: each.handle_request for name, each in per_upstream.items()},
            runtime.recorder,
            settings.policy,
        )
        endpoint = authentication.gate(by_upstream)
        app.router.routes.append(
            Route("/servers/{name}/mcp", endpoint=endpoint, methods=["GET", "POST", "DELETE"])
        )
    from memtap.ui.mount import OnFirstRequest

    def dashboard() -> Starlette:  # the read-only dashboard, behind the same gate and grants
        from memtap.ui.app import create_ui_app

        return create_ui_app(
            settings.db,
            policy=settings.policy,
            authentication=authentication,
            upstreams=runtime.upstreams.status if runtime.upstreams is not None else None,
            loopback_only=is_loopback(host) and not settings.authenticated,
        )

    app.router.routes.append(Mount("/ui", app=OnFirstRequest(dashboard)))
    return app


def _protected_resource(runtime: Runtime) -> ProtectedResource | None:
    """The OAuth protected resource of a server that accepts bearer JWTs (memtap/auth/jwt.py)."""
    if not runtime.settings.authenticators:
        return None
    from memtap.auth.jwt import JwtAuthenticator
    from memtap.auth.resource import ProtectedResource

    for each in runtime.settings.authenticators:
        if isinstance(each, JwtAuthenticator):
            return ProtectedResource(each.settings)
    return None
