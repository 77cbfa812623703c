"""The recorder's journal lane: which durable batches the journal takes, and what waits to be inserted.

Used by the writer thread of :class:`memtap.trace.writer.Recorder` only (no locking). A batch of
at most ``batch`` events goes to the synced journal (:mod:`memtap.trace.journal`) while the
database takes commits (``healthy``); the events then wait in ``pending`` until the recorder
inserts them, ahead of its next batch, in one commit, after which the journal is reset. Anything
wrong with the journal file turns the lane off (said once in the log): durable batches then
commit to the database as they did before the journal, and whatever the file holds is recovered
by the next start.
"""

from __future__ import annotations

import logging
from pathlib import Path

from memtap.trace.journal import JOURNAL_BYTES, Journal, JournalBusy, journal_path, recover
from memtap.trace.models import TraceEvent
from memtap.trace.store import TraceStore

__all__ = ["JournalLane"]

log = logging.getLogger("memtap.recorder")


class JournalLane:
    def __init__(
        self,
        db: Path,
        *,
        enabled: bool,
        size: int = JOURNAL_BYTES,
        batch: int = 4,
        pending_max: int = 64,
        linger_s: float = 0.01,
    ) -> None:
        self.db = db
        self.path = journal_path(db)
        self.enabled = enabled
        self.size = size
        self.batch = batch  # the largest batch the journal takes
        self.pending_max = pending_max  # insert once this many wait
        self.linger_s = linger_s  # ... or once no event came for this long
        self.journal: Journal | None = None
        self.pending: list[TraceEvent] = []  # answered from the journal, not yet in the tables
        self.healthy = True  # the last commit succeeded: while not, batches commit (and callers see why)

    def open(self, store: TraceStore) -> int:
        """Put in the events a previous process left in the journal (how many), then keep the
        journal (``enabled``) or remove it. Raises StoreError when the database refuses them."""
        path = self.path
        if not self.enabled and not path.exists():
            return 0
        try:
            journal = Journal.open(path, create=self.enabled, size=self.size, mode_of=self.db)
        except JournalBusy:  # another process on this database uses it (and recovers it)
            log.warning("%s is in use by another memtap; durable events commit to the database", path)
            return 0
        except FileNotFoundError:
            return 0
        except OSError as exc:
            log.warning(
                "durable journal %s cannot be used (%s); durable events commit to the database", path, exc
            )
            return 0
        found = 0
        try:
            found = recover(store, journal)
            if found:
                log.warning(
                    "recovered %d events from the durable journal %s (a crash came first)", found, path
                )
            if self.enabled:
                journal.wipe()
                self.journal = journal
                return found
            path.unlink()  # not durable now: the journal is not needed
        except OSError as exc:
            log.warning(
                "durable journal %s cannot be used (%s); durable events commit to the database", path, exc
            )
        finally:
            if self.journal is None:
                journal.close()
        return found

    def take(self, events: list[TraceEvent]) -> bool:
        """Append ``events`` to the journal and sync it (then they are durable and pending); False:
        the lane does not take them (too many, too big, the database refuses, the file failed)."""
        journal = self.journal
        if journal is None or not self.healthy or len(events) > self.batch:
            return False
        try:
            payloads = [event.model_dump_json().encode() for event in events]
            if not journal.fits(payloads):
                return False  # committed with the pending ones, after which the journal is empty
            journal.append(payloads)
        except OSError as exc:
            self.stop(f"writing it failed: {exc}")
            return False
        self.pending.extend(events)
        return True

    def due(self, flush: bool) -> bool:
        """Whether the pending events are to be inserted now."""
        return bool(self.pending) and (flush or len(self.pending) >= self.pending_max)

    def inserted(self, *, all_saved: bool, some_spilled: bool) -> None:
        """The pending events were committed or spilled: reset the journal. ``all_saved`` false
        (the spill file failed too): the journal is all that holds some of them, so it is kept."""
        self.pending = []
        if self.journal is None:
            return
        if not all_saved:
            self.stop(
                "some journaled events could not be written nor spilled; it keeps them for the next start"
            )
            return
        try:
            self.journal.reset(sync=some_spilled)
        except OSError as exc:
            self.stop(f"resetting it failed: {exc}")

    def stop(self, why: str) -> None:
        """Stop using the journal (said once in the log); its records stay for the next start."""
        log.error("durable journal %s: %s; durable events commit to the database from now on", self.path, why)
        self.close()

    def close(self) -> None:
        if self.journal is not None:
            self.journal.close()
            self.journal = None
