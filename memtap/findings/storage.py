"""The ``findings`` table (migration m016): saving findings once, listing and reading them back."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from sqlite_utils import Database

from memtap.errors import StoreError
from memtap.findings.model import Finding, Severity
from memtap.ids import new_id
from memtap.trace.models import utc_now
from memtap.trace.store import immediate_transaction

__all__ = ["get_finding", "list_findings", "save_findings"]

_INSERT = (
    "INSERT OR IGNORE INTO findings (id, kind, severity, severity_rank, summary, event_id, namespace, run_id,"
    " episode, session, turn, event_ids, item_ids, evidence, detector_version, created_at, dedupe)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _dedupe(finding: Finding) -> str:
    key = json.dumps(
        [finding.kind, finding.event_id, sorted(finding.item_ids), finding.summary, finding.detector_version]
    )
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def save_findings(db: Database, findings: Sequence[Finding]) -> list[Finding]:
    """Insert findings not stored yet (the same finding found again is kept once); returns the new ones,
    with their ``id`` and ``created_at`` filled."""
    if not findings:
        return []
    fresh: list[Finding] = []
    try:
        with immediate_transaction(db):
            for finding in findings:
                finding.id = finding.id or new_id()
                finding.created_at = finding.created_at or utc_now().isoformat()
                cursor = db.conn.execute(
                    _INSERT,
                    (
                        finding.id,
                        finding.kind,
                        finding.severity.label,
                        int(finding.severity),
                        finding.summary,
                        finding.event_id,
                        finding.namespace,
                        finding.run,
                        finding.episode,
                        finding.session,
                        finding.turn,
                        json.dumps(finding.event_ids),
                        json.dumps(finding.item_ids),
                        json.dumps(finding.evidence, ensure_ascii=False, default=str),
                        finding.detector_version,
                        finding.created_at,
                        _dedupe(finding),
                    ),
                )
                if cursor.rowcount:
                    fresh.append(finding)
    except sqlite3.Error as exc:
        raise StoreError(f"findings could not be stored: {exc}") from exc
    return fresh


def _from_row(row: dict[str, Any]) -> Finding:
    return Finding(
        id=row["id"],
        kind=row["kind"],
        severity=Severity(row["severity_rank"]),
        summary=row["summary"],
        event_id=row["event_id"],
        namespace=row["namespace"],
        run=row["run_id"],
        episode=row["episode"],
        session=row["session"],
        turn=row["turn"],
        event_ids=json.loads(row["event_ids"]),
        item_ids=json.loads(row["item_ids"]),
        evidence=json.loads(row["evidence"]),
        detector_version=row["detector_version"],
        created_at=row["created_at"],
    )


def list_findings(
    db: Database,
    *,
    kind: str | None = None,
    min_severity: Severity | None = None,
    namespace: str | None = None,
    run: str | None = None,
    since: str | None = None,
    event_id: str | None = None,
    limit: int | None = None,
) -> list[Finding]:
    where: list[str] = []
    args: list[object] = []
    for column, value in (("kind", kind), ("namespace", namespace), ("run_id", run), ("event_id", event_id)):
        if value is not None:
            where.append(f"{column} = ?")
            args.append(value)
    if min_severity is not None:
        where.append("severity_rank >= ?")
        args.append(int(min_severity))
    if since is not None:
        where.append("event_id IN (SELECT id FROM events WHERE started_at >= ?)")
        args.append(since)
    sql = "SELECT * FROM findings"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY event_id, id"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    try:
        return [_from_row(row) for row in db.query(sql, args)]
    except sqlite3.Error as exc:
        raise StoreError(f"findings could not be read: {exc}") from exc


def get_finding(db: Database, finding_id: str) -> Finding | None:
    rows = list(db.query("SELECT * FROM findings WHERE id = ?", [finding_id]))
    if not rows:
        # A prefix, compared as text: '%' and '_' in what the user typed are not wildcards.
        rows = list(
            db.query(
                "SELECT * FROM findings WHERE substr(id, 1, ?) = ? LIMIT 2", [len(finding_id), finding_id]
            )
        )
        if len(rows) != 1:
            return None
    return _from_row(rows[0])
