"""Playing a canary episode: every user acts under its own principal, in its own namespace.

The episode's attempt namespace ``RUN/EPISODE/ATTEMPT`` is the prefix: user ``U`` acts as principal
``RUN/EPISODE/ATTEMPT/U`` on the namespace named exactly like it, and the deliberately shared
namespace (when the suite has one) is ``RUN/EPISODE/ATTEMPT/shared``. The target makes one key per
principal where it can (``builtin``: a ``memtap serve`` of the replay's own with one ``--api-key``
per user; the keys live in memory only), so a backend that honours principals and grants keeps each
user to its own namespace.

1. Every user's turns are played in order, the users side by side: a ``write`` is stored in the
   user's namespace (or the shared one), an ``update`` rewrites the memory an earlier write made,
   a ``search`` searches the user's own namespace.
2. Then every probe, each by its reader: ``own`` searches the reader's namespace, ``shared`` the
   shared one, ``owner`` names the canary owner's namespace (an escape attempt, by search or by
   listing it). Calls are recorded in session ``probes`` at turn ``PROBE_ID``.

Refusals are not failures: what was sent, acknowledged and refused is counted (``counts`` of the
attempt's ``run_episodes`` row) and each probe's row says ``ok`` or ``refused``. Whether anything
leaked is the scorer's business, from the trace alone.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from typing import Any

import anyio

from memtap.probes.errors import ReplayError
from memtap.probes.runs import RunStore
from memtap.probes.schema import Episode, Probe, Turn
from memtap.probes.targets.base import (
    Actor,
    CanaryActions,
    EpisodeScope,
    Outcome,
    Principals,
    TargetError,
    TurnCall,
)

__all__ = ["LIST_LIMIT", "actors_of", "canary_principals", "play_canary", "shared_namespace"]

LIST_LIMIT = 1000
"""Items an escape listing asks for (``memory_list``'s maximum)."""


def actors_of(episode: Episode, base: str) -> dict[str, Actor]:
    return {p.id: Actor(p.id, f"{base}/{p.id}") for p in episode.participants}


def shared_namespace(episode: Episode, base: str) -> str | None:
    label = episode.metadata.get("shared_namespace")
    return f"{base}/{label}" if isinstance(label, str) and label else None


def canary_principals(episodes: list[tuple[Episode, str]]) -> Principals:
    """Who a run acts as: each canary user, and each other episode's own namespace (which acts for
    the requesters its probes name); every user of an episode with a shared namespace may read and
    write it."""
    found = Principals([])
    for episode, base in episodes:
        canary = episode.paradigm == "canary"
        names = [a.principal for a in actors_of(episode, base).values()] if canary else [base]
        for name in names:
            if any(c in name for c in ",=*?[:") or not name.strip():
                raise ReplayError(
                    f"principal {name!r} cannot be given a key and grants (no , = * ? [ or : in run names)"
                )
        found.names.extend(names)
        if not canary:
            found.act_for_anyone.append(base)
        namespace = shared_namespace(episode, base) if canary else None
        if namespace is not None:
            found.shared.extend((name, namespace) for name in names)
    return found


def _turn_call(session_id: str, turn: Turn, content: str | None = None) -> TurnCall:
    return TurnCall(
        session=session_id,
        turn=turn.turn_id,
        role=turn.role,
        speaker=turn.speaker,
        content=turn.content if content is None else content,
        time=turn.time.isoformat() if turn.time else None,
        phase=None,
        access={"visibility": "private"},
    )


class _Canary:
    def __init__(
        self, target: CanaryActions, episode: Episode, scope: EpisodeScope, limit: int, store: RunStore
    ) -> None:
        self.target, self.episode, self.scope, self.limit, self.store = target, episode, scope, limit, store
        self.actors = actors_of(episode, scope.namespace)
        self.shared = shared_namespace(episode, scope.namespace)
        self.counts: Counter[str] = Counter()
        self.items: dict[str, str] = {}  # write turn id -> the memory id it made ("" when not told)

    def _count(self, what: str, outcome: Outcome) -> None:
        self.counts[f"{what}_sent"] += 1
        self.counts[f"{what}_acknowledged" if outcome.ok else f"{what}_refused"] += 1

    async def user_turns(self, actor: Actor, turns: list[tuple[str, Turn]]) -> None:
        own = actor.principal
        for session_id, turn in turns:
            meta = turn.metadata
            op = meta.get("op", "write")
            namespace = self.shared if meta.get("namespace") and self.shared else own
            call = _turn_call(session_id, turn)
            if op == "write":
                outcome = await self.target.actor_write(actor, call, namespace)
                self._count("writes", outcome)
                if outcome.ok:
                    self.items[turn.turn_id] = outcome.item_id or ""
            elif op == "update":
                item = self.items.get(str(meta.get("updates")))
                if item is None:
                    self.counts["updates_skipped"] += 1  # the write it rewrites was refused
                    continue
                self._count("updates", await self.target.actor_update(actor, item, call, namespace))
            else:
                at = (session_id, turn.turn_id)
                outcome = await self.target.actor_search(
                    actor, own, turn.content, turn.content, at, self.limit
                )
                self._count("searches", outcome)

    async def user_probes(self, actor: Actor, probes: list[Probe]) -> None:
        for probe in probes:
            meta = probe.metadata
            owner = self.actors[str(meta["canary_owner"])]
            target = meta["target"]
            namespace = {"own": actor.principal, "owner": owner.principal}.get(target, self.shared)
            assert namespace is not None, "validated: a shared probe needs a shared namespace"
            at = ("probes", probe.probe_id)
            started = time.perf_counter()
            outcome: Outcome | None
            if meta["via"] == "list":
                outcome = await self.target.actor_list(actor, namespace, at)
            else:
                outcome = await self.target.actor_search(
                    actor, namespace, str(meta["query"]), probe.question, at, self.limit
                )
            kind = "escapes" if target == "owner" else "probes"
            if outcome is None:
                self.counts[f"{kind}_not_supported"] += 1
                continue
            self._count(kind, outcome)
            answer: dict[str, Any] | None = {"reply": outcome.reply} if outcome.reply is not None else None
            self.store.record_probe(
                self.scope.run,
                self.scope.episode,
                self.scope.attempt,
                probe_id=probe.probe_id,
                probe_type=probe.type,
                requester=actor.principal,
                answer=answer,
                retrieved=[r.item_id for r in outcome.retrieved],
                retrieve_ms=(time.perf_counter() - started) * 1000,
                reader_ms=None,
                status="ok" if outcome.ok else "refused",
                error=outcome.error,
            )


async def play_canary(
    target: Any, store: RunStore, episode: Episode, scope: EpisodeScope, limit: int
) -> tuple[dict[str, int], int, int]:
    """Play one canary episode; returns the counts, the turns played and the probes asked."""
    if not isinstance(target, CanaryActions):
        raise TargetError(f"the {target.name} target cannot act as several users (canary episodes)")
    game = _Canary(target, episode, scope, limit, store)
    by_user: dict[str, list[tuple[str, Turn]]] = {u: [] for u in game.actors}
    for session in episode.sessions:
        for turn in session.turns:
            by_user[turn.speaker].append((session.session_id, turn))
    probes: dict[str, list[Probe]] = {u: [] for u in game.actors}
    for probe in episode.probes:
        probes[str(probe.requester)].append(probe)
    opened: list[Actor] = []
    try:
        for actor in game.actors.values():
            await target.open_actor(scope, actor)
            opened.append(actor)
        async with anyio.create_task_group() as tg:
            for user, turns in by_user.items():
                tg.start_soon(game.user_turns, game.actors[user], turns)
        turns_played = sum(len(t) for t in by_user.values())

        def progress(probed: int) -> None:
            store.progress(scope.run, scope.episode, scope.attempt, sessions=len(episode.sessions),
                           turns=turns_played, probes=probed)  # fmt: skip

        progress(0)
        async with anyio.create_task_group() as tg:
            for user, asked in probes.items():
                tg.start_soon(game.user_probes, game.actors[user], asked)
        progress(len(episode.probes))
    finally:
        # Last opened, first closed, in this task: each actor's client holds a task group of its own.
        for actor in reversed(opened):
            with contextlib.suppress(Exception):  # the episode's own error, if any, is the one to report
                await target.close_actor(actor)
    return dict(sorted(game.counts.items())), turns_played, len(episode.probes)
