"""What a finding is, how severe it can be, and the interface every detector implements."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import IntEnum
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from memtap.errors import ConfigError
from memtap.trace.models import AccessTags, Context, EffectKind, Op, Role

if TYPE_CHECKING:
    from memtap.findings.state import TraceState

__all__ = [
    "DETECTOR_VERSION",
    "Detector",
    "EffectView",
    "EventView",
    "Finding",
    "LeanEffect",
    "LeanEvent",
    "Severity",
    "Shape",
]

# Bumped whenever a rule changes what it reports; stored with every finding so a finding can be
# traced back to the rule that made it.
DETECTOR_VERSION = "1"


class Severity(IntEnum):
    """Ordered: ``--fail-on high`` fails on high and critical findings."""

    INFO = 0
    LOW = 1
    MEDIUM = 2
    HIGH = 3
    CRITICAL = 4

    @classmethod
    def parse(cls, text: str) -> Severity:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            names = ", ".join(s.name.lower() for s in cls)
            raise ConfigError(f"unknown severity {text!r}; use one of: {names}") from None

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass
class Finding:
    """One flagged behaviour: which rule, how severe, where, and the evidence for it."""

    kind: str
    severity: Severity
    summary: str
    event_id: str
    namespace: str | None = None
    run: str | None = None
    episode: str | None = None
    session: str | None = None
    turn: str | None = None
    event_ids: list[str] = field(default_factory=list)
    item_ids: list[str] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)
    detector_version: str = DETECTOR_VERSION
    id: str | None = None
    created_at: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "severity": self.severity.label,
            "summary": self.summary,
            "event_id": self.event_id,
            "namespace": self.namespace,
            "run": self.run,
            "episode": self.episode,
            "session": self.session,
            "turn": self.turn,
            "event_ids": self.event_ids,
            "item_ids": self.item_ids,
            "evidence": self.evidence,
            "detector_version": self.detector_version,
            "created_at": self.created_at,
        }


class Shape(NamedTuple):
    """What kind of event it is, as far as the rules tell events apart: the engine shows an event
    only to the detectors that ``want`` its shape (most events are adds and retrievals, which most
    rules have nothing to say about)."""

    op: Op
    ok: bool  # status "ok"
    error: bool  # an error message is recorded
    kinds: frozenset[EffectKind]  # of its effects
    role: Role | None
    gate: str | None  # None (no verdict), "deny" (a would-deny or withheld verdict) or "other"
    parent: bool  # it has a parent_id


class EffectView(Protocol):
    """What the rules read of an effect: a ``MemoryEffect``, or the lean reader's slotted
    ``LeanEffect`` (below: made for millions of effects, it holds only these)."""

    @property
    def kind(self) -> EffectKind: ...
    @property
    def item_id(self) -> str: ...
    @property
    def namespace(self) -> str | None: ...
    @property
    def content_before(self) -> str | None: ...
    @property
    def content_after(self) -> str | None: ...
    @property
    def tags_after(self) -> AccessTags | None: ...
    @property
    def derived_from(self) -> list[str]: ...


class EventView(Protocol):
    """What the rules read of an event: a ``TraceEvent``, or the lean reader's ``LeanEvent``."""

    @property
    def id(self) -> str: ...
    @property
    def backend(self) -> str: ...
    @property
    def tool(self) -> str: ...
    @property
    def op(self) -> Op: ...
    @property
    def context(self) -> Context: ...
    @property
    def arguments(self) -> dict[str, Any]: ...
    @property
    def result(self) -> Any: ...
    @property
    def effects(self) -> Sequence[EffectView]: ...
    @property
    def status(self) -> str: ...
    @property
    def error(self) -> str | None: ...
    @property
    def gate(self) -> str | None: ...
    @property
    def parent_id(self) -> str | None: ...
    @property
    def links(self) -> list[str]: ...


@dataclass(slots=True, eq=False)
class LeanEffect:
    """An effect as the rules read it (``EffectView``), for the reader's ``lean`` mode
    (``reader.py``): a slotted object made with its values as read (a model with its dict,
    fields-set and private slots cost three times as much to make and to free, for millions of
    effects)."""

    kind: EffectKind
    item_id: str
    namespace: str | None
    content_before: str | None
    content_after: str | None
    tags_after: AccessTags | None
    derived_from: list[str]


@dataclass(slots=True, eq=False)
class LeanEvent:
    """An event as the rules read it (``EventView``; ``started_at`` too), for ``lean``
    reading: slotted, made with its values as read."""

    id: str
    started_at: datetime
    backend: str
    tool: str
    op: Op
    context: Context
    arguments: dict[str, Any]
    result: Any
    effects: list[LeanEffect]
    status: str
    error: str | None
    gate: str | None
    parent_id: str | None
    links: list[str]


class Detector(Protocol):
    """A small documented rule. ``observe`` sees each event in trace order, with the state of the
    trace *before* the event (``state``); it returns the findings the event causes. Detectors
    never write: the engine applies the event to the state after every detector has seen it.
    ``wants`` says which event shapes ``observe`` can find anything in, or learn anything from:
    it is only shown those (a superset is safe; missing one loses findings)."""

    name: str
    severity: Severity
    rule: str

    def wants(self, shape: Shape) -> bool: ...

    def observe(self, event: EventView, state: TraceState) -> Iterable[Finding]: ...


def finding_for(
    detector: Detector,
    event: EventView,
    summary: str,
    *,
    item_ids: list[str] | None = None,
    event_ids: list[str] | None = None,
    evidence: dict[str, Any] | None = None,
    severity: Severity | None = None,
    namespace: str | None = None,
) -> Finding:
    """A finding located at ``event`` (its context fills namespace, run, episode, session, turn)."""
    ctx = event.context
    return Finding(
        kind=detector.name,
        severity=detector.severity if severity is None else severity,
        summary=summary,
        event_id=event.id,
        namespace=namespace or ctx.namespace,
        run=ctx.run,
        episode=ctx.episode,
        session=ctx.session,
        turn=ctx.turn,
        event_ids=event_ids if event_ids is not None else [event.id],
        item_ids=item_ids or [],
        evidence=evidence or {},
    )
