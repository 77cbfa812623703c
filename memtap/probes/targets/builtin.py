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

**Canary episodes** (several users, :mod:`memtap.probes.canary_replay`): before the server starts,
the replay gives the target every principal the run acts as; the target makes one random key per
principal and starts ``memtap serve`` with them (``MEMTAP_API_KEYS`` in the child's environment,
never on its command line, in the run's record or in the trace), with ``--gate`` when one was
asked. Each user opens its own MCP session with its own key (``Authorization: Bearer``; with
``--server``, whose keys the replay cannot know, ``X-Memtap-Principal`` instead) and its own
namespace in ``X-Memtap-Namespace``; the namespace a call reads or writes, and the requester (the
user), travel in ``_meta``, so an escape attempt names the other user's namespace there.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from pathlib import Path
from typing import Any, cast

from memtap.probes.ab_replay import WriteOutcome
from memtap.probes.targets._server import MemtapServer, health
from memtap.probes.targets.base import (
    Actor,
    EpisodeScope,
    Outcome,
    Principals,
    ProbeCall,
    ProbeResult,
    Retrieved,
    TargetError,
    TurnCall,
)

__all__ = ["BuiltinTarget"]


def _error_text(result: Any) -> str:
    parts = [getattr(block, "text", "") for block in result.content or []]
    return " ".join(p for p in parts if p) or "the tool call failed"


class BuiltinTarget:
    name = "builtin"

    def __init__(
        self,
        db: Path,
        *,
        url: str | None = None,
        serve_args: tuple[str, ...] = (),
        gate: str | None = None,
    ) -> None:
        self.db = db
        self.url = url
        self.serve_args = (*serve_args, *(("--gate", gate) if gate else ()))
        self.gate = gate
        self.server: MemtapServer | None = None
        self._episodes: dict[str, tuple[contextlib.AsyncExitStack, Any]] = {}
        self._keys: dict[str, str] = {}  # principal -> key; in memory only, for the server this run starts
        self._principals = False

    def set_principals(self, principals: Principals) -> None:
        self._principals = True
        if self.url is None:  # a server of our own: one fresh key per principal, and the grants
            self._keys = {p: secrets.token_urlsafe(24) for p in principals.names}
            self.serve_args += tuple(principals.serve_args())

    def _auth(self, principal: str) -> dict[str, str]:
        if principal in self._keys:
            return {"Authorization": f"Bearer {self._keys[principal]}"}
        return {"X-Memtap-Principal": principal} if self._principals else {}

    async def start(self) -> None:
        import anyio

        if self.url is None:
            env = (
                {"MEMTAP_API_KEYS": ",".join(f"{k}={p}" for p, k in self._keys.items())}
                if self._keys
                else None
            )
            self.server = MemtapServer(self.db, extra=self.serve_args, env=env)
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
        return {
            "target": "builtin",
            "url": self.url,
            "started_server": self.server is not None,
            "gate": self.gate,
            "principals": "one key per user" if self._keys else ("by header" if self._principals else None),
        }

    async def open_episode(self, scope: EpisodeScope) -> None:
        assert self.url is not None, "start() first"
        headers = {
            "X-Memtap-Run": scope.run,
            "X-Memtap-Episode": scope.episode,
            "X-Memtap-Namespace": scope.namespace,
            **self._auth(scope.namespace),
        }
        self._episodes[scope.namespace] = await self._connect(headers)

    async def _connect(self, headers: dict[str, str]) -> tuple[contextlib.AsyncExitStack, Any]:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.types import Implementation

        assert self.url is not None, "start() first"
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
        return stack, client

    async def mark(self, scope: EpisodeScope, turn: TurnCall) -> None:
        """Nothing to do: every call this target makes carries its own turn."""

    async def _call(self, scope: EpisodeScope, tool: str, args: dict[str, Any], meta: dict[str, Any]) -> Any:
        _, client = self._episodes[scope.namespace]
        result = await client.call_tool(tool, args, meta=cast(Any, {"memtap": meta}))
        if result.is_error:
            raise TargetError(f"{tool} failed: {_error_text(result)}")
        return result.structured_content or {}

    @staticmethod
    def _add_args(turn: TurnCall) -> dict[str, Any]:
        metadata = {"speaker": turn.speaker, "time": turn.time, "phase": turn.phase}
        return {
            "content": turn.content,
            "metadata": {k: v for k, v in metadata.items() if v is not None},
            "access": turn.access,
        }

    async def ingest_turn(self, scope: EpisodeScope, turn: TurnCall) -> None:
        if not turn.content.strip():
            return
        meta = {"session": turn.session, "turn": turn.turn, "role": turn.role}
        await self._call(scope, "memory_add", self._add_args(turn), meta)

    # -- recorded traffic (A/B replay, memtap.probes.ab_replay) ------------------------------------

    async def _recorded(
        self, scope: EpisodeScope, turn: TurnCall, tool: str, args: dict[str, Any]
    ) -> tuple[WriteOutcome, dict[str, Any]]:
        _, client = self._episodes[scope.namespace]
        meta = {"session": turn.session, "turn": turn.turn, "role": turn.role}
        started = time.perf_counter()
        result = await client.call_tool(tool, args, meta=cast(Any, {"memtap": meta}))
        ms = (time.perf_counter() - started) * 1000
        if result.is_error:
            return WriteOutcome(False, ms=ms, error=f"{tool} refused: {_error_text(result)}"), {}
        return WriteOutcome(True, ms=ms), result.structured_content or {}

    async def write_recorded(self, scope: EpisodeScope, turn: TurnCall) -> WriteOutcome:
        """A recorded write: ``memory_add``; the items it created (mem0: one per stored fact)."""
        outcome, found = await self._recorded(scope, turn, "memory_add", self._add_args(turn))
        if found.get("id") is not None:
            outcome.items = [str(found["id"])]
        else:
            outcome.items = [str(r["id"]) for r in found.get("results") or [] if r.get("id") is not None]
        return outcome

    async def update_recorded(self, scope: EpisodeScope, turn: TurnCall, item: str) -> WriteOutcome:
        outcome, _ = await self._recorded(scope, turn, "memory_update", {"id": item, "content": turn.content})
        outcome.items = [item] if outcome.ok else []
        return outcome

    async def delete_recorded(self, scope: EpisodeScope, turn: TurnCall, item: str) -> WriteOutcome:
        outcome, _ = await self._recorded(scope, turn, "memory_delete", {"id": item})
        outcome.items = [item] if outcome.ok else []
        return outcome

    async def ask_probe(self, scope: EpisodeScope, probe: ProbeCall, *, limit: int) -> ProbeResult:
        started = time.perf_counter()
        args = {"query": probe.question, "limit": limit, "requester": probe.requester}
        found = await self._call(scope, "memory_search", args, {"session": "probes", "turn": probe.probe_id})
        elapsed = (time.perf_counter() - started) * 1000
        return ProbeResult(_retrieved(found.get("results", [])), elapsed)

    # -- canary episodes: one session per user, under its own principal ----------------------------

    async def open_actor(self, scope: EpisodeScope, actor: Actor) -> None:
        headers = {
            "X-Memtap-Run": scope.run,
            "X-Memtap-Episode": scope.episode,
            "X-Memtap-Namespace": actor.principal,
            **self._auth(actor.principal),
        }
        self._episodes[actor.principal] = await self._connect(headers)

    async def _act(
        self, actor: Actor, tool: str, args: dict[str, Any], meta: dict[str, Any]
    ) -> tuple[Outcome, dict[str, Any]]:
        _, client = self._episodes[actor.principal]
        started = time.perf_counter()
        result = await client.call_tool(tool, args, meta=cast(Any, {"memtap": meta}))
        ms = (time.perf_counter() - started) * 1000
        if result.is_error:
            return Outcome(False, _error_text(result), ms=ms), {}
        found = result.structured_content or {}
        return Outcome(True, ms=ms), found

    def _turn_meta(self, actor: Actor, turn: TurnCall, namespace: str) -> dict[str, Any]:
        return self._meta(actor, (turn.session, turn.turn), namespace, turn.role)

    @staticmethod
    def _meta(actor: Actor, at: tuple[str, str], namespace: str, role: str = "user") -> dict[str, Any]:
        """The call's context: the actor asks, as ``role``, in ``namespace`` at (session, turn)."""
        session, turn = at
        return {"session": session, "turn": turn, "role": role, "namespace": namespace,
                "requester": actor.principal}  # fmt: skip

    async def actor_write(self, actor: Actor, turn: TurnCall, namespace: str) -> Outcome:
        metadata = {k: v for k, v in {"speaker": turn.speaker, "time": turn.time}.items() if v is not None}
        args = {"content": turn.content, "metadata": metadata, "access": turn.access}
        outcome, found = await self._act(actor, "memory_add", args, self._turn_meta(actor, turn, namespace))
        outcome.item_id = str(found["id"]) if found.get("id") is not None else None
        return outcome

    async def actor_update(self, actor: Actor, item_id: str, turn: TurnCall, namespace: str) -> Outcome:
        args = {"id": item_id, "content": turn.content}
        outcome, _ = await self._act(actor, "memory_update", args, self._turn_meta(actor, turn, namespace))
        return outcome

    async def actor_search(
        self, actor: Actor, namespace: str, query: str, question: str, at: tuple[str, str], limit: int
    ) -> Outcome:
        meta = self._meta(actor, at, namespace)
        outcome, found = await self._act(actor, "memory_search", {"query": query, "limit": limit}, meta)
        outcome.retrieved = _retrieved(found.get("results", []))
        return outcome

    async def actor_list(self, actor: Actor, namespace: str, at: tuple[str, str]) -> Outcome | None:
        from memtap.probes.canary_replay import LIST_LIMIT

        meta = self._meta(actor, at, namespace)
        outcome, found = await self._act(actor, "memory_list", {"limit": LIST_LIMIT}, meta)
        outcome.retrieved = _retrieved(found.get("items", []))
        return outcome

    async def close_actor(self, actor: Actor) -> None:
        entry = self._episodes.pop(actor.principal, None)
        if entry is not None:
            await entry[0].aclose()

    async def close_episode(self, scope: EpisodeScope) -> None:
        entry = self._episodes.pop(scope.namespace, None)
        if entry is not None:
            await entry[0].aclose()

    async def aclose(self) -> None:
        if self.server is not None:
            import anyio

            await anyio.to_thread.run_sync(self.server.stop)


def _retrieved(found: list[dict[str, Any]]) -> list[Retrieved]:
    return [
        Retrieved(
            item_id=str(m["id"]),
            content=str(m.get("content", "")),
            rank=int(m.get("rank") or i + 1),
            score=m.get("score"),
            tags=m.get("tags"),
            provenance=m.get("provenance") or {},
        )
        for i, m in enumerate(found)
    ]
