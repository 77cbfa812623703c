"""Connections to upstream MCP servers: a lean stdio client and the SDK's streamable HTTP client.

Both answer one question, ``request(method, params) -> result dict``, and raise
:class:`~memtap.errors.UpstreamError` subclasses for everything that is not a
result: a JSON-RPC error (passed on unchanged), a timeout, a closed connection.

Why a stdio client of our own: measured here, the SDK's ``ClientSession`` over
stdio spends about 1-2 ms of Python per request (several memory-stream hops and
tasks between the pipe and the caller, result validation against the output
schema), more than the reference memory server's own time (about 0.9 ms). memtap
adds its own hop in front, so it reads the pipe directly: one reader task, one
future per request id, ``json.loads`` on the line. Results are validated with
the SDK's pydantic types where they are forwarded (:mod:`memtap.proxy.forward`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import anyio

from memtap import __version__
from memtap.errors import UpstreamError, UpstreamProtocolError, UpstreamRPCError, UpstreamTimeout
from memtap.errors import UpstreamUnavailable as Unavailable

__all__ = ["Connection", "LateAnswer", "ServerHello", "open_stdio"]

log = logging.getLogger("memtap.upstream")

_LINE_LIMIT = 64 << 20  # one JSON-RPC message may be a large graph
_CLOSE_GRACE_S = 2.0
HANDSHAKE_VERSION = "2025-11-25"


class ServerHello:
    """What the server said about itself in the initialize handshake."""

    def __init__(self, result: dict[str, Any]) -> None:
        info = result.get("serverInfo") or {}
        self.name: str | None = info.get("name") if isinstance(info, dict) else None
        self.version: str | None = info.get("version") if isinstance(info, dict) else None
        self.protocol_version: str | None = result.get("protocolVersion")
        caps = result.get("capabilities")
        self.capabilities: dict[str, Any] = caps if isinstance(caps, dict) else {}
        self.instructions: str | None = result.get("instructions")


_LATE_LIMIT = 1024  # timed-out requests watched for a late answer, per connection


class LateAnswer:
    """Whether a request memtap gave up on was answered after all (the server finished it).

    Handed to :meth:`Connection.request` by a caller that must know when a timed-out write has
    stopped changing the server (reconciliation). A connection that can watch for the late answer
    sets ``watched`` when the request times out (and then does not send ``notifications/cancelled``:
    the reference server's handler carries a cancelled write out all the same, and the SDK then
    suppresses its answer, the one sign that it has ended); ``arrived`` is set when the answer comes.
    """

    __slots__ = ("arrived", "watched")

    def __init__(self) -> None:
        self.watched = False
        self.arrived = False


class Connection(Protocol):
    hello: ServerHello
    pid: int | None
    closed: anyio.Event

    def describe_exit(self) -> str: ...

    async def request(
        self, method: str, params: dict[str, Any] | None, *, timeout: float, late: LateAnswer | None = None
    ) -> dict[str, Any]: ...


def _encode(message: dict[str, Any]) -> bytes:
    try:
        text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:  # an unpaired surrogate: send it escaped, as JSON allows
        return (json.dumps(message, ensure_ascii=True, separators=(",", ":")) + "\n").encode("ascii")


class StdioConnection:
    """One server subprocess, newline-delimited JSON-RPC on its stdin and stdout."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process) -> None:
        self.name = name
        self.proc = proc
        self.pid: int | None = proc.pid
        self.closed = anyio.Event()
        self.hello = ServerHello({})
        self.on_notification: Callable[[str, Any], None] | None = None
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._late: dict[int, LateAnswer] = {}  # timed-out requests whose answer may still come
        self._next_id = 0
        self._stderr: deque[str] = deque(maxlen=20)
        self._malformed = 0

    # -- reading ------------------------------------------------------------------------

    async def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        try:
            while True:
                try:
                    line = await self.proc.stdout.readline()
                except (ValueError, asyncio.LimitOverrunError):
                    log.error("upstream %s: a message exceeded %d bytes; closing", self.name, _LINE_LIMIT)
                    break
                if not line:
                    break
                if line.strip():
                    self._dispatch(line)
        finally:
            await self._wait_exit()
            self._fail_pending()
            self.closed.set()

    def _dispatch(self, line: bytes) -> None:
        try:
            message = json.loads(line)
            if not isinstance(message, dict):
                raise ValueError("not a JSON object")
        except ValueError as exc:
            self._malformed += 1
            log.warning("upstream %s wrote a line that is not JSON-RPC (%s): %.200r", self.name, exc, line)
            return
        if "method" in message:
            self._incoming(message)
            return
        future = self._pending.pop(message.get("id"), None)  # type: ignore[arg-type]
        if future is None or future.done():
            if self._late:
                late = self._late.pop(message.get("id"), None)  # type: ignore[arg-type]
                if late is not None:
                    late.arrived = True
            return
        error = message.get("error")
        if isinstance(error, dict):
            future.set_exception(
                UpstreamRPCError(
                    int(error.get("code", -32603)),
                    str(error.get("message", "error")),
                    error.get("data"),
                    upstream=self.name,
                )
            )
        elif isinstance(message.get("result"), dict):
            future.set_result(message["result"])
        else:
            future.set_exception(
                UpstreamProtocolError(
                    f"upstream {self.name!r} answered with neither a result object nor an error: "
                    f"{json.dumps(message)[:200]}",
                    upstream=self.name,
                )
            )

    def _incoming(self, message: dict[str, Any]) -> None:
        method, request_id = message["method"], message.get("id")
        if request_id is None:
            if self.on_notification is not None:
                self.on_notification(method, message.get("params"))
            return
        if method == "ping":
            reply: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "result": {}}
        elif method == "roots/list":
            reply = {"jsonrpc": "2.0", "id": request_id, "result": {"roots": []}}
        else:
            error = {"code": -32601, "message": f"memtap does not relay {method} to the agent"}
            reply = {"jsonrpc": "2.0", "id": request_id, "error": error}
        self._write(reply)

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        with contextlib.suppress(ValueError, asyncio.LimitOverrunError):
            while line := await self.proc.stderr.readline():
                text = line.decode("utf-8", "replace").rstrip()
                self._stderr.append(text)
                log.debug("upstream %s: %s", self.name, text)

    async def _wait_exit(self) -> None:
        with anyio.move_on_after(_CLOSE_GRACE_S):
            await self.proc.wait()

    def _fail_pending(self) -> None:
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(Unavailable(self.describe_exit(), upstream=self.name))

    def stderr_tail(self) -> str:
        return " | ".join(line for line in self._stderr if line)[-500:]

    def describe_exit(self, when: str = "") -> str:
        code = self.proc.returncode
        how = "closed its output" if code is None else f"exited with code {code}"
        if code is not None and code < 0:
            with contextlib.suppress(ValueError):
                how = f"was killed by {signal.Signals(-code).name}"
        tail = self.stderr_tail()
        return f"upstream {self.name!r} {how}{when}" + (f" (stderr: {tail})" if tail else "")

    # -- writing ------------------------------------------------------------------------

    def _write(self, message: dict[str, Any]) -> None:
        stdin = self.proc.stdin
        if stdin is None or stdin.is_closing():
            raise Unavailable(self.describe_exit(), upstream=self.name)
        stdin.write(_encode(message))

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        with contextlib.suppress(UpstreamError, ConnectionError):
            self._write(message)

    async def _broken(self) -> Unavailable:
        """The pipe broke before the reader saw the end: wait (briefly) until the exit is observed,
        so the error says how the upstream ended."""
        with anyio.move_on_after(_CLOSE_GRACE_S):
            await self.closed.wait()
        return Unavailable(self.describe_exit(), upstream=self.name)

    async def _cancel(self, request_ids: list[int], timeout: float) -> None:
        """Tell the upstream that memtap gave up on these requests after ``timeout`` seconds."""
        reason = f"memtap: timed out after {timeout:g} s"
        for request_id in request_ids:
            await self.notify("notifications/cancelled", {"requestId": request_id, "reason": reason})

    async def request(
        self, method: str, params: dict[str, Any] | None, *, timeout: float, late: LateAnswer | None = None
    ) -> dict[str, Any]:
        """One request's result within ``timeout``. With ``late``, a request that times out is not
        cancelled but watched: its answer, when it comes, sets ``late.arrived``."""
        if self.closed.is_set():
            raise Unavailable(self.describe_exit(), upstream=self.name)
        self._next_id += 1
        request_id = self._next_id
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        try:
            self._write(message)
            assert self.proc.stdin is not None
            await self.proc.stdin.drain()
            async with asyncio.timeout(timeout):  # cheaper than an anyio cancel scope, on the hot path
                return await future
        except (ConnectionError, RuntimeError, Unavailable):
            raise await self._broken() from None
        except TimeoutError:
            if late is None:
                await self._cancel([request_id], timeout)
            else:
                late.watched = True
                self._late[request_id] = late
                if len(self._late) > _LATE_LIMIT:  # the oldest is given up on (it stays unsettled)
                    del self._late[next(iter(self._late))]
            raise UpstreamTimeout(
                f"upstream {self.name!r} did not answer {method} within {timeout:g} s", upstream=self.name
            ) from None
        finally:
            self._pending.pop(request_id, None)

    async def request_many(
        self, method: str, params: list[dict[str, Any]], *, timeout: float
    ) -> list[dict[str, Any] | UpstreamError]:
        """Several requests of ``method`` written at once, in order, in one write (pipelined: the
        server reads them together instead of one wake-up per call); each one's result, or the
        :class:`UpstreamError` it got (a JSON-RPC error), in the order sent. A broken connection or
        the deadline for them all raises as :meth:`request` does."""
        if self.closed.is_set():
            raise Unavailable(self.describe_exit(), upstream=self.name)
        loop = asyncio.get_running_loop()
        futures: list[tuple[int, asyncio.Future[dict[str, Any]]]] = []
        lines = []
        for one in params:
            self._next_id += 1
            futures.append((self._next_id, loop.create_future()))
            self._pending[self._next_id] = futures[-1][1]
            lines.append(_encode({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": one}))
        stdin = self.proc.stdin
        try:
            if stdin is None or stdin.is_closing():
                raise Unavailable(self.describe_exit(), upstream=self.name)
            stdin.write(b"".join(lines))
            await stdin.drain()
            async with asyncio.timeout(timeout):
                await asyncio.wait([future for _, future in futures])
            results: list[dict[str, Any] | UpstreamError] = []
            for _, future in futures:
                error = future.exception()
                if error is None:
                    results.append(future.result())
                elif isinstance(error, UpstreamError) and not isinstance(error, Unavailable):
                    results.append(error)  # this request's own JSON-RPC error
                else:
                    raise error
            return results
        except (ConnectionError, RuntimeError, Unavailable):
            raise await self._broken() from None
        except TimeoutError:
            await self._cancel([request_id for request_id, future in futures if not future.done()], timeout)
            raise UpstreamTimeout(
                f"upstream {self.name!r} did not answer {len(futures)} pipelined {method} in {timeout:g} s",
                upstream=self.name,
            ) from None
        finally:
            for request_id, future in futures:
                self._pending.pop(request_id, None)
                if not future.done():
                    future.cancel()

    async def close(self) -> None:
        """Close stdin, give the server a grace period, then end its process group."""
        proc = self.proc
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()
        with anyio.move_on_after(_CLOSE_GRACE_S):
            await proc.wait()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if proc.returncode is not None:
                break
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
            with anyio.move_on_after(_CLOSE_GRACE_S):
                await proc.wait()


@contextlib.asynccontextmanager
async def open_stdio(
    name: str,
    command: str,
    args: list[str],
    env: dict[str, str],
    cwd: str | None,
    *,
    timeout: float,
    on_notification: Callable[[str, Any], None] | None = None,
    client_name: str = "memtap",
) -> AsyncIterator[StdioConnection]:
    """Start the server, run the initialize handshake (as MCP client ``client_name``), and yield the
    connection; stop it on exit."""
    try:
        proc = await asyncio.create_subprocess_exec(
            command,
            *args,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
            limit=_LINE_LIMIT,
        )
    except FileNotFoundError:
        where = f" in {cwd}" if cwd else ""
        raise Unavailable(
            f"upstream {name!r}: command not found: {command!r}{where} (PATH={env.get('PATH', '')})",
            upstream=name,
        ) from None
    except (PermissionError, NotADirectoryError, OSError) as exc:
        raise Unavailable(f"upstream {name!r}: cannot start {command!r}: {exc}", upstream=name) from None
    conn = StdioConnection(name, proc)
    conn.on_notification = on_notification
    # Plain tasks rather than a task group: a failed handshake must reach the supervisor as the
    # UpstreamError it is, not wrapped in an exception group.
    readers = [asyncio.create_task(conn._read_stdout()), asyncio.create_task(conn._read_stderr())]
    try:
        try:
            result = await conn.request(
                "initialize",
                {
                    "protocolVersion": HANDSHAKE_VERSION,
                    "capabilities": {"roots": {"listChanged": False}},
                    "clientInfo": {"name": client_name, "version": __version__},
                },
                timeout=timeout,
            )
        except UpstreamTimeout:
            raise Unavailable(
                f"upstream {name!r} did not finish the MCP handshake within {timeout:g} s", upstream=name
            ) from None
        except Unavailable:
            raise Unavailable(conn.describe_exit(" during start"), upstream=name) from None
        conn.hello = ServerHello(result)
        await conn.notify("notifications/initialized")
        yield conn
    finally:
        with anyio.CancelScope(shield=True):
            await conn.close()
            for task in readers:
                task.cancel()
            await asyncio.gather(*readers, return_exceptions=True)
