"""The pass-through upstreams' HTTP client against small raw HTTP servers on loopback: answers
as servers send them (kept alive or not, read until close, informational first, large and
slowly read), and the failures a caller must tell apart."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from memtap.adapters.upstream_http import BrokeOff, CannotConnect, HTTPClient

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
HEADERS = b"Content-Type: application/json\r\n"
Serve = Callable[[Handler], Awaitable["Server"]]


async def _request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    return head + await reader.readexactly(length)


class Server:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self.url = ""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[Server]]]:
    servers: list[asyncio.Server] = []

    async def start(handler: Handler) -> Server:
        server = Server(handler)
        listening = await asyncio.start_server(server._serve, "127.0.0.1", 0)
        servers.append(listening)
        server.url = f"http://127.0.0.1:{listening.sockets[0].getsockname()[1]}/v1/chat/completions"
        return server

    yield start
    for listening in servers:
        listening.close()


def _deadline(seconds: float = 5.0) -> float:
    return asyncio.get_running_loop().time() + seconds


@pytest.mark.anyio
async def test_kept_alive_answers_reuse_one_connection_and_closed_ones_get_a_new_one(serve: Serve) -> None:
    async def keep(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            server.requests.append(await _request(reader))
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")  # no Connection: close, then closes

    server = await serve(keep)
    closing = await serve(once)
    client = HTTPClient()
    for url in [server.url] * 3 + [closing.url] * 3:
        response = await client.post(url, HEADERS, b'{"n": 1}', _deadline())
        assert (response.status, await response.read(_deadline())) == (200, b"{}")
        client.release(url, response)
        await asyncio.sleep(0)  # a close the server sent is seen before the next call, or not: both work
    assert server.connections == 1 and len(server.requests) == 3
    assert server.requests[0].startswith(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:")
    assert server.requests[0].endswith(b'Content-Length: 8\r\n\r\n{"n": 1}')
    assert closing.connections == 3
    await client.close()


@pytest.mark.anyio
async def test_a_connection_with_bytes_after_its_answer_is_not_used_again(serve: Serve) -> None:
    async def chatty(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await _request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}HTTP/1.1 200 OK\r\n")

    server = await serve(chatty)
    client = HTTPClient()
    for _ in range(3):
        response = await client.post(server.url, HEADERS, b"{}", _deadline())
        assert (response.status, await response.read(_deadline())) == (200, b"{}")
        client.release(server.url, response)
    assert server.connections == 3
    await client.close()


@pytest.mark.anyio
async def test_a_body_read_until_close_and_an_informational_answer_first_are_read_whole(serve: Serve) -> None:
    async def until_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n")
        writer.write(b"Connection: close\r\n\r\nall of it")

    server = await serve(until_close)
    client = HTTPClient()
    response = await client.post(server.url, HEADERS, b"{}", _deadline())
    assert (response.status, response.content_type) == (200, "text/plain")
    assert await response.read(_deadline()) == b"all of it"
    client.release(server.url, response)
    assert response.closed


@pytest.mark.anyio
async def test_a_large_stream_read_slowly_arrives_whole(serve: Serve) -> None:
    piece = b"x" * 65536

    async def chunked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        for _ in range(64):
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    server = await serve(chunked)
    client = HTTPClient()
    response = await client.post(server.url, HEADERS, b"{}", _deadline())
    received = 0
    while True:
        try:
            chunk = await response.next_chunk(5.0)
        except StopAsyncIteration:
            break
        received += len(chunk)
        await asyncio.sleep(0.001)  # a slow reader: the connection stops reading past the high-water mark
    assert received == 64 * len(piece) and response.complete
    client.release(server.url, response)
    await client.close()


@pytest.mark.anyio
async def test_failures_are_cannot_connect_broke_off_or_timeout(serve: Serve) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        await asyncio.sleep(30)

    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)

    async def torn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this")

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(b"<html>not http</html>\r\n\r\n")

    client = HTTPClient(connect_timeout=2)
    with pytest.raises(CannotConnect):
        await client.post("http://127.0.0.1:1/v1", HEADERS, b"{}", _deadline())
    with pytest.raises(CannotConnect):
        await client.post("ftp://example.invalid/v1", HEADERS, b"{}", _deadline())
    with pytest.raises(TimeoutError):
        await client.post((await serve(silent)).url, HEADERS, b"{}", _deadline(0.2))
    with pytest.raises(CannotConnect):
        await client.post((await serve(hang_up)).url, HEADERS, b"{}", _deadline())
    with pytest.raises(CannotConnect):
        await client.post((await serve(garbage)).url, HEADERS, b"{}", _deadline())
    server = await serve(torn)
    response = await client.post(server.url, HEADERS, b"{}", _deadline())
    with pytest.raises(BrokeOff):
        await response.read(_deadline())
    client.release(server.url, response)
    assert response.closed
    await client.close()
