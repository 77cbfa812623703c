"""Checks that no secret (a key, a token, a private key's bytes) reached a trace database, on
disk: the main file and its write-ahead log (and shared-memory index). A recent write lives in the
``-wal`` file until a checkpoint copies it into the main file, so a check that reads only the
main file while a writer is open can miss exactly the event it means to check."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

__all__ = ["assert_absent", "database_files", "found_in"]

SUFFIXES = ("", "-wal", "-shm", "-journal")


def database_files(db: Path, *, writer_open: bool) -> dict[Path, bytes]:
    """The bytes of ``db`` and of each of its ``-wal``/``-shm``/``-journal`` files present.
    ``writer_open``: a connection still has the file open in WAL mode, so its ``-wal`` file must
    exist (a clean close checkpoints it into the main file and removes it)."""
    assert db.is_file(), f"no database file {db}"
    wal = db.with_name(db.name + "-wal")
    assert wal.is_file() or not writer_open, (
        f"{wal} is missing while the writer is open: the check would read the main file only"
    )
    files = (db.with_name(db.name + suffix) for suffix in SUFFIXES)
    return {path: path.read_bytes() for path in files if path.is_file()}


def found_in(
    db: Path, secrets: Mapping[str, str | bytes], *, writer_open: bool, also: bytes = b""
) -> list[str]:
    """The names of the ``secrets`` found in ``db``'s files (or in ``also``, e.g. a log)."""
    stored = [*database_files(db, writer_open=writer_open).values(), also]
    wanted = {name: s.encode() if isinstance(s, str) else s for name, s in secrets.items()}
    assert all(wanted.values()), "an empty secret is found everywhere"
    return [name for name, secret in wanted.items() if any(secret in blob for blob in stored)]


def assert_absent(db: Path, *secrets: str | bytes, writer_open: bool) -> None:
    """Fail, naming the secret and the file, if any of ``secrets`` is stored in ``db``'s files."""
    assert secrets, "no secret to look for"
    for path, blob in database_files(db, writer_open=writer_open).items():
        for secret in secrets:
            raw = secret.encode() if isinstance(secret, str) else secret
            assert raw and raw not in blob, f"secret {secret[:6]!r}… is stored in {path.name}"
