"""Real effects of ``mcp-memory-libsql`` (npm): a knowledge graph in a libSQL (SQLite) file.

The server keeps the reference server's model (entities with observations, relations)
in three tables (``entities``, ``observations``, ``relations``), so memtap records it
with the same items and the same content-derived ids (:mod:`memtap.adapters.memory_server`):
an observation is ``obs_`` + a hash of its entity and text, the same in every event
and across restarts, and the same item as on the reference server.

Its answers say little about what it did, and some of what it does is destructive:

- ``create_entities`` on an entity that exists *replaces* its type and all its
  observations (the server deletes them first); memtap records the removed
  observations as deletes and the new ones as updates derived from what they replaced
  (paired as for the reference server: one new observation derives from all removed,
  several pair in order), and a changed type as an update of the entity;
- it stores text sanitised (control characters dropped, trimmed, cut to 4096
  characters), so the content recorded is what the file holds, not what was sent;
- each entity is its own transaction: a call that fails on its second entity has
  stored the first, and memtap records that effect on the failed call;
- ``create_relations`` stores duplicates (no unique key): a relation already there
  adds nothing; ``delete_relation`` removes every copy.

memtap reads the rows of the entities a mutating call names (their observations and
the relations touching them) from the file, before and after the call, in a worker
thread, and records the difference. The file is found from the server's own
``LIBSQL_URL`` (``file:PATH``; a relative path, and the default ``./memory-tool.db``,
against the server's working folder). A remote ``libsql://`` URL cannot be read: the
server is then wrapped without derived effects (calls are recorded, effects are not).
A call that ends in an upstream error is reconciled like the reference server's
(:mod:`memtap.adapters.reconcile`).
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import unicodedata
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from memtap.adapters.connections import LateAnswer
from memtap.adapters.graph_state import Graph
from memtap.adapters.memory_server import (
    _READS,
    entity_id,
    observation_id,
    relation_id,
    relation_text,
    retrieval_effects,
)
from memtap.adapters.reconcile import Reconciler
from memtap.adapters.sqlite_reader import SqliteStore, placeholders
from memtap.adapters.tap_call import Answered, forward_read, forward_write
from memtap.config import McpServerConfig, StdioServerConfig
from memtap.errors import UpstreamError
from memtap.trace.models import AccessTags, Context, EffectKind, MemoryEffect, Op

if TYPE_CHECKING:
    from memtap.adapters.upstream import Upstream
    from memtap.trace.calls import CallRecord

__all__ = ["MUTATING_TOOLS", "LibsqlState", "LibsqlTap", "libsql_file_for", "named_entities", "sanitize"]

log = logging.getLogger("memtap.upstream")

MUTATING_TOOLS = frozenset({"create_entities", "create_relations", "delete_entity", "delete_relation"})
_NAME_CHARS = 256


def sanitize(text: str) -> str:
    """The server's ``sanitize_input``: control and format characters dropped, trimmed."""
    kept = "".join(c for c in text if c in "\n\t" or unicodedata.category(c)[0] != "C")
    return re.sub(r"\n{3,}", "\n\n", kept).strip()


def libsql_file_for(config: McpServerConfig, env: Mapping[str, str] | None = None) -> Path | None:
    """The SQLite file a stdio ``mcp-memory-libsql`` keeps its graph in; None for a remote URL."""
    if not isinstance(config, StdioServerConfig):
        return None
    env = config.env if env is None else env
    url = env.get("LIBSQL_URL") or "file:./memory-tool.db"
    if not url.startswith("file:"):
        return None
    path = url[len("file:") :].split("?", 1)[0]
    if path.startswith("//"):  # file:///abs/path
        path = path[2:]
    if not path:
        return None
    return Path(path) if os.path.isabs(path) else Path(config.cwd or os.getcwd()) / path


def named_entities(tool: str, arguments: dict[str, Any]) -> list[str]:
    """The entity names a mutating call can change, as sent and as the server stores them."""
    raw: list[Any] = []
    if tool == "create_entities":
        items = arguments.get("entities")
        raw = [i.get("name") for i in items if isinstance(i, dict)] if isinstance(items, list) else []
    elif tool == "create_relations":
        items = arguments.get("relations")
        if isinstance(items, list):
            raw = [i.get(k) for i in items if isinstance(i, dict) for k in ("source", "target")]
    elif tool == "delete_entity":
        raw = [arguments.get("name")]
    elif tool == "delete_relation":
        raw = [arguments.get("source"), arguments.get("target")]
    names = [n for n in raw if isinstance(n, str)]
    return list(dict.fromkeys([*names, *(sanitize(n)[:_NAME_CHARS] for n in names)]))


def _graph_of(conn: sqlite3.Connection, names: frozenset[str] | None) -> Graph:
    """The entities ``names`` (None: all), their observations and the relations touching them."""
    graph = Graph()
    if names is not None and not names:
        return graph
    where, args = ("", []) if names is None else (f" WHERE name IN ({placeholders(len(names))})", list(names))
    types = dict(conn.execute(f"SELECT name, entity_type FROM entities{where}", args).fetchall())
    owner = where.replace("name", "entity_name")
    observations: dict[str, list[str]] = {}
    for name, content in conn.execute(
        f"SELECT entity_name, content FROM observations{owner} ORDER BY id", args
    ).fetchall():
        observations.setdefault(name, []).append(content)
    for name, kind in types.items():
        graph.entities[name] = (str(kind), observations.get(name, []))
    if names is None:
        rows = conn.execute("SELECT source, relation_type, target FROM relations ORDER BY id").fetchall()
    else:
        marks = placeholders(len(names))
        rows = conn.execute(
            "SELECT source, relation_type, target FROM relations "
            f"WHERE source IN ({marks}) OR target IN ({marks}) ORDER BY id",
            [*names, *names],
        ).fetchall()
    graph.relations = list(dict.fromkeys((str(s), str(t), str(o)) for s, t, o in rows))
    return graph


def _missing_tables(exc: OSError) -> bool:
    return "no such table" in str(exc)


class LibsqlState:
    """The server's libSQL file, read by entity name (the interface the reconciler reads through)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.store = SqliteStore(path)

    def read(self, names: frozenset[str], *, fresh: bool = True) -> Graph:
        """The state of ``names`` now, in this thread (the reconciler calls it from a worker thread)."""
        try:
            return self.store.read_now(lambda conn: _graph_of(conn, names), Graph())
        except OSError as exc:
            if _missing_tables(exc):  # a file the server has not set up yet holds nothing
                return Graph()
            raise

    def scan_all(self) -> Graph:
        try:
            return self.store.read_now(lambda conn: _graph_of(conn, None), Graph())
        except OSError as exc:
            if _missing_tables(exc):
                return Graph()
            raise

    async def read_async(self, names: frozenset[str] | None) -> Graph:
        """The state of ``names`` (None: the whole graph), read in a worker thread."""
        if names is None:
            return await anyio.to_thread.run_sync(self.scan_all)
        return await anyio.to_thread.run_sync(lambda: self.read(names))

    def forget(self) -> None:
        """Nothing is cached: every read goes to the file."""


class LibsqlTap:
    """Forwards calls to ``mcp-memory-libsql`` and derives what each one changed from its file."""

    def __init__(self, upstream: Upstream, path: Path) -> None:
        self.upstream = upstream
        self.file = LibsqlState(path)
        self.reconciler = Reconciler(self)  # type: ignore[arg-type]  # the same reading interface

    @property
    def method(self) -> str:
        return f"file {self.file.path}"

    async def read_from_server(self, names: frozenset[str] | None) -> Graph:
        """The server has no exact read of named entities (``read_graph`` gives the ten newest)."""
        raise UpstreamError(f"upstream {self.upstream.name!r}: its state can only be read from its file")

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
        if tool not in MUTATING_TOOLS and (tool in _READS or not upstream.kind_of(tool).mutates):
            result = await forward_read(upstream, tool, arguments, meta, record, answered)
            effects = retrieval_effects(result, context) if tool == "search_nodes" else []
            return result, effects, None
        # A write this profile does not know (a newer server's tool) is diffed over the whole graph.
        named = named_entities(tool, arguments) if tool in MUTATING_TOOLS else []
        names = frozenset(named) if tool in MUTATING_TOOLS else None

        async def read_before() -> Graph:
            if self.reconciler.unsettled:
                await self.reconciler.settle()
            return await self.file.read_async(names)

        async def read_after() -> Graph:
            after = await self.file.read_async(names)
            self.reconciler.succeeded(names, after)
            return after

        late = LateAnswer()  # a timed-out write is settled by its late answer (reconcile.py)

        async def failed(before: Graph, exc: UpstreamError) -> None:
            await self.reconciler.failed(tool, names, before, context, record, exc, late)

        result, before, after = await forward_write(
            upstream, tool, arguments, meta, record, answered, read_before=read_before,
            read_after=read_after, failed=failed, unread=lambda: self.reconciler.succeeded(names, None),
            late=late,
        )  # fmt: skip
        if after is None:
            return result, [], None
        order = list(dict.fromkeys([*named, *before.entities, *after.entities]))
        effects = diff(before, after, order, context.namespace)
        kinds = {e.kind for e in effects}
        op = Op.UPDATE if EffectKind.UPDATE in kinds and EffectKind.ADD not in kinds else None
        return result, effects, op


def diff(before: Graph, after: Graph, order: Iterable[str], namespace: str | None) -> list[MemoryEffect]:
    """What changed between two states of the named entities, in the call's order.

    Observations an entity lost and gained in the same call (``create_entities`` over an
    existing entity) are paired: the new ones are updates derived from the old.
    """
    tags = AccessTags(owner=namespace)
    effects: list[MemoryEffect] = []

    def effect(kind: EffectKind, item: str, old: str | None, new: str | None, sources: list[str]) -> None:
        effects.append(
            MemoryEffect(
                kind=kind, item_id=item, namespace=namespace, content_before=old, content_after=new,
                tags_after=tags if kind != EffectKind.DELETE else None, derived_from=sources,
            )
        )  # fmt: skip

    for name in order:
        old, new = before.entities.get(name), after.entities.get(name)
        if old is None and new is not None:
            effect(EffectKind.ADD, entity_id(name), None, f"{name} ({new[0]})", [])
        elif old is not None and new is None:
            effect(EffectKind.DELETE, entity_id(name), f"{name} ({old[0]})", None, [])
        elif old is not None and new is not None and old[0] != new[0]:
            effect(EffectKind.UPDATE, entity_id(name), f"{name} ({old[0]})", f"{name} ({new[0]})", [])
        old_obs = dict.fromkeys(old[1]) if old else {}
        new_obs = dict.fromkeys(new[1]) if new else {}
        removed = [o for o in old_obs if o not in new_obs]
        added = [o for o in new_obs if o not in old_obs]
        for text in removed:
            effect(EffectKind.DELETE, observation_id(name, text), text, None, [])
        replaced: dict[str, list[str]] = {}
        if removed and new is not None:  # replaced in place, not deleted with the entity
            if len(added) == 1:
                replaced = {added[0]: removed}
            else:
                replaced = {n: [o] for n, o in zip(added, removed, strict=False)}
        for text in added:
            sources = replaced.get(text, [])
            effect(
                EffectKind.UPDATE if sources else EffectKind.ADD,
                observation_id(name, text),
                "\n".join(sources) if sources else None,
                text,
                [observation_id(name, o) for o in sources],
            )
    old_rel, new_rel = set(before.relations), set(after.relations)
    for relation in before.relations:
        if relation not in new_rel:
            effect(EffectKind.DELETE, relation_id(relation), relation_text(relation), None, [])
    for relation in after.relations:
        if relation not in old_rel:
            effect(EffectKind.ADD, relation_id(relation), None, relation_text(relation), [])
    return effects
