"""The ``findings`` table (migration m016): saving findings once, listing and reading them back."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlite_utils import Database

from memtap.errors import StoreError
from memtap.findings.model import Finding, Severity
from memtap.findings.rows import KEY as _KEY
from memtap.findings.rows import Columns, finding_columns
from memtap.ids import new_ids
from memtap.trace.models import utc_now
from memtap.trace.store import immediate_transaction

__all__ = ["PurgedMeanwhile", "get_finding", "list_findings", "purge_mark", "save_findings"]

_INSERT = (
    "INSERT OR IGNORE INTO findings (kind, severity, severity_rank, summary, event_id, namespace, run_id,"
    " episode, session, turn, event_ids, item_ids, evidence, detector_version, dedupe, id, created_at)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


class PurgedMeanwhile(StoreError):
    """``memtap purge`` ran after the findings' events were read: they may quote what it removed,
    so they are not stored (the caller works them out again from the purged trace)."""


def purge_mark(db: Database) -> int:
    """Where the database's purge receipts end (their highest id; 0 for none): a purge since a
    reader took the mark moves it."""
    row = db.conn.execute("SELECT max(id) FROM purge_receipts").fetchone()
    return int(row[0] or 0)


def save_findings(
    db: Database,
    findings: Sequence[Finding],
    columns: Sequence[Columns] | None = None,
    *,
    read_at_purge: int | None = None,
) -> list[Finding]:
    """Insert findings not stored yet (the same finding found again is kept once); returns the new ones,
    with their ``id`` and ``created_at`` filled (every finding gets them, stored or not).

    ``columns``: each finding's ``finding_columns``, when they were worked out already.
    ``read_at_purge``: the ``purge_mark`` taken before their events were read; when a purge has
    moved it since, nothing is stored and :class:`PurgedMeanwhile` is raised (checked inside the
    write transaction, so a purge cannot come between the check and the insert)."""
    if not findings:
        return []
    if columns is None:
        columns = [finding_columns(finding) for finding in findings]
    fresh: list[Finding] = []
    rows: list[Columns] = []
    try:
        with _big_cache(db, len(findings)), immediate_transaction(db):
            if read_at_purge is not None and purge_mark(db) != read_at_purge:
                raise PurgedMeanwhile("a purge ran after the events these findings come from were read")
            taken = _stored_keys(db, [cols[_KEY] for cols in columns])
            ids = iter(new_ids(sum(1 for finding in findings if not finding.id)))
            now = utc_now().isoformat()  # stored together: one time (a clock reading each cost 3 us)
            for finding, cols in zip(findings, columns, strict=True):
                finding.id = finding.id or next(ids)
                finding.created_at = finding.created_at or now
                if cols[_KEY] in taken:
                    continue  # stored already, or earlier in this batch
                taken.add(cols[_KEY])
                rows.append((*cols, finding.id, finding.created_at))
                fresh.append(finding)
            # One statement for the batch; OR IGNORE still guards the unique id and key.
            stored = db.conn.executemany(_INSERT, rows).rowcount
            if stored != len(rows):
                kept = _stored_ids(db, rows)
                fresh = [f for f, row in zip(fresh, rows, strict=True) if (row[_KEY], row[-2]) in kept]
    except sqlite3.Error as exc:
        raise StoreError(f"findings could not be stored: {exc}") from exc
    return fresh


_BIG_BATCH = 10_000  # findings stored at once (``memtap check``) for which the page cache is raised
_BIG_CACHE_KIB = 262_144


@contextmanager
def _big_cache(db: Database, count: int) -> Iterator[None]:
    """A page cache of up to 256 MiB on the connection while a big batch is stored: each row goes
    into seven b-trees (the table, the id, the dedupe key and five indexes), two of them at random
    places (ids and keys), and the default 2 MiB cache read their pages back from the file again and
    again (115,054 findings: 3.1 to 3.5 s of CPU, 2.5 s with the bigger cache). Set back after."""
    if count < _BIG_BATCH:
        yield
        return
    (before,) = db.conn.execute("PRAGMA cache_size").fetchone()
    db.conn.execute(f"PRAGMA cache_size = -{_BIG_CACHE_KIB}")
    try:
        yield
    finally:
        db.conn.execute(f"PRAGMA cache_size = {int(before)}")


def _stored_keys(db: Database, keys: list[str]) -> set[str]:
    """Which of the dedupe ``keys`` the findings table holds already."""
    taken: set[str] = set()
    if db.conn.execute("SELECT 1 FROM findings LIMIT 1").fetchone() is None:
        return taken
    for at in range(0, len(keys), 500):
        chunk = keys[at : at + 500]
        marks = ",".join("?" * len(chunk))
        taken.update(
            key for (key,) in db.conn.execute(f"SELECT dedupe FROM findings WHERE dedupe IN ({marks})", chunk)
        )
    return taken


def _stored_ids(db: Database, rows: list[Columns]) -> set[tuple[str, str]]:
    """The (dedupe key, id) pairs of ``rows`` the findings table holds (a row can be ignored for its
    id alone only if two ids collide)."""
    kept: set[tuple[str, str]] = set()
    keys = [row[_KEY] for row in rows]
    for at in range(0, len(keys), 500):
        chunk = keys[at : at + 500]
        marks = ",".join("?" * len(chunk))
        kept.update(db.conn.execute(f"SELECT dedupe, id FROM findings WHERE dedupe IN ({marks})", chunk))
    return kept


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
