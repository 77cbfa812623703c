"""The embedded memory backend: namespaced, versioned items in SQLite with BM25 search.

Every change is a new row: an update closes the current version's validity interval
and opens the next, a delete closes the last one. Nothing is physically destroyed,
so history and lineage survive. Search uses SQLite's FTS5 (BM25 ranking, fixed
k1 = 1.2 and b = 0.75) over an index that holds exactly the current versions: each
add, update and delete changes only the rows it touches, so the index is correct
after every operation without a rebuild.
"""

from __future__ import annotations

import json
import re
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from memtap.adapters.base import BackendResult, StoredMemory, StoredVersion
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


_TOKEN = re.compile(r"\w+", re.UNICODE)


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens, as the search index sees them."""
    return _TOKEN.findall(text.lower())


def fts_query(text: str) -> str | None:
    """An FTS5 query matching any token of ``text`` (BM25 ranks the matches)."""
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
_M_COLUMNS = ", ".join("m." + name for name in _COLUMN_NAMES)


class BuiltinBackend:
    """memtap's own memory store. Safe for one event loop; calls are short SQLite transactions."""

    name = "builtin"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.db = open_database(self.path, MIGRATIONS)
        self.conn = self.db.conn

    async def close(self) -> None:
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
                self._insert_version(item_id, namespace, 1, content, metadata or {}, tags, provenance, at, at)
        except sqlite3.Error as exc:
            raise BackendError(describe_sqlite_error(self.path, exc)) from exc
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
        match = fts_query(query)
        if match is None or limit <= 0:
            return BackendResult({"results": []})
        rows = self._rows(
            f"SELECT {_M_COLUMNS}, bm25(builtin_memory_fts) AS bm25"
            " FROM builtin_memory_fts JOIN builtin_memory m ON m.version_id = builtin_memory_fts.rowid"
            " WHERE builtin_memory_fts MATCH ? AND builtin_memory_fts.namespace = ?"
            " ORDER BY bm25, m.version_id LIMIT ?",
            (match, namespace, limit),
        )
        results, effects = [], []
        for rank, row in enumerate(rows, start=1):
            memory = self._memory(row)
            memory.score = round(-float(row["bm25"]), 6)
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
                self._insert_version(
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
        except sqlite3.Error as exc:
            raise BackendError(describe_sqlite_error(self.path, exc)) from exc
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
        except sqlite3.Error as exc:
            raise BackendError(describe_sqlite_error(self.path, exc)) from exc
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
