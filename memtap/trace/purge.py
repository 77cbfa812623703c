"""``memtap purge``: remove a namespace's or some items' content from a memtap database for good.

What is removed, in one write transaction:

- the builtin backend: the items' rows of ``builtin_memory`` (every version, content and
  metadata) and their entries in the FTS5 index ``builtin_memory_fts`` (deleted, then the
  index is optimized so no segment keeps the old tokens); the namespace's generation is
  bumped, so a ``memtap serve`` holding an in-memory search index of it rebuilds it;
- the trace: ``items`` and ``item_versions`` content and ``effects`` content before/after
  of the items become receipts (``purged;sha256:<hex>;bytes=<n>``); the calls that touched
  them (and, for a namespace, every call in it, with their parent and child calls) have
  their bodies reduced as the ``hashed`` content policy does, and every remaining
  occurrence of a purged text in their arguments, results and errors replaced by its
  receipt; replay answers of the namespace's episodes (``run_probes``), alignment reasons of
  the items and score files likewise.

Then one receipt per item goes to ``purge_receipts``, the WAL is checkpointed and truncated,
and the file is vacuumed with ``secure_delete`` on, so no freed page keeps a byte of it.

Before that, the durable journal beside the database (``<db>.journal``) is settled: when no
process holds it, the events in it are put into the database (to be purged with the rest) and
the whole file is zeroed; a running writer zeroes each record once it is in the database, so a
purge beside it waits (up to 10 s) until its journal holds no record. The spill file is scrubbed.

Left alone, and said so in docs/privacy.md: wrapped upstream servers' own storage, the copy of
a suite's gold kept for scoring (``suite_episodes``), other items that happen to contain the
same text, and spans a running process has already exported.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memtap.errors import ConfigError, StoreError
from memtap.ids import new_id
from memtap.jsontext import json_text
from memtap.trace.journal import settle_journal
from memtap.trace.models import utc_now
from memtap.trace.privacy import reduce_bodies
from memtap.trace.scrub import RECEIPT_PREFIXES, Scrubber, metadata_texts, scrub_spill, stamp
from memtap.trace.sqlite import busy_timeout_ms, describe_sqlite_error
from memtap.trace.store import TraceStore

__all__ = ["PurgeReport", "purge"]


@dataclass
class PurgedItem:
    backend: str
    item_id: str
    namespace: str | None
    contents: list[str] = field(default_factory=list)  # one per version, oldest first

    def receipt(self) -> list[dict[str, Any]]:
        return [
            {"version": i, "sha256": hashlib.sha256(c.encode()).hexdigest(), "bytes": len(c.encode())}
            for i, c in enumerate(self.contents, start=1)
        ]


@dataclass
class PurgeReport:
    """What a purge removed (or, dry run, would remove), rows changed per table."""

    purge_id: str
    scope: str
    items: list[PurgedItem]
    tables: dict[str, int] = field(default_factory=dict)
    dry_run: bool = False
    checkpoint: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "purge_id": self.purge_id,
            "scope": self.scope,
            "dry_run": self.dry_run,
            "items": [
                {
                    "backend": i.backend,
                    "item_id": i.item_id,
                    "namespace": i.namespace,
                    "versions": len(i.contents),
                }
                for i in self.items
            ],
            "tables": self.tables,
            "checkpoint": self.checkpoint,
        }


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def _placeholders(values: Sequence[Any]) -> str:
    return ",".join("?" * len(values))


class _Purge:
    def __init__(self, conn: sqlite3.Connection, report: PurgeReport) -> None:
        self.conn = conn
        self.report = report
        self.tables = _tables(conn)
        self.builtin = "builtin_memory" in self.tables

    def count(self, table: str, n: int) -> None:
        if n:
            self.report.tables[table] = self.report.tables.get(table, 0) + n

    # -- finding what to purge -----------------------------------------------------------

    def find(self, namespace: str | None, item_ids: Sequence[str]) -> list[PurgedItem]:
        found: dict[tuple[str, str], PurgedItem] = {}
        where, args = ("namespace = ?", [namespace]) if namespace is not None else (
            f"item_id IN ({_placeholders(item_ids)})", list(item_ids))  # fmt: skip
        for backend, item_id, ns in self.conn.execute(
            f"SELECT backend, item_id, namespace FROM items WHERE {where}", args
        ):
            found[(backend, item_id)] = PurgedItem(backend, item_id, ns)
        if self.builtin:
            for item_id, ns in self.conn.execute(
                f"SELECT DISTINCT item_id, namespace FROM builtin_memory WHERE {where}", args
            ):
                found.setdefault(("builtin", item_id), PurgedItem("builtin", item_id, ns))
        for item in found.values():
            item.contents = self._contents(item)
        return sorted(found.values(), key=lambda i: (i.backend, i.item_id))

    def _contents(self, item: PurgedItem) -> list[str]:
        """Every text the item ever held: its versions, and what effects said of it."""
        texts: list[str] = []
        key = (item.backend, item.item_id)
        versions = "SELECT content FROM item_versions WHERE backend = ? AND item_id = ? ORDER BY version"
        texts += [r[0] for r in self.conn.execute(versions, key)]
        if item.backend == "builtin" and self.builtin:
            for content, metadata in self.conn.execute(
                "SELECT content, metadata FROM builtin_memory WHERE item_id = ? ORDER BY version",
                (item.item_id,),
            ):
                texts.append(content)
                texts += metadata_texts(metadata)
        for before, after in self.conn.execute(
            "SELECT content_before, content_after FROM effects WHERE backend = ? AND item_id = ?", key
        ):
            texts += [t for t in (before, after) if t]
        return [t for t in dict.fromkeys(texts) if t and not t.startswith(RECEIPT_PREFIXES)]

    def related_events(self, namespace: str | None, items: list[PurgedItem]) -> list[str]:
        ids: set[str] = set()
        keys = [(i.backend, i.item_id) for i in items]
        for backend, item_id in keys:
            found = "SELECT event_id FROM effects WHERE backend = ? AND item_id = ?"
            ids.update(r[0] for r in self.conn.execute(found, (backend, item_id)))
        if namespace is not None:
            ids.update(
                r[0] for r in self.conn.execute("SELECT id FROM events WHERE namespace = ?", (namespace,))
            )
        # The calls they ran inside (a chat that searched or captured) and the calls they caused.
        for chunk in _chunks(sorted(ids)):
            q = _placeholders(chunk)
            parents = f"SELECT parent_id FROM events WHERE id IN ({q}) AND parent_id IS NOT NULL"
            ids.update(r[0] for r in self.conn.execute(parents, chunk))
            ids.update(
                r[0] for r in self.conn.execute(f"SELECT id FROM events WHERE parent_id IN ({q})", chunk)
            )
        return sorted(ids)

    # -- removing ------------------------------------------------------------------------

    def remove_builtin(self, items: list[PurgedItem]) -> set[str]:
        namespaces: set[str] = set()
        if not self.builtin:
            return namespaces
        for item in items:
            if item.backend != "builtin":
                continue
            rows = self.conn.execute(
                "SELECT version_id, content, namespace, item_id, valid_to FROM builtin_memory"
                " WHERE item_id = ?",
                (item.item_id,),
            ).fetchall()
            for version_id, content, ns, item_id, valid_to in rows:
                namespaces.add(ns)
                if valid_to is None:  # only current versions are in the full-text index
                    self.conn.execute(
                        "INSERT INTO builtin_memory_fts (builtin_memory_fts, rowid, content, namespace,"
                        " item_id) VALUES ('delete', ?, ?, ?, ?)",
                        (version_id, content, ns, item_id),
                    )
                    self.count("builtin_memory_fts", 1)
            deleted = self.conn.execute(
                "DELETE FROM builtin_memory WHERE item_id = ?", (item.item_id,)
            ).rowcount
            self.count("builtin_memory", deleted)
        if namespaces:
            # Rewrite the index as one segment: deleted entries leave no tokens in older segments.
            self.conn.execute("INSERT INTO builtin_memory_fts (builtin_memory_fts) VALUES ('optimize')")
            for ns in namespaces:
                self.conn.execute(
                    "INSERT INTO builtin_generation (namespace, value) VALUES (?, 1)"
                    " ON CONFLICT (namespace) DO UPDATE SET value = value + 1",
                    (ns,),
                )
        return namespaces

    def rewrite(
        self,
        table: str,
        columns: Mapping[str, Callable[[str], str]],
        where: str = "1",
        args: Sequence[Any] = (),
    ) -> None:
        """Pass each of ``columns`` of ``table``'s rows matching ``where`` through its function
        (NULL stays NULL) and write back the rows that changed, counting them."""
        names = list(columns)
        rows = self.conn.execute(
            f"SELECT rowid, {', '.join(names)} FROM {table} WHERE {where}", args
        ).fetchall()
        assign = ", ".join(f"{name} = ?" for name in names)
        fns = list(columns.values())
        for rowid, *old in rows:
            new = [None if v is None else fn(v) for fn, v in zip(fns, old, strict=True)]
            if new != old:
                self.conn.execute(f"UPDATE {table} SET {assign} WHERE rowid = ?", (*new, rowid))
                self.count(table, 1)

    def stamp_items(self, items: list[PurgedItem]) -> None:
        """The items' content, in the trace, becomes receipts."""
        for item in items:
            key = (item.backend, item.item_id)
            where = "backend = ? AND item_id = ?"
            self.rewrite("items", {"content": _stamp_content}, where, key)
            self.rewrite("item_versions", {"content": _stamp_content}, where, key)
            columns = {"content_before": _stamp_content, "content_after": _stamp_content}
            self.rewrite("effects", columns, where, key)

    def scrub_events(self, event_ids: list[str], namespace: str | None, scrub: Scrubber) -> None:
        for chunk in _chunks(event_ids):
            rows = self.conn.execute(
                "SELECT id, tool, namespace, arguments, result, error FROM events"
                f" WHERE id IN ({_placeholders(chunk)})",
                chunk,
            ).fetchall()
            for event_id, tool, ns, arguments, result, error in rows:
                args_v, result_v = json.loads(arguments), json.loads(result) if result is not None else None
                if namespace is not None and ns == namespace:
                    args_v, result_v = reduce_bodies(tool, args_v, result_v, "hashed")
                new = (
                    scrub(json_text(args_v)),
                    None if result_v is None else scrub(json_text(result_v)),
                    None if error is None else scrub(error),
                )
                if new != (arguments, result, error):
                    self.conn.execute(
                        "UPDATE events SET arguments = ?, result = ?, error = ? WHERE id = ?",
                        (*new, event_id),
                    )
                    self.count("events", 1)

    def scrub_runs(self, namespace: str | None, scrub: Scrubber) -> None:
        """Replay answers of the namespace's episodes, and what their probes retrieved."""
        if namespace is None or "run_probes" not in self.tables:
            return
        episodes = (
            "SELECT p.rowid FROM run_probes p JOIN run_episodes e ON p.run_id = e.run_id"
            " AND p.episode_id = e.episode_id AND p.attempt = e.attempt WHERE e.namespace = ?"
        )
        self.rewrite(
            "run_probes",
            {"answer": _stamp_content, "retrieved": scrub},
            f"rowid IN ({episodes})",
            (namespace,),
        )

    def scrub_scores(self, items: list[PurgedItem], scrub: Scrubber) -> None:
        """Alignment reasons of the purged items and score files may quote their text."""
        if "alignments" not in self.tables or not scrub:
            return
        for chunk in _chunks(sorted({item.item_id for item in items})):
            self.rewrite("alignments", {"reason": scrub}, f"item_id IN ({_placeholders(chunk)})", chunk)
        self.rewrite("scores", {"json": scrub})

    def scrub_evidence(self, items: list[PurgedItem], scrub: Scrubber) -> None:
        """What reconciliation read of the items (``effects.evidence``) quotes their state."""
        columns = {row[1] for row in self.conn.execute("PRAGMA table_info(effects)")}
        if "evidence" not in columns or not scrub:
            return
        for item in items:
            where = "backend = ? AND item_id = ? AND evidence IS NOT NULL"
            self.rewrite("effects", {"evidence": scrub}, where, (item.backend, item.item_id))

    def scrub_findings(self, scrub: Scrubber) -> None:
        """Findings quote what they judged (summaries and evidence: before/after content, the
        turn that asked for a change), and a cross-namespace finding quotes another namespace's
        item, so every finding is scanned, not only the purged namespace's."""
        if "findings" not in self.tables or not scrub:
            return
        self.rewrite("findings", {"summary": scrub, "evidence": scrub})

    def write_receipts(self, items: list[PurgedItem], by: str) -> None:
        at = utc_now().isoformat()
        for item in items:
            self.conn.execute(
                "INSERT INTO purge_receipts (purge_id, purged_at, purged_by, scope, backend, item_id,"
                " namespace, versions, contents) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (self.report.purge_id, at, by, self.report.scope, item.backend, item.item_id, item.namespace,
                 len(item.contents), json_text(item.receipt())),
            )  # fmt: skip
        self.count("purge_receipts", len(items))


def _stamp_content(text: str) -> str:
    """A purged item's content becomes its receipt (what already is a receipt stays)."""
    return stamp(text) if text and not text.startswith(RECEIPT_PREFIXES) else text


def _chunks(values: Sequence[str], size: int = 500) -> Iterable[list[str]]:
    for start in range(0, len(values), size):
        yield list(values[start : start + size])


def _checkpoint(conn: sqlite3.Connection, deadline_s: float = 10.0) -> str:
    """Copy the WAL into the file and truncate it, waiting for readers of old snapshots."""
    end = time.monotonic() + deadline_s
    while True:
        busy, frames, done = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy == 0 and frames in (done, -1, 0):
            return "truncated"
        if time.monotonic() > end:
            return f"incomplete: {done} of {frames} WAL frames copied (another process is reading)"
        time.sleep(0.05)


def purge(
    db: Path,
    *,
    namespace: str | None = None,
    item_ids: Sequence[str] = (),
    by: str,
    dry_run: bool = False,
) -> PurgeReport:
    """Purge a namespace or items from ``db``; an unknown namespace or item changes nothing."""
    if (namespace is None) == (not item_ids):
        raise ConfigError("purge takes either --namespace or one or more --item")
    if not db.exists():
        raise ConfigError(f"no memtap database at {db}")
    # Events a durable writer answered through its journal but had not yet put into the tables
    # are put in first, so they are purged too, and the journal's bytes are zeroed.
    settle_journal(db)
    TraceStore(db).close()  # apply pending migrations (the receipts table)
    scope = f"namespace:{namespace}" if namespace is not None else "items"
    report = PurgeReport(purge_id=new_id(), scope=scope, items=[], dry_run=dry_run)
    conn = sqlite3.connect(db, isolation_level=None, timeout=busy_timeout_ms() / 1000)
    try:
        conn.execute("PRAGMA secure_delete = ON")
        job = _Purge(conn, report)
        conn.execute("BEGIN IMMEDIATE")
        try:
            items = job.find(namespace, item_ids)
            report.items = items
            if namespace is not None:
                known = (
                    items
                    or conn.execute(
                        "SELECT 1 FROM events WHERE namespace = ? LIMIT 1", (namespace,)
                    ).fetchone()
                )
                if not known:
                    raise ConfigError(
                        f"namespace {namespace!r} has no items or calls in {db}; nothing was purged"
                    )
            else:
                missing = sorted(set(item_ids) - {i.item_id for i in items})
                if missing:
                    raise ConfigError(
                        f"no memory item {', '.join(map(repr, missing))} in {db}; nothing was purged"
                    )
            texts = sorted({t for item in items for t in item.contents}, key=len, reverse=True)
            events = job.related_events(namespace, items)
            job.remove_builtin(items)
            scrub = Scrubber(texts)
            job.stamp_items(items)
            job.scrub_events(events, namespace, scrub)
            job.scrub_runs(namespace, scrub)
            job.scrub_scores(items, scrub)
            job.scrub_evidence(items, scrub)
            job.scrub_findings(scrub)
            job.write_receipts(items, by)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        if dry_run:
            conn.execute("ROLLBACK")
            return report
        conn.execute("COMMIT")
        report.checkpoint = _checkpoint(conn)
        conn.execute("VACUUM")
        report.checkpoint = _checkpoint(conn)
    except sqlite3.Error as exc:
        raise StoreError(describe_sqlite_error(db, exc)) from exc
    finally:
        conn.close()
    scrub_spill(db, texts)
    return report
