"""Upstreams reached over streamable HTTP, through the SDK's client session (no process, no pid)."""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio

from memtap import __version__
from memtap.adapters.connections import LateAnswer, ServerHello
from memtap.errors import UpstreamProtocolError, UpstreamRPCError, UpstreamTimeout
from memtap.errors import UpstreamUnavailable as Unavailable

__all__ = ["HttpConnection", "open_http"]

log = logging.getLogger("memtap.upstream")


@functools.cache
def _request_kinds() -> tuple[dict[str, tuple[Any, Any]], Any]:
    """The request and params types of each forwarded method, and the adapter for a raw result:
    built once (a TypeAdapter costs about 60 us), on first use (mcp_types loads lazily)."""
    import mcp_types as types
    from pydantic import TypeAdapter

    kinds: dict[str, tuple[Any, Any]] = {
        "tools/call": (types.CallToolRequest, types.CallToolRequestParams),
        "tools/list": (types.ListToolsRequest, types.PaginatedRequestParams),
        "resources/list": (types.ListResourcesRequest, types.PaginatedRequestParams),
        "resources/templates/list": (types.ListResourceTemplatesRequest, types.PaginatedRequestParams),
        "resources/read": (types.ReadResourceRequest, types.ReadResourceRequestParams),
        "prompts/list": (types.ListPromptsRequest, types.PaginatedRequestParams),
        "prompts/get": (types.GetPromptRequest, types.GetPromptRequestParams),
    }
    return kinds, TypeAdapter(dict[str, Any])


class HttpConnection:
    """A streamable HTTP server through the SDK's client session (no process, no pid)."""

    def __init__(self, name: str, url: str, session: Any, hello: ServerHello) -> None:
        self.name = name
        self.url = url
        self.session = session
        self.hello = hello
        self.pid: int | None = None
        self.closed = anyio.Event()
        self._last_error = ""

    def describe_exit(self) -> str:
        return f"upstream {self.name!r} at {self.url} closed the connection" + (
            f": {self._last_error}" if self._last_error else ""
        )

    async def request(
        self, method: str, params: dict[str, Any] | None, *, timeout: float, late: LateAnswer | None = None
    ) -> dict[str, Any]:
        """One request's result within ``timeout``. The SDK session forgets a timed-out request, so
        ``late`` is never watched here: a reconciler falls back on a later write's answer."""
        from mcp.shared.exceptions import MCPError
        from pydantic import ValidationError

        if self.closed.is_set():
            raise Unavailable(self.describe_exit(), upstream=self.name)
        kinds, any_result = _request_kinds()
        request_type, params_type = kinds[method]
        request = request_type(params=params_type.model_validate(params or {}))
        try:
            with anyio.fail_after(timeout):
                result = await self.session.send_request(request, any_result)
                return dict(result)
        except TimeoutError:
            raise UpstreamTimeout(
                f"upstream {self.name!r} did not answer {method} within {timeout:g} s", upstream=self.name
            ) from None
        except MCPError as exc:
            if exc.code == -32000:  # connection closed
                self._last_error = exc.message
                self.closed.set()
                raise Unavailable(self.describe_exit(), upstream=self.name) from None
            raise UpstreamRPCError(exc.code, exc.message, exc.data, upstream=self.name) from None
        except ValidationError as exc:
            raise UpstreamProtocolError(
                f"upstream {self.name!r} answered {method} with an invalid result: {exc.errors()[0]['msg']}",
                upstream=self.name,
            ) from None
        except OSError as exc:
            self._last_error = str(exc)
            self.closed.set()
            raise Unavailable(self.describe_exit(), upstream=self.name) from None


@contextlib.asynccontextmanager
async def open_http(
    name: str, url: str, headers: dict[str, str], *, timeout: float
) -> AsyncIterator[HttpConnection]:
    """Connect and initialize; the connection lives until the block ends."""
    import httpx2
    import mcp_types as types
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def on_message(message: Any) -> None:
        if isinstance(message, Exception):
            log.warning("upstream %s: %s", name, message)

    started = False
    try:
        async with (
            httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(
                read,
                write,
                message_handler=on_message,
                client_info=types.Implementation(name="memtap", version=__version__),
            ) as session,
        ):
            with anyio.fail_after(timeout):
                result = await session.initialize()
            started = True
            yield HttpConnection(
                name, url, session, ServerHello(result.model_dump(by_alias=True, mode="json"))
            )
    except Exception as exc:  # the SDK's task groups wrap transport failures in exception groups
        cause = _root_cause(exc)
        if isinstance(cause, TimeoutError) and not started:
            reason = f"did not finish the MCP handshake within {timeout:g} s"
        else:
            reason = f"{type(cause).__name__}: {cause}"
        where = "" if started else " during start"
        raise Unavailable(f"upstream {name!r} at {url}{where}: {reason}", upstream=name) from None


def _root_cause(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc
