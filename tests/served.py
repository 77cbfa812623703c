"""The real memtap app served by uvicorn on a free port, in a thread of this process (so the
SDK's in-memory span exporter sees its spans)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memtap.config import ConfigFile
from memtap.harness.inprocess import InProcessServer
from memtap.proxy.runtime import Settings
from memtap.trace.models import TraceEvent
from memtap.trace.store import TraceStore


class ServedMemtap(InProcessServer):
    def __init__(self, db: Path, config: dict[str, Any], **settings: Any) -> None:
        super().__init__(
            Settings(db=db, config=ConfigFile.model_validate(config), **settings), name="memtap-under-test"
        )

    def events(
        self, predicate: Callable[[list[TraceEvent]], bool], timeout: float = 10.0
    ) -> list[TraceEvent]:
        """Recorded events, once ``predicate`` holds for them (recording runs after the answer)."""
        deadline = time.monotonic() + timeout
        while True:
            assert self.runtime is not None
            self.runtime.recorder.flush()
            store = TraceStore(self.db)
            try:
                events = store.list_events()
            finally:
                store.close()
            if predicate(events):
                return events
            if time.monotonic() > deadline:
                raise AssertionError(f"recorded events never matched; got {[(e.op, e.tool) for e in events]}")
            time.sleep(0.01)


def chats(count: int) -> Callable[[list[TraceEvent]], bool]:
    return lambda events: sum(e.op.value == "chat" for e in events) >= count
