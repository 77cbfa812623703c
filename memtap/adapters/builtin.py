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

All SQLite work runs on one dedicated thread (:class:`SqliteThread`), never on the event
loop: a commit (an fsync in durable mode) does not stall other requests, and the
connection, the indexes and the generation counters belong to that thread alone. Writes
waiting together commit together (one transaction, a savepoint each).

A write commits its call's event in the same transaction when the trace lives in this
file (:mod:`memtap.trace.inline`): the value and effects are read inside the
transaction, handed to the call's :class:`~memtap.trace.inline.InlineEvent`, and the
event is inserted with :func:`~memtap.trace.store.insert_events` before ``COMMIT``. So a
write and its event are on disk together or not at all.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from memtap.adapters.base import BackendResult, StoredMemory, StoredVersion
from memtap.adapters.bm25 import NamespaceIndexes, tokenize
from memtap.adapters.builtin_schema import COLUMNS, MIGRATIONS, fts_query, provenance_of, tags_of
from memtap.adapters.sqlite_thread import SqliteThread
from memtap.errors import BackendError, ItemNotFound
from memtap.ids import new_id
from memtap.trace.inline import InlineEvent, current_inline_event
from memtap.trace.models import AccessTags, EffectKind, MemoryEffect, Provenance, utc_now
from memtap.trace.sqlite import describe_sqlite_error, open_database
from memtap.trace.store import insert_events

__all__ = ["MIGRATIONS", "BuiltinBackend", "SqliteThread", "fts_query", "tokenize"]


class _Abandoned(Exception):
    """The call was cancelled before its write committed: roll the write back."""


@dataclass
class _Written:
    """One write step's outcome: its result, and what to do once its transaction is over."""

    backend: BuiltinBackend
    result: BackendResult
    namespace: str
    generation: int
    removed: int | None = None
    added: tuple[int, str] | None = None
    inline: InlineEvent | None = None  # the call's event, committed in the same transaction

    def committed(self) -> None:
        if self.inline is not None:
            self.inline.committed()
        self.backend._indexes.committed(
            self.namespace, self.generation, removed=self.removed, added=self.added
        )

    def rolled_back(self) -> None:
        if self.inline is not None:
            self.inline.release()


class BuiltinBackend:
    """memtap's own memory store; its SQLite work runs on one dedicated thread."""

    name = "builtin"
    # Writes started together are queued in the order they started (nothing is awaited before the
    # hand-over to the thread) and committed in that order, grouped: memory_add_batch relies on it.
    ordered_writes = True

    def __init__(self, path: str | Path, *, durable: bool = False) -> None:
        self.path = Path(path)
        self.real_path = self.path.resolve()
        self.db = open_database(self.path, MIGRATIONS, durable=durable, check_same_thread=False)
        self.conn = self.db.conn
        self._indexes: NamespaceIndexes[int] = NamespaceIndexes()  # keyed by version_id
        self._thread = SqliteThread("memtap-builtin", self.conn, self._error)

    def _error(self, exc: sqlite3.Error) -> BackendError:
        return BackendError(describe_sqlite_error(self.path, exc))

    async def close(self) -> None:
        try:
            await self._thread.run(self._close)
        finally:
            self._thread.close()

    def _close(self) -> None:
        self._indexes.clear()
        self.conn.close()

    # -- helpers -------------------------------------------------------------------------

    def _current(self, namespace: str, item_id: str) -> dict[str, Any]:
        row = self._one(
            f"SELECT {COLUMNS} FROM builtin_memory WHERE item_id = ? AND namespace = ?"
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
            f"SELECT {COLUMNS} FROM builtin_memory WHERE version_id IN ({marks})", tuple(version_ids)
        )
        return {row["version_id"]: row for row in rows}

    @staticmethod
    def _memory(row: dict[str, Any]) -> StoredMemory:
        return StoredMemory(
            id=row["item_id"],
            namespace=row["namespace"],
            content=row["content"],
            metadata=json.loads(row["metadata"]),
            tags=tags_of(row),
            provenance=provenance_of(row),
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

    async def _write(self, inline: InlineEvent | None, work: Callable[[], _Written]) -> BackendResult:
        """Run ``work`` in a write transaction on the backend's thread, committing the call's event
        in it too (``inline``). The value and effects are what ``work`` read inside the
        transaction; nothing is read after the commit."""

        def step() -> _Written:
            try:
                written = work()
                if inline is not None:
                    event = inline.claim(written.result.value, written.result.effects)
                    if event is None:
                        raise _Abandoned
                    try:
                        insert_events(self.conn, [event])
                    except BaseException:
                        inline.release()
                        raise
                    written.inline = inline
                return written
            except _Abandoned:
                raise BackendError(
                    "the call was cancelled before its write committed; nothing was written"
                ) from None
            except sqlite3.Error as exc:
                raise self._error(exc) from exc
            except BackendError:
                raise
            except Exception as exc:
                raise BackendError(f"the write was rolled back: {type(exc).__name__}: {exc}") from exc

        return (await self._thread.write(step)).result

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

    # -- the protocol: each method runs its SQLite work on the backend's thread -----------

    async def add(
        self,
        namespace: str,
        content: str,
        *,
        metadata: dict[str, Any] | None = None,
        tags: AccessTags | None = None,
        provenance: Provenance | None = None,
    ) -> BackendResult:
        inline = current_inline_event(self.real_path)
        metadata = metadata or {}
        item_id = "mem_" + new_id()
        at = utc_now().isoformat()

        def work() -> _Written:
            version_id = self._insert_version(
                item_id, namespace, 1, content, metadata, tags, provenance, at, at
            )
            stored = StoredMemory(
                id=item_id,
                namespace=namespace,
                content=content,
                metadata=metadata,
                tags=tags,
                provenance=provenance or Provenance(),
                created_at=datetime.fromisoformat(at),
                updated_at=datetime.fromisoformat(at),
            )
            effect = MemoryEffect(
                kind=EffectKind.ADD,
                item_id=item_id,
                namespace=namespace,
                content_after=content,
                tags_after=tags,
            )
            value = stored.model_dump(mode="json", exclude_none=True)
            generation = self._bump_generation(namespace)
            return _Written(
                self, BackendResult(value, [effect]), namespace, generation, added=(version_id, content)
            )

        return await self._write(inline, work)

    async def search(self, namespace: str, query: str, *, limit: int = 10) -> BackendResult:
        tokens = list(dict.fromkeys(tokenize(query)))  # each distinct word weighs once
        if not tokens or limit <= 0:
            return BackendResult({"results": []})
        return await self._thread.run(lambda: self._search(namespace, tokens, limit))

    def _search(self, namespace: str, tokens: list[str], limit: int) -> BackendResult:
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
        return await self._thread.run(lambda: self._get(namespace, item_id))

    def _get(self, namespace: str, item_id: str) -> BackendResult:
        row = self._current(namespace, item_id)
        return BackendResult(self._memory(row).model_dump(mode="json", exclude_none=True))

    async def list(self, namespace: str, *, limit: int = 50, offset: int = 0) -> BackendResult:
        return await self._thread.run(lambda: self._list(namespace, limit, offset))

    def _list(self, namespace: str, limit: int, offset: int) -> BackendResult:
        with self._snapshot():
            total = self._one(
                "SELECT count(*) AS n FROM builtin_memory WHERE namespace = ? AND valid_to IS NULL",
                (namespace,),
            )
            rows = self._rows(
                f"SELECT {COLUMNS} FROM builtin_memory WHERE namespace = ? AND valid_to IS NULL"
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
        inline = current_inline_event(self.real_path)
        at = utc_now().isoformat()

        def work() -> _Written:
            row = self._current(namespace, item_id)
            old_tags = tags_of(row)
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
            current = self._current(namespace, item_id)  # inside the transaction: what was committed
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
            return _Written(
                self,
                BackendResult(value, [effect]),
                namespace,
                generation,
                removed=row["version_id"],
                added=(version_id, new_content),
            )

        return await self._write(inline, work)

    async def delete(
        self, namespace: str, item_id: str, *, provenance: Provenance | None = None
    ) -> BackendResult:
        inline = current_inline_event(self.real_path)
        at = utc_now().isoformat()

        def work() -> _Written:
            row = self._current(namespace, item_id)
            self._close_version(row, at, "delete")
            generation = self._bump_generation(namespace)
            effect = MemoryEffect(
                kind=EffectKind.DELETE,
                item_id=item_id,
                namespace=namespace,
                content_before=row["content"],
                tags_before=tags_of(row),
            )
            value = {"id": item_id, "deleted": True, "deleted_at": at}
            return _Written(
                self, BackendResult(value, [effect]), namespace, generation, removed=row["version_id"]
            )

        return await self._write(inline, work)

    async def history(self, namespace: str, item_id: str) -> BackendResult:
        return await self._thread.run(lambda: self._history(namespace, item_id))

    def _history(self, namespace: str, item_id: str) -> BackendResult:
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
                tags=tags_of(row),
                provenance=provenance_of(row),
                valid_from=datetime.fromisoformat(row["valid_from"]),
                valid_to=datetime.fromisoformat(row["valid_to"]) if row["valid_to"] else None,
                closed_by=row["closed_by"],
            ).model_dump(mode="json", exclude_none=True)
            for row in rows
        ]
        return BackendResult({"id": item_id, "namespace": namespace, "versions": versions})
