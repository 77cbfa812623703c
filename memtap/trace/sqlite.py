"""Opening a memtap SQLite file: pragmas, migrations, and clear errors."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from memtap.errors import SchemaTooNew, StoreError

__all__ = ["BUSY_TIMEOUT_MS", "busy_timeout_ms", "describe_sqlite_error", "is_transient", "open_database"]

BUSY_TIMEOUT_MS = 5000


def busy_timeout_ms() -> int:
    """How long a write waits for another process's lock: ``$MEMTAP_SQLITE_BUSY_TIMEOUT_MS`` or 5 s."""
    raw = os.environ.get("MEMTAP_SQLITE_BUSY_TIMEOUT_MS")
    return int(raw) if raw and raw.isdigit() else BUSY_TIMEOUT_MS


def describe_sqlite_error(path: str | Path, exc: sqlite3.Error) -> str:
    """A one-line explanation of a SQLite failure on ``path``."""
    text = str(exc)
    if "readonly" in text or "read-only" in text:
        return f"database {path} is read-only: {text}"
    if "locked" in text or "busy" in text:
        return f"database {path} is locked by another process (waited {busy_timeout_ms()} ms): {text}"
    if "unable to open" in text:
        return f"cannot open database {path}: {text}"
    if "disk is full" in text or "SQLITE_FULL" in text:
        return f"the disk holding {path} is full: {text}"
    if "not a database" in text or "malformed" in text:
        return f"{path} is not a memtap database or is damaged: {text}"
    return f"database {path}: {text}"


_TRANSIENT = ("locked", "busy", "disk is full", "disk i/o error", "unable to open")


def is_transient(exc: sqlite3.Error) -> bool:
    """Whether trying the same statement again later may succeed."""
    return isinstance(exc, sqlite3.OperationalError) and any(word in str(exc).lower() for word in _TRANSIENT)


def _open_read_only(path: Path, migrations: Migrations) -> Database:
    """Open a file this process may not write: ``mode=ro``, or ``immutable=1`` when SQLite cannot
    make the WAL index beside it (nobody can be writing a file no one may write)."""
    conn: sqlite3.Connection | None = None
    for query in ("mode=ro", "immutable=1"):
        try:
            conn = sqlite3.connect(f"file:{path}?{query}", uri=True, isolation_level=None)
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            break
        except sqlite3.Error as exc:
            last = exc
            conn = None
    if conn is None:
        raise StoreError(describe_sqlite_error(path, last))
    db = Database(conn)
    known = {m.name for m in migrations._migrations}
    applied = {m.name for m in migrations.applied(db)}
    if applied - known:
        raise SchemaTooNew(
            f"database {path} was written by a newer memtap (unknown migrations in {migrations.name}: "
            f"{', '.join(sorted(applied - known))}); upgrade memtap to open it"
        )
    if known - applied:
        raise StoreError(f"database {path} is read-only and needs migrating by this memtap first")
    return db


def open_database(
    path: str | Path,
    migrations: Migrations,
    *,
    durable: bool = False,
    check_same_thread: bool = True,
    read_only_ok: bool = False,
) -> Database:
    """Open (creating if needed) a SQLite file in WAL mode and apply ``migrations``.

    Raises :class:`SchemaTooNew` when the file holds migrations of this set that
    this memtap does not know, and :class:`StoreError` for anything else that
    stops the file from being used, naming the path and the cause. With
    ``read_only_ok``, a file this process may not write is opened for reading.
    """
    path = Path(path)
    if str(path) != ":memory:":
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the folder for database {path}: {exc}") from exc
        try:
            exists = path.exists()
        except OSError as exc:
            raise StoreError(f"cannot access database {path}: {exc.strerror}") from exc
        if exists and not os.access(path, os.W_OK):
            if read_only_ok:
                return _open_read_only(path, migrations)
            raise StoreError(f"database {path} is read-only (no write permission)")
    try:
        conn = sqlite3.connect(str(path), check_same_thread=check_same_thread, isolation_level=None)
        conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms()}")
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
