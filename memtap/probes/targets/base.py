"""What the replay driver needs from a target: five calls, each through a real front door.

A target is the agent stack under test, reached the way a live agent's traffic reaches it:
``builtin`` (memtap's MCP front door over the embedded backend), ``mcp:CONFIG[:NAME]`` (a
wrapped upstream MCP server) and ``openai:URL`` (an agent behind an OpenAI-compatible
endpoint) are one module each. The driver calls, per episode and from one task:

1. :meth:`Target.open_episode` — a fresh namespace for the episode;
2. for each turn in time order, :meth:`Target.mark` (the replay clock, for targets whose agent
   makes memory calls on its own) then :meth:`Target.ingest_turn`;
3. for each probe, :meth:`Target.mark` with the probe as a turn (session ``probes``, turn the
   probe's id), then :meth:`Target.ask_probe`, asked by the probe's requester, returning what was
   retrieved (and, for agents that answer, the reply);
4. :meth:`Target.close_episode`, also when the episode failed.

A target raises :class:`TargetError` (or any exception) when a call fails; the driver marks
the episode failed with that error and goes on with the next one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from memtap.probes.errors import SuiteError

__all__ = ["EpisodeScope", "ProbeCall", "ProbeResult", "Retrieved", "Target", "TargetError", "TurnCall"]


class TargetError(SuiteError):
    """A target refused or failed a call the replay made."""


@dataclass(frozen=True)
class EpisodeScope:
    """One attempt at one episode: the run, the episode, and its fresh namespace."""

    run: str
    episode: str
    attempt: int
    namespace: str
    owner: str  # the suite's namespace owner (the user), who keeps access to everything


@dataclass(frozen=True)
class TurnCall:
    session: str
    turn: str
    role: str
    speaker: str
    content: str
    time: str | None
    phase: str | None
    access: dict[str, Any]  # visibility, participants, allow, deny, sensitivity (memtap's access tags)


@dataclass(frozen=True)
class ProbeCall:
    probe_id: str
    probe_type: str
    question: str
    requester: str
    time: str


@dataclass(frozen=True)
class Retrieved:
    item_id: str
    content: str
    rank: int
    score: float | None = None
    tags: dict[str, Any] | None = None
    provenance: dict[str, Any] = field(default_factory=dict)


@dataclass
class ProbeResult:
    retrieved: list[Retrieved]
    retrieve_ms: float
    reply: str | None = None  # an agent's own answer (openai targets); None when only memory is read


@runtime_checkable
class Target(Protocol):
    name: str

    async def start(self) -> None:
        """Reach (or start) the stack under test; raise TargetError when it cannot be used."""

    def describe(self) -> dict[str, Any]:
        """What the run records about the target (no secrets)."""

    async def open_episode(self, scope: EpisodeScope) -> None: ...

    async def mark(self, scope: EpisodeScope, turn: TurnCall) -> None: ...

    async def ingest_turn(self, scope: EpisodeScope, turn: TurnCall) -> None: ...

    async def ask_probe(self, scope: EpisodeScope, probe: ProbeCall, *, limit: int) -> ProbeResult: ...

    async def close_episode(self, scope: EpisodeScope) -> None: ...

    async def aclose(self) -> None: ...
