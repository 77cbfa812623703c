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

__all__ = [
    "Actor",
    "BatchIngest",
    "CanaryActions",
    "EpisodeScope",
    "Outcome",
    "Principals",
    "ProbeCall",
    "ProbeResult",
    "Retrieved",
    "Target",
    "TargetError",
    "TurnCall",
    "TurnFailed",
]


class TargetError(SuiteError):
    """A target refused or failed a call the replay made."""


class TurnFailed(TargetError):
    """One turn of a batch failed: ``index`` is its position in the turns the target was given."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


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


@runtime_checkable
class BatchIngest(Protocol):
    """A target whose turns need no per-turn reaction (no replay-clock mark, no reply to wait for):
    the driver may hand it the turns of the sessions up to the next probe at once, instead of
    :meth:`Target.mark` and :meth:`Target.ingest_turn` per turn. The trace must be the one per-turn
    ingestion leaves; a failed turn is raised as :class:`TurnFailed` with its position."""

    async def ingest_turns(self, scope: EpisodeScope, turns: list[TurnCall]) -> None: ...


@runtime_checkable
class PipelinedIngest(Protocol):
    """A target that takes each turn as its own call (``--ingest turn``) but needs no per-turn
    reaction either: the driver hands it the turns of the sessions up to the next probe, and it
    may have several calls in flight, as long as the target serves them in the order sent (one
    ordered stream). The trace is the one :meth:`Target.ingest_turn` turn by turn leaves; a failed
    turn is raised as :class:`TurnFailed` with its position, after the calls in flight with it
    ended (served and recorded, as separate calls are)."""

    async def ingest_each(self, scope: EpisodeScope, turns: list[TurnCall]) -> None: ...


@runtime_checkable
class PipelinedProbes(Protocol):
    """A target whose probes need no mark and no reply: the driver hands it the probes due together
    (no turn between them) and it may have their searches in flight together, served in the order
    sent. Each result's ``retrieve_ms`` is an equal share of the time they took together (their
    sum is the time spent); a refused search raises :class:`TargetError`, as :meth:`Target.ask_probe`
    does."""

    async def ask_probes(
        self, scope: EpisodeScope, probes: list[ProbeCall], *, limit: int
    ) -> list[ProbeResult]: ...


# -- acting as one user of many (the isolation canary) ----------------------------------------------


@dataclass(frozen=True)
class Actor:
    """One user of a canary episode, acting under its own principal, whose namespace is named like it."""

    user: str  # the suite's participant id
    principal: str  # RUN/EPISODE/ATTEMPT/USER: the principal and its own namespace


@dataclass
class Outcome:
    """What one call of an actor got back: acknowledged (``ok``) or refused with the target's error."""

    ok: bool
    error: str | None = None
    item_id: str | None = None  # a write's new memory id, where the target says
    retrieved: list[Retrieved] = field(default_factory=list)
    reply: str | None = None
    ms: float = 0.0


@dataclass(frozen=True)
class Principals:
    """Who a run acts as, for a server the replay starts: ``names`` each get a key; ``shared`` are
    (principal, namespace) pairs granted read and write (a canary's deliberately shared namespace);
    ``act_for_anyone`` are the principals of ordinary episodes, whose probes name their requesters."""

    names: list[str]
    shared: list[tuple[str, str]] = field(default_factory=list)
    act_for_anyone: list[str] = field(default_factory=list)

    def serve_args(self) -> list[str]:
        """``--grant`` and ``--act-for`` options of ``memtap serve`` and ``memtap proxy``."""
        grants = [a for p, ns in self.shared for a in ("--grant", f"{p}={ns}:read,write")]
        return grants + [a for p in self.act_for_anyone for a in ("--act-for", f"{p}=*")]


@runtime_checkable
class CanaryActions(Protocol):
    """What a target needs to play a canary episode: calls made by one user of many, each under its
    own principal. A call the target refuses is an :class:`Outcome` with ``ok`` false (an MCP tool
    error, an HTTP 4xx); a target that cannot be reached raises."""

    def set_principals(self, principals: Principals) -> None:
        """Before :meth:`Target.start`: every principal the run will act as (keys are made for them)
        and the grants beyond their own namespaces that the suite asks for."""

    async def open_actor(self, scope: EpisodeScope, actor: Actor) -> None: ...

    async def actor_write(self, actor: Actor, turn: TurnCall, namespace: str) -> Outcome: ...

    async def actor_update(self, actor: Actor, item_id: str, turn: TurnCall, namespace: str) -> Outcome: ...

    async def actor_search(
        self, actor: Actor, namespace: str, query: str, question: str, at: tuple[str, str], limit: int
    ) -> Outcome:
        """Search ``namespace`` (``at`` is the session and turn the call is recorded in); a chat
        target asks ``question`` instead, with ``namespace`` as the memory it names."""

    async def actor_list(self, actor: Actor, namespace: str, at: tuple[str, str]) -> Outcome | None:
        """List ``namespace``; None when the target has no listing."""

    async def close_actor(self, actor: Actor) -> None: ...
