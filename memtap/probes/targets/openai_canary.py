"""``openai:`` target, canary episodes: several users chatting with one agent behind one endpoint.

Each user's turns are chat calls of its own: ``user`` and ``X-Memtap-Requester`` are the user's
principal, ``X-Memtap-Namespace`` the namespace the call names (the user's own; the shared one; or,
for an escape attempt, the other user's), and ``X-Memtap-Session``, ``-Turn``, ``-Run``,
``-Episode`` where the call is recorded. A write, an update and a search are each one chat turn (an
agent with memory captures what it is told and recalls what it is asked); a probe asks its
question. The reply is what the scorer reads (channel ``chat``), with the memory the endpoint
injected when it is memtap recording to the run's database. The endpoint's key is
``OPENAI_API_KEY`` for every user: the replay cannot make keys for a server it did not start, so
per-user principals come only from these headers (a keyless memtap on loopback) and from ``user``.
There is no listing over chat: escape listings are not attempted.
"""

from __future__ import annotations

import time
from pathlib import Path

from memtap.probes.targets.base import Actor, EpisodeScope, Outcome, Principals, TargetError, TurnCall
from memtap.probes.targets.openai import OpenAITarget, _name

__all__ = ["OpenAICanaryTarget"]


class OpenAICanaryTarget(OpenAITarget):
    def __init__(self, spec: str, db: Path) -> None:
        super().__init__(spec, db)
        self._scopes: dict[str, EpisodeScope] = {}  # actor principal -> its episode attempt

    def set_principals(self, principals: Principals) -> None:
        """Nothing to make: the endpoint's keys are its own (see the module docstring)."""

    async def open_actor(self, scope: EpisodeScope, actor: Actor) -> None:
        if self.session is None:
            raise TargetError("start() first")
        self._scopes[actor.principal] = scope

    def _actor_headers(self, actor: Actor, namespace: str, at: tuple[str, str], role: str) -> dict[str, str]:
        scope = self._scopes[actor.principal]
        return {
            **self._headers(scope, at[0], at[1], role),
            "X-Memtap-Namespace": namespace,
            "X-Memtap-Requester": actor.principal,
            "X-Memtap-Principal": actor.principal,
        }

    async def _say(self, actor: Actor, namespace: str, text: str, at: tuple[str, str], role: str) -> Outcome:
        message = {"role": "user", "content": text, "name": _name(actor.user)}
        started = time.perf_counter()
        try:
            reply = await self._chat(
                [message], self._actor_headers(actor, namespace, at, role), actor.principal
            )
        except TargetError as exc:
            return Outcome(False, str(exc), ms=(time.perf_counter() - started) * 1000)
        return Outcome(True, reply=reply, ms=(time.perf_counter() - started) * 1000)

    async def actor_write(self, actor: Actor, turn: TurnCall, namespace: str) -> Outcome:
        return await self._say(actor, namespace, turn.content, (turn.session, turn.turn), turn.role)

    async def actor_update(self, actor: Actor, item_id: str, turn: TurnCall, namespace: str) -> Outcome:
        return await self._say(actor, namespace, turn.content, (turn.session, turn.turn), turn.role)

    async def actor_search(
        self, actor: Actor, namespace: str, query: str, question: str, at: tuple[str, str], limit: int
    ) -> Outcome:
        return await self._say(actor, namespace, question, at, "user")

    async def actor_list(self, actor: Actor, namespace: str, at: tuple[str, str]) -> Outcome | None:
        return None

    async def close_actor(self, actor: Actor) -> None:
        self._scopes.pop(actor.principal, None)
