"""Real effects of ``mcp-memory-keeper`` (npm): keyed context items in a SQLite file.

A memory item there is one row of ``context_items``: a ``key`` and its ``value`` in a
session (with category, priority, channel and a private flag); the pair (session, key)
is unique. memtap gives it the stable id ``ctx_`` + a hash of the session and the key,
so a later save under the same key is an **update** of the same item (the server does
``INSERT OR REPLACE``: a new row with a new row id, the old value gone), recorded with
the value before and after. A save that stores exactly what was there records nothing.

memtap reads the rows a mutating call names, before and after the call, from the
server's own database (``DATA_DIR/context.db``; the server's default ``DATA_DIR`` is
``~/mcp-data/memory-keeper``), read-only, in a worker thread:

- ``context_save``, ``context_batch_save``, ``context_batch_update``, and
  ``context_batch_delete`` with ``keys``: the rows with those keys (in any session:
  the server's current session lives in its process, memtap learns it from the rows
  each write changes);
- every other tool its profile says may change memory (``context_batch_delete`` with a
  ``keyPattern``, checkpoint restores, imports, branches and merges of sessions, ...):
  the whole ``context_items`` table, before and after.

Retrievals (``context_get``, ``context_search``, ``context_search_all``,
``context_semantic_search``): the items the answer lists, in its order, with their ids;
an answer that names keys without sessions (the text formats) is resolved against the
rows with those keys (the session the call named, else the server's current one, else
the newest). Content is the stored value (search answers cut values at 100 characters).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memtap.adapters.sqlite_reader import SqliteStore, placeholders
from memtap.adapters.tap_call import Answered, forward_read, forward_write
from memtap.config import McpServerConfig, StdioServerConfig
from memtap.errors import UpstreamError
from memtap.trace.models import AccessTags, Context, EffectKind, MemoryEffect, Op

if TYPE_CHECKING:
    from memtap.adapters.upstream import Upstream
    from memtap.trace.calls import CallRecord

__all__ = ["KEYED_TOOLS", "RETRIEVAL_TOOLS", "KeeperTap", "Row", "item_id", "keeper_file_for", "named_keys"]

log = logging.getLogger("memtap.upstream")

KEYED_TOOLS = frozenset(
    {"context_save", "context_batch_save", "context_batch_update", "context_batch_delete"}
)
RETRIEVAL_TOOLS = frozenset(
    {"context_get", "context_search", "context_search_all", "context_semantic_search"}
)

Key = tuple[str, str]  # (session id, key)


@dataclass(frozen=True)
class Row:
    """What memtap compares of one context item."""

    value: str
    category: str | None
    priority: str | None
    channel: str | None
    private: bool


def item_id(session: str, key: str) -> str:
    data = f"{session}\x1f{key}".encode("utf-8", "surrogatepass")
    return "ctx_" + hashlib.blake2b(data, digest_size=8).hexdigest()


def keeper_file_for(config: McpServerConfig, env: Mapping[str, str] | None = None) -> Path | None:
    """Where a stdio ``mcp-memory-keeper`` keeps its database: ``DATA_DIR/context.db``."""
    if not isinstance(config, StdioServerConfig):
        return None
    env = config.env if env is None else env
    folder = env.get("DATA_DIR") or os.path.join(
        env.get("HOME") or os.path.expanduser("~"), "mcp-data", "memory-keeper"
    )
    if not os.path.isabs(folder):
        folder = os.path.join(config.cwd or os.getcwd(), folder)
    return Path(folder) / "context.db"


def named_keys(tool: str, arguments: dict[str, Any]) -> list[str] | None:
    """The keys a mutating call names; None when it names none exactly (read the whole table)."""

    def keys_of(field: str) -> list[str]:
        items = arguments.get(field)
        found = [i.get("key") for i in items if isinstance(i, dict)] if isinstance(items, list) else []
        return [k for k in found if isinstance(k, str)]

    if tool == "context_save":
        key = arguments.get("key")
        return [key] if isinstance(key, str) else []
    if tool == "context_batch_save":
        return keys_of("items")
    if tool == "context_batch_update":
        return keys_of("updates")
    if tool == "context_batch_delete" and not arguments.get("keyPattern"):
        keys = arguments.get("keys")
        return [k for k in keys if isinstance(k, str)] if isinstance(keys, list) else []
    return None


_COLUMNS = "session_id, key, value, category, priority, channel, is_private"


def _rows(conn: sqlite3.Connection, keys: frozenset[str] | None) -> dict[Key, Row]:
    if keys is not None and not keys:
        return {}
    if keys is None:
        cursor = conn.execute(f"SELECT {_COLUMNS} FROM context_items ORDER BY created_at, rowid")
    else:
        # (session_id, key) is the table's unique index: one probe per session and key.
        cursor = conn.execute(
            f"SELECT {_COLUMNS} FROM context_items WHERE session_id IN (SELECT id FROM sessions) "
            f"AND key IN ({placeholders(len(keys))}) ORDER BY created_at, rowid",
            list(keys),
        )
    return {
        (str(s), str(k)): Row(str(v), c, p, ch, bool(private))
        for s, k, v, c, p, ch, private in cursor.fetchall()
    }


def _texts(result: dict[str, Any]) -> list[str]:
    return [
        c["text"]
        for c in result.get("content") or []
        if isinstance(c, dict) and isinstance(c.get("text"), str)
    ]


_BULLET = re.compile(r"^• \[[^\]]*\] (.+) \([^()]*\)$")
_KEY_LINE = re.compile(r"^\s+Key: (.+)$")


def listed_items(result: dict[str, Any]) -> list[tuple[str | None, str]]:
    """The (session or None, key) pairs a retrieval answer lists, in its order."""
    found: list[tuple[str | None, str]] = []
    for text in _texts(result):
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict):
            items = data.get("items")
            if isinstance(items, list):
                for item in items:
                    if isinstance(item, dict) and isinstance(item.get("key"), str):
                        session = item.get("session_id")
                        found.append((session if isinstance(session, str) else None, item["key"]))
            continue
        for line in text.splitlines():
            match = _BULLET.match(line) or _KEY_LINE.match(line)
            if match:
                found.append((None, match.group(1)))
    return list(dict.fromkeys(found))


class KeeperTap:
    """Forwards calls to ``mcp-memory-keeper`` and derives what each one changed from its database."""

    def __init__(self, upstream: Upstream, path: Path) -> None:
        self.upstream = upstream
        self.path = path
        self.store = SqliteStore(path)
        self.session: str | None = None  # the server's current session, as its writes show it

    @property
    def method(self) -> str:
        return f"file {self.path}"

    async def _read(self, keys: frozenset[str] | None) -> dict[Key, Row]:
        try:
            return await self.store.read(lambda conn: _rows(conn, keys), {})
        except OSError as exc:
            if "no such table" in str(exc):  # the server has not set its database up yet
                return {}
            raise

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        meta: dict[str, Any] | None,
        context: Context,
        record: CallRecord | None,
        answered: Answered | None = None,
    ) -> tuple[dict[str, Any], list[MemoryEffect], Op | None]:
        """Forward one call; returns the upstream's result, the real effects, and a refined op.
        ``answered`` is handed the result as soon as it arrives, as ``GraphTap.call`` does."""
        upstream = self.upstream
        if tool not in KEYED_TOOLS and not upstream.kind_of(tool).mutates:
            result = await forward_read(upstream, tool, arguments, meta, record, answered)
            effects: list[MemoryEffect] = []
            if tool in RETRIEVAL_TOOLS and not result.get("isError"):
                effects = await self._retrieved(result, arguments, context)
            return result, effects, None
        named = named_keys(tool, arguments)
        keys = frozenset(named) if named is not None else None

        async def failed(before: dict[Key, Row], exc: UpstreamError) -> None:
            if record is not None:  # what landed before the error, read now, as reconciled effects
                record.effects = await self._reconcile(keys, before, context, tool, exc)

        result, before, after = await forward_write(
            upstream, tool, arguments, meta, record, answered,
            read_before=lambda: self._read(keys), read_after=lambda: self._read(keys), failed=failed,
        )  # fmt: skip
        if after is None:
            return result, [], None
        effects = self._diff(before, after, context.namespace)
        kinds = {e.kind for e in effects}
        op = Op.UPDATE if kinds == {EffectKind.UPDATE} else None
        return result, effects, op

    async def _reconcile(
        self, keys: frozenset[str] | None, before: dict[Key, Row], ctx: Context, tool: str, exc: BaseException
    ) -> list[MemoryEffect]:
        try:
            after = await self._read(keys)
        except OSError as error:
            log.warning("upstream %s: cannot read %s to reconcile: %s", self.upstream.name, self.path, error)
            return []
        evidence = {
            "why": f"{type(exc).__name__}: {exc}",
            "read": f"file {self.path}",
            "keys": sorted(keys) if keys is not None else None,
            "tool": tool,
            "final": False,
        }
        effects = self._diff(before, after, ctx.namespace)
        return [e.model_copy(update={"reconciled": True, "evidence": evidence}) for e in effects]

    def _diff(
        self, before: dict[Key, Row], after: dict[Key, Row], namespace: str | None
    ) -> list[MemoryEffect]:
        effects: list[MemoryEffect] = []
        for where in dict.fromkeys([*before, *after]):
            old, new = before.get(where), after.get(where)
            if old == new:
                continue
            self.session = where[0] if new is not None else self.session
            kind = EffectKind.ADD if old is None else EffectKind.DELETE if new is None else EffectKind.UPDATE
            effects.append(
                MemoryEffect(
                    kind=kind,
                    item_id=item_id(*where),
                    namespace=namespace,
                    content_before=old.value if old is not None else None,
                    content_after=new.value if new is not None else None,
                    tags_after=AccessTags(owner=namespace) if new is not None else None,
                )
            )
        return effects

    async def _retrieved(
        self, result: dict[str, Any], arguments: dict[str, Any], ctx: Context
    ) -> list[MemoryEffect]:
        listed = listed_items(result)
        if not listed:
            return []
        try:
            rows = await self._read(frozenset(key for _, key in listed))
        except OSError as exc:
            log.warning("upstream %s: cannot read %s for a retrieval: %s", self.upstream.name, self.path, exc)
            return []
        asked = arguments.get("sessionId")
        effects: list[MemoryEffect] = []
        for session, key in listed:
            where = self._resolve(session, key, rows, asked if isinstance(asked, str) else None)
            if where is None:
                continue
            effects.append(
                MemoryEffect(
                    kind=EffectKind.RETRIEVE, item_id=item_id(*where), namespace=ctx.namespace,
                    content_after=rows[where].value, rank=len(effects) + 1,
                )
            )  # fmt: skip
        return effects

    def _resolve(self, session: str | None, key: str, rows: dict[Key, Row], asked: str | None) -> Key | None:
        if session is not None:
            return (session, key) if (session, key) in rows else None
        for candidate in (asked, self.session):
            if candidate is not None and (candidate, key) in rows:
                return (candidate, key)
        holding = [where for where in rows if where[1] == key]
        return holding[-1] if holding else None  # the newest row with that key

    def close(self) -> None:
        self.store.close()
