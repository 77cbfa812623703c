"""The server behind memtap's pytest plugin (``memtap.pytest_plugin``): memtap serving in the
test's process, with its trace, items and findings read back and asserted on. Kept apart from
the plugin module, which pytest imports in every session of every project that installs memtap:
that module must stay light, this one imports the whole server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memtap.findings.model import Finding
from memtap.findings.storage import list_findings
from memtap.harness.inprocess import InProcessServer
from memtap.trace.models import MemoryItem, Op, TraceEvent
from memtap.trace.store import TraceStore

__all__ = ["MemtapServer"]


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
