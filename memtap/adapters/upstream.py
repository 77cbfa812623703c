"""Wrapped MCP servers: starting, restarting, timing out, and the tools each one offers.

One :class:`Upstream` per configured server. A supervisor task owns its connection
(processes and SDK sessions must be opened and closed by one task); callers only
ever ``await upstream.request(...)``.

Lifecycle, as the status reports it:

``idle`` (lazy, not started yet) → ``starting`` → ``ready``; a process that exits
becomes ``crashed``, a start that fails becomes ``failed``.

- A crash is told to exactly one caller: the call that was in flight when the
  upstream died, or else the next call. That call gets an error and starts the
  restart; later calls wait for it. A crash is never hidden behind a silent
  restart, because the upstream may have lost state the agent relies on.
- Restarts back off: a start that fails, or a process that dies within
  ``CRASH_WINDOW_S`` of starting, doubles the delay before the next attempt
  (``BACKOFF_BASE_S`` up to ``BACKOFF_MAX_S``). A call waits out the delay when
  its timeout allows, and is refused at once with the reason when it does not.
- Every call and every start has a deadline (the upstream's ``timeout``); nothing
  waits forever on an upstream.
- Start failures and crashes are recorded as ``control`` events.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import anyio

from memtap.adapters.connections import Connection, LateAnswer, open_stdio
from memtap.adapters.http_upstream import open_http
from memtap.adapters.profiles import (
    Classification,
    Profile,
    ToolKind,
    classify_tools,
    detect_profile,
    find_profile,
)
from memtap.config import HttpServerConfig, McpServerConfig, StdioServerConfig
from memtap.errors import UpstreamError, UpstreamProtocolError, UpstreamTimeout, UpstreamUnavailable

if TYPE_CHECKING:
    from memtap.adapters.taps import EffectTap

__all__ = ["BACKOFF_BASE_S", "BACKOFF_MAX_S", "CRASH_WINDOW_S", "State", "Upstream", "child_environment"]

log = logging.getLogger("memtap.upstream")

BACKOFF_BASE_S = 0.25
BACKOFF_MAX_S = 30.0
CRASH_WINDOW_S = 10.0
_SECRET_ENV = ("MEMTAP_API_KEYS",)


class State(StrEnum):
    IDLE = "idle"
    STARTING = "starting"
    READY = "ready"
    CRASHED = "crashed"
    FAILED = "failed"
    STOPPED = "stopped"


def child_environment(config: StdioServerConfig, *, inherit: bool) -> dict[str, str]:
    """The environment a stdio upstream gets, always passed explicitly.

    From a config file: the SDK's small allow-list (PATH, HOME, ...) plus the
    entry's ``env``. For ``memtap proxy -- COMMAND`` (``inherit``): memtap's own
    environment, which is what the client configured for the wrapped command,
    without memtap's secrets.
    """
    from mcp.client.stdio import get_default_environment

    base = (
        {k: v for k, v in os.environ.items() if k not in _SECRET_ENV}
        if inherit
        else get_default_environment()
    )
    return {**base, **config.env}


def _first_upstream_error(exc: BaseException) -> str:
    """The message of the UpstreamError in ``exc`` (possibly inside an exception group), else a summary."""
    if isinstance(exc, UpstreamError):
        return str(exc)
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _first_upstream_error(inner)
            if found:
                return found
    log.error("upstream start failed unexpectedly", exc_info=exc)
    return f"{type(exc).__name__}: {exc}"


@dataclass
class _Run:
    """One started connection: when it became ready, and whether its end was told to a caller."""

    conn: Connection
    ready_at: float
    crash_reported: bool = False


RecordControl = Callable[[str, str, str], Awaitable[None]]  # (upstream, tool, error)


class Upstream:
    """One wrapped MCP server."""

    def __init__(
        self,
        name: str,
        config: McpServerConfig,
        *,
        timeout: float | None = None,
        inherit_env: bool = False,
        record_control: RecordControl | None = None,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self.timeout = timeout if timeout is not None else config.memtap.timeout
        self.inherit_env = inherit_env
        self.state = State.IDLE
        self.last_error: str | None = None
        self.starts = 0
        self.crashes = 0
        self.failures = 0
        self.next_attempt = 0.0
        self.started_at: float | None = None
        self.tools: list[dict[str, Any]] = []
        self.classes: dict[str, Classification] = {}
        self.profile: Profile | None = None
        self.tap: EffectTap | None = None  # the profile's effect deriver (adapters/taps.py)
        self.recorder: Any = None  # where reconciliation records what it finds (set by the pool)
        # Serialises calls whose effects are derived from state read before and after them.
        self.write_lock = anyio.Lock()
        self._record_control = record_control
        self._on_change = on_change
        self._run: _Run | None = None
        self._wanted = anyio.Event()
        self._changed = anyio.Event()
        self._tools_stale = False

    # -- state --------------------------------------------------------------------------

    @property
    def pid(self) -> int | None:
        return self._run.conn.pid if self._run is not None and self.state == State.READY else None

    @property
    def hello_name(self) -> str | None:
        return self._run.conn.hello.name if self._run is not None else None

    def current_connection(self) -> object | None:
        """The started connection calls go to now (None before the first start), as an identity."""
        return self._run

    def connection_ended(self, run: object | None) -> bool:
        """Whether the connection ``run`` (from :meth:`current_connection`) is over.

        Nothing sent on an ended connection can still change the server's state."""
        return run is not self._run or self.state != State.READY

    def _set(self, state: State, error: str | None = None) -> None:
        self.state = state
        if error is not None:
            self.last_error = error
        self._changed.set()
        self._changed = anyio.Event()
        if self._on_change is not None:
            self._on_change()

    def want(self) -> None:
        """Ask the supervisor to start (or restart) the upstream."""
        self._wanted.set()

    def _back_off(self) -> None:
        self.failures += 1
        self.next_attempt = time.monotonic() + min(BACKOFF_BASE_S * 2 ** (self.failures - 1), BACKOFF_MAX_S)

    def describe(self) -> str:
        if isinstance(self.config, StdioServerConfig):
            return " ".join([self.config.command, *self.config.args])
        return self.config.url

    def status(self) -> dict[str, Any]:
        retry = self.next_attempt - time.monotonic()
        return {
            "name": self.name,
            "transport": "stdio" if isinstance(self.config, StdioServerConfig) else "http",
            "target": self.describe(),
            "state": self.state.value,
            "pid": self.pid,
            "server": self.hello_name,
            "profile": self.profile.name if self.profile else None,
            "tools": len(self.tools),
            "starts": self.starts,
            "crashes": self.crashes,
            "last_error": self.last_error,
            "retry_in_s": round(retry, 3) if self.state == State.FAILED and retry > 0 else None,
            "timeout_s": self.timeout,
        }

    # -- the supervisor ---------------------------------------------------------------------

    def _open(self) -> contextlib.AbstractAsyncContextManager[Connection]:
        config = self.config
        if isinstance(config, HttpServerConfig):
            return open_http(self.name, config.url, config.headers, timeout=self.timeout)
        return open_stdio(
            self.name,
            config.command,
            config.args,
            child_environment(config, inherit=self.inherit_env),
            config.cwd,
            timeout=self.timeout,
            on_notification=self._notification,
        )

    def _notification(self, method: str, params: Any) -> None:
        if method == "notifications/tools/list_changed":
            self._tools_stale = True

    async def supervise(self) -> None:
        """Start the upstream whenever it is wanted; runs until cancelled."""
        try:
            while True:
                await self._wanted.wait()
                self._wanted = anyio.Event()
                delay = self.next_attempt - time.monotonic()
                if delay > 0:
                    await anyio.sleep(delay)
                await self._start_once()
        finally:
            self._set(State.STOPPED)

    async def _start_once(self) -> None:
        self._set(State.STARTING)
        self.starts += 1
        run: _Run | None = None
        try:
            async with self._open() as conn:
                await self._load_tools(conn)
                run = self._run = _Run(conn, time.monotonic())
                self.started_at = time.time()
                self._set(State.READY)
                log.info("upstream %s ready (pid %s, %d tools)", self.name, conn.pid, len(self.tools))
                await conn.closed.wait()
                message = conn.describe_exit()
        except Exception as exc:  # the supervisor never dies: any failure is a failed start or an exit
            error = _first_upstream_error(exc)
            if run is not None:  # failed after the start, while closing: treat as an exit
                message = error
            else:
                self._back_off()
                self._set(State.FAILED, error)
                log.warning("%s", error)
                await self._control("upstream/start", error)
                return
        self.crashes += 1
        if time.monotonic() - run.ready_at < CRASH_WINDOW_S:
            self._back_off()
        else:
            self.failures, self.next_attempt = 0, 0.0
        self._set(State.CRASHED, message)
        log.warning("%s", message)
        if run.crash_reported:
            self.want()
        await self._control("upstream/exit", message)

    async def _control(self, tool: str, error: str) -> None:
        if self._record_control is not None:
            await self._record_control(self.name, tool, error)

    async def _load_tools(self, conn: Connection) -> None:
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(100):
            page = await conn.request(
                "tools/list", {"cursor": cursor} if cursor else {}, timeout=self.timeout
            )
            batch = page.get("tools")
            if not isinstance(batch, list) or not all(isinstance(t, dict) and "name" in t for t in batch):
                raise UpstreamProtocolError(f"upstream {self.name!r} answered tools/list without a tool list")
            tools.extend(batch)
            cursor = page.get("nextCursor")
            if not cursor:
                break
        self.tools = tools
        options = self.config.memtap
        names = [str(t["name"]) for t in tools]
        self.profile = (
            find_profile(options.profile) if options.profile else detect_profile(conn.hello.name, names)
        )
        self.classes = classify_tools(
            ((str(t["name"]), t.get("annotations")) for t in tools), profile=self.profile, rules=options.rules
        )
        if self.tap is None:
            from memtap.adapters.taps import tap_for

            self.tap = tap_for(self)
        self._tools_stale = False

    # -- calls --------------------------------------------------------------------------

    async def connection(self, timeout: float | None = None) -> Connection:
        """The live connection, starting or restarting the upstream as needed, within ``timeout``."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        seen_starts = self.starts
        while True:
            run = self._run
            if self.state == State.READY and run is not None:
                return run.conn
            if self.state == State.CRASHED and run is not None and not run.crash_reported:
                run.crash_reported = True
                self.want()
                raise UpstreamUnavailable(f"{self.last_error}; restarting it", upstream=self.name)
            if self.state == State.FAILED:
                if self.starts > seen_starts:  # the attempt this call waited for failed too
                    raise UpstreamUnavailable(str(self.last_error), upstream=self.name)
                wait = self.next_attempt - time.monotonic()
                if wait > deadline - time.monotonic():
                    raise UpstreamUnavailable(
                        f"{self.last_error}; next start attempt in {wait:.1f} s", upstream=self.name
                    )
            if self.state == State.STOPPED:
                raise UpstreamUnavailable(f"upstream {self.name!r} is stopped", upstream=self.name)
            if self.state != State.STARTING:
                self.want()
            changed = self._changed
            with anyio.move_on_after(max(0.0, deadline - time.monotonic())):
                await changed.wait()
            if time.monotonic() >= deadline and not self.state == State.READY:
                raise UpstreamTimeout(
                    f"upstream {self.name!r} did not become ready within {timeout:g} s (it is {self.state})",
                    upstream=self.name,
                )

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        late: LateAnswer | None = None,
    ) -> dict[str, Any]:
        """One JSON-RPC request within ``timeout`` (default: the upstream's), a wait for a start
        included; ``late``: watch for its answer if it times out (:class:`LateAnswer`)."""
        budget = self.timeout if timeout is None else timeout
        started = time.monotonic()
        conn = await self.connection(budget)
        run = self._run
        left = max(0.001, budget - (time.monotonic() - started))
        try:
            return await conn.request(method, params, timeout=left, late=late)
        except UpstreamTimeout:
            raise UpstreamTimeout(
                f"upstream {self.name!r} did not answer {method} within {self.timeout:g} s",
                upstream=self.name,
            ) from None
        except UpstreamUnavailable:
            if run is not None and run.conn is conn:  # the upstream died under this call: it was told
                run.crash_reported = True
                if self.state == State.CRASHED:
                    self.want()
            raise

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        meta: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        late: LateAnswer | None = None,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
        if meta:
            params["_meta"] = meta
        return await self.request("tools/call", params, timeout=timeout, late=late)

    async def list_tools(self) -> list[dict[str, Any]]:
        """The upstream's tools (wire form), starting it if needed."""
        conn = await self.connection()
        if self._tools_stale:
            await self._load_tools(conn)
        return self.tools

    def capable(self, key: str) -> bool:
        """Whether the server announced the capability behind a listing (``prompts`` or resources)."""
        caps = self._run.conn.hello.capabilities if self._run is not None else {}
        return ("prompts" if key == "prompts" else "resources") in caps

    def kind_of(self, tool: str) -> ToolKind:
        found = self.classes.get(tool)
        return found.kind if found is not None else ToolKind.OTHER


@contextlib.asynccontextmanager
async def supervising(upstreams: list[Upstream], *, eager: bool) -> AsyncIterator[None]:
    """Run the supervisors of ``upstreams`` for the duration of the block."""
    async with anyio.create_task_group() as tg:
        for upstream in upstreams:
            tg.start_soon(upstream.supervise)
            if eager:
                upstream.want()
        try:
            yield
        finally:
            tg.cancel_scope.cancel()
