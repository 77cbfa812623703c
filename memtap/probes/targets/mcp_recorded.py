"""The ``mcp`` target's replay of recorded writes, updates and deletes (A/B replay,
:mod:`memtap.probes.ab_replay`), as a mixin of :class:`memtap.probes.targets.mcp.McpTarget`.

On the reference server a recorded write is an observation of the speaker's entity (its item id
is the observation's, :func:`memtap.adapters.memory_server.observation_id`); an update is that
observation's ``delete_observations`` then ``add_observations`` of the new content on the same
entity (memtap's derivation records the pair as the observation's update); a delete is its
``delete_observations``. Another profile replays writes with its write tool (the target items are
the ids its structured result names) and skips updates and deletes.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from memtap.adapters.memory_server import observation_id
from memtap.probes.ab_replay import WriteOutcome
from memtap.probes.targets.base import EpisodeScope, TurnCall

if TYPE_CHECKING:
    from memtap.probes.targets.mcp import _Episode

__all__ = ["RecordedObservations"]


def _error_text(result: Any) -> str:
    parts = [getattr(block, "text", "") for block in result.content or []]
    return " ".join(p for p in parts if p) or "the tool call failed"


class RecordedObservations:
    """Needs, from the class it is mixed into: ``_episodes``, ``_call``, ``_generic_args``."""

    _episodes: dict[str, _Episode]

    if TYPE_CHECKING:

        async def _call(
            self,
            episode: _Episode,
            tool: str,
            args: dict[str, Any],
            meta: dict[str, Any],
            *,
            check: bool = True,
        ) -> Any: ...

        def _generic_args(
            self, episode: _Episode, tool: str, text: str, namespace: str, limit: int | None = None
        ) -> dict[str, Any]: ...

    async def _timed(
        self, episode: _Episode, calls: list[tuple[str, dict[str, Any]]], turn: TurnCall
    ) -> tuple[WriteOutcome, Any]:
        """``calls`` in order, in the turn's context, until one is refused: (outcome, last result)."""
        meta = {"session": turn.session, "turn": turn.turn, "role": turn.role}
        started, result = time.perf_counter(), None
        for tool, args in calls:
            result = await self._call(episode, tool, args, meta, check=False)
            if result.is_error:
                ms = (time.perf_counter() - started) * 1000
                return WriteOutcome(False, ms=ms, error=f"{tool} refused: {_error_text(result)}"), result
        return WriteOutcome(True, ms=(time.perf_counter() - started) * 1000), result

    async def write_recorded(self, scope: EpisodeScope, turn: TurnCall) -> WriteOutcome:
        """A recorded write: the reference server's observation of the speaker's entity (its id is the
        observation's); another profile's write tool (the ids its structured result names)."""
        episode = self._episodes[scope.namespace]
        if episode.profile.name != "server-memory":
            assert episode.profile.write_tool is not None
            args = self._generic_args(episode, episode.profile.write_tool, turn.content, scope.namespace)
            outcome, result = await self._timed(episode, [(episode.profile.write_tool, args)], turn)
            from memtap.probes.targets.mcp import _generic_results

            outcome.items = [r.item_id for r in _generic_results(result, 1000)] if outcome.ok else []
            return outcome
        entity = turn.speaker or scope.owner
        if entity in episode.speakers:
            call = (
                "add_observations",
                {"observations": [{"entityName": entity, "contents": [turn.content]}]},
            )
        else:
            entities = [{"name": entity, "entityType": "speaker", "observations": [turn.content]}]
            call = ("create_entities", {"entities": entities})
        outcome, _ = await self._timed(episode, [call], turn)
        if outcome.ok:
            episode.speakers.add(entity)
            item = observation_id(entity, turn.content)
            episode.observations[item] = (entity, turn.content)
            outcome.items = [item]
        return outcome

    def _observation(self, episode: _Episode, item: str, tool: str) -> tuple[str, str] | WriteOutcome:
        if episode.profile.name != "server-memory":
            return WriteOutcome(False, skipped=f"profile {episode.profile.name} replays no recorded {tool}")
        found = episode.observations.get(item)
        return found if found is not None else WriteOutcome(False, skipped=f"no observation {item} replayed")

    async def update_recorded(self, scope: EpisodeScope, turn: TurnCall, item: str) -> WriteOutcome:
        """An update of an observation: its delete, then the new content added to the same entity."""
        episode = self._episodes[scope.namespace]
        found = self._observation(episode, item, "memory_update")
        if isinstance(found, WriteOutcome):
            return found
        entity, old = found
        gone = {"deletions": [{"entityName": entity, "observations": [old]}]}
        added = {"observations": [{"entityName": entity, "contents": [turn.content]}]}
        outcome, _ = await self._timed(
            episode, [("delete_observations", gone), ("add_observations", added)], turn
        )
        if outcome.ok:
            new = observation_id(entity, turn.content)
            del episode.observations[item]
            episode.observations[new] = (entity, turn.content)
            outcome.items = [new]
        return outcome

    async def delete_recorded(self, scope: EpisodeScope, turn: TurnCall, item: str) -> WriteOutcome:
        episode = self._episodes[scope.namespace]
        found = self._observation(episode, item, "memory_delete")
        if isinstance(found, WriteOutcome):
            return found
        entity, old = found
        gone = {"deletions": [{"entityName": entity, "observations": [old]}]}
        outcome, _ = await self._timed(episode, [("delete_observations", gone)], turn)
        if outcome.ok:
            del episode.observations[item]
            outcome.items = [item]
        return outcome
