"""Live detection and ``memtap purge``: a purge of a namespace that live detection has already
examined leaves nothing of it in the detectors' state either (a later finding quotes none of it),
and findings worked out from events read before a purge are not stored after it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import http_client, meta
from findings_helpers import settled_findings

from memtap.errors import StoreError
from memtap.findings.model import Finding, Severity
from memtap.findings.storage import PurgedMeanwhile, list_findings, purge_mark, save_findings
from memtap.trace.store import TraceStore

pytestmark = pytest.mark.anyio

MARKER = "ZEBRAFINCH-4417"
OLD = f"{MARKER} alice keeps her spare key under the blue pot by the door"
NEW = "alice keeps her spare key under the blue pot by the door"  # near-equal to OLD (10 of 11 words)


def _purge(db: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "memtap", "purge", "--db", str(db), "--namespace", "alice", "--by", "dpo"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def _bytes_of(db: Path, needle: str) -> dict[str, int]:
    found = {p.name: p.read_bytes().count(needle.encode()) for p in db.parent.glob(db.name + "*")}
    return {name: n for name, n in found.items() if n}


async def _add(url: str, content: str) -> None:
    async with http_client(url, {"X-Memtap-Namespace": "alice"}) as client:
        result = await client.call_tool("memory_add", {"content": content}, meta=meta(session="s1"))
        assert not result.is_error, result


async def test_after_a_purge_live_detection_quotes_nothing_it_removed(serve_memtap: Any) -> None:
    served = serve_memtap()
    url = f"http://127.0.0.1:{served.port}/mcp"
    await _add(url, OLD)
    settled_findings(served)  # the detectors have seen it: their state holds OLD
    _purge(served.db)
    assert _bytes_of(served.db, MARKER) == {}

    await _add(url, NEW)  # near-equal to what the detectors saw before the purge
    found = settled_findings(served)

    # Before the state was worked out again from the purged trace, this was a `duplicate` finding
    # quoting OLD (its `duplicate_of`), stored after the purge.
    assert [f for f in found if f.kind == "duplicate"] == []
    assert all(MARKER not in repr(f.as_dict()) for f in found)
    assert _bytes_of(served.db, MARKER) == {}


def test_findings_read_before_a_purge_are_not_stored_after_it(tmp_path: Path) -> None:
    store = TraceStore(tmp_path / "t.db")
    try:
        mark = purge_mark(store.db)
        store.db.conn.execute(
            "INSERT INTO purge_receipts (purge_id, purged_at, purged_by, scope, backend, item_id, namespace,"
            " versions, contents) VALUES ('p1', 'now', 'dpo', 'namespace', 'builtin', 'mem_1', 'alice', 1, '[]')"
        )
        store.db.conn.commit()
        finding = Finding(
            kind="duplicate",
            severity=Severity.LOW,
            summary=f"quotes {MARKER}",
            event_id="e1",
            namespace="alice",
        )
        with pytest.raises(PurgedMeanwhile) as raised:
            save_findings(store.db, [finding], read_at_purge=mark)
        assert isinstance(raised.value, StoreError)
        assert list_findings(store.db) == []
        # Taken after the purge, the mark lets them in.
        assert [
            f.summary for f in save_findings(store.db, [finding], read_at_purge=purge_mark(store.db))
        ] == [f"quotes {MARKER}"]
    finally:
        store.close()
