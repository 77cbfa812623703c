"""The secrets check reads what a live writer has not checkpointed yet, and refuses to pass on
the main file alone when the WAL it expects is missing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from secrets_check import assert_absent, found_in


def test_a_secret_only_in_the_wal_is_found_and_a_missing_wal_fails(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=wal")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE t (v TEXT)")
    conn.execute("INSERT INTO t VALUES ('sk-only-in-the-wal')")
    conn.commit()
    try:
        assert b"sk-only-in-the-wal" not in db.read_bytes()  # what a main-file-only check saw
        with pytest.raises(AssertionError, match=r"stored in t\.db-wal$"):
            assert_absent(db, "sk-only-in-the-wal", writer_open=True)
        assert found_in(db, {"key": "sk-only-in-the-wal", "other": "sk-never"}, writer_open=True) == ["key"]
    finally:
        conn.close()  # the last close checkpoints and removes the WAL
    assert not db.with_name("t.db-wal").exists()
    with pytest.raises(AssertionError, match="missing while the writer is open"):
        assert_absent(db, "sk-never", writer_open=True)
    with pytest.raises(AssertionError, match=r"stored in t\.db$"):
        assert_absent(db, "sk-only-in-the-wal", writer_open=False)
