"""The durable journal: a preallocated file beside the trace database for lone durable events.

In ``--durable`` mode a caller that records one event on its own would otherwise wait for a
whole SQLite commit with ``synchronous=FULL`` (13 b-trees, ~16 WAL pages and an fdatasync).
The recorder instead appends the event's JSON to ``<db>.journal`` with one ``pwrite`` and one
``fdatasync`` and answers the caller; the events are inserted into the database later, many
in one commit (see :mod:`memtap.trace.writer`), and the journal is reset once that commit is
durable.

The file is created at its full size, zero-filled and synced once (its folder too), so a
later append never changes the file's size: ``fdatasync`` then has no metadata to write, and
a full disk cannot make an append fail. Layout::

    header (4096 bytes): magic b"MEMTAPJ\\0", format version (u32), cycle id (u64)
    records from 4096:   length (u32), cycle id (u64), CRC32 (u32), payload (the event's JSON)

A record counts only when its cycle id is the header's and its CRC matches; the first that
does not (a torn write, zeros, a record of an earlier cycle) ends the scan. Resetting writes a
new random cycle id into the header and zeros over the records, so no event's content stays in
the file after it is in the database. The file has the database's permissions, and a process
using it holds an exclusive ``flock`` on it: a second process on the same database writes
durable events straight to the database, and ``memtap purge`` can tell a live writer's
journal from a dead one's.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
import struct
import time
import zlib
from collections.abc import Sequence
from pathlib import Path

from memtap.errors import StoreError
from memtap.trace.models import TraceEvent
from memtap.trace.store import TraceStore

__all__ = ["JOURNAL_BYTES", "Journal", "JournalBusy", "journal_path", "peek", "recover", "settle_journal"]

log = logging.getLogger("memtap.recorder")

MAGIC = b"MEMTAPJ\x00"
VERSION = 1
_HEADER = struct.Struct("<8sIQ")
HEADER_BYTES = 4096
_RECORD = struct.Struct("<IQI")  # payload length, cycle id, CRC32 of (length, cycle id, payload)
JOURNAL_BYTES = 4 * 1024 * 1024
_ZEROS = bytes(1024 * 1024)


class JournalBusy(StoreError):
    """A live memtap process holds the journal."""


def journal_path(db: str | Path) -> Path:
    db = Path(db)
    return db.with_name(db.name + ".journal")


def _crc(head: bytes, payload: bytes) -> int:
    return zlib.crc32(payload, zlib.crc32(head[:12]))


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system lets a folder be synced
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class Journal:
    """An open journal file, locked by this process."""

    def __init__(self, path: Path, fd: int, size: int) -> None:
        self.path = path
        self.fd = fd
        self.size = size
        self.cycle = 0
        self.tail = HEADER_BYTES  # where the next record goes
        self.used = HEADER_BYTES  # the end of what may hold records (zeroed on reset)

    @classmethod
    def open(
        cls, path: Path, *, create: bool, size: int = JOURNAL_BYTES, mode_of: Path | None = None
    ) -> Journal:
        """Open and lock ``path`` (creating it if ``create``); the records are left as found.

        Raises :class:`JournalBusy` when another process holds it, ``FileNotFoundError`` when it
        does not exist and ``create`` is false, :class:`StoreError` for a file this memtap cannot
        read (another format or a newer version), and ``OSError`` for anything else.
        """
        mode = 0o600
        if mode_of is not None:
            with contextlib.suppress(OSError):
                mode = os.stat(mode_of).st_mode & 0o666
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0), mode)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise JournalBusy(f"the durable journal {path} is in use by a running memtap") from None
            journal = cls(path, fd, max(size, HEADER_BYTES * 2))
            journal._read_header()
        except BaseException:
            os.close(fd)
            raise
        return journal

    def _read_header(self) -> None:
        head = os.pread(self.fd, _HEADER.size, 0)
        if len(head) < _HEADER.size or head == bytes(_HEADER.size):
            return  # new (or never written): no records
        magic, version, cycle = _HEADER.unpack(head)
        if magic != MAGIC:
            raise StoreError(f"{self.path} is not a memtap durable journal; move it away to start")
        if version != VERSION:
            raise StoreError(
                f"the durable journal {self.path} has format version {version}, which this memtap "
                f"(version {VERSION}) cannot read; it may hold acknowledged events: recover it with the "
                "memtap that wrote it, or move it away to start"
            )
        self.cycle = cycle

    def scan(self) -> list[bytes]:
        """The payloads of the valid records of the current cycle, in order."""
        if self.cycle == 0:
            return []
        end = os.fstat(self.fd).st_size
        data = os.pread(self.fd, end - HEADER_BYTES, HEADER_BYTES) if end > HEADER_BYTES else b""
        found: list[bytes] = []
        at = 0
        while at + _RECORD.size <= len(data):
            head = data[at : at + _RECORD.size]
            length, cycle, crc = _RECORD.unpack(head)
            start = at + _RECORD.size
            if cycle != self.cycle or length == 0 or start + length > len(data):
                break
            payload = data[start : start + length]
            if _crc(head, payload) != crc:
                break
            found.append(payload)
            at = start + length
        self.tail = self.used = HEADER_BYTES + at
        return found

    def fits(self, payloads: Sequence[bytes]) -> bool:
        need = sum(_RECORD.size + len(p) for p in payloads)
        return self.tail + need <= self.size

    def append(self, payloads: Sequence[bytes]) -> None:
        """Write ``payloads`` as records after the last one and make them durable (``fdatasync``)."""
        parts = []
        for payload in payloads:
            head = _RECORD.pack(len(payload), self.cycle, 0)
            parts.append(_RECORD.pack(len(payload), self.cycle, _crc(head, payload)))
            parts.append(payload)
        data = b"".join(parts)
        written = os.pwrite(self.fd, data, self.tail)
        if written != len(data):
            raise OSError(f"short write to {self.path}: {written} of {len(data)} bytes")
        self.tail += written
        self.used = max(self.used, self.tail)
        os.fdatasync(self.fd)

    def reset(self, *, sync: bool = False) -> None:
        """Start a new cycle: every record written so far becomes invalid, and its bytes zeros.

        Needs no sync when every record is in the database: one of the old cycle that survives a
        crash names an event the database already holds, which recovery skips, and the next
        append's ``fdatasync`` makes the new header durable before a record of the new cycle
        counts. ``sync`` when some were spilled instead (recovery would record them twice)."""
        self._zero(HEADER_BYTES, self.used)
        self._new_cycle()
        if sync:
            os.fdatasync(self.fd)

    def wipe(self) -> None:
        """Zero the whole file at its full size, write a new cycle's header, and sync (file and folder)."""
        if os.fstat(self.fd).st_size != self.size:
            os.ftruncate(self.fd, self.size)
        self._zero(HEADER_BYTES, self.size)
        self._new_cycle()
        os.fsync(self.fd)
        _fsync_dir(self.path.parent)

    def _zero(self, start: int, end: int) -> None:
        while start < end:
            n = min(len(_ZEROS), end - start)
            os.pwrite(self.fd, _ZEROS[:n] if n < len(_ZEROS) else _ZEROS, start)
            start += n

    def _new_cycle(self) -> None:
        cycle = self.cycle
        while cycle in (0, self.cycle):
            cycle = secrets.randbits(64)
        os.pwrite(self.fd, _HEADER.pack(MAGIC, VERSION, cycle).ljust(HEADER_BYTES, b"\0"), 0)
        self.cycle = cycle
        self.tail = self.used = HEADER_BYTES

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # releases the lock
            self.fd = -1


def recover(store: TraceStore, journal: Journal) -> int:
    """Insert the journal's events that ``store`` lacks, in order, in one durable commit; how many.

    Raises :class:`StoreError` when the database refuses them (the journal is left as it is)."""
    payloads = journal.scan()
    if not payloads:
        return 0
    try:
        events = [TraceEvent.model_validate_json(p) for p in payloads]
    except ValueError as exc:  # a valid CRC over a payload this memtap cannot read: keep it for a person
        raise StoreError(
            f"the durable journal {journal.path} holds an event this memtap cannot read: {exc}"
        ) from exc
    have: set[str] = set()
    ids = [e.id for e in events]
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        rows = store.db.conn.execute(
            f"SELECT id FROM events WHERE id IN ({','.join('?' * len(chunk))})", chunk
        )
        have.update(row[0] for row in rows)
    missing, seen = [], set(have)
    for event in events:
        if event.id not in seen:
            seen.add(event.id)
            missing.append(event)
    store.write_events(missing)
    return len(missing)


def settle_journal(db: Path, *, wait_s: float = 10.0) -> int:
    """Before a purge: put every event of a journal no process holds into the database (returned:
    how many), and zero the whole file. A journal a running memtap holds is waited on until its
    writer has put its records into the database (it does so within milliseconds of going idle);
    :class:`JournalBusy` if that does not happen within ``wait_s``."""
    path = journal_path(db)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            journal = Journal.open(path, create=False)
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise StoreError(f"cannot read the durable journal {path}: {exc}; nothing was purged") from exc
        except JournalBusy:
            if not peek(path):
                return 0  # the live writer zeroes each record once it is in the database
            if time.monotonic() > deadline:
                raise JournalBusy(
                    f"the durable journal {path} still holds events a running memtap has not yet put "
                    f"into the database after {wait_s:.0f} s; nothing was purged; try again"
                ) from None
            time.sleep(0.05)
            continue
        try:
            store = TraceStore(db, durable=True)
            try:
                found = recover(store, journal)
            finally:
                store.close()
            journal.wipe()
        finally:
            journal.close()
        if found:
            log.warning("put %d events from the durable journal %s into %s before purging", found, path, db)
        return found


def peek(path: Path) -> list[TraceEvent]:
    """The events in a journal's valid records now, read without its lock (another process may hold it)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return []
    try:
        journal = Journal(path, fd, JOURNAL_BYTES)
        journal._read_header()
        return [TraceEvent.model_validate_json(p) for p in journal.scan()]
    finally:
        os.close(fd)
