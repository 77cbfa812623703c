"""``builtin``: memtap's own MCP front door over the embedded backend, over streamable HTTP.

The replay starts a ``memtap serve`` of its own on the run's database (or uses one given by
``--server URL``, which must write to the same database) and plays every episode through the
official MCP client, one connection per episode, exactly as an agent would:

- a turn is one ``memory_add`` of its content, with ``session``, ``turn`` and ``role`` in the
  request's ``_meta`` and ``run``, ``episode`` and ``namespace`` in ``X-Memtap-*`` headers;
  the speaker, the turn's time and the session's phase go in the memory's metadata, and the
  session's access (visibility, participants, allow, deny, sensitivity) becomes its access
  tags, with the suite's namespace owner always allowed. Turns with empty content are not
  sent (the memory tools refuse empty memories);
- a probe is one ``memory_search`` of its question, asked by its requester (the access gate
  records what that requester should not have been shown), in session ``probes`` at turn
  ``probe_id``.

The embedded backend stores what it is given, so this target is the "remember every turn"
baseline: its trace has adds and retrievals, and no updates or deletes.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, cast

from memtap.probes.targets._server import MemtapServer, health
from memtap.probes.targets.base import EpisodeScope, ProbeCall, ProbeResult, Retrieved, TargetError, TurnCall

__all__ = ["BuiltinTarget"]


def _error_text(result: Any) -> str:
    parts = [getattr(block, "text", "") for block in result.content or []]
    return " ".join(p for p in parts if p) or "the tool call failed"


class BuiltinTarget:
    name = "builtin"

    def __init__(self, db: Path, *, url: str | None = None, serve_args: tuple[str, ...] = ()) -> None:
        self.db = db
        self.url = url
        self.serve_args = serve_args
        self.server: MemtapServer | None = None
        self._episodes: dict[str, tuple[contextlib.AsyncExitStack, Any]] = {}

    async def start(self) -> None:
        import anyio

        if self.url is None:
            self.server = MemtapServer(self.db, extra=self.serve_args)
            self.url = await anyio.to_thread.run_sync(self.server.start)
            return
        base = self.url.rsplit("/mcp", 1)[0]
        try:
            info = await anyio.to_thread.run_sync(health, base)
        except OSError as exc:
            raise TargetError(f"no memtap serve answers at {base}/healthz: {exc}") from None
        served = info.get("db")
        if served is not None and Path(served).resolve() != self.db.resolve():
            raise TargetError(
                f"the server at {base} writes to {served}, not to {self.db}; pass --db {served} so the run "
                "and its trace are in one database"
            )

    def describe(self) -> dict[str, Any]:
        return {"target": "builtin", "url": self.url, "started_server": self.server is not None}

    async def open_episode(self, scope: EpisodeScope) -> None:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.types import Implementation

        assert self.url is not None, "start() first"
        headers = {
            "X-Memtap-Run": scope.run,
            "X-Memtap-Episode": scope.episode,
            "X-Memtap-Namespace": scope.namespace,
        }
        stack = contextlib.AsyncExitStack()
        try:
            http = await stack.enter_async_context(httpx2.AsyncClient(headers=headers, timeout=60))
            transport = streamable_http_client(self.url, http_client=http)
            info = Implementation(name="memtap-replay", version="1")
            # The classic session (initialize handshake, then JSON-RPC), as deployed agents speak it;
            # measured here about 25% cheaper per call than the SDK's "auto" mode.
            client = await stack.enter_async_context(Client(transport, client_info=info, mode="legacy"))
        except BaseException:
            await stack.aclose()
            raise
        self._episodes[scope.namespace] = (stack, client)

    async def mark(self, scope: EpisodeScope, turn: TurnCall) -> None:
        """Nothing to do: every call this target makes carries its own turn."""

    async def _call(self, scope: EpisodeScope, tool: str, args: dict[str, Any], meta: dict[str, Any]) -> Any:
        _, client = self._episodes[scope.namespace]
        result = await client.call_tool(tool, args, meta=cast(Any, {"memtap": meta}))
        if result.is_error:
            raise TargetError(f"{tool} failed: {_error_text(result)}")
        return result.structured_content or {}

    async def ingest_turn(self, scope: EpisodeScope, turn: TurnCall) -> None:
        if not turn.content.strip():
            return
        metadata = {"speaker": turn.speaker, "time": turn.time, "phase": turn.phase}
        args = {
            "content": turn.content,
            "metadata": {k: v for k, v in metadata.items() if v is not None},
            "access": turn.access,
        }
        await self._call(
            scope, "memory_add", args, {"session": turn.session, "turn": turn.turn, "role": turn.role}
        )

    async def ask_probe(self, scope: EpisodeScope, probe: ProbeCall, *, limit: int) -> ProbeResult:
        started = time.perf_counter()
        args = {"query": probe.question, "limit": limit, "requester": probe.requester}
        found = await self._call(scope, "memory_search", args, {"session": "probes", "turn": probe.probe_id})
        elapsed = (time.perf_counter() - started) * 1000
        retrieved = [
            Retrieved(
                item_id=str(m["id"]),
                content=str(m.get("content", "")),
                rank=int(m.get("rank") or i + 1),
                score=m.get("score"),
                tags=m.get("tags"),
                provenance=m.get("provenance") or {},
            )
            for i, m in enumerate(found.get("results", []))
        ]
        return ProbeResult(retrieved, elapsed)

    async def close_episode(self, scope: EpisodeScope) -> None:
        entry = self._episodes.pop(scope.namespace, None)
        if entry is not None:
            await entry[0].aclose()

    async def aclose(self) -> None:
        if self.server is not None:
            import anyio

            await anyio.to_thread.run_sync(self.server.stop)
