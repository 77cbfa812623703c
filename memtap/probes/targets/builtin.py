"""``builtin``: memtap's own MCP front door over the embedded backend.

Two transports:

- **stdio** (the default, without ``--server``): the replay starts ``memtap serve --stdio`` on
  the run's database as a child and speaks JSON-RPC to it with memtap's lean client
  (:mod:`memtap.probes.targets._stdio`), one connection for every episode; ``run``, ``episode``
  and ``namespace`` travel in each request's ``_meta``;
- **streamable HTTP**: with ``--server URL`` (a running ``memtap serve``, which must write to the
  same database), and for canary episodes, whose users need keys of their own: the official MCP
  client, one connection per episode, ``run``, ``episode`` and ``namespace`` in ``X-Memtap-*``
  headers.

Both are memtap's real front door, and leave the same events (their ``front_door`` says which):

- a turn is one ``memory_add`` of its content, with ``session``, ``turn`` and ``role`` in the
  request's ``_meta``; by default the driver hands a session's turns over at once
  (:class:`~memtap.probes.targets.base.BatchIngest`) and they go as one ``memory_add_batch``,
  which records one ``memory_add`` event per turn, the same as the calls one by one;
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
from memtap.probes.targets._runs import BATCH_BYTES
from memtap.probes.targets._runs import chunks as _chunks
from memtap.probes.targets._runs import retrieved as _retrieved
from memtap.probes.targets._server import MemtapServer, health
from memtap.probes.targets._stdio import StdioServe, error_text
from memtap.probes.targets.base import (
    Actor,
    EpisodeScope,
    Outcome,
    Principals,
    ProbeCall,
    ProbeResult,
    TargetError,
    TurnCall,
    TurnFailed,
)

__all__ = ["BATCH_BYTES", "BuiltinTarget"]


def _error_text(result: Any) -> str:
    parts = [getattr(block, "text", "") for block in result.content or []]
    return " ".join(p for p in parts if p) or "the tool call failed"


class BuiltinTarget:
    name = "builtin"
    pipelined = True  # per-turn calls over stdio may be in flight together (ingest_each)

    def __init__(
        self,
        db: Path,
        *,
        url: str | None = None,
        serve_args: tuple[str, ...] = (),
        gate: str | None = None,
        transport: str = "auto",
    ) -> None:
        """``transport``: ``auto`` (stdio unless ``url`` is given or users need keys), ``stdio``
        or ``http``."""
        self.db = db
        self.url = url
        self.transport = transport
        self.stdio: StdioServe | None = None
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

        # Canary episodes act as several users, each with a key of its own: only HTTP carries keys.
        stdio = self.transport == "stdio" or (self.transport == "auto" and not self._principals)
        if self.url is None and stdio:
            if self._principals:
                raise TargetError(
                    "canary episodes act as users with keys of their own; stdio carries no keys"
                )
            self.stdio = StdioServe(self.db, extra=self.serve_args)
            await self.stdio.start()
            return
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
            "transport": "stdio" if self.stdio is not None else "http",
            "started_server": self.server is not None or self.stdio is not None,
            "gate": self.gate,
            "principals": "one key per user" if self._keys else ("by header" if self._principals else None),
        }

    async def open_episode(self, scope: EpisodeScope) -> None:
        if self.stdio is not None:  # one connection for every episode; the scope travels in _meta
            return
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

    async def _call(
        self, scope: EpisodeScope, tool: str, args: dict[str, Any], meta: dict[str, Any]
    ) -> tuple[bool, str, dict[str, Any]]:
        """(failed, error text, structured content) of one tool call in ``scope``."""
        if self.stdio is not None:
            scoped = {"run": scope.run, "episode": scope.episode, "namespace": scope.namespace, **meta}
            answer = await self.stdio.call(tool, args, scoped)
            failed = bool(answer.get("isError"))
            return failed, error_text(answer) if failed else "", answer.get("structuredContent") or {}
        _, client = self._episodes[scope.namespace]
        result = await client.call_tool(tool, args, meta=cast(Any, {"memtap": meta}))
        text = _error_text(result) if result.is_error else ""
        return bool(result.is_error), text, result.structured_content or {}

    async def _checked(
        self, scope: EpisodeScope, tool: str, args: dict[str, Any], meta: dict[str, Any]
    ) -> Any:
        failed, text, found = await self._call(scope, tool, args, meta)
        if failed:
            raise TargetError(f"{tool} failed: {text}")
        return found

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
        await self._checked(scope, "memory_add", self._add_args(turn), meta)

    async def ingest_each(self, scope: EpisodeScope, turns: list[TurnCall]) -> None:
        """``--ingest turn``: one ``memory_add`` call per turn. Over stdio they are pipelined (a run
        of them written at once, in order, and served in that order by the child: the same events
        and lineage as one by one, without a round trip per turn); over HTTP, where separate
        requests could overtake each other, and on a backend whose adds depend on the ones before
        (mem0), one after another. The first failed turn fails the episode."""
        sent = [(position, t) for position, t in enumerate(turns) if t.content.strip()]
        if self.stdio is None or not self.pipelined:
            for position, turn in sent:
                try:
                    await self.ingest_turn(scope, turn)
                except TargetError as exc:
                    raise TurnFailed(str(exc), position) from None
            return
        scoped = {"run": scope.run, "episode": scope.episode, "namespace": scope.namespace}
        for chunk in _chunks(sent):
            calls = [
                (self._add_args(t), {**scoped, "session": t.session, "turn": t.turn, "role": t.role})
                for _, t in chunk
            ]
            answers = await self.stdio.call_many("memory_add", calls)
            for (position, _), answer in zip(chunk, answers, strict=True):
                if answer.get("isError"):
                    raise TurnFailed(f"memory_add failed: {error_text(answer)}", position)

    async def ingest_turns(self, scope: EpisodeScope, turns: list[TurnCall]) -> None:
        """The turns as ``memory_add_batch`` calls (one ``memory_add`` event per turn); the first
        failed turn fails the episode, named as its ``memory_add``."""
        sent = [(position, t) for position, t in enumerate(turns) if t.content.strip()]
        for chunk in _chunks(sent):
            items = [
                {**self._add_args(t), "meta": {"session": t.session, "turn": t.turn, "role": t.role}}
                for _, t in chunk
            ]
            failed, text, found = await self._call(scope, "memory_add_batch", {"items": items}, {})
            if not failed:
                continue
            bad = next((i for i in found.get("items", []) if "error" in i), None)
            if bad is None:
                raise TurnFailed(f"memory_add_batch failed: {text}", chunk[0][0])
            position, turn = chunk[int(bad["index"])]
            raise TurnFailed(
                f"memory_add failed: session {turn.session} turn {turn.turn} (item {bad['index']} of a "
                f"memory_add_batch of {len(chunk)}): {bad['error']}",
                position,
            )

    # -- recorded traffic (A/B replay, memtap.probes.ab_replay) ------------------------------------

    async def _recorded(
        self, scope: EpisodeScope, turn: TurnCall, tool: str, args: dict[str, Any]
    ) -> tuple[WriteOutcome, dict[str, Any]]:
        meta = {"session": turn.session, "turn": turn.turn, "role": turn.role}
        started = time.perf_counter()
        failed, text, found = await self._call(scope, tool, args, meta)  # stdio or HTTP
        ms = (time.perf_counter() - started) * 1000
        if failed:
            return WriteOutcome(False, ms=ms, error=f"{tool} refused: {text}"), {}
        return WriteOutcome(True, ms=ms), found

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
        found = await self._checked(
            scope, "memory_search", args, {"session": "probes", "turn": probe.probe_id}
        )
        elapsed = (time.perf_counter() - started) * 1000
        return ProbeResult(_retrieved(found.get("results", [])), elapsed)

    async def ask_probes(
        self, scope: EpisodeScope, probes: list[ProbeCall], *, limit: int
    ) -> list[ProbeResult]:
        """Probes due together: over stdio their ``memory_search`` calls pipelined (written at once,
        served in order), each ``retrieve_ms`` an equal share of the time they took; else one by one."""
        if self.stdio is None or not self.pipelined:
            return [await self.ask_probe(scope, probe, limit=limit) for probe in probes]
        scoped = {"run": scope.run, "episode": scope.episode, "namespace": scope.namespace}
        calls = [
            ({"query": p.question, "limit": limit, "requester": p.requester},
             {**scoped, "session": "probes", "turn": p.probe_id})
            for p in probes
        ]  # fmt: skip
        started = time.perf_counter()
        answers = await self.stdio.call_many("memory_search", calls)
        share = (time.perf_counter() - started) * 1000 / max(len(probes), 1)
        results = []
        for answer in answers:
            if answer.get("isError"):
                raise TargetError(f"memory_search failed: {error_text(answer)}")
            found = answer.get("structuredContent") or {}
            results.append(ProbeResult(_retrieved(found.get("results", [])), share))
        return results

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
        if self.stdio is not None:
            await self.stdio.aclose()
        if self.server is not None:
            import anyio

            await anyio.to_thread.run_sync(self.server.stop)
