"""Reading a wrapped server's own SQLite store, read-only, off the event loop.

Used by the taps of servers that keep their memory in a SQLite file
(:mod:`memtap.adapters.libsql_server`, :mod:`memtap.adapters.keeper_server`). One
connection per store that refuses every change (``PRAGMA query_only``: memtap can never
write the server's data), opened on first use and shared by the worker threads the reads run on (under a
lock: one read at a time). Each read is its own statement outside any transaction, so
it sees everything the server has committed (rollback journal or WAL alike).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import anyio

__all__ = ["SqliteStore", "placeholders"]

T = TypeVar("T")


def placeholders(count: int) -> str:
    """``?, ?, ...`` for an ``IN (...)`` list of ``count`` values."""
    return ", ".join("?" * count)


class SqliteStore:
    """A server's SQLite file, read-only; ``read`` runs a function on its connection in a thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _connection(self) -> sqlite3.Connection | None:
        if self._conn is None:
            if not self.path.exists():
                return None  # the server creates it on its first start; nothing is stored yet
            # Not ``mode=ro``: a read-only connection to a WAL database cannot use the shared
            # wal-index and reads the whole WAL again at every transaction (milliseconds per read).
            # ``query_only`` refuses every change instead; ``mode=rw`` never creates the file.
            conn = sqlite3.connect(
                f"file:{self.path}?mode=rw", uri=True, check_same_thread=False, isolation_level=None
            )
            conn.execute("PRAGMA query_only = ON")
            conn.execute("PRAGMA busy_timeout = 5000")  # the server may hold its write lock a moment
            self._conn = conn
        return self._conn

    def read_now(self, query: Callable[[sqlite3.Connection], T], empty: T) -> T:
        """``query`` on the connection, in this thread; ``empty`` while the file does not exist.

        Raises ``OSError`` when the file cannot be read (``sqlite3.Error`` is turned into one).
        """
        with self._lock:
            try:
                conn = self._connection()
                return empty if conn is None else query(conn)
            except sqlite3.Error as exc:
                self._close()
                raise OSError(f"cannot read {self.path}: {exc}") from exc

    async def read(self, query: Callable[[sqlite3.Connection], T], empty: T) -> T:
        """``query`` on the connection in a worker thread (SQLite file reads stay off the event loop)."""
        return await anyio.to_thread.run_sync(self.read_now, query, empty)

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        with self._lock:
            self._close()
