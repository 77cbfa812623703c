"""The ``/v1`` fast routes: served in front of the framework, with memtap's own layers only.

:class:`FastRoutesApp` is the FastAPI app ``memtap serve`` runs. A request for one of the
routes given to :meth:`~FastRoutesApp.serve_fast` (the OpenAI-compatible endpoints) goes
straight to its endpoint (the authentication gate and the handler, which read the body under
its cap, record the call and answer OpenAI-shaped errors) behind the same two layers the full
stack gives it: :class:`~memtap.proxy.guard.RequestGuard` (header caps, a ``431`` for a header
over them) and Starlette's ``ServerErrorMiddleware`` (a plain ``500`` for a bug, re-raised to
the server's log). Everything else (``/mcp``, the dashboard, ``/healthz``, the lifespan, a
method a route does not take) goes through the app as usual.

What is skipped: FastAPI's own HTTP telemetry (its server span and metrics when an
OpenTelemetry provider is configured; memtap's chat and memory spans are still emitted),
its exception-telemetry and app body-limit layers (the handlers cap bodies themselves),
exception middleware, exit stack and routing: together about 0.1 ms a call, a fifth of
memtap's own cost on a chat call with memory off.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["FastRoutesApp"]


class FastRoutesApp(FastAPI):
    """A FastAPI app that serves some routes in front of its middleware stack."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._fast: dict[str, tuple[frozenset[str], ASGIApp]] = {}

    def serve_fast(self, routes: list[Route], guard: Callable[[ASGIApp], ASGIApp]) -> None:
        """Serve ``routes`` (plain ASGI endpoints) in front of the stack, each behind ``guard``."""
        for route in routes:
            app = ServerErrorMiddleware(guard(route.app), debug=self.debug)
            self._fast[route.path] = (frozenset(route.methods or ()), app)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            fast = self._fast.get(scope["path"])
            if fast is not None and scope["method"] in fast[0]:
                scope["app"] = self
                await fast[1](scope, receive, send)
                return
        await super().__call__(scope, receive, send)
