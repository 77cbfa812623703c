"""The embedded memory backend: namespaced, versioned items in SQLite with BM25 search.

Every change is a new row: an update closes the current version's validity interval
and opens the next, a delete closes the last one. Nothing is physically destroyed,
so history and lineage survive.

Search ranks with an in-memory BM25 index per namespace (:mod:`memtap.adapters.bm25`,
rank_bm25's BM25Okapi ranking, statistics of that namespace alone; scores are BM25Okapi's
shifted by one per-query constant so they are never negative), built on the first
search of the namespace from its current rows and then kept in step by this backend's
own add, update and delete. Other processes may write the same file; every write
transaction bumps the namespace's row of ``builtin_generation``, so a search that reads
another value than the one its index was built at rebuilds the index. The FTS5 table
``builtin_memory_fts`` stays the file's durable full-text index (for sqlite3 and
Datasette users): it holds exactly the current versions, each write changing only the
rows it touches.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from memtap.adapters.base import BackendResult, StoredMemory, StoredVersion
from memtap.adapters.bm25 import NamespaceIndexes, tokenize
from memtap.errors import BackendError, ItemNotFound
from memtap.ids import new_id
from memtap.trace.models import AccessTags, EffectKind, MemoryEffect, Provenance, utc_now
from memtap.trace.sqlite import describe_sqlite_error, open_database
from memtap.trace.store import immediate_transaction

__all__ = ["MIGRATIONS", "BuiltinBackend", "fts_query", "tokenize"]

MIGRATIONS = Migrations("memtap.builtin")


@MIGRATIONS()
def m001_create_builtin_memory(db: Database) -> None:
    db.execute(
        """
        CREATE TABLE builtin_memory (
            version_id INTEGER PRIMARY KEY,
            item_id TEXT NOT NULL,
            namespace TEXT NOT NULL,
            version INTEGER NOT NULL,
            content TEXT NOT NULL,
            metadata TEXT NOT NULL DEFAULT '{}',
            tags TEXT,
            provenance TEXT,
            created_at TEXT NOT NULL,
            valid_from TEXT NOT NULL,
            valid_to TEXT,
            closed_by TEXT,
            UNIQUE (item_id, version)
        )
        """
    )
    db.execute("CREATE INDEX builtin_memory_current ON builtin_memory(namespace, valid_to, version_id)")
    db.execute(
        "CREATE VIRTUAL TABLE builtin_memory_fts USING fts5(content, namespace UNINDEXED,"
        " item_id UNINDEXED, content='builtin_memory', content_rowid='version_id')"
    )


@MIGRATIONS()
def m002_create_generation(db: Database) -> None:
    db.execute(
        """
        CREATE TABLE builtin_generation (
            -- bumped by every write of the builtin backend to the namespace; a process whose
            -- in-memory search index was built at another value rebuilds it
            namespace TEXT PRIMARY KEY,
            value INTEGER NOT NULL
        )
        """
    )


def fts_query(text: str) -> str | None:
    """An FTS5 query for ``builtin_memory_fts`` matching any token of ``text``, or None if it has none.

    Search itself ranks in memory; this is for reading the FTS5 table directly."""
    tokens = dict.fromkeys(tokenize(text))
    return " OR ".join(f'"{token}"' for token in tokens) or None


def _tags_of(row: dict[str, Any]) -> AccessTags | None:
    return AccessTags.model_validate_json(row["tags"]) if row["tags"] else None


def _provenance_of(row: dict[str, Any]) -> Provenance:
    return Provenance.model_validate_json(row["provenance"]) if row["provenance"] else Provenance()


_COLUMN_NAMES = (
    "version_id",
    "item_id",
    "namespace",
    "version",
    "content",
    "metadata",
    "tags",
    "provenance",
    "created_at",
    "valid_from",
    "valid_to",
)
_COLUMNS = ", ".join(_COLUMN_NAMES)


class BuiltinBackend:
    """memtap's own memory store. Safe for one event loop; calls are short SQLite transactions."""

    name = "builtin"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.db = open_database(self.path, MIGRATIONS)
        self.conn = self.db.conn
        self._indexes: NamespaceIndexes[int] = NamespaceIndexes()  # keyed by version_id

    async def close(self) -> None:
        self._indexes.clear()
        self.conn.close()

    # -- helpers -------------------------------------------------------------------------

    def _current(self, namespace: str, item_id: str) -> dict[str, Any]:
        row = self._one(
            f"SELECT {_COLUMNS} FROM builtin_memory WHERE item_id = ? AND namespace = ?"
            " ORDER BY version DESC LIMIT 1",
            (item_id, namespace),
        )
        if row is None:
            raise ItemNotFound(item_id, namespace)
        if row["valid_to"] is not None:
            raise ItemNotFound(item_id, namespace, deleted_at=row["valid_to"])
        return row

    def _one(self, sql: str, args: tuple[Any, ...]) -> dict[str, Any] | None:
        rows = self._rows(sql, args)
        return rows[0] if rows else None

    def _rows(self, sql: str, args: tuple[Any, ...]) -> list[dict[str, Any]]:
        try:
            cursor = self.conn.execute(sql, args)
        except sqlite3.Error as exc:
            raise BackendError(describe_sqlite_error(self.path, exc)) from exc
        names = [d[0] for d in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def _versions(self, version_ids: list[int]) -> dict[int, dict[str, Any]]:
        if not version_ids:
            return {}
        marks = ", ".join("?" * len(version_ids))
        rows = self._rows(
            f"SELECT {_COLUMNS} FROM builtin_memory WHERE version_id IN ({marks})", tuple(version_ids)
        )
        return {row["version_id"]: row for row in rows}

    @staticmethod
    def _memory(row: dict[str, Any]) -> StoredMemory:
        return StoredMemory(
            id=row["item_id"],
            namespace=row["namespace"],
            content=row["content"],
            metadata=json.loads(row["metadata"]),
            tags=_tags_of(row),
            provenance=_provenance_of(row),
            version=row["version"],
            created_at=datetime.fromisoformat(row["created_at"]),
            updated_at=datetime.fromisoformat(row["valid_from"]),
            deleted_at=datetime.fromisoformat(row["valid_to"]) if row["valid_to"] else None,
        )

    def _insert_version(
        self,
        item_id: str,
        namespace: str,
        version: int,
        content: str,
        metadata: dict[str, Any],
        tags: AccessTags | None,
        provenance: Provenance | None,
        at: str,
        created_at: str,
    ) -> int:
        cursor = self.conn.execute(
            "INSERT INTO builtin_memory (item_id, namespace, version, content, metadata, tags, provenance,"
            " created_at, valid_from) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                item_id,
                namespace,
                version,
                content,
                json.dumps(metadata, ensure_ascii=False),
                tags.model_dump_json() if tags else None,
                provenance.model_dump_json(exclude_none=True) if provenance else None,
                created_at,
                at,
            ),
        )
        rowid = int(cursor.lastrowid or 0)
        self.conn.execute(
            "INSERT INTO builtin_memory_fts (rowid, content, namespace, item_id) VALUES (?, ?, ?, ?)",
            (rowid, content, namespace, item_id),
        )
        return rowid

    def _close_version(self, row: dict[str, Any], at: str, closed_by: str) -> None:
        self.conn.execute(
            "UPDATE builtin_memory SET valid_to = ?, closed_by = ? WHERE version_id = ?",
            (at, closed_by, row["version_id"]),
        )
        self.conn.execute(
            "INSERT INTO builtin_memory_fts (builtin_memory_fts, rowid, content, namespace, item_id)"
            " VALUES ('delete', ?, ?, ?, ?)",
            (row["version_id"], row["content"], row["namespace"], row["item_id"]),
        )

    def _write(self) -> Any:
        return immediate_transaction(self.db)

    @contextlib.contextmanager
    def _snapshot(self) -> Iterator[None]:
        """One read transaction: every statement inside sees the same state of the file."""
        self.conn.execute("BEGIN")
        try:
            yield
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def _bump_generation(self, namespace: str) -> int:
        """Count a write to ``namespace`` (inside its transaction); the new generation."""
        rows = self.conn.execute(
            "INSERT INTO builtin_generation (namespace, value) VALUES (?, 1)"
            " ON CONFLICT (namespace) DO UPDATE SET value = value + 1 RETURNING value",
            (namespace,),
        ).fetchall()
        return int(rows[0][0])

    def _generation(self, namespace: str) -> int:
        row = self.conn.execute(
            "SELECT value FROM builtin_generation WHERE namespace = ?", (namespace,)
        ).fetchone()
        return int(row[0]) if row else 0

    def _current_contents(self, namespace: str) -> Iterator[tuple[int, str]]:
        yield from self.conn.execute(
            "SELECT version_id, content FROM builtin_memory WHERE namespace = ? AND valid_to IS NULL"
            " ORDER BY version_id",
            (namespace,),
        )

    # -- the protocol ----------------------------------------------------------------------

    async def add(
        self,
        namespace: str,
        content: str,
        *,
        metadata: dict[str, Any] | None = None,
        tags: AccessTags | None = None,
        provenance: Provenance | None = None,
    ) -> BackendResult:
        item_id = "mem_" + new_id()
        at = utc_now().isoformat()
        try:
            with self._write():
                version_id = self._insert_version(
                    item_id, namespace, 1, content, metadata or {}, tags, provenance, at, at
                )
                generation = self._bump_generation(namespace)
        except sqlite3.Error as exc:
            raise BackendError(describe_sqlite_error(self.path, exc)) from exc
        self._indexes.committed(namespace, generation, added=(version_id, content))
        stored = StoredMemory(
            id=item_id,
            namespace=namespace,
            content=content,
            metadata=metadata or {},
            tags=tags,
            provenance=provenance or Provenance(),
            created_at=datetime.fromisoformat(at),
            updated_at=datetime.fromisoformat(at),
        )
        effect = MemoryEffect(
            kind=EffectKind.ADD, item_id=item_id, namespace=namespace, content_after=content, tags_after=tags
        )
        return BackendResult(stored.model_dump(mode="json", exclude_none=True), [effect])

    async def search(self, namespace: str, query: str, *, limit: int = 10) -> BackendResult:
        tokens = list(dict.fromkeys(tokenize(query)))  # each distinct word weighs once
        if not tokens or limit <= 0:
            return BackendResult({"results": []})
        try:
            with self._snapshot():
                index = self._indexes.get(
                    namespace, self._generation(namespace), lambda: self._current_contents(namespace)
                )
                hits = index.search(tokens, limit)
                floor = index.score_floor(tokens)  # >= 0 scores, same order: see bm25's docstring
                row_of = self._versions([version_id for version_id, _ in hits])
        except sqlite3.Error as exc:
            raise BackendError(describe_sqlite_error(self.path, exc)) from exc
        results, effects = [], []
        for rank, (version_id, score) in enumerate(hits, start=1):
            memory = self._memory(row_of[version_id])
            memory.score = round(score - floor, 6)
            memory.rank = rank
            results.append(memory.model_dump(mode="json", exclude_none=True))
            effects.append(
                MemoryEffect(
                    kind=EffectKind.RETRIEVE,
                    item_id=memory.id,
                    namespace=namespace,
                    content_after=memory.content,
                    tags_after=memory.tags,
                    rank=rank,
                    score=memory.score,
                )
            )
        return BackendResult({"results": results}, effects)

    async def get(self, namespace: str, item_id: str) -> BackendResult:
        row = self._current(namespace, item_id)
        return BackendResult(self._memory(row).model_dump(mode="json", exclude_none=True))

    async def list(self, namespace: str, *, limit: int = 50, offset: int = 0) -> BackendResult:
        total = self._one(
            "SELECT count(*) AS n FROM builtin_memory WHERE namespace = ? AND valid_to IS NULL", (namespace,)
        )
        rows = self._rows(
            f"SELECT {_COLUMNS} FROM builtin_memory WHERE namespace = ? AND valid_to IS NULL"
            " ORDER BY version_id LIMIT ? OFFSET ?",
            (namespace, limit, offset),
        )
        items = [self._memory(row).model_dump(mode="json", exclude_none=True) for row in rows]
        return BackendResult({"items": items, "total": total["n"] if total else 0, "offset": offset})

    async def update(
        self,
        namespace: str,
        item_id: str,
        *,
        content: str | None = None,
        metadata: dict[str, Any] | None = None,
        tags: AccessTags | None = None,
        provenance: Provenance | None = None,
    ) -> BackendResult:
        at = utc_now().isoformat()
        try:
            with self._write():
                row = self._current(namespace, item_id)
                old_tags = _tags_of(row)
                new_content = row["content"] if content is None else content
                new_metadata = json.loads(row["metadata"]) if metadata is None else metadata
                new_tags = old_tags if tags is None else tags
                self._close_version(row, at, "update")
                version_id = self._insert_version(
                    item_id,
                    namespace,
                    row["version"] + 1,
                    new_content,
                    new_metadata,
                    new_tags,
                    provenance,
                    at,
                    row["created_at"],
                )
                generation = self._bump_generation(namespace)
        except sqlite3.Error as exc:
            raise BackendError(describe_sqlite_error(self.path, exc)) from exc
        self._indexes.committed(
            namespace, generation, removed=row["version_id"], added=(version_id, new_content)
        )
        current = self._current(namespace, item_id)
        effect = MemoryEffect(
            kind=EffectKind.UPDATE,
            item_id=item_id,
            namespace=namespace,
            content_before=row["content"],
            content_after=new_content,
            tags_before=old_tags,
            tags_after=new_tags,
        )
        value = self._memory(current).model_dump(mode="json", exclude_none=True)
        return BackendResult(value, [effect])

    async def delete(
        self, namespace: str, item_id: str, *, provenance: Provenance | None = None
    ) -> BackendResult:
        at = utc_now().isoformat()
        try:
            with self._write():
                row = self._current(namespace, item_id)
                self._close_version(row, at, "delete")
                generation = self._bump_generation(namespace)
        except sqlite3.Error as exc:
            raise BackendError(describe_sqlite_error(self.path, exc)) from exc
        self._indexes.committed(namespace, generation, removed=row["version_id"])
        tags = _tags_of(row)
        effect = MemoryEffect(
            kind=EffectKind.DELETE,
            item_id=item_id,
            namespace=namespace,
            content_before=row["content"],
            tags_before=tags,
        )
        return BackendResult({"id": item_id, "deleted": True, "deleted_at": at}, [effect])

    async def history(self, namespace: str, item_id: str) -> BackendResult:
        rows = self._rows(
            "SELECT version, content, metadata, tags, provenance, valid_from, valid_to, closed_by"
            " FROM builtin_memory WHERE item_id = ? AND namespace = ? ORDER BY version",
            (item_id, namespace),
        )
        if not rows:
            raise ItemNotFound(item_id, namespace)
        versions = [
            StoredVersion(
                version=row["version"],
                content=row["content"],
                metadata=json.loads(row["metadata"]),
                tags=_tags_of(row),
                provenance=_provenance_of(row),
                valid_from=datetime.fromisoformat(row["valid_from"]),
                valid_to=datetime.fromisoformat(row["valid_to"]) if row["valid_to"] else None,
                closed_by=row["closed_by"],
            ).model_dump(mode="json", exclude_none=True)
            for row in rows
        ]
        return BackendResult({"id": item_id, "namespace": namespace, "versions": versions})
