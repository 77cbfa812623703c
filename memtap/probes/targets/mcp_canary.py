"""``mcp:`` target, canary episodes: several users, one wrapped server, one ``memtap proxy``.

A canary episode attempt gets one proxy (and, for the reference server, one fresh
``MEMORY_FILE_PATH``) shared by all its users: the point is to see whether the wrapped server
keeps them apart. Each user opens its own MCP session through it, with its own key when the
replay made keys (the proxy gets them in ``MEMTAP_API_KEYS``), its own namespace in
``X-Memtap-Namespace``, and the namespace each call names and the requester (the user) in
``_meta``:

- servers whose profile has an owner argument (``user_id``, ``group_id``, ...: Mem0, Graphiti,
  ...) get the namespace there: an escape attempt asks the server for another user's memory;
- the reference memory server has no owners: a user's memories are observations of an entity
  named after the namespace's last part (the user, or ``shared``), and every search sees the
  whole graph, so its canary score shows what any user can read of any other's;
- an update is written as a new memory (the profiles name no plain update); a listing is
  ``read_graph`` where the server has it.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import anyio

from memtap.adapters.graph_state import graph_from_result
from memtap.adapters.memory_server import observation_id
from memtap.probes.targets._server import MemtapServer
from memtap.probes.targets.base import (
    Actor,
    EpisodeScope,
    Outcome,
    Principals,
    Retrieved,
    TargetError,
    TurnCall,
)
from memtap.probes.targets.mcp import McpTarget

__all__ = ["McpCanaryTarget"]


class McpCanaryTarget(McpTarget):
    def __init__(self, spec: str, db: Path) -> None:
        super().__init__(spec, db)
        self._keys: dict[str, str] = {}
        self._shared: dict[str, tuple[MemtapServer, int]] = {}  # episode base -> (proxy, actors open)
        self._entities: dict[str, set[str]] = {}  # episode base -> entities created
        self._base: dict[str, str] = {}  # actor principal -> episode base
        self._grants: list[str] = []

    def set_principals(self, principals: Principals) -> None:
        import secrets

        self._keys = {p: secrets.token_urlsafe(24) for p in principals.names}
        self._grants = principals.serve_args()

    async def _proxy(self, scope: EpisodeScope) -> MemtapServer:
        found = self._shared.get(scope.namespace)
        if found is not None:
            self._shared[scope.namespace] = (found[0], found[1] + 1)
            return found[0]
        config = self._episode_config(scope)
        env = {"MEMTAP_API_KEYS": ",".join(f"{k}={p}" for p, k in self._keys.items())} if self._keys else None
        server = MemtapServer(
            self.db,
            extra=["--config", str(config), "--only", self.server_name, *self._grants],
            command="proxy",
            env=env,
        )
        self._servers.append(server)
        self._shared[scope.namespace] = (server, 1)
        await anyio.to_thread.run_sync(server.start)
        return server

    async def open_actor(self, scope: EpisodeScope, actor: Actor) -> None:
        server = await self._proxy(scope)
        self._base[actor.principal] = scope.namespace
        self._entities.setdefault(scope.namespace, set())
        auth = (
            {"Authorization": f"Bearer {self._keys[actor.principal]}"}
            if actor.principal in self._keys
            else {"X-Memtap-Principal": actor.principal}
        )
        headers = {
            "X-Memtap-Run": scope.run,
            "X-Memtap-Episode": scope.episode,
            "X-Memtap-Namespace": actor.principal,
            **auth,
        }
        url = f"{server.base_url}/servers/{self.server_name}/mcp"
        stack = contextlib.AsyncExitStack()
        self._episodes[actor.principal] = await self._connect(stack, server, url, headers)

    def _meta(self, actor: Actor, at: tuple[str, str], namespace: str, role: str = "user") -> dict[str, Any]:
        return {
            "session": at[0],
            "turn": at[1],
            "role": role,
            "namespace": namespace,
            "requester": actor.principal,
        }

    async def actor_write(self, actor: Actor, turn: TurnCall, namespace: str) -> Outcome:
        episode = self._episodes[actor.principal]
        meta = self._meta(actor, (turn.session, turn.turn), namespace, turn.role)
        started = time.perf_counter()
        if episode.profile.name != "server-memory":
            assert episode.profile.write_tool is not None
            args = self._generic_args(episode, episode.profile.write_tool, turn.content, namespace)
            tool = episode.profile.write_tool
        else:
            entity = namespace.rsplit("/", 1)[-1]
            created = self._entities[self._base[actor.principal]]
            if entity in created:
                tool, args = (
                    "add_observations",
                    {"observations": [{"entityName": entity, "contents": [turn.content]}]},
                )
            else:
                created.add(entity)  # before the call: users write side by side
                tool = "create_entities"
                args = {
                    "entities": [{"name": entity, "entityType": "namespace", "observations": [turn.content]}]
                }
        result = await self._call(episode, tool, args, meta, check=False)
        ms = (time.perf_counter() - started) * 1000
        if result.is_error:
            return Outcome(False, _text(result), ms=ms)
        return Outcome(True, ms=ms)

    async def actor_update(self, actor: Actor, item_id: str, turn: TurnCall, namespace: str) -> Outcome:
        return await self.actor_write(actor, turn, namespace)

    async def actor_search(
        self, actor: Actor, namespace: str, query: str, question: str, at: tuple[str, str], limit: int
    ) -> Outcome:
        episode = self._episodes[actor.principal]
        started = time.perf_counter()
        try:
            found = await self._search(episode, query, namespace, limit, self._meta(actor, at, namespace))
        except TargetError as exc:
            return Outcome(False, str(exc), ms=(time.perf_counter() - started) * 1000)
        return Outcome(True, retrieved=found, ms=(time.perf_counter() - started) * 1000)

    async def actor_list(self, actor: Actor, namespace: str, at: tuple[str, str]) -> Outcome | None:
        episode = self._episodes[actor.principal]
        if "read_graph" not in episode.tools:
            return None
        started = time.perf_counter()
        result = await self._call(episode, "read_graph", {}, self._meta(actor, at, namespace), check=False)
        ms = (time.perf_counter() - started) * 1000
        if result.is_error:
            return Outcome(False, _text(result), ms=ms)
        graph = graph_from_result(result.model_dump(by_alias=True, mode="json"))
        retrieved = [
            Retrieved(observation_id(entity, text), text, 0, provenance={"entity": entity})
            for entity, (_, observations) in graph.entities.items()
            for text in observations
        ]
        return Outcome(True, retrieved=retrieved, ms=ms)

    async def close_actor(self, actor: Actor) -> None:
        episode = self._episodes.pop(actor.principal, None)
        base = self._base.pop(actor.principal, None)
        if episode is not None:
            # The actor's stack holds only its client: the proxy is the episode's, stopped with the last user.
            await episode.stack.aclose()
        if base is None or base not in self._shared:
            return
        server, users = self._shared[base]
        if users > 1:
            self._shared[base] = (server, users - 1)
            return
        del self._shared[base]
        self._entities.pop(base, None)
        await anyio.to_thread.run_sync(server.stop)
        self._servers.remove(server)


def _text(result: Any) -> str:
    parts = [getattr(block, "text", "") for block in result.content or []]
    return " ".join(p for p in parts if p) or "the tool call failed"
