"""memtap's pytest plugin (registered through the ``pytest11`` entry point): assert what an agent
did to its memory inside your own tests.

The ``memtap_server`` fixture starts memtap in this process on a free loopback port, on a fresh
trace database under the test's ``tmp_path``: the builtin backend by default, the MCP servers of
``memtap_config``'s ``mcpServers`` wrapped (``memtap proxy``) when it names some, and the chat
proxy at ``.base_url`` whenever ``model_list`` is configured. Hand the agent ``.mcp_url`` or
``.base_url``, run it, then assert::

    def test_agent_forgets_what_it_is_told(memtap_server):
        run_my_agent(mcp_url=memtap_server.mcp_url)
        memtap_server.assert_no_findings("erasure")
        memtap_server.assert_live("Alice lives in Berlin")
        memtap_server.assert_writes("alice", ["Alice lives in Berlin"])

Override the ``memtap_config`` fixture (a dict in the config file's shape) to configure it.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memtap.findings.model import Finding
from memtap.findings.storage import list_findings
from memtap.trace.models import MemoryItem, Op, TraceEvent
from memtap.trace.store import TraceStore

__all__ = ["MemtapServer", "memtap_config", "memtap_server"]


class MemtapServer:
    """A memtap serving in this process, and its trace, items and findings."""

    def __init__(self, db: Path, config: dict[str, Any]) -> None:
        self.db = db
        self.config = config
        self.port = 0
        self.runtime: Any = None
        self._server: Any = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="memtap-pytest", daemon=True)

    @property
    def mcp_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible chat proxy (with ``model_list`` configured)."""
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> MemtapServer:
        self._thread.start()
        if not self._ready.wait(60):
            raise RuntimeError("memtap did not start within 60 s")
        if self._error is not None:
            raise self._error
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        self._thread.join(30)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # surfaced by start()
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        import uvicorn

        from memtap.config import ConfigFile
        from memtap.proxy.app import create_app
        from memtap.proxy.runtime import Runtime, Settings

        config = ConfigFile.model_validate(self.config)
        self.runtime = Runtime(Settings(db=self.db, config=config, upstreams=config.enabled_servers()))
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        server = uvicorn.Server(
            uvicorn.Config(create_app(self.runtime), log_level="warning", lifespan="on", access_log=False)
        )
        self._server = server
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            if task.done():
                task.result()
            await asyncio.sleep(0.005)
        self._ready.set()
        await task

    # -- reading back ----------------------------------------------------------------

    def settle(self) -> None:
        """Wait until every call so far is recorded and examined by the detectors."""
        assert self.runtime is not None, "memtap is not running"
        if not self.runtime.recorder.flush():
            raise AssertionError(f"the trace was not written in time: {self.runtime.recorder.stats_dict()}")
        if self.runtime.findings is not None and not self.runtime.findings.wait_idle():
            raise AssertionError("the detectors did not catch up in time")

    def _store(self) -> TraceStore:
        self.settle()
        return TraceStore(self.db)

    def events(self) -> list[TraceEvent]:
        store = self._store()
        try:
            return store.list_events()
        finally:
            store.close()

    def items(self, namespace: str | None = None, *, include_deleted: bool = False) -> list[MemoryItem]:
        store = self._store()
        try:
            return store.list_items(namespace=namespace, include_closed=include_deleted, limit=100_000)
        finally:
            store.close()

    def findings(self, kind: str | None = None) -> list[Finding]:
        store = self._store()
        try:
            return list_findings(store.db, kind=kind)
        finally:
            store.close()

    # -- assertions -------------------------------------------------------------------

    def assert_no_findings(self, kind: str | None = None) -> None:
        """No finding (of ``kind``) above ``info``; the message lists what was found."""
        found = [f for f in self.findings(kind) if f.severity.label != "info"]
        if found:
            lines = "\n".join(f"  {f.severity.label} {f.kind}: {f.summary}" for f in found)
            raise AssertionError(f"memtap found {len(found)} finding(s):\n{lines}")

    def assert_live(self, content: str, namespace: str | None = None) -> MemoryItem:
        """An item with exactly this content is live (in ``namespace``, if given)."""
        items = self.items(namespace)
        for item in items:
            if item.content == content:
                return item
        shown = "\n".join(f"  {i.namespace}: {i.content!r}" for i in items) or "  (none)"
        raise AssertionError(f"no live item with content {content!r}; live items:\n{shown}")

    def assert_writes(self, namespace: str, contents: list[str]) -> None:
        """The namespace saw exactly these writes (add and update contents, in order)."""
        seen = [
            eff.content_after or ""
            for event in self.events()
            if event.op in (Op.WRITE, Op.UPDATE) and event.status == "ok"
            for eff in event.effects
            if (eff.namespace or event.context.namespace) == namespace and eff.kind.value in ("add", "update")
        ]
        if seen != contents:
            raise AssertionError(f"namespace {namespace!r} saw writes {seen!r}, expected {contents!r}")


@pytest.fixture
def memtap_config() -> dict[str, Any]:
    """The config memtap_server starts with (the config file's shape); override it in a conftest."""
    return {}


@pytest.fixture
def memtap_server(tmp_path: Path, memtap_config: dict[str, Any]) -> Iterator[MemtapServer]:
    """memtap serving on a free port over a fresh trace database; stopped after the test."""
    server = MemtapServer(tmp_path / "memtap-trace.db", memtap_config).start()
    try:
        yield server
    finally:
        server.stop()
