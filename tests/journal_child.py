"""A process that records events through the durable journal, says they were answered, and waits
to be killed before any of them is put into the database (tests/test_durable_journal.py)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from trace_builder import add_event

from memtap.trace.writer import Recorder


async def main(db: Path, n: int, content: str) -> None:
    # No linger runs out and no batch fills: only flush() or close() would insert the events.
    recorder = Recorder(db, durable=True, journal_linger_s=3600, journal_pending=1_000_000).start()
    events = [add_event(i) for i in range(n)]
    for event in events:
        event.effects[0].content_after = f"{content} {event.effects[0].content_after}"
        await recorder.record(event)
    answer = {
        "ids": [e.id for e in events],
        "journaled": recorder.stats.journaled,
        "written": recorder.stats.written,
    }
    print(json.dumps(answer), flush=True)
    sys.stdin.read()  # until killed


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]))
