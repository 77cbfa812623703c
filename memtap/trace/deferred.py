"""Durable commits that leave the items for a moment later.

In ``--durable`` mode each caller waits for the synced commit of its event. That commit is
the durable record: the event, its effects (everything the items are derived from) and one
``pending_items`` row per event with effects (migration m029). The items and item versions
the effects imply are five more b-trees, so five more pages written with every commit of a
lone caller's event. The recorder applies them after answering, for many events at a time
(up to :data:`ITEMS_BATCH` events, or when no event came for :data:`ITEMS_LINGER_S`, or at a
flush or close), in one transaction that deletes their pending rows and needs no sync of its
own: the next synced commit carries its pages to disk, and until then the pending rows
(synced) say what is still to do. The items of a durable event therefore show a few
milliseconds after its answer; :meth:`memtap.trace.writer.Recorder.flush` waits for them.
A crash in between leaves rows here, and the next store opened for writing applies them
(:func:`recover_pending`), so every acknowledged event's items exist after a restart, and
none is applied twice: an event is applied only in the transaction that deletes its row.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING

from memtap.trace.models import TraceEvent
from memtap.trace.store import immediate_transaction, materialise_events

if TYPE_CHECKING:
    from memtap.trace.store import TraceStore

__all__ = ["ITEMS_BATCH", "ITEMS_LINGER_S", "materialise_pending", "recover_pending"]

log = logging.getLogger("memtap.recorder")

# Apply the items of a durable recorder's events when this many wait, or when no event came
# for this long: one transaction (about six pages) for many events, not five pages in each commit.
ITEMS_BATCH = 64
ITEMS_LINGER_S = 0.01


def materialise_pending(conn: sqlite3.Connection, events: Sequence[TraceEvent]) -> int:
    """Apply the items of ``events`` whose ``pending_items`` rows are still there, deleting the
    rows, in one transaction committed without a sync (the connection's level is restored).

    Returns how many events were applied (another process's :func:`recover_pending` may have
    applied some already). Raises ``sqlite3.Error``; the transaction is then rolled back and
    the rows stay for a later try.
    """
    if not events:
        return 0
    (level,) = conn.execute("PRAGMA synchronous").fetchone()
    conn.execute("PRAGMA synchronous = NORMAL")
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            ids = [event.id for event in events]
            held: set[str] = set()
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                held.update(
                    row[0] for row in conn.execute(f"SELECT event_id FROM pending_items WHERE event_id IN ({marks})", chunk)
                )
                conn.execute(f"DELETE FROM pending_items WHERE event_id IN ({marks})", chunk)
            due = [event for event in events if event.id in held]
            materialise_events(conn, due)
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    finally:
        conn.execute(f"PRAGMA synchronous = {int(level)}")
    return len(due)


def recover_pending(store: TraceStore) -> int:
    """Apply the items of every event a durable recorder committed and did not get to apply
    (it was killed in between); returns how many. A store that cannot be written, or a database
    that is busy, is left as it is (the next writable open tries again)."""
    conn = store.db.conn
    try:
        if conn.execute("SELECT 1 FROM pending_items LIMIT 1").fetchone() is None:
            return 0
        with immediate_transaction(store.db):
            ids = [row[0] for row in conn.execute("SELECT event_id FROM pending_items ORDER BY event_id")]
            events = []
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = list(store.db.query(f"SELECT * FROM events WHERE id IN ({marks}) ORDER BY id", chunk))
                events.extend(store._events_from_rows(rows))
            conn.execute("DELETE FROM pending_items")
            materialise_events(conn, events)
    except sqlite3.Error as exc:
        log.warning("%s: the items of events committed before a crash are not applied yet: %s", store.path, exc)
        return 0
    log.warning("%s: applied the items of %d events committed before a crash", store.path, len(events))
    return len(events)
