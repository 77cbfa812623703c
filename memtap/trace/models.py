"""The core types of a trace: who called, what the call did to which memory items."""

from __future__ import annotations

from collections.abc import Set
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = [
    "AccessTags",
    "Context",
    "EffectKind",
    "ItemVersion",
    "MemoryEffect",
    "MemoryItem",
    "Op",
    "Provenance",
    "Role",
    "TraceEvent",
    "Visibility",
    "built_model",
    "utc_now",
]

_M = TypeVar("_M", bound=BaseModel)


def utc_now() -> datetime:
    return datetime.now(UTC)


def built_model(cls: type[_M], values: dict[str, Any], fields_set: Set[str]) -> _M:
    """A ``cls`` instance holding ``values`` (every field, each already of its type, in the fields'
    order: the dict becomes the model's own), without validation; ``fields_set``: the fields
    counted as set. What ``model_construct`` gives, without walking the field defaults."""
    model = cls.__new__(cls)
    object.__setattr__(model, "__dict__", values)
    object.__setattr__(model, "__pydantic_fields_set__", set(fields_set))
    object.__setattr__(model, "__pydantic_extra__", None)
    object.__setattr__(model, "__pydantic_private__", None)
    return model


class Op(StrEnum):
    """The lifecycle operation of one call."""

    WRITE = "write"
    UPDATE = "update"
    DELETE = "delete"
    RETRIEVE = "retrieve"
    READ = "read"
    CHAT = "chat"
    EMBED = "embed"
    CONTROL = "control"


class EffectKind(StrEnum):
    """What a call did to one memory item."""

    ADD = "add"
    UPDATE = "update"
    DELETE = "delete"
    RETRIEVE = "retrieve"


class Role(StrEnum):
    """The source role of what is being remembered."""

    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    THIRD_PARTY = "third_party"
    SYSTEM = "system"


class Visibility(StrEnum):
    PRIVATE = "private"
    PARTICIPANTS = "participants"
    PUBLIC = "public"


class AccessTags(BaseModel):
    """Who may be told a memory. Assigned at write time from context and explicit tags.

    ``private``: the owner only; ``participants``: the owner and the listed
    participants; ``public``: anyone. ``allow`` adds principals, ``deny`` removes
    them whatever else says.
    """

    model_config = ConfigDict(extra="forbid")

    owner: str | None = None
    visibility: Visibility = Visibility.PRIVATE
    participants: list[str] = Field(default_factory=list)
    allow: list[str] = Field(default_factory=list)
    deny: list[str] = Field(default_factory=list)
    sensitivity: str | None = None

    def permits(self, requester: str | None) -> bool:
        """Whether ``requester`` may be told a memory carrying these tags."""
        if requester is None:
            return self.visibility == Visibility.PUBLIC
        if requester in self.deny:
            return False
        if requester == self.owner or requester in self.allow:
            return True
        if self.visibility == Visibility.PUBLIC:
            return True
        return self.visibility == Visibility.PARTICIPANTS and requester in self.participants


class Context(BaseModel):
    """Where a call came from: who, on whose memory, in which run, session and turn."""

    model_config = ConfigDict(extra="forbid")

    principal: str = "local"
    namespace: str = "local"
    agent_id: str | None = None
    client: str | None = None
    requester: str | None = None
    run: str | None = None
    episode: str | None = None
    session: str | None = None
    turn: str | None = None
    role: Role | None = None
    upstream: str | None = None
    trace_id: str | None = None

    @field_validator("turn", mode="before")
    @classmethod
    def _turn_as_text(cls, value: object) -> object:
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class MemoryEffect(BaseModel):
    """What one call did to one memory item, with the state before and after."""

    kind: EffectKind
    item_id: str
    namespace: str | None = None
    content_before: str | None = None
    content_after: str | None = None
    tags_before: AccessTags | None = None
    tags_after: AccessTags | None = None
    rank: int | None = None
    score: float | None = None
    derived_from: list[str] = Field(default_factory=list)
    # Not observed as the call's own answer but found afterwards by reading the backend's state
    # (after an upstream error, a timeout or a restart, or by ``memtap verify --record``);
    # ``evidence`` says what was read, when and why.
    reconciled: bool = False
    evidence: dict[str, Any] | None = None


class TraceEvent(BaseModel):
    """One call through a front door, exactly once."""

    id: str
    started_at: datetime
    ended_at: datetime
    front_door: str
    backend: str
    tool: str
    op: Op
    context: Context
    arguments: dict[str, Any] = Field(default_factory=dict)
    result: Any = None
    effects: list[MemoryEffect] = Field(default_factory=list)
    backend_ms: float | None = None
    overhead_ms: float | None = None
    status: str = "ok"
    error: str | None = None
    gate: str | None = None
    # The whole call, monotonic clock; set for every event.
    total_ms: float | None = None
    # The call during which this one ran (a chat's memory search and capture name the chat).
    parent_id: str | None = None
    # Chat and embedding calls: the model alias, the provider behind it, token usage, time to
    # the first token the caller got, time spent searching memory before the model was called,
    # and the events this call caused.
    model: str | None = None
    provider: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    ttft_ms: float | None = None
    memory_ms: float | None = None
    links: list[str] = Field(default_factory=list)

    @classmethod
    def built(cls, values: dict[str, Any]) -> TraceEvent:
        """An event holding ``values`` (every field, each already of its type; the dict becomes
        the event's own when its keys are in the fields' order), without validation.

        What ``model_construct(**values)`` gives when every field is passed (the same fields, in
        the same order, all counted as set), in a fifth of its time: it walks no field defaults.
        """
        if tuple(values) != _EVENT_FIELDS:  # not every field, or not in their order
            values = {name: values[name] for name in _EVENT_FIELDS}
        return built_model(cls, values, _EVENT_FIELD_SET)


_EVENT_FIELDS = tuple(TraceEvent.model_fields)
_EVENT_FIELD_SET = frozenset(_EVENT_FIELDS)


class Provenance(BaseModel):
    """Where a memory came from: the event, run, session, turn and role that created it."""

    event_id: str | None = None
    run: str | None = None
    episode: str | None = None
    session: str | None = None
    turn: str | None = None
    role: Role | None = None
    principal: str | None = None

    @classmethod
    def of(cls, context: Context, event_id: str | None = None) -> Provenance:
        """Where a memory written by a call with this context comes from."""
        return cls(
            event_id=event_id,
            run=context.run,
            episode=context.episode,
            session=context.session,
            turn=context.turn,
            role=context.role,
            principal=context.principal,
        )

    def context(self, namespace: str, **extra: str | None) -> Context:
        """The context of a call that writes on behalf of this provenance (the inverse of :meth:`of`)."""
        return Context(
            principal=self.principal or namespace,
            namespace=namespace,
            run=self.run,
            episode=self.episode,
            session=self.session,
            turn=self.turn,
            role=self.role,
            **extra,
        )


class ItemVersion(BaseModel):
    version: int
    content: str
    tags: AccessTags | None = None
    event_id: str | None = None
    op: EffectKind
    valid_from: datetime
    valid_to: datetime | None = None


class MemoryItem(BaseModel):
    """The materialised state of one item. Items are never destroyed: a delete closes
    the validity interval."""

    item_id: str
    backend: str
    namespace: str | None = None
    content: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    tags: AccessTags | None = None
    provenance: Provenance = Field(default_factory=Provenance)
    version: int = 1
    valid_from: datetime
    valid_to: datetime | None = None
    derived_from: list[str] = Field(default_factory=list)
    history: list[ItemVersion] = Field(default_factory=list)

    @property
    def is_valid(self) -> bool:
        return self.valid_to is None
