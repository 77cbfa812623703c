"""The live detectors' own process: it tails the trace database and runs the engine there.

Run by :class:`memtap.findings.live.LiveFindings` as ``python -m memtap.findings.worker DB``.
Detection is pure Python; on a thread of the serving process it took the interpreter lock from
the recorder for as long as the recorder itself held it (the recorder ran at a third of its rate
beside it). In a process of its own it runs on another core and shares nothing with the calls.

The protocol is JSON lines. On stdin: first the setup (``{"after": ROWID, "canaries":
[[value, owners, configured], ...]}``), then a number each time the parent committed events (a
"poke"). For each poke the worker reads every event committed after the last one it examined
(in commit order: rowid), feeds the engine, stores new findings, and answers on stdout
``{"ack": N, "findings": [...], "stats": {...}}`` (while more pokes are already waiting, new
findings are stored and answered with theirs, at most a quarter second later: fewer write
transactions beside the recorder's). End of stdin ends it.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import select
import sys
import time
from typing import IO, Any

__all__ = ["main"]

log = logging.getLogger("memtap.findings.worker")

_PAGE = 5000
# The worker's scheduling priority (Unix nice): below the serving process, so that on a busy
# machine the recorder keeps its rate and detection waits for spare CPU (it catches up later;
# nothing is skipped, the events are in the database).
NICE = 19


# While more commits are already announced, new findings wait (at most this long) to be stored
# with theirs: one write transaction beside the recorder's instead of one per commit.
_SAVE_EVERY_S = 0.25


class _Pokes:
    """Lines from the parent on a file descriptor, and whether another one is already waiting."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = b""

    def line(self) -> str | None:
        """The next line (blocking); ``None`` at the end of the input."""
        while b"\n" not in self.buffer:
            data = os.read(self.fd, 65536)
            if not data:
                return None
            self.buffer += data
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line.decode("utf-8")

    def waiting(self) -> bool:
        if b"\n" in self.buffer:
            return True
        try:
            ready, _, _ = select.select([self.fd], [], [], 0)
        except (OSError, ValueError):  # no select on this kind of pipe: answer every poke
            return False
        return bool(ready)


def _serve(setup: dict[str, Any], db: str, pokes: _Pokes, out: IO[str]) -> None:
    from memtap.findings.access import Canary
    from memtap.findings.engine import Engine, make_detectors
    from memtap.findings.model import Finding
    from memtap.findings.reader import read_page
    from memtap.findings.storage import PurgedMeanwhile, purge_mark, save_findings
    from memtap.trace.store import TraceStore

    def fresh_engine() -> Engine:
        canaries = [
            Canary(value, set(owners), bool(configured)) for value, owners, configured in setup["canaries"]
        ]
        return Engine(make_detectors(canaries))

    def rebuilt() -> tuple[Engine, list[Finding], int | str | None]:
        """After a purge: the state worked out again from the purged trace (so no rule quotes
        what it removed), and the findings of the events whose findings are not stored yet."""
        gc.unfreeze()  # the old state goes
        engine = fresh_engine()
        (stored_events,) = store.db.conn.execute(
            "SELECT count(*) FROM events WHERE rowid > ? AND rowid <= ?", (start, saved_after)
        ).fetchone()
        pending: list[Finding] = []
        position: int | str | None = start
        while True:
            limit = min(_PAGE, stored_events) if stored_events > 0 else _PAGE
            events, position = read_page(store.db.conn, after=position, limit=limit, by_rowid=True, lean=True)
            if not events:
                return engine, pending, position
            found = engine.feed(events)
            if stored_events > 0:
                stored_events -= len(events)  # their findings are stored (and purged with the rest)
            else:
                pending.extend(found)

    engine = fresh_engine()
    store = TraceStore(db)
    start = int(setup["after"])
    after: str | int | None = start
    saved_after: str | int | None = start  # the findings of the events up to here are stored
    mark = purge_mark(store.db)  # the state holds nothing a purge after this mark removed
    stored = 0
    pending: list[Finding] = []
    errors: list[str] = []
    last_save = time.monotonic()
    try:
        while (line := pokes.line()) is not None:
            if not line.strip():
                continue
            seq = int(line)
            try:
                now = purge_mark(store.db)  # taken first: a purge while rebuilding moves it again
                if now != mark:  # the state may hold what a purge removed: worked out again
                    engine, pending, after = rebuilt()
                    mark = now  # only once rebuilt: a rebuild that failed is tried on the next poke
                while True:
                    events, after = read_page(
                        store.db.conn, after=after, limit=_PAGE, by_rowid=True, lean=True
                    )
                    if not events:
                        break
                    pending.extend(engine.feed(events))
            except Exception as exc:  # reported; the next poke reads on from where this stopped
                log.exception("live findings: events could not be examined")
                errors.append(f"{type(exc).__name__}: {exc}")
            if pending and pokes.waiting() and time.monotonic() - last_save < _SAVE_EVERY_S:
                continue  # stored and answered with the commits already announced
            fresh: list[dict[str, Any]] = []
            try:
                for _ in range(3):  # a purge between reading and storing: worked out again
                    try:
                        saved = save_findings(store.db, pending, read_at_purge=mark) if pending else []
                        break
                    except PurgedMeanwhile:
                        now = purge_mark(store.db)
                        engine, pending, after = rebuilt()
                        mark = now
                else:
                    raise PurgedMeanwhile("purges kept coming while the findings were stored")
                stored += len(saved)
                fresh = [f.as_dict() for f in saved]
                pending = []
                saved_after = after
            except Exception as exc:  # kept: stored with the next poke's (saving twice keeps one)
                log.exception("live findings: findings could not be stored")
                errors.append(f"{type(exc).__name__}: {exc}")
            last_save = time.monotonic()
            # What is alive now stays (the state): later collections look at new objects only.
            gc.freeze()
            stats = engine.stats
            answer = {
                "ack": seq,
                "findings": fresh,
                "error": "; ".join(errors) or None,
                "stats": {
                    "events": stats.events,
                    "findings": stats.findings,
                    "stored": stored,
                    "by_kind": stats.by_kind,
                    "detector_errors": stats.detector_errors,
                    "last_error": stats.last_error,
                },
            }
            errors = []
            out.write(json.dumps(answer, ensure_ascii=False, default=str) + "\n")
            out.flush()
    finally:
        store.close()


def main() -> None:
    if hasattr(os, "nice"):
        os.nice(NICE)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(name)s: %(message)s")
    # The protocol owns stdin and stdout: anything else printing goes to stderr.
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w", encoding="utf-8")
    sys.stdout = sys.stderr
    pokes = _Pokes(sys.stdin.fileno())
    setup = json.loads(pokes.line() or "{}")
    if len(sys.argv) != 2 or "after" not in setup:
        print("usage: python -m memtap.findings.worker DB (setup on stdin)", file=sys.stderr)
        raise SystemExit(2)
    _serve(setup, sys.argv[1], pokes, out)


if __name__ == "__main__":
    main()
