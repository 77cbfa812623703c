"""The dashboard's read side: keyset-paginated queries over the trace, on read-only connections.

Every list is one indexed query ``... WHERE key < ? ORDER BY key DESC LIMIT n``; nothing reads a
whole table. Text that is not valid UTF-8 is decoded with replacement characters, never refused.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["EVENT_FILTERS", "LIVE_BATCH", "PAGE", "Reader", "event_summary", "loads"]

PAGE = 50
LIVE_BATCH = 500  # the most events one poll of the live view returns; it polls again at once when full
EVENT_FILTERS = ("op", "namespace", "session", "principal", "upstream", "run_id", "status")
# Word for word the WHERE of the partial index events_status_id (m028): SQLite uses a partial
# index only for a query whose WHERE holds its terms.
NOT_OK_SQL = "status <> 'ok'"
# Word for word the WHERE of the partial index events_denials (migration m021): SQLite uses the
# index only for this exact expression (tests/test_ui_pages.py checks the plan).
DENIAL_SQL = (
    "(status = 'error' AND (error LIKE '%may not %' OR error LIKE '%contradicts%')) "
    "OR gate LIKE 'observe:would-deny%' OR gate LIKE 'enforce:withheld=%'"
)
RELATED = "id, tool, op, status, namespace, principal"  # a linked call's line, and who may see it
Row = dict[str, Any]
Visible = Callable[[Row], bool]
CHUNK = 500  # rows read per query while filling a restricted caller's page of namespaces or runs
CHUNKS = 20  # and at most this many queries per page


def loads(text: str | None) -> Any:
    """A JSON column's value (the text itself when it is not JSON)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _short(text: str | None, n: int = 80) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


def event_summary(event: Row, effects: Sequence[Row]) -> str:
    """What the call did to which item, in one line."""
    if event["status"] != "ok":
        return f"failed: {_short(event['error'], 100)}"
    if not effects:
        return f"{event['tool']} ({event['op']}), no memory changed"
    kinds = [e["kind"] for e in effects]
    if all(k == "retrieve" for k in kinds):
        return f"retrieved {len(effects)} item(s)"
    first = effects[0]
    shown = first["content_after"] if first["kind"] != "delete" else first["content_before"]
    more = f" and {len(effects) - 1} more" if len(effects) > 1 else ""
    return f"{first['kind']} {first['item_id']}: “{_short(shown, 60)}”{more}"


class Reader:
    """Queries over one trace file; each call opens its own read-only connection."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @contextmanager
    def connect(self) -> Iterator[sqlite3.Connection]:
        conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.text_factory = _text
        conn.execute("PRAGMA busy_timeout = 5000")
        try:
            yield conn
        finally:
            conn.close()

    def _all(self, sql: str, params: Sequence[Any] = ()) -> list[Row]:
        with self.connect() as conn:
            return [dict(r) for r in conn.execute(sql, params)]

    def _one(self, sql: str, params: Sequence[Any] = ()) -> Row | None:
        rows = self._all(sql, params)
        return rows[0] if rows else None

    def has_table(self, name: str) -> bool:
        sql = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
        return self._one(sql, (name,)) is not None

    # events

    def events(
        self,
        filters: dict[str, str],
        *,
        before: str | None = None,
        after: str | None = None,
        visible: Callable[[Row], bool] = lambda _: True,
        limit: int = PAGE,
        where: str | None = None,
    ) -> tuple[list[Row], str | None]:
        """The newest events matching ``filters`` (newest first), older than ``before`` or newer
        than ``after``; ``visible`` drops rows the caller may not see. Returns the rows and the
        cursor of the next page (None at the end)."""
        clauses, params = [], []
        for name in EVENT_FILTERS:
            if filters.get(name):
                clauses.append(f"{name} = ?")
                params.append(filters[name])
        if filters.get("status") and filters["status"] != "ok":
            clauses.append(NOT_OK_SQL)  # the events_status_id index holds only these (m028)
        if where:
            clauses.append(f"({where})")
        if after is not None:
            return self._newer(clauses, params, after, visible, limit)
        found: list[Row] = []
        cursor = before
        for _ in range(20):  # a restricted caller's page may need a few chunks; bounded
            chunk_clauses = [*clauses, "id < ?"] if cursor else clauses
            sql = "SELECT * FROM events" + (" WHERE " + " AND ".join(chunk_clauses) if chunk_clauses else "")
            sql += " ORDER BY id DESC LIMIT ?"
            chunk = self._all(sql, [*params, *([cursor] if cursor else []), limit + 1])
            for row in chunk[:limit]:
                cursor = row["id"]
                if visible(row):
                    found.append(row)
                    if len(found) == limit:
                        more = len(chunk) > limit or row is not chunk[-1]
                        return self._with_effects(found), cursor if more else None
            if len(chunk) <= limit:
                return self._with_effects(found), None
        return self._with_effects(found), cursor

    def _newer(
        self, clauses: list[str], params: list[Any], after: str, visible: Callable[[Row], bool], limit: int
    ) -> tuple[list[Row], str | None]:
        """Events newer than ``after``, the oldest ``limit`` of them (so a burst is not skipped),
        newest first; the cursor is the newest id scanned."""
        sql = "SELECT * FROM events WHERE " + " AND ".join([*clauses, "id > ?"]) + " ORDER BY id LIMIT ?"
        chunk = self._all(sql, [*params, after, limit])
        found = [row for row in chunk if visible(row)]
        found.reverse()
        return self._with_effects(found), chunk[-1]["id"] if chunk else None

    def _with_effects(self, events: list[Row]) -> list[Row]:
        if not events:
            return events
        marks = ",".join("?" * len(events))
        effects = self._all(
            f"SELECT * FROM effects WHERE event_id IN ({marks}) ORDER BY event_id, seq",
            [e["id"] for e in events],
        )
        by_event: dict[str, list[Row]] = {}
        for each in effects:
            by_event.setdefault(each["event_id"], []).append(each)
        for event in events:
            event["effects"] = by_event.get(event["id"], [])
            event["summary"] = event_summary(event, event["effects"])
        return events

    def event(self, event_id: str) -> Row | None:
        found = self._one("SELECT * FROM events WHERE id = ?", (event_id,))
        if found is None:
            return None
        event = self._with_effects([found])[0]
        event["children"] = self._all(
            f"SELECT {RELATED} FROM events WHERE parent_id = ? ORDER BY id LIMIT 100",
            (event_id,),
        )
        links = loads(event.get("links")) or []
        ids = [x for x in links if isinstance(x, str)][:100] if isinstance(links, list) else []
        if event.get("parent_id"):
            ids.append(event["parent_id"])
        marks = ",".join("?" * len(ids))
        event["linked"] = self._all(f"SELECT {RELATED} FROM events WHERE id IN ({marks})", ids) if ids else []
        return event

    def event_heads(self, ids: Sequence[str]) -> dict[str, Row]:
        """Who made events ``ids`` and on which namespace (what a visibility check needs), by id."""
        if not ids:
            return {}
        marks = ",".join("?" * len(ids))
        sql = f"SELECT id, tool, principal, namespace FROM events WHERE id IN ({marks})"
        return {row["id"]: row for row in self._all(sql, list(ids))}

    def denials(self, *, before: str | None, visible: Callable[[Row], bool]) -> tuple[list[Row], str | None]:
        return self.events({}, before=before, visible=visible, where=DENIAL_SQL)

    def findings(
        self, *, before: int | None, kind: str | None = None, severity: str | None = None
    ) -> tuple[list[Row], int | None]:
        """Rows of the ``findings`` table, newest first (keyset on rowid), of one kind or severity."""
        sql = "SELECT rowid AS _rowid, * FROM findings"
        where: list[str] = []
        params: list[Any] = []
        for column, value in (("kind", kind), ("severity", severity)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if before is not None:
            where.append("rowid < ?")
            params.append(before)
        if where:
            sql += " WHERE " + " AND ".join(where)
        rows = self._all(sql + " ORDER BY rowid DESC LIMIT ?", [*params, PAGE + 1])
        nxt = rows[PAGE - 1]["_rowid"] if len(rows) > PAGE else None
        return rows[:PAGE], nxt

    # memory

    def _visible_page(
        self, fetch: Callable[[str | None, int], list[Row]], key: str, cursor: str | None, visible: Visible
    ) -> tuple[list[Row], str | None]:
        """Up to ``PAGE`` rows that ``visible`` keeps, from ``fetch(cursor, n)`` (at most ``n`` rows
        past ``cursor`` in key order), a bounded number of chunks. The cursor returned is the key
        of the last row shown, so the next-page link never names a row the caller may not see
        (only a run of ``CHUNKS * CHUNK`` rows it may not see, none shown, yields a hidden one)."""
        found: list[Row] = []
        for attempt in range(CHUNKS):
            size = PAGE if attempt == 0 else CHUNK  # a caller who sees every row reads one page
            rows = fetch(cursor, size + 1)
            for i, row in enumerate(rows[:size]):
                if visible(row):
                    found.append(row)
                    if len(found) == PAGE:
                        more = len(rows) > size or i < len(rows) - 1
                        return found, row[key] if more else None
                cursor = row[key]
            if len(rows) <= size:
                return found, None
        return found, found[-1][key] if found else cursor

    def namespaces(
        self, *, after: str | None, visible: Visible = lambda _: True
    ) -> tuple[list[Row], str | None]:
        def fetch(cursor: str | None, n: int) -> list[Row]:
            sql = (
                "SELECT namespace, count(*) AS items, sum(valid_to IS NULL) AS current "
                "FROM items INDEXED BY items_namespace "  # covering: no row lookups
                "WHERE namespace IS NOT NULL" + (" AND namespace > ?" if cursor else "")
            )
            sql += " GROUP BY namespace ORDER BY namespace LIMIT ?"
            return self._all(sql, [*([cursor] if cursor else []), n])

        return self._visible_page(fetch, "namespace", after, visible)

    def items(self, namespace: str, *, after: str | None) -> tuple[list[Row], str | None]:
        sql = "SELECT * FROM items WHERE namespace = ?" + (" AND item_id > ?" if after else "")
        rows = self._all(
            sql + " ORDER BY item_id LIMIT ?", [namespace, *([after] if after else []), PAGE + 1]
        )
        return rows[:PAGE], rows[PAGE - 1]["item_id"] if len(rows) > PAGE else None

    def item(self, backend: str, item_id: str) -> Row | None:
        item = self._one("SELECT * FROM items WHERE backend = ? AND item_id = ?", (backend, item_id))
        if item is None:
            return None
        item["versions"] = self._all(
            "SELECT v.*, e.principal, e.session, e.turn, e.role, e.tool, e.started_at "
            "FROM item_versions v LEFT JOIN events e ON e.id = v.event_id "
            "WHERE v.backend = ? AND v.item_id = ? ORDER BY v.version LIMIT 500",
            (backend, item_id),
        )
        item["closing"] = self._one(
            "SELECT f.event_id, e.principal, e.session, e.turn, e.started_at FROM effects f "
            "JOIN events e ON e.id = f.event_id "
            "WHERE f.backend = ? AND f.item_id = ? AND f.kind = 'delete' LIMIT 1",
            (backend, item_id),
        )
        item["retrievals"] = self._all(
            "SELECT f.event_id, f.rank, f.score, e.principal, e.requester, e.session, e.turn, "
            "e.started_at, e.gate FROM effects f JOIN events e ON e.id = f.event_id "
            "WHERE f.backend = ? AND f.item_id = ? AND f.kind = 'retrieve' "
            "ORDER BY f.event_id DESC LIMIT 100",
            (backend, item_id),
        )
        return item

    # runs

    def runs(self, *, before: str | None, visible: Visible = lambda _: True) -> tuple[list[Row], str | None]:
        """The newest runs ``visible`` keeps, each with its latest score's id and time (``scored``)."""

        def fetch(cursor: str | None, n: int) -> list[Row]:
            sql = "SELECT * FROM runs" + (" WHERE id < ?" if cursor else "") + " ORDER BY id DESC LIMIT ?"
            return self._all(sql, [*([cursor] if cursor else []), n])

        rows, nxt = self._visible_page(fetch, "id", before, visible)
        marks = ",".join("?" * len(rows))
        latest = self._all(
            "SELECT run_id, id, created_at FROM scores WHERE id IN "
            f"(SELECT max(id) FROM scores WHERE run_id IN ({marks}) GROUP BY run_id)",
            [r["id"] for r in rows],
        )
        scored = {s["run_id"]: s for s in latest}
        for run in rows:
            run["scored"] = scored.get(run["id"])
        return rows, nxt

    def run(self, run_id: str) -> Row | None:
        run = self._one("SELECT * FROM runs WHERE id = ?", (run_id,))
        if run is None:
            return None
        run["episodes"] = self._all(
            "SELECT status, count(*) AS n FROM run_episodes WHERE run_id = ? GROUP BY status", (run_id,)
        )
        run["failed"] = self._all(
            "SELECT episode_id, attempt, error FROM run_episodes "
            "WHERE run_id = ? AND status = 'failed' ORDER BY episode_id LIMIT 20",
            (run_id,),
        )
        score = self._one("SELECT json FROM scores WHERE run_id = ? ORDER BY id DESC LIMIT 1", (run_id,))
        run["score"] = loads(score["json"]) if score else None
        return run

    def run_namespaces(self, run_id: str) -> list[str]:
        rows = self._all(
            "SELECT DISTINCT namespace FROM run_episodes WHERE run_id = ? LIMIT 10000", (run_id,)
        )
        return [r["namespace"] for r in rows]

    def upstreams(self) -> list[Row]:
        return self._all(
            "SELECT upstream, count(*) AS calls, sum(status != 'ok') AS errors, max(id) AS last_event "
            "FROM events WHERE upstream IS NOT NULL GROUP BY upstream ORDER BY upstream LIMIT 200"
        )
