"""The memtap under test: a child process (to SIGKILL), or the app in a thread of this process
(to reach its SQLite connections and make the disk full or the database read-only mid-load)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memtap.harness.inprocess import InProcessServer
from memtap.probes.targets._server import MemtapServer

__all__ = ["InProcessServer", "MemtapServer", "connections_of", "in_process", "run_on_connections"]


def in_process(db: Path, *, durable: bool = False) -> InProcessServer:
    """``memtap serve --http`` on ``db`` in a thread of this process (not started)."""
    from memtap.proxy.runtime import Settings

    settings = Settings(db=db, durable=durable)
    return InProcessServer(settings, name="memtap-harness-server", log_level="critical")


def run_on_connections(server: InProcessServer, statement: str) -> None:
    """Run ``statement`` on both of the server's connections, each where it is used (the
    backend's on its own SQLite thread when it has one, else on the event loop);
    ``{pages}`` in it is that connection's current ``page_count``."""
    assert server.loop is not None and server.runtime is not None
    runtime = server.runtime
    backend, recorder = connections_of(runtime)

    def run(conn: sqlite3.Connection) -> None:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(statement.format(pages=pages))

    async def on_backend() -> None:
        thread = getattr(runtime.backend, "_thread", None)
        if thread is not None:
            await thread.run(lambda: run(backend))
        else:
            run(backend)

    asyncio.run_coroutine_threadsafe(on_backend(), server.loop).result(10)
    run(recorder)  # serialised by SQLite's own mutex against the writer thread


def connections_of(runtime: Any) -> tuple[sqlite3.Connection, sqlite3.Connection]:
    """The builtin backend's connection and the recorder's (the harness reaches inside on purpose)."""
    return runtime.backend.conn, runtime.recorder._store.db.conn


def child(db: Path, extra: Sequence[str] = (), command: str = "serve") -> MemtapServer:
    return MemtapServer(db, extra=extra, command=command)
