"""The upstreams of one memtap process: their supervisors, their status, their errors in the trace."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memtap.adapters.upstream import Upstream, supervising
from memtap.config import McpServerConfig
from memtap.errors import UnknownUpstream, UpstreamUnavailable
from memtap.trace.calls import recorded_call
from memtap.trace.models import Context, Op
from memtap.trace.writer import Recorder

if TYPE_CHECKING:
    from memtap.adapters.upstream_backend import UpstreamMemoryBackend

__all__ = ["UpstreamPool", "read_status_files", "status_dir"]

log = logging.getLogger("memtap.upstream")


def status_dir(db: Path) -> Path:
    """Where running proxies using the trace database ``db`` describe their upstreams."""
    return db.parent / "proxies"


def read_status_files(db: Path) -> list[dict[str, Any]]:
    """The status of every live proxy writing to ``db`` (files of dead processes are skipped)."""
    found = []
    folder = status_dir(db)
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            os.kill(int(data["pid"]), 0)
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a proxy that has gone (or a file being replaced)
        if str(data.get("db")) == str(db):
            found.append(data)
    return found


class UpstreamPool:
    """Every configured upstream, started eagerly or on first use, supervised together."""

    def __init__(
        self,
        servers: Mapping[str, McpServerConfig],
        recorder: Recorder | None,
        *,
        eager: bool = True,
        timeout: float | None = None,
        inherit_env: bool = False,
        status_file: Path | None = None,
        db: Path | None = None,
        principal: str = "local",
    ) -> None:
        self.recorder = recorder
        self.eager = eager
        self.status_file = status_file
        self.db = db
        self.principal = principal
        self.started = time.time()
        self.running = False
        self.upstreams: dict[str, Upstream] = {
            name: Upstream(
                name,
                config,
                timeout=timeout,
                inherit_env=inherit_env,
                record_control=self._record_control,
                on_change=self._write_status,
            )
            for name, config in servers.items()
        }
        for upstream in self.upstreams.values():
            upstream.recorder = recorder

    def get(self, name: str) -> Upstream:
        try:
            return self.upstreams[name]
        except KeyError:
            known = ", ".join(self.upstreams) or "none"
            raise UnknownUpstream(f"unknown upstream {name!r}; this proxy wraps: {known}") from None

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[UpstreamPool]:
        """Supervise the upstreams until the block ends; then stop them (and their processes)."""
        if self.running:
            yield self
            return
        self.running = True
        try:
            async with supervising(list(self.upstreams.values()), eager=self.eager):
                self._write_status()
                try:
                    yield self
                finally:  # calls answered before they were recorded may still read an upstream
                    if self.recorder is not None:
                        await self.recorder.answered_first.drain()
        finally:
            await self._settle()
            self.running = False
            if self.status_file is not None:
                self.status_file.unlink(missing_ok=True)

    async def _settle(self) -> None:
        """The upstreams have stopped: read their unsettled writes one last time (reconcile.py)."""
        import anyio

        with anyio.CancelScope(shield=True), anyio.move_on_after(10):
            for upstream in self.upstreams.values():
                reconciler = getattr(upstream.tap, "reconciler", None)
                if reconciler is not None and reconciler.unsettled:
                    await reconciler.settle()

    async def start_all(self) -> dict[str, str | None]:
        """Start every upstream now; returns each one's start error (None when ready)."""
        import anyio

        errors: dict[str, str | None] = {}

        async def start(upstream: Upstream) -> None:
            try:
                await upstream.connection()
                errors[upstream.name] = None
            except UpstreamUnavailable as exc:
                errors[upstream.name] = str(exc)
            except Exception as exc:
                errors[upstream.name] = f"{type(exc).__name__}: {exc}"

        async with anyio.create_task_group() as tg:
            for upstream in self.upstreams.values():
                tg.start_soon(start, upstream)
        return {name: errors.get(name) for name in self.upstreams}

    def status(self) -> dict[str, Any]:
        return {name: upstream.status() for name, upstream in self.upstreams.items()}

    def memory_backend(self, name: str) -> UpstreamMemoryBackend:
        """A :class:`~memtap.adapters.base.MemoryBackend` over the upstream ``name``."""
        from memtap.adapters.upstream_backend import UpstreamMemoryBackend

        return UpstreamMemoryBackend(self.get(name))

    async def _record_control(self, upstream: str, tool: str, error: str) -> None:
        if self.recorder is None:
            return
        context = Context(principal=self.principal, namespace=self.principal, upstream=upstream)
        async with recorded_call(
            self.recorder,
            tool=tool,
            op=Op.CONTROL,
            front_door="upstream",
            backend=upstream,
            arguments={},
            fallback_context=lambda: context,
        ):
            raise UpstreamUnavailable(error, upstream=upstream)

    def _write_status(self) -> None:
        if self.status_file is None:
            return
        data = {
            "pid": os.getpid(),
            "db": str(self.db) if self.db is not None else None,
            "started_at": self.started,
            "updated_at": time.time(),
            "upstreams": self.status(),
        }
        try:
            self.status_file.parent.mkdir(parents=True, exist_ok=True)
            temp = self.status_file.with_name(self.status_file.name + ".tmp")
            temp.write_text(json.dumps(data), encoding="utf-8")
            temp.replace(self.status_file)
        except OSError as exc:  # status is a convenience; serving goes on
            log.warning("cannot write proxy status %s: %s", self.status_file, exc)
