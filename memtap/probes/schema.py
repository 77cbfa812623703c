"""The suite format (``memtap-suite/1``): pydantic models and the checks a model cannot express.

A suite is a list of episodes. Each episode is one controlled experiment on one memory:
sessions of turns played in time order, a gold memory bank with lineage, and probes asked
afterwards by named requesters. Importers write this shape, generators write it, replay and
scoring read only this shape. ``docs/suite-format.md`` documents every field and every
addition to the published contract.

:func:`episode_problems` finds what the models cannot: duplicate ids, references to gold
keys, sessions or turns that do not exist, sessions out of time order, and probes whose
support is not valid at the time they are asked.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from memtap.probes.canary_schema import canary_probe_problems, canary_turn_problems

__all__ = [
    "ANONYMOUS",
    "FORMAT",
    "HISTORY_PROBES",
    "MEMPROBE_PARADIGMS",
    "Access",
    "Behavior",
    "Conflict",
    "Episode",
    "ExpectedAction",
    "GoldMemory",
    "MemoryType",
    "Participant",
    "Phase",
    "Probe",
    "ProbeFields",
    "ProbeGold",
    "ProbeType",
    "Session",
    "SessionGold",
    "Temporal",
    "Turn",
    "UpdateGold",
    "episode_problems",
]

FORMAT = "memtap-suite/1"
ANONYMOUS = "anonymous"
"""The requester id of a querier whose identity is unknown (MemArena's anonymous querier)."""

MEMPROBE_PARADIGMS = ("interference", "misinformation", "consolidation", "reconsolidation")

Paradigm = Literal[
    "interference",
    "misinformation",
    "consolidation",
    "reconsolidation",
    "lifecycle",
    "permission",
    "abstention",
    "qa",
    "canary",
]
Behavior = Literal["update", "preserve"]
Phase = Literal["encoding", "filler", "perturbation", "perturbation_p1", "perturbation_p2", "post", "probe"]
TurnRole = Literal["user", "assistant", "tool", "third_party", "system"]
ParticipantRole = Literal["user", "assistant", "tool", "third_party", "requester", "system"]
Visibility = Literal["private", "participants", "public"]
MemoryType = Literal["episodic", "user_profile", "fact", "agent_identity", "agent_method", "agent_knowledge"]
SourceLabel = Literal["user", "assistant", "tool", "document", "third_party", "stale_record"]
ConflictStatus = Literal["not_accepted", "stale", "different_entity", "hypothetical", "accepted"]
ProbeType = Literal[
    "current_value",
    "previous_value",
    "change_detection",
    "source",
    "conflict_value",
    "temporal",
    "qa",
    "permission",
    "abstention",
    "cloze",
    "metadata",
    "canary",
]
ExpectedAction = Literal["answer", "disclose", "withhold", "abstain"]

HISTORY_PROBES = frozenset({"previous_value", "change_detection", "source", "conflict_value", "temporal"})
"""Probe types that ask about history: their support may have been invalidated before they are asked."""


def _utc(value: datetime) -> datetime:
    """Times without a zone are UTC, so every time in a suite compares with every other."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


Time = Annotated[datetime, AfterValidator(_utc)]


class _Strict(BaseModel):
    """Unknown keys are errors: a misspelt field must not be silently ignored."""

    model_config = ConfigDict(extra="forbid")


class Participant(_Strict):
    id: str = Field(..., min_length=1)
    role: ParticipantRole


class Access(_Strict):
    """Who may later be told what was said in a session (or what a gold memory holds)."""

    visibility: Visibility = "participants"
    allow: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)
    sensitivity: str | None = None


class Turn(_Strict):
    turn_id: str = Field(..., min_length=1)
    role: TurnRole
    speaker: str = Field(..., min_length=1)
    content: str
    time: Time | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class UpdateGold(_Strict):
    delete: list[str] = Field(default_factory=list)
    add: list[str] = Field(default_factory=list)


class SessionGold(_Strict):
    capture: list[str] = Field(default_factory=list)
    update: UpdateGold = Field(default_factory=UpdateGold)


class Session(_Strict):
    session_id: str = Field(..., min_length=1)
    time: Time
    phase: Phase | None = None
    participants: list[str] = Field(default_factory=list)
    access: Access = Field(default_factory=Access)
    turns: list[Turn] = Field(..., min_length=1)
    gold: SessionGold = Field(default_factory=SessionGold)
    metadata: dict[str, Any] = Field(default_factory=dict)


class GoldMemory(_Strict):
    content: str = Field(..., min_length=1)
    type: MemoryType
    source: SourceLabel | None = None
    created_in: str | None = None
    invalidated_in: str | None = None
    replaces: list[str] = Field(default_factory=list)
    access: Access | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class Conflict(_Strict):
    value: str | None = None
    source: SourceLabel | None = None
    status: ConflictStatus | None = None
    applies_to_target: bool | None = None


class Temporal(_Strict):
    old_value: str | None = None
    new_value: str | None = None
    trigger: str | None = None
    reason: str | None = None


class ProbeFields(_Strict):
    changed: bool | None = None
    source: SourceLabel | None = None
    conflict: Conflict | None = None
    temporal: Temporal | None = None
    protected_fact: str | None = None


def _text_or_none(value: object) -> object:
    """Numbers become text (LoCoMo has integer answers); everything else is checked as it is."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


class ProbeGold(_Strict):
    answer: str | None = None
    fields: ProbeFields = Field(default_factory=ProbeFields)

    _answer_text = field_validator("answer", mode="before")(_text_or_none)


class Probe(_Strict):
    probe_id: str = Field(..., min_length=1)
    type: ProbeType
    requester: str | None = None
    question: str = Field(..., min_length=1)
    time: Time
    expected_behavior: Behavior | None = None
    expected_action: ExpectedAction = "answer"
    gold: ProbeGold = Field(default_factory=ProbeGold)
    support: list[str] = Field(default_factory=list)
    evidence_turns: list[str] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("expected_behavior", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return None if value == "" else value


class Episode(_Strict):
    format: Literal["memtap-suite/1"]
    episode_id: str = Field(..., min_length=1)
    suite: str | None = None
    paradigm: Paradigm
    condition: str | None = None
    expected_behavior: Behavior | None = None
    group_id: str | None = None
    namespace: str = Field(..., min_length=1)
    participants: list[Participant] = Field(..., min_length=1)
    split_perturbation: bool = False
    sessions: list[Session] = Field(..., min_length=1)
    gold_memory: dict[str, GoldMemory] = Field(default_factory=dict)
    probes: list[Probe] = Field(default_factory=list)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @field_validator("expected_behavior", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return None if value == "" else value

    def owner(self) -> str:
        """The requester a probe without one is asked by: the namespace's owner."""
        return self.namespace

    def requester_of(self, probe: Probe) -> str:
        return probe.requester if probe.requester is not None else self.owner()

    def turn_count(self) -> int:
        return sum(len(session.turns) for session in self.sessions)


# -- checks across fields ------------------------------------------------------------------------


def _duplicates(values: list[str]) -> list[str]:
    return [value for value, count in Counter(values).items() if count > 1]


def episode_problems(ep: Episode) -> list[tuple[str, str]]:
    """What is wrong with a parsed episode, as (field path, message) pairs; empty when valid."""
    problems: list[tuple[str, str]] = []
    add = problems.append
    session_ids = [s.session_id for s in ep.sessions]
    turn_ids = [t.turn_id for s in ep.sessions for t in s.turns]
    for name, ids in (
        ("participants", [p.id for p in ep.participants]),
        ("sessions", session_ids),
        ("turns", turn_ids),
        ("probes", [p.probe_id for p in ep.probes]),
    ):
        for dup in _duplicates(ids):
            add((name, f"duplicate id {dup!r}"))
    sessions = {s.session_id: s for s in ep.sessions}
    turns = set(turn_ids)
    people = {p.id for p in ep.participants}
    keys = set(ep.gold_memory)
    if ep.namespace not in people:
        add(("namespace", f"{ep.namespace!r} is not one of the participants"))

    previous: datetime | None = None
    for i, session in enumerate(ep.sessions):
        where = f"sessions[{i}]"
        if previous is not None and session.time < previous:
            add(
                (
                    f"{where}.time",
                    f"session {session.session_id!r} at {session.time.isoformat()} "
                    f"comes before the session listed ahead of it ({previous.isoformat()}); "
                    "sessions must be in time order",
                )
            )
        previous = session.time
        for person in session.participants:
            if person not in people:
                add((f"{where}.participants", f"{person!r} is not one of the episode's participants"))
        last = session.time
        for j, turn in enumerate(session.turns):
            if turn.speaker not in people:
                add((f"{where}.turns[{j}].speaker", f"{turn.speaker!r} is not one of the participants"))
            if turn.time is not None:
                if turn.time < last:
                    add(
                        (
                            f"{where}.turns[{j}].time",
                            f"turn {turn.turn_id!r} is earlier than "
                            f"{'the session start' if j == 0 else 'the turn before it'}",
                        )
                    )
                last = turn.time
        for k, key in enumerate(session.gold.capture):
            _check_key(add, keys, f"{where}.gold.capture[{k}]", key)
            created = ep.gold_memory[key].created_in if key in keys else None
            if created is not None and created != session.session_id:
                add((f"{where}.gold.capture[{k}]", f"{key!r} is created in {created!r}, not in this session"))
        for k, key in enumerate(session.gold.update.add):
            _check_key(add, keys, f"{where}.gold.update.add[{k}]", key)
            created = ep.gold_memory[key].created_in if key in keys else None
            if created is not None and created != session.session_id:
                add((f"{where}.gold.update.add[{k}]", f"{key!r} is created in {created!r}, not here"))
        for k, key in enumerate(session.gold.update.delete):
            _check_key(add, keys, f"{where}.gold.update.delete[{k}]", key)
            closed = ep.gold_memory[key].invalidated_in if key in keys else None
            if key in keys and closed != session.session_id:
                add(
                    (
                        f"{where}.gold.update.delete[{k}]",
                        f"{key!r} is deleted here but its invalidated_in is {closed!r}",
                    )
                )

    if ep.paradigm == "canary":
        problems += canary_turn_problems(ep)
    for key, memory in ep.gold_memory.items():
        where = f"gold_memory.{key}"
        for name in ("created_in", "invalidated_in"):
            value = getattr(memory, name)
            if value is not None and value not in sessions:
                add((f"{where}.{name}", f"no session {value!r} in this episode"))
        if (
            memory.created_in in sessions
            and memory.invalidated_in in sessions
            and sessions[memory.invalidated_in].time < sessions[memory.created_in].time
        ):
            add((f"{where}.invalidated_in", "invalidated before it was created"))
        for k, old in enumerate(memory.replaces):
            _check_key(add, keys, f"{where}.replaces[{k}]", old)
            if old == key:
                add((f"{where}.replaces[{k}]", "a memory cannot replace itself"))

    if ep.paradigm in MEMPROBE_PARADIGMS and ep.expected_behavior is None:
        add(("expected_behavior", f"a {ep.paradigm} episode needs update or preserve"))
    phases = [s.phase for s in ep.sessions]
    if ep.split_perturbation:
        if "perturbation_p1" not in phases or "perturbation_p2" not in phases:
            add(("split_perturbation", "a split episode needs perturbation_p1 and perturbation_p2 sessions"))
        elif phases.index("perturbation_p2") < phases.index("perturbation_p1"):
            add(("split_perturbation", "perturbation_p2 comes before perturbation_p1"))

    for i, probe in enumerate(ep.probes):
        where = f"probes[{i}]"
        if probe.requester is not None and probe.requester not in people and probe.requester != ANONYMOUS:
            add((f"{where}.requester", f"{probe.requester!r} is not a participant (nor {ANONYMOUS!r})"))
        if (
            probe.expected_behavior is not None
            and ep.expected_behavior is not None
            and probe.expected_behavior != ep.expected_behavior
        ):
            add(
                (
                    f"{where}.expected_behavior",
                    f"{probe.expected_behavior} but the episode expects {ep.expected_behavior}",
                )
            )
        if probe.type == "permission" and probe.expected_action not in ("disclose", "withhold"):
            add((f"{where}.expected_action", "a permission probe expects disclose or withhold"))
        if probe.type == "canary" or ep.paradigm == "canary":
            problems += [(f"{where}.{f}", m) for f, m in canary_probe_problems(ep, probe)]
        for k, turn_id in enumerate(probe.evidence_turns):
            if turn_id not in turns:
                add((f"{where}.evidence_turns[{k}]", f"no turn {turn_id!r} in this episode"))
        for k, key in enumerate(probe.support):
            if not _check_key(add, keys, f"{where}.support[{k}]", key):
                continue
            problem = _support_problem(ep.gold_memory[key], probe, sessions)
            if problem:
                add((f"{where}.support[{k}]", f"{key!r} {problem}"))
    return problems


def _check_key(add: Any, keys: set[str], where: str, key: str) -> bool:
    if key in keys:
        return True
    add((where, f"gold key {key!r} does not exist in gold_memory"))
    return False


def _support_problem(memory: GoldMemory, probe: Probe, sessions: dict[str, Session]) -> str | None:
    """Why ``memory`` cannot support ``probe`` at its time, or None when it can."""
    at = probe.time
    if memory.created_in in sessions and sessions[memory.created_in].time > at:
        return f"is created in {memory.created_in!r}, after the probe is asked"
    if probe.type in HISTORY_PROBES or memory.invalidated_in not in sessions:
        return None
    if sessions[memory.invalidated_in].time <= at:
        return f"is no longer valid when the probe is asked (invalidated in {memory.invalidated_in!r})"
    return None
