"""Opening a memtap SQLite file: pragmas, migrations, and clear errors."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from memtap.errors import SchemaTooNew, StoreError

__all__ = ["BUSY_TIMEOUT_MS", "describe_sqlite_error", "open_database"]

BUSY_TIMEOUT_MS = 5000


def describe_sqlite_error(path: str | Path, exc: sqlite3.Error) -> str:
    """A one-line explanation of a SQLite failure on ``path``."""
    text = str(exc)
    if "readonly" in text or "read-only" in text:
        return f"database {path} is read-only: {text}"
    if "locked" in text or "busy" in text:
        return f"database {path} is locked by another process (waited {BUSY_TIMEOUT_MS} ms): {text}"
    if "unable to open" in text:
        return f"cannot open database {path}: {text}"
    if "disk is full" in text or "SQLITE_FULL" in text:
        return f"the disk holding {path} is full: {text}"
    if "not a database" in text or "malformed" in text:
        return f"{path} is not a memtap database or is damaged: {text}"
    return f"database {path}: {text}"


def open_database(
    path: str | Path,
    migrations: Migrations,
    *,
    durable: bool = False,
    check_same_thread: bool = True,
) -> Database:
    """Open (creating if needed) a SQLite file in WAL mode and apply ``migrations``.

    Raises :class:`SchemaTooNew` when the file holds migrations of this set that
    this memtap does not know, and :class:`StoreError` for anything else that
    stops the file from being used, naming the path and the cause.
    """
    path = Path(path)
    if str(path) != ":memory:":
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the folder for database {path}: {exc}") from exc
        if path.exists() and not os.access(path, os.W_OK):
            raise StoreError(f"database {path} is read-only (no write permission)")
    try:
        conn = sqlite3.connect(str(path), check_same_thread=check_same_thread, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        db = Database(conn)
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(path) != ":memory:" and str(mode).lower() != "wal":
            raise StoreError(f"database {path} could not be switched to WAL mode (got {mode})")
        conn.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
        conn.execute("PRAGMA foreign_keys = ON")
        known = {m.name for m in migrations._migrations}
        unknown = [m.name for m in migrations.applied(db) if m.name not in known]
        if unknown:
            conn.close()
            raise SchemaTooNew(
                f"database {path} was written by a newer memtap (unknown migrations in "
                f"{migrations.name}: {', '.join(unknown)}); upgrade memtap to open it"
            )
        migrations.apply(db)
    except sqlite3.Error as exc:
        raise StoreError(describe_sqlite_error(path, exc)) from exc
    return db
