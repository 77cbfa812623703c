"""What the replay driver sends: a session's turns and a probe as target calls, and how turns go
(batched, pipelined one call per turn, or one by one)."""

from __future__ import annotations

from memtap.errors import ConfigError
from memtap.probes.schema import Episode, Probe, Session
from memtap.probes.targets.base import (
    BatchIngest,
    EpisodeScope,
    PipelinedIngest,
    ProbeCall,
    Target,
    TurnCall,
)

__all__ = ["PROBE_SESSION", "EachTurn", "batch_ingest", "probe_call", "probe_turn", "turn_calls"]


PROBE_SESSION = "probes"
"""The session a probe's memory calls are recorded in (their turn is the probe's id)."""


def probe_turn(probe: Probe, requester: str) -> TurnCall:
    """A probe as a mark on the replay clock: session ``probes``, turn ``PROBE_ID``, the requester."""
    return TurnCall(
        session=PROBE_SESSION,
        turn=probe.probe_id,
        role="user",
        speaker=requester,
        content=probe.question,
        time=probe.time.isoformat(),
        phase="probe",
        access={},
    )


class EachTurn:
    """``--ingest turn`` on a :class:`PipelinedIngest` target: each turn its own call, pipelined."""

    def __init__(self, target: PipelinedIngest) -> None:
        self.target = target

    async def ingest_turns(self, scope: EpisodeScope, turns: list[TurnCall]) -> None:
        await self.target.ingest_each(scope, turns)


def probe_call(probe: Probe, requester: str) -> ProbeCall:
    return ProbeCall(probe.probe_id, probe.type, probe.question, requester, probe.time.isoformat())


def batch_ingest(target: Target, ingest: str) -> BatchIngest | None:
    """The target as a batch ingester when ``ingest`` (auto, turn, batch) says so and it is one;
    with ``turn``, a target that pipelines its per-turn calls takes the same runs of turns."""
    if ingest == "turn" and isinstance(target, PipelinedIngest):
        return EachTurn(target)
    if ingest == "turn" or not isinstance(target, BatchIngest):
        if ingest == "batch":
            raise ConfigError(f"--ingest batch: the {target.name} target takes turns one by one only")
        return None
    return target


def turn_calls(episode: Episode, session: Session) -> list[TurnCall]:
    access = session.access
    allow = list(dict.fromkeys([*access.allow, episode.owner()]))
    tags = {
        "visibility": access.visibility,
        "participants": session.participants,
        "allow": allow,
        "deny": access.deny,
        "sensitivity": access.sensitivity,
    }
    return [
        TurnCall(
            session=session.session_id,
            turn=turn.turn_id,
            role=turn.role,
            speaker=turn.speaker,
            content=turn.content,
            time=(turn.time or session.time).isoformat(),
            phase=session.phase,
            access={k: v for k, v in tags.items() if v is not None},
        )
        for turn in session.turns
    ]
