"""The memtap under test: a child process (to SIGKILL), or the app in a thread of this process
(to reach its SQLite connections and make the disk full or the database read-only mid-load)."""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memtap.probes.targets._server import MemtapServer

__all__ = ["InProcessServer", "MemtapServer", "connections_of"]


class InProcessServer:
    """``memtap serve --http`` as an app served by uvicorn in a thread of this process."""

    def __init__(self, db: Path, *, durable: bool = False) -> None:
        from memtap.proxy.runtime import Settings

        self.settings = Settings(db=db, durable=durable)
        self.port = 0
        self.runtime: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._server: Any = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="memtap-harness-server", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def start(self) -> InProcessServer:
        self._thread.start()
        if not self._ready.wait(60):
            raise RuntimeError("memtap did not start within 60 s")
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        import uvicorn

        from memtap.proxy.app import create_app
        from memtap.proxy.runtime import Runtime

        self.loop = asyncio.get_running_loop()
        self.runtime = Runtime(self.settings)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            create_app(self.runtime), log_level="critical", lifespan="on", access_log=False
        )
        self._server = uvicorn.Server(config)
        task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.005)
        self._ready.set()
        try:
            await task
        finally:
            await self.runtime.aclose()

    def run_on_loop(self, statement: str) -> None:
        """Run ``statement`` on both of the server's connections, each where it is used (the
        backend's on its own SQLite thread when it has one, else on the event loop);
        ``{pages}`` in it is that connection's current ``page_count``."""
        assert self.loop is not None
        backend, recorder = connections_of(self.runtime)

        def run(conn: sqlite3.Connection) -> None:
            pages = conn.execute("PRAGMA page_count").fetchone()[0]
            conn.execute(statement.format(pages=pages))

        async def on_backend() -> None:
            thread = getattr(self.runtime.backend, "_thread", None)
            if thread is not None:
                await thread.run(lambda: run(backend))
            else:
                run(backend)

        asyncio.run_coroutine_threadsafe(on_backend(), self.loop).result(10)
        run(recorder)  # serialised by SQLite's own mutex against the writer thread

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        self._thread.join(60)


def connections_of(runtime: Any) -> tuple[sqlite3.Connection, sqlite3.Connection]:
    """The builtin backend's connection and the recorder's (the harness reaches inside on purpose)."""
    return runtime.backend.conn, runtime.recorder._store.db.conn


def child(db: Path, extra: Sequence[str] = (), command: str = "serve") -> MemtapServer:
    return MemtapServer(db, extra=extra, command=command)
