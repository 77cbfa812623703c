"""MCP over this process's stdin and stdout, on non-blocking pipes.

The SDK's ``stdio_server()`` reads each line and writes each answer through a worker
thread (``anyio.wrap_file``): three thread hand-offs per call, each one a GIL
hand-over that costs up to the interpreter's switch interval when the recorder's
writer thread is busy. Measured on the proxy's stdio front, that was most of what
memtap added per call. This transport keeps the SDK's contract (the same stream pair
of ``SessionMessage``) and its protection of the wire (fd 0 and 1 point at the null
device and at stderr while serving, so stray reads and prints miss the protocol),
and reads and writes the pipes from the event loop. A stdin or stdout that is not a
pipe, socket or terminal (a regular file) falls back to the SDK's transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage

if TYPE_CHECKING:
    from memtap.proxy.lean import LeanCalls

__all__ = ["stdio_streams"]

_LINE_LIMIT = 64 << 20


@contextlib.contextmanager
def _claimed(fd: int, diversion: int) -> Any:
    """A private duplicate of ``fd``, while ``fd`` itself points at ``diversion``."""
    private = os.dup(fd)
    saved = os.dup(fd)
    os.dup2(diversion, fd)
    try:
        yield private
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def _is_pipe_like(fd: int) -> bool:
    import stat

    mode = os.fstat(fd).st_mode
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)


@contextlib.asynccontextmanager
async def stdio_streams(lean: LeanCalls | None = None) -> AsyncIterator[tuple[Any, Any]]:
    """The (read, write) stream pair ``Server.run`` takes, served on stdin and stdout.

    With ``lean``, each line is first offered to it (``memtap proxy``'s ``tools/call``
    without the SDK's server layers, ``proxy/lean.py``); what it does not take goes to the SDK."""
    if not (_is_pipe_like(0) and _is_pipe_like(1)):
        from mcp.server.stdio import stdio_server

        async with stdio_server() as streams:
            yield streams
        return
    loop = asyncio.get_running_loop()
    null = os.open(os.devnull, os.O_RDONLY)
    err = os.dup(2)
    try:
        with _claimed(0, null) as stdin_fd, _claimed(1, err) as stdout_fd:
            reader = asyncio.StreamReader(limit=_LINE_LIMIT)
            read_transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(stdin_fd, "rb", buffering=0)
            )
            write_transport, write_protocol = await loop.connect_write_pipe(
                asyncio.streams.FlowControlMixin, os.fdopen(stdout_fd, "wb", buffering=0)
            )
            writer = asyncio.StreamWriter(write_transport, write_protocol, None, loop)
            if lean is not None:
                lean.attach(writer)
            incoming_send, incoming = anyio.create_memory_object_stream[SessionMessage | Exception](0)
            outgoing, outgoing_receive = anyio.create_memory_object_stream[SessionMessage](0)

            async def read_lines() -> None:
                async with incoming_send:
                    while line := await reader.readline():
                        if lean is not None and lean.take(line):
                            continue
                        try:
                            message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                        except Exception as exc:  # the session answers a parse error
                            await incoming_send.send(exc)
                            continue
                        if lean is not None:
                            lean.opened(message)
                        await incoming_send.send(SessionMessage(message))
                    if lean is not None:
                        await lean.close()

            async def write_lines() -> None:
                async with outgoing_receive:
                    async for message in outgoing_receive:
                        if lean is not None:
                            lean.sent(message.message)
                        data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                        writer.write(data.encode("utf-8") + b"\n")
                        await writer.drain()

            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(read_lines)
                    tg.start_soon(write_lines)
                    yield incoming, outgoing
                    tg.cancel_scope.cancel()
            finally:
                read_transport.close()
                write_transport.close()
    finally:
        os.close(null)
        os.close(err)
