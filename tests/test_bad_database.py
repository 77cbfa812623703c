"""Databases that are locked, full or read-only: clear errors, nothing lost, the server stays up."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ServerProcess, http_client

from memtap.adapters.builtin import BuiltinBackend
from memtap.errors import BackendError
from memtap.trace.store import TraceStore

pytestmark = pytest.mark.anyio


async def test_a_locked_database_is_a_tool_error_and_the_call_is_still_recorded(
    start_http_server: Callable[..., ServerProcess],
) -> None:
    server = start_http_server(env={"MEMTAP_SQLITE_BUSY_TIMEOUT_MS": "200"})
    async with http_client(server.url) as client:
        blocker = sqlite3.connect(server.db, isolation_level=None, timeout=0)
        blocker.execute("BEGIN EXCLUSIVE")
        try:
            locked = await client.call_tool("memory_add", {"content": "while locked"})
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        after = await client.call_tool("memory_add", {"content": "after the lock"})
    assert locked.is_error and "is locked by another process" in locked.content[0].text  # type: ignore[union-attr]
    assert not after.is_error
    assert server.stop() == 0
    store = TraceStore(server.db)
    events = store.list_events()
    store.close()
    assert [(e.status, e.arguments["content"]) for e in events] == [
        ("error", "while locked"),
        ("ok", "after the lock"),
    ]


async def test_a_full_database_is_a_clear_backend_error_and_keeps_what_it_had(db_path: Path) -> None:
    backend = BuiltinBackend(db_path)
    kept = (await backend.add("u", "kept")).value["id"]
    pages = backend.conn.execute("PRAGMA page_count").fetchone()[0]
    backend.conn.execute(f"PRAGMA max_page_count = {pages}")  # SQLite's own 'database or disk is full'
    with pytest.raises(BackendError, match=r"the disk holding .* is full"):
        await backend.add("u", "x" * 200_000)
    backend.conn.execute("PRAGMA max_page_count = 1073741823")
    assert [m["id"] for m in (await backend.list("u")).value["items"]] == [kept]
    assert (await backend.add("u", "room again")).effects != []
    await backend.close()


def _as_plain_user(*args: str) -> subprocess.CompletedProcess[str]:
    """memtap as root without the capabilities that override file permissions
    (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH): file modes hold for it as for any user. Unlike
    switching to another user, it can still run this checkout's interpreter and code, wherever
    the checkout lies (a private ``mktemp -d`` folder included)."""
    return subprocess.run(
        ["setpriv", "--bounding-set=-dac_override,-dac_read_search", sys.executable, "-m", "memtap", *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.fixture
def shared_folder(tmp_path: Path) -> Path:
    """A folder for the files whose modes the plain-user memtap meets."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run memtap without root's permission overrides")
    return tmp_path


@pytest.fixture
def read_only_trace(shared_folder: Path) -> Path:
    path = shared_folder / "trace.db"
    TraceStore(path).close()
    path.chmod(0o444)
    return path


def test_a_read_only_database_can_still_be_read_but_not_served(read_only_trace: Path) -> None:
    listed = _as_plain_user("trace", "list", "--db", str(read_only_trace), "--json")
    assert listed.returncode == 0, listed.stderr
    served = _as_plain_user("serve", "--http", "127.0.0.1:0", "--db", str(read_only_trace))
    assert served.returncode == 2
    assert (
        served.stderr.strip()
        == f"memtap: error: database {read_only_trace} is read-only (no write permission)"
    )


def test_a_database_in_a_folder_the_user_cannot_enter_is_one_clear_line(shared_folder: Path) -> None:
    private = shared_folder / "private"
    private.mkdir()
    TraceStore(private / "trace.db").close()
    private.chmod(0o000)  # its owner too needs the mode's permission to enter it
    result = _as_plain_user("trace", "list", "--db", str(private / "trace.db"))
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == f"memtap: error: cannot access trace database {private}/trace.db: Permission denied"
    )
