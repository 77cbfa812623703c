"""A lean HTTP/1.1 client for the pass-through upstreams: one POST, its answer's bytes as they come.

The chat proxy's upstream call is the same request again and again: a JSON body to one URL,
and back a status, a content type and the body, whole or streamed. A general client
(aiohttp) spends most of a pass-through call's CPU building and tearing down its request,
response, header and timer objects; this one writes the request head and body in one go on a
kept-alive connection and parses the answer with ``httptools`` (the C parser uvicorn uses),
keeping only what the proxy reads. It measured a fifth of aiohttp's CPU per call here.

What it does: ``http`` and ``https`` (the system's default TLS context), connections kept
alive per host and reused (closed after 60 s idle, or when the server says ``Connection:
close``), ``Content-Length``, chunked and read-until-close bodies, a deadline on every wait (a
total one for whole answers, one per read for streams), and back-pressure on a stream the
caller reads slowly. A reused connection that the server had closed before it sent a byte
is retried once on a new one. What it does not: redirects, proxies from the environment,
cookies, compression (it asks for ``identity`` and passes on whatever comes).

Failures are :class:`CannotConnect` (no connection, or closed before the answer began),
:class:`BrokeOff` (closed or garbled after it began) and ``TimeoutError``.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from urllib.parse import urlsplit

import httptools

__all__ = ["BrokeOff", "CannotConnect", "HTTPClient", "Response"]

_KEEPALIVE_S = 60.0
_HIGH_WATER = 1 << 20  # bytes of a stream's body held before the connection stops reading


class CannotConnect(OSError):
    """No connection to the upstream, or it closed before its answer began."""


class BrokeOff(OSError):
    """The upstream's answer began and then broke off (closed early, or not HTTP)."""


class Response(asyncio.Protocol):
    """One kept-alive connection, and the answer being read on it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._parser = httptools.HttpResponseParser(self)
        self._transport: asyncio.Transport | None = None
        self._waiter: asyncio.Future[None] | None = None
        self.closed = False
        self.idle_since = 0.0
        self._begin()

    def _begin(self) -> None:
        self.status = 0
        self.content_type = "application/json"
        self.keep_alive = False
        self.headers_done = False
        self.complete = False
        self.received = False
        self.error: BaseException | None = None
        self._has_length = False
        self._informational = False
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._paused = False

    # -- the protocol and the parser's callbacks ---------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.complete:  # bytes after the answer, before the next request: a broken connection
            self.close()
            return
        self.received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self.error = BrokeOff(f"not an HTTP answer: {exc}")
            self.close()
            self._wake()
            return
        if self._chunks:  # body came: one wake and one back-pressure check per read, not per chunk
            if self._buffered > _HIGH_WATER and not self._paused and self._transport is not None:
                self._paused = True
                self._transport.pause_reading()
            self._wake()

    def eof_received(self) -> bool:
        return False  # close the transport: a half-closed connection is of no further use

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.headers_done and not self.complete and not self._has_length:
            self.complete = True  # a body that runs until the connection closes
        elif not self.complete and self.error is None:
            self.error = exc or ConnectionResetError("the server closed the connection")
        self._wake()

    def on_message_begin(self) -> None:
        if self.complete:  # a second answer begins in the read that ended the first
            self.keep_alive = False

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.complete:  # a second answer in the same read: not a connection to keep
            self.keep_alive = False
            return
        lowered = name.lower()
        if lowered == b"content-type":
            self.content_type = value.decode("latin-1")
        elif lowered in (b"content-length", b"transfer-encoding"):
            self._has_length = True

    def on_headers_complete(self) -> None:
        if self.complete:
            self.keep_alive = False
            return
        status = self._parser.get_status_code()
        if status < 200:  # 100 Continue and the like: the answer is still to come
            self._informational = True
            return
        self.status = status
        self.keep_alive = self._parser.should_keep_alive()
        self.headers_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self.complete:
            self.keep_alive = False
            return
        self._chunks.append(body)
        self._buffered += len(body)

    def on_message_complete(self) -> None:
        if self.complete:
            self.keep_alive = False
            return
        if self._informational:
            self._informational = False
            self.content_type, self._has_length = "application/json", False
            return
        self.complete = True
        self._wake()

    # -- for the client ----------------------------------------------------------------

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self, deadline: float) -> None:
        """Until the parser or the connection has news, or ``deadline`` (loop time) passes."""
        waiter = self._waiter = self._loop.create_future()
        timer = self._loop.call_at(deadline, _expire, waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            timer.cancel()

    @property
    def usable(self) -> bool:
        return not self.closed and self._transport is not None and not self._transport.is_closing()

    def send(self, head: bytes, body: bytes) -> None:
        self._begin()
        if not self.usable:
            raise CannotConnect("the connection closed before the request went out")
        assert self._transport is not None
        try:
            self._transport.writelines((head, body))
        except (RuntimeError, OSError) as exc:  # a transport closing under the write
            raise CannotConnect(f"the request could not be sent: {exc}") from None

    async def wait_headers(self, deadline: float) -> None:
        while not self.headers_done:
            if self.error is not None or self.closed:
                raise CannotConnect(f"the server closed the connection before answering ({self.error})")
            await self._wait(deadline)

    def _take(self) -> bytes:
        chunks, self._chunks, self._buffered = self._chunks, [], 0
        if self._paused and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def read(self, deadline: float) -> bytes:
        """The whole body."""
        while not self.complete:
            if self.error is not None:
                raise BrokeOff(str(self.error) or type(self.error).__name__)
            await self._wait(deadline)
        return self._take()

    async def next_chunk(self, read_timeout: float) -> bytes:
        """The body's next bytes as they arrive (``StopAsyncIteration`` after the last); each wait
        for more may take ``read_timeout`` seconds. For an iterator of a class of its own: an
        async generator costs more per stream (made, registered with the loop, finalised)."""
        while True:
            if self._chunks:
                return self._take()
            if self.complete:
                raise StopAsyncIteration
            if self.error is not None:
                raise BrokeOff(str(self.error) or type(self.error).__name__)
            await self._wait(self._loop.time() + read_timeout)

    def arrived(self, limit: int) -> bool:
        """Whether the whole body is in, and at most ``limit`` bytes of it are still to be taken."""
        return self.complete and self._buffered <= limit

    def ended(self) -> bool:
        """Whether the whole body is in and taken: nothing more will come."""
        return self.complete and not self._chunks

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class HTTPClient:
    """POSTs over kept-alive connections, one pool per scheme, host and port."""

    def __init__(self, connect_timeout: float = 10.0) -> None:
        self.connect_timeout = connect_timeout
        self._idle: dict[tuple[str, str, int], list[Response]] = {}
        self._targets: dict[str, tuple[tuple[str, str, int], bytes]] = {}
        self._tls: ssl.SSLContext | None = None

    def _target(self, url: str) -> tuple[tuple[str, str, int], bytes]:
        """(scheme, host, port) and the request line's start and Host header, per URL."""
        found = self._targets.get(url)
        if found is None:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise CannotConnect(f"not an http(s) URL: {url}")
            port = parts.port or (443 if parts.scheme == "https" else 80)
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            host = parts.netloc.rpartition("@")[2]
            found = (
                (parts.scheme, parts.hostname, port),
                f"POST {path} HTTP/1.1\r\nHost: {host}\r\n".encode(),
            )
            self._targets[url] = found
        return found

    async def _connect(self, key: tuple[str, str, int], deadline: float) -> Response:
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        tls: ssl.SSLContext | None = None
        if scheme == "https":
            if self._tls is None:
                self._tls = ssl.create_default_context()
            tls = self._tls
        timeout = max(0.0, min(self.connect_timeout, deadline - loop.time()))
        try:
            _, response = await asyncio.wait_for(
                loop.create_connection(
                    lambda: Response(loop), host, port, ssl=tls, server_hostname=host if tls else None
                ),
                timeout,
            )
        except TimeoutError:
            raise
        except OSError as exc:
            raise CannotConnect(str(exc) or type(exc).__name__) from None
        return response

    def _reusable(self, key: tuple[str, str, int]) -> Response | None:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            response = idle.pop()
            if response.usable and now - response.idle_since < _KEEPALIVE_S:
                return response
            response.close()
        return None

    async def post(self, url: str, headers: bytes, body: bytes, deadline: float) -> Response:
        """Send the request (``headers``: header lines, each ending in CRLF, without Host and
        Content-Length); return once the answer's status and headers are in (by ``deadline``,
        loop time). The caller reads the body and then calls :meth:`release`."""
        key, start = self._target(url)
        head = b"%s%sContent-Length: %d\r\n\r\n" % (start, headers, len(body))
        for attempt in (0, 1):
            response = self._reusable(key) if attempt == 0 else None
            reused = response is not None
            if response is None:
                response = await self._connect(key, deadline)
            try:
                response.send(head, body)
                await response.wait_headers(deadline)
            except CannotConnect:
                response.close()
                if reused and not response.received:
                    continue  # the server had closed it while it was idle: once more on a new one
                raise
            except BaseException:
                response.close()
                raise
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    def release(self, key_url: str, response: Response) -> None:
        """Keep the connection for the next call if its answer was read whole, else close it."""
        if response.complete and response.keep_alive and response.usable and response.error is None:
            response.idle_since = time.monotonic()
            self._idle.setdefault(self._target(key_url)[0], []).append(response)
        else:
            response.close()

    async def close(self) -> None:
        for idle in self._idle.values():
            for response in idle:
                response.close()
        self._idle.clear()
