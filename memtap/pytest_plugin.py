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

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memtap.findings.model import Finding
from memtap.findings.storage import list_findings
from memtap.harness.inprocess import InProcessServer
from memtap.trace.models import MemoryItem, Op, TraceEvent
from memtap.trace.store import TraceStore

__all__ = ["MemtapServer", "memtap_config", "memtap_server"]


class MemtapServer(InProcessServer):
    """A memtap serving in this process, and its trace, items and findings."""

    def __init__(self, db: Path, config: dict[str, Any]) -> None:
        from memtap.config import ConfigFile
        from memtap.proxy.runtime import Settings

        self.config = config
        parsed = ConfigFile.model_validate(config)
        settings = Settings(db=db, config=parsed, upstreams=parsed.enabled_servers())
        super().__init__(settings, name="memtap-pytest")

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
