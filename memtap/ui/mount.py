"""The dashboard as ``memtap serve`` and ``memtap proxy`` mount it at ``/ui``: built on its first
request, so a server that nobody opens the dashboard of never loads Jinja, the pages and the
figures (a quarter of a second of every start on a 2-core machine)."""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["OnFirstRequest"]


class OnFirstRequest:
    """An ASGI app that ``build`` makes when the first request reaches it, then every request's.

    ``build`` is synchronous and runs on the event loop, so two first requests cannot both build."""

    def __init__(self, build: Callable[[], ASGIApp]) -> None:
        self._build = build
        self._app: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._app is None:
            self._app = self._build()
        await self._app(scope, receive, send)
