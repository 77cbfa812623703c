"""Storing findings: each kept once (whether found twice in one batch or stored by an earlier
check), every finding given an id and a time, the stored rows read back as they were found."""

from __future__ import annotations

from pathlib import Path

from memtap.findings.model import Finding, Severity
from memtap.findings.rows import finding_columns
from memtap.findings.storage import list_findings, save_findings
from memtap.trace.store import TraceStore


def _finding(event: str, item: str, summary: str = "kept twice") -> Finding:
    return Finding(
        kind="duplicate",
        severity=Severity.LOW,
        summary=summary,
        event_id=event,
        namespace="alice",
        event_ids=[event],
        item_ids=[item, "mem_b"],
        evidence={"content": "Café notes ☕", "count": 2},
    )


def test_a_finding_found_twice_is_stored_once_and_a_second_save_stores_nothing(tmp_path: Path) -> None:
    store = TraceStore(tmp_path / "t.db")
    try:
        batch = [_finding("E1", "mem_a"), _finding("E1", "mem_a"), _finding("E2", "mem_a")]
        fresh = save_findings(store.db, batch)
        assert fresh == [batch[0], batch[2]]
        assert all(f.id and f.created_at for f in batch)  # every finding, stored or not, has them
        again = [_finding("E2", "mem_a"), _finding("E3", "mem_c", "new")]
        fresh = save_findings(store.db, again, [finding_columns(f) for f in again])  # columns given
        assert fresh == [again[1]] and again[0].id is not None
        stored = list_findings(store.db)
        assert [(f.event_id, f.summary) for f in stored] == [
            ("E1", "kept twice"),
            ("E2", "kept twice"),
            ("E3", "new"),
        ]
        assert stored[0].as_dict() == batch[0].as_dict()  # evidence, ids, severity read back as found
    finally:
        store.close()
