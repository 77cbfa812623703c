"""The real memtap app served by uvicorn on a free port, in a thread of this process (so the
SDK's in-memory span exporter sees its spans)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn

from memtap.config import ConfigFile
from memtap.proxy.app import create_app
from memtap.proxy.runtime import Runtime, Settings
from memtap.trace.models import TraceEvent
from memtap.trace.store import TraceStore


class ServedMemtap:
    def __init__(self, db: Path, config: dict[str, Any], **settings: Any) -> None:
        self.db = db
        self.settings = Settings(db=db, config=ConfigFile.model_validate(config), **settings)
        self.port = 0
        self.runtime: Runtime | None = None
        self._server: uvicorn.Server | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="memtap-under-test", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> ServedMemtap:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("memtap did not start")
        if self._error is not None:
            raise self._error
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # surfaced to the test by start()
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        import socket

        self.runtime = Runtime(self.settings)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            create_app(self.runtime), log_level="warning", lifespan="on", access_log=False
        )
        self._server = uvicorn.Server(config)
        task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.005)
        self._ready.set()
        try:
            await task
        finally:
            await self.runtime.aclose()

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        self._thread.join(30)

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
