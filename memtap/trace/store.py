"""The trace store: events, their effects, and the items those effects materialise."""

from __future__ import annotations

import contextlib
import itertools
import json
import sqlite3
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlite_utils import Database

from memtap.errors import StoreError
from memtap.jsontext import json_text
from memtap.trace.migrations import MIGRATIONS
from memtap.trace.models import (
    AccessTags,
    Context,
    EffectKind,
    ItemVersion,
    MemoryEffect,
    MemoryItem,
    Provenance,
    TraceEvent,
)
from memtap.trace.sqlite import describe_sqlite_error, is_transient, open_database

__all__ = ["TraceStore", "immediate_transaction", "insert_events"]


def _json(value: Any) -> str | None:
    return None if value is None else json_text(value)


_EVENT_COLUMNS = (
    "id, started_at, ended_at, front_door, backend, tool, op, status, error, principal, namespace,"
    " requester, run_id, episode, session, turn, role, client, upstream, context, arguments, result,"
    " backend_ms, overhead_ms, gate, total_ms, parent_id, model, provider, input_tokens, output_tokens,"
    " ttft_ms, memory_ms, links"
)

_EVENT_ROW = f"({','.join('?' * len(_EVENT_COLUMNS.split(',')))})"
# Multi-row inserts of 2**k events (k < 8), each statement prepared once and kept in the
# connection's statement cache: a batch is one SQLite step per power of two in its size
# rather than one per event, and so one release of the GIL rather than one per event (each a
# possible hand-over to the event loop's thread and back).
_INSERT_EVENTS = {
    1 << k: f"INSERT INTO events ({_EVENT_COLUMNS}) VALUES {','.join([_EVENT_ROW] * (1 << k))}"
    for k in range(8)
}


def _insert_event_rows(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    """Insert ``rows`` in order, in as few statements as the sizes in _INSERT_EVENTS allow."""
    at = 0
    while at < len(rows):
        size = min(128, 1 << ((len(rows) - at).bit_length() - 1))
        conn.execute(_INSERT_EVENTS[size], list(itertools.chain.from_iterable(rows[at : at + size])))
        at += size


_EFFECT_COLUMNS = (
    "event_id, seq, kind, backend, namespace, item_id, content_before, content_after, tags_before,"
    " tags_after, rank, score, derived_from, reconciled, evidence"
)
_INSERT_EFFECT = (
    f"INSERT INTO effects ({_EFFECT_COLUMNS}) VALUES ({','.join('?' * len(_EFFECT_COLUMNS.split(',')))})"
)


def _tags_json(tags: AccessTags | None) -> str | None:
    return None if tags is None else tags.model_dump_json()


def _load(text: str | None) -> Any:
    return None if text is None else json.loads(text)


@contextlib.contextmanager
def immediate_transaction(db: Database) -> Iterator[None]:
    """One write transaction that takes the write lock at its start (no upgrade deadlocks)."""
    db.conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.conn.execute("COMMIT")
    except BaseException:
        # A COMMIT that failed (busy, I/O) can leave the transaction open: its rows would go out
        # with the next commit on this connection, after the caller has counted them as failed.
        if db.conn.in_transaction:
            db.conn.execute("ROLLBACK")
        raise


def insert_events(conn: sqlite3.Connection, events: Sequence[TraceEvent]) -> None:
    """Insert events, their effects and the item states they imply, inside the caller's transaction.

    The recorder calls it through :meth:`TraceStore.write_events`; the builtin backend calls it
    on its own connection inside a write's transaction, so the write and its event commit together.
    Raises ``sqlite3.Error``; the caller rolls back.
    """
    # Enum members are str subclasses: SQLite binds them as text, without the cost of .value.
    event_rows = []
    effect_rows = []
    materialise = []
    for event in events:
        ctx = event.context
        ended = event.ended_at.isoformat()
        event_rows.append(
            (
                event.id,
                event.started_at.isoformat(),
                ended,
                event.front_door,
                event.backend,
                event.tool,
                event.op,
                event.status,
                event.error,
                ctx.principal,
                ctx.namespace,
                ctx.requester,
                ctx.run,
                ctx.episode,
                ctx.session,
                ctx.turn,
                ctx.role,
                ctx.client,
                ctx.upstream,
                ctx.model_dump_json(exclude_none=True),
                _json(event.arguments) or "{}",
                _json(event.result),
                event.backend_ms,
                event.overhead_ms,
                event.gate,
                event.total_ms,
                event.parent_id,
                event.model,
                event.provider,
                event.input_tokens,
                event.output_tokens,
                event.ttft_ms,
                event.memory_ms,
                _json(event.links) if event.links else None,
            )
        )
        for seq, eff in enumerate(event.effects):
            tags_after = _tags_json(eff.tags_after)
            derived = _json(eff.derived_from) if eff.derived_from else None
            effect_rows.append(
                (
                    event.id,
                    seq,
                    eff.kind,
                    event.backend,
                    eff.namespace or ctx.namespace,
                    eff.item_id,
                    eff.content_before,
                    eff.content_after,
                    _tags_json(eff.tags_before),
                    tags_after,
                    eff.rank,
                    eff.score,
                    derived,
                    1 if eff.reconciled else 0,
                    _json(eff.evidence),
                )
            )
            materialise.append((event, eff, ended, tags_after, derived))
    _insert_event_rows(conn, event_rows)
    conn.executemany(_INSERT_EFFECT, effect_rows)
    for args in materialise:
        _materialise(conn, *args)


def _materialise(
    conn: sqlite3.Connection,
    event: TraceEvent,
    eff: MemoryEffect,
    at: str,
    tags: str | None,
    derived: str | None,
) -> None:
    """Apply one effect to the items it touches (``at``, ``tags``, ``derived``: already as text)."""
    key = (event.backend, eff.item_id)
    kind = eff.kind
    if kind == EffectKind.RETRIEVE:
        conn.execute(
            "UPDATE items SET retrieved_count = retrieved_count + 1 WHERE backend = ? AND item_id = ?",
            key,
        )
        return
    if kind == EffectKind.DELETE:
        row = conn.execute(
            "SELECT version, valid_to FROM items WHERE backend = ? AND item_id = ?", key
        ).fetchone()
        if row is not None and row[1] is None:
            conn.execute(
                "UPDATE items SET valid_to = ?, last_event = ? WHERE backend = ? AND item_id = ?",
                (at, event.id, *key),
            )
            conn.execute(
                "UPDATE item_versions SET valid_to = ? WHERE backend = ? AND item_id = ? AND version = ?",
                (at, *key, row[0]),
            )
        return
    content = eff.content_after if eff.content_after is not None else ""
    ctx = event.context
    created = conn.execute(
        "INSERT OR IGNORE INTO items (backend, item_id, namespace, content, tags, version, created_event,"
        " principal, run_id, episode, session, turn, role, valid_from, valid_to, derived_from,"
        " last_event) VALUES (?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?)",
        (
            *key,
            eff.namespace or ctx.namespace,
            content,
            tags,
            event.id,
            ctx.principal,
            ctx.run,
            ctx.episode,
            ctx.session,
            ctx.turn,
            ctx.role,
            at,
            derived,
            event.id,
        ),
    ).rowcount
    if created:
        conn.execute(
            "INSERT INTO item_versions VALUES (?, ?, 1, ?, ?, ?, ?, ?, NULL)",
            (*key, content, tags, kind, event.id, at),
        )
        return
    (current,) = conn.execute("SELECT version FROM items WHERE backend = ? AND item_id = ?", key).fetchone()
    conn.execute(
        "UPDATE item_versions SET valid_to = ? WHERE backend = ? AND item_id = ? AND version = ?"
        " AND valid_to IS NULL",
        (at, *key, current),
    )
    conn.execute(
        "INSERT INTO item_versions VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL)",
        (*key, current + 1, content, tags, kind, event.id, at),
    )
    conn.execute(
        "UPDATE items SET content = ?, tags = COALESCE(?, tags), version = ?, valid_to = NULL,"
        " last_event = ? WHERE backend = ? AND item_id = ?",
        (content, tags, current + 1, event.id, *key),
    )


class TraceStore:
    """A trace database. Opening one applies pending migrations."""

    def __init__(
        self,
        path: str | Path,
        *,
        durable: bool = False,
        check_same_thread: bool = True,
        read_only_ok: bool = False,
    ) -> None:
        self.path = Path(path)
        self.db = open_database(
            self.path,
            MIGRATIONS,
            durable=durable,
            check_same_thread=check_same_thread,
            read_only_ok=read_only_ok,
        )

    def close(self) -> None:
        self.db.conn.close()

    # -- writing -----------------------------------------------------------------

    def write_events(self, events: Sequence[TraceEvent]) -> None:
        """Insert events, their effects and the item states they imply, in one transaction."""
        if not events:
            return
        try:
            with immediate_transaction(self.db):
                insert_events(self.db.conn, events)
        except sqlite3.Error as exc:
            raise StoreError(describe_sqlite_error(self.path, exc), transient=is_transient(exc)) from exc

    # -- reading -----------------------------------------------------------------

    def count_events(self) -> int:
        return int(self.db.conn.execute("SELECT count(*) FROM events").fetchone()[0])

    def list_events(
        self,
        *,
        op: str | None = None,
        namespace: str | None = None,
        run: str | None = None,
        session: str | None = None,
        parent_id: str | None = None,
        after_id: str | None = None,
        limit: int | None = None,
        newest_first: bool = False,
    ) -> list[TraceEvent]:
        where, args = [], []
        for column, value in (
            ("op", op),
            ("namespace", namespace),
            ("run_id", run),
            ("session", session),
            ("parent_id", parent_id),
        ):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        if after_id is not None:
            where.append("id > ?")
            args.append(after_id)
        sql = "SELECT * FROM events"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id DESC" if newest_first else " ORDER BY id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        rows = list(self._query(sql, args))
        if newest_first:
            rows.reverse()
        return self._events_from_rows(rows)

    def get_event(self, event_id: str) -> TraceEvent | None:
        rows = list(self._query("SELECT * FROM events WHERE id = ?", [event_id]))
        if not rows:
            rows = list(self._query("SELECT * FROM events WHERE id LIKE ? LIMIT 2", [event_id + "%"]))
            if len(rows) != 1:
                return None
        return self._events_from_rows(rows)[0]

    def _query(self, sql: str, args: Sequence[Any]) -> Iterator[dict[str, Any]]:
        try:
            yield from self.db.query(sql, args)
        except sqlite3.Error as exc:
            raise StoreError(describe_sqlite_error(self.path, exc)) from exc

    def _events_from_rows(self, rows: list[dict[str, Any]]) -> list[TraceEvent]:
        if not rows:
            return []
        ids = [row["id"] for row in rows]
        effects: dict[str, list[MemoryEffect]] = {i: [] for i in ids}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for eff in self._query(
                f"SELECT * FROM effects WHERE event_id IN ({marks}) ORDER BY event_id, seq", chunk
            ):
                effects[eff["event_id"]].append(
                    MemoryEffect(
                        kind=EffectKind(eff["kind"]),
                        item_id=eff["item_id"],
                        namespace=eff["namespace"],
                        content_before=eff["content_before"],
                        content_after=eff["content_after"],
                        tags_before=_tags(eff["tags_before"]),
                        tags_after=_tags(eff["tags_after"]),
                        rank=eff["rank"],
                        score=eff["score"],
                        derived_from=_load(eff["derived_from"]) or [],
                        reconciled=bool(eff["reconciled"]),
                        evidence=_load(eff["evidence"]),
                    )
                )
        return [
            TraceEvent(
                id=row["id"],
                started_at=datetime.fromisoformat(row["started_at"]),
                ended_at=datetime.fromisoformat(row["ended_at"]),
                front_door=row["front_door"],
                backend=row["backend"],
                tool=row["tool"],
                op=row["op"],
                context=Context.model_validate_json(row["context"]),
                arguments=json.loads(row["arguments"]),
                result=_load(row["result"]),
                effects=effects[row["id"]],
                backend_ms=row["backend_ms"],
                overhead_ms=row["overhead_ms"],
                status=row["status"],
                error=row["error"],
                gate=row["gate"],
                total_ms=row["total_ms"],
                parent_id=row["parent_id"],
                model=row["model"],
                provider=row["provider"],
                input_tokens=row["input_tokens"],
                output_tokens=row["output_tokens"],
                ttft_ms=row["ttft_ms"],
                memory_ms=row["memory_ms"],
                links=_load(row["links"]) or [],
            )
            for row in rows
        ]

    def list_items(
        self, *, namespace: str | None = None, include_closed: bool = False, limit: int | None = None
    ) -> list[MemoryItem]:
        where, args = [], []
        if namespace is not None:
            where.append("namespace = ?")
            args.append(namespace)
        if not include_closed:
            where.append("valid_to IS NULL")
        sql = "SELECT * FROM items"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY valid_from, item_id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [self._item_from_row(row, history=False) for row in self._query(sql, args)]

    def get_item(self, item_id: str, *, backend: str | None = None) -> MemoryItem | None:
        sql, args = "SELECT * FROM items WHERE item_id = ?", [item_id]
        if backend is not None:
            sql += " AND backend = ?"
            args.append(backend)
        rows = list(self._query(sql + " LIMIT 2", args))
        if len(rows) != 1:
            return None
        return self._item_from_row(rows[0], history=True)

    def _item_from_row(self, row: dict[str, Any], *, history: bool) -> MemoryItem:
        versions: list[ItemVersion] = []
        if history:
            versions = [
                ItemVersion(
                    version=v["version"],
                    content=v["content"],
                    tags=_tags(v["tags"]),
                    event_id=v["event_id"],
                    op=EffectKind(v["op"]),
                    valid_from=datetime.fromisoformat(v["valid_from"]),
                    valid_to=datetime.fromisoformat(v["valid_to"]) if v["valid_to"] else None,
                )
                for v in self._query(
                    "SELECT * FROM item_versions WHERE backend = ? AND item_id = ? ORDER BY version",
                    [row["backend"], row["item_id"]],
                )
            ]
        return MemoryItem(
            item_id=row["item_id"],
            backend=row["backend"],
            namespace=row["namespace"],
            content=row["content"],
            tags=_tags(row["tags"]),
            provenance=Provenance(
                event_id=row["created_event"],
                run=row["run_id"],
                episode=row["episode"],
                session=row["session"],
                turn=row["turn"],
                role=row["role"],
                principal=row["principal"],
            ),
            version=row["version"],
            valid_from=datetime.fromisoformat(row["valid_from"]),
            valid_to=datetime.fromisoformat(row["valid_to"]) if row["valid_to"] else None,
            derived_from=_load(row["derived_from"]) or [],
            history=versions,
        )


def _tags(text: str | None) -> AccessTags | None:
    return None if text is None else AccessTags.model_validate_json(text)
