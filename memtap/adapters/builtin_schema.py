"""The builtin backend's tables (their own migration set, ``memtap.builtin``) and row helpers."""

from __future__ import annotations

from typing import Any

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from memtap.adapters.bm25 import tokenize
from memtap.trace.models import AccessTags, Provenance

__all__ = ["COLUMNS", "MIGRATIONS", "fts_query", "provenance_of", "tags_of"]

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


def tags_of(row: dict[str, Any]) -> AccessTags | None:
    return AccessTags.model_validate_json(row["tags"]) if row["tags"] else None


def provenance_of(row: dict[str, Any]) -> Provenance:
    return Provenance.model_validate_json(row["provenance"]) if row["provenance"] else Provenance()


COLUMN_NAMES = (
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
COLUMNS = ", ".join(COLUMN_NAMES)
