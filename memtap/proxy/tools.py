"""The memory tools memtap offers over MCP: argument models, schemas, annotations."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from memtap.auth.resolve import ARGUMENT_FIELDS
from memtap.errors import InvalidArguments
from memtap.limits import MAX_BATCH_ITEMS, MAX_ITEMS, MAX_OFFSET, MAX_TURN, bound_schema
from memtap.trace.models import Op, Role, Visibility

__all__ = [
    "BATCH_TOOL",
    "CONTEXT_FIELDS",
    "ITEM_META_FIELDS",
    "TOOLS",
    "AccessArg",
    "AddArgs",
    "AddBatchArgs",
    "BatchItem",
    "ContextArgs",
    "DeleteArgs",
    "GetArgs",
    "HistoryArgs",
    "ListArgs",
    "SearchArgs",
    "ToolSpec",
    "UpdateArgs",
    "parse_arguments",
]


class AccessArg(BaseModel):
    """Who may later be told this memory."""

    model_config = ConfigDict(extra="forbid")

    visibility: Visibility | None = Field(
        None, description="private (owner only), participants (owner and participants), or public"
    )
    participants: list[str] = Field(
        default_factory=list, max_length=MAX_ITEMS, description="Principals who took part"
    )
    allow: list[str] = Field(
        default_factory=list, max_length=MAX_ITEMS, description="Principals who may always be told"
    )
    deny: list[str] = Field(
        default_factory=list, max_length=MAX_ITEMS, description="Principals who must never be told"
    )
    sensitivity: str | None = Field(None, description="A sensitivity category: health, finance, ...")


class ContextArgs(BaseModel):
    """Optional context every tool accepts; `_meta` and HTTP headers can carry it instead."""

    model_config = ConfigDict(extra="forbid")

    namespace: str | None = Field(None, description="Whose memory (defaults to the caller)")
    session: str | None = Field(None, description="Conversation session id")
    turn: str | Annotated[int, Field(ge=0, le=MAX_TURN)] | None = Field(
        None, description="Turn id within the session"
    )
    role: Role | None = Field(None, description="Who said what is remembered")
    requester: str | None = Field(None, description="On whose behalf a retrieval will be shown")
    run: str | None = Field(None, description="Experiment or replay run id")
    episode: str | None = Field(None, description="Episode id within a run")


CONTEXT_FIELDS = ARGUMENT_FIELDS
"""ContextArgs' fields: the one list, in memtap.auth.resolve (a test keeps the model matching it)."""


def _object_from_json_text(value: object) -> object:
    """An object argument sent as JSON text (the MCP Inspector sends ``access`` so) is decoded;
    text that is not a JSON object is left for the field's own validation to refuse."""
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            decoded = json.loads(value)
        except ValueError:
            return value
        return decoded if isinstance(decoded, dict) else value
    return value


class AddArgs(ContextArgs):
    content: str = Field(..., min_length=1, description="The memory, in plain text")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Free-form JSON metadata")
    access: AccessArg | None = Field(None, description="Access tags; default: private to the namespace")

    _objects = field_validator("metadata", "access", mode="before")(_object_from_json_text)


class ItemMeta(BaseModel):
    """This item's own context, weighed as a memory_add request's _meta.memtap."""

    model_config = ConfigDict(extra="forbid")

    namespace: str | None = Field(None, description="Whose memory")
    session: str | None = Field(None, description="Conversation session id")
    turn: str | Annotated[int, Field(ge=0, le=MAX_TURN)] | None = Field(None, description="Turn id")
    role: Role | None = Field(None, description="Who said what is remembered")
    requester: str | None = Field(None, description="On whose behalf a retrieval will be shown")
    run: str | None = Field(None, description="Experiment or replay run id")
    episode: str | None = Field(None, description="Episode id within a run")
    agent_id: str | None = Field(None, description="The agent acting")
    trace_id: str | None = Field(None, description="An outside trace id to link")


ITEM_META_FIELDS = frozenset(ItemMeta.model_fields)


class BatchItem(AddArgs):
    """One memory: memory_add's arguments, and its own context in meta."""

    meta: ItemMeta | None = Field(
        None,
        description="This item's context (session, turn, role, ...), weighed as a memory_add request's "
        "_meta.memtap: over the call's _meta and headers, never against what the operator pinned",
    )


class AddBatchArgs(ContextArgs):
    """Several memories to add in order, each served and recorded as one memory_add call."""

    items: list[BatchItem] = Field(
        ...,
        min_length=1,
        max_length=MAX_BATCH_ITEMS,
        description="The memories, in order; each is served and recorded exactly as one memory_add call",
    )


class SearchArgs(ContextArgs):
    query: str = Field(..., description="What to look for (BM25 over memory content)")
    limit: int = Field(10, ge=1, le=100, description="How many results at most")


class GetArgs(ContextArgs):
    id: str = Field(..., min_length=1, description="Memory item id")


class ListArgs(ContextArgs):
    limit: int = Field(50, ge=1, le=1000, description="How many items at most")
    offset: int = Field(0, ge=0, le=MAX_OFFSET, description="How many items to skip (oldest first)")


class UpdateArgs(ContextArgs):
    """Give at least one of content, metadata or access."""

    id: str = Field(..., min_length=1, description="Memory item id")
    content: str | None = Field(None, min_length=1, description="The new content")
    metadata: dict[str, Any] | None = Field(None, description="Replaces the metadata")
    access: AccessArg | None = Field(None, description="Replaces the access tags")

    _objects = field_validator("metadata", "access", mode="before")(_object_from_json_text)

    @model_validator(mode="after")
    def _something_changes(self) -> UpdateArgs:
        if self.content is None and self.metadata is None and self.access is None:
            raise ValueError("give at least one of content, metadata or access")
        return self


class DeleteArgs(ContextArgs):
    id: str = Field(..., min_length=1, description="Memory item id")
    reason: str | None = Field(None, description="Why the memory is deleted (kept in the trace)")


class HistoryArgs(ContextArgs):
    id: str = Field(..., min_length=1, description="Memory item id")


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    args: type[ContextArgs]
    op: Op
    read_only: bool
    destructive: bool
    idempotent: bool

    def input_schema(self, context_args: bool = False) -> dict[str, Any]:
        """The JSON schema a model sees: without the context fields unless ``context_args``
        (they come from the connection: headers, ``_meta``, the key). Calls that still send
        them are accepted when they agree with the connection (see memtap.auth.resolve).
        Strings are bounded by this process's caps (memtap.limits)."""
        schema = bound_schema(self.args.model_json_schema())
        if context_args:
            return schema
        schema = _without_context(schema)
        defs = {k: _without_context(v) if k == "BatchItem" else v for k, v in schema.pop("$defs", {}).items()}
        used: dict[str, Any] = {}
        text = json.dumps(schema["properties"])
        while True:  # keep the definitions still referenced, and those they reference
            more = {k: v for k, v in defs.items() if k not in used and f'"#/$defs/{k}"' in text}
            if not more:
                break
            used.update(more)
            text = json.dumps(used)
        if used:
            schema["$defs"] = used
        return schema


def _without_context(schema: dict[str, Any]) -> dict[str, Any]:
    properties = {k: v for k, v in schema["properties"].items() if k not in CONTEXT_FIELDS}
    schema = {**schema, "properties": properties}
    if "required" in schema:
        schema["required"] = [k for k in schema["required"] if k in properties]
    return schema


BATCH_TOOL = "memory_add_batch"

TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec(
            "memory_add",
            "Add a memory",
            "Store a new memory item in the namespace, with provenance and access tags.",
            AddArgs,
            Op.WRITE,
            read_only=False,
            destructive=False,
            idempotent=False,
        ),
        ToolSpec(
            BATCH_TOOL,
            "Add memories",
            "Store several new memory items in one call, in order. Each item is served and recorded exactly "
            "as one memory_add call would be (its own event, context, grants and caps); an item that fails "
            "does not stop the others, and the answer names every failed item by its index.",
            AddBatchArgs,
            Op.WRITE,
            read_only=False,
            destructive=False,
            idempotent=False,
        ),
        ToolSpec(
            "memory_search",
            "Search memories",
            "Find memory items relevant to a query, best first (BM25 ranking). Each result's score is "
            "non-negative and higher is better: BM25Okapi's score, shifted up by one per-query "
            "constant only when a query word is in more than half of the namespace's memories.",
            SearchArgs,
            Op.RETRIEVE,
            read_only=True,
            destructive=False,
            idempotent=True,
        ),
        ToolSpec(
            "memory_get",
            "Get a memory",
            "Read the current version of one memory item by id.",
            GetArgs,
            Op.READ,
            read_only=True,
            destructive=False,
            idempotent=True,
        ),
        ToolSpec(
            "memory_list",
            "List memories",
            "List the current memory items of the namespace, oldest first.",
            ListArgs,
            Op.READ,
            read_only=True,
            destructive=False,
            idempotent=True,
        ),
        ToolSpec(
            "memory_update",
            "Update a memory",
            "Replace a memory item's content, metadata or access tags (at least one of them). "
            "The old version is kept in history.",
            UpdateArgs,
            Op.UPDATE,
            read_only=False,
            destructive=True,
            idempotent=True,
        ),
        ToolSpec(
            "memory_delete",
            "Delete a memory",
            "Delete a memory item. It stops being returned; its history is kept.",
            DeleteArgs,
            Op.DELETE,
            read_only=False,
            destructive=True,
            idempotent=True,
        ),
        ToolSpec(
            "memory_history",
            "Memory history",
            "Every version of a memory item, with validity intervals and provenance.",
            HistoryArgs,
            Op.READ,
            read_only=True,
            destructive=False,
            idempotent=True,
        ),
    )
}


def parse_arguments(spec: ToolSpec, arguments: dict[str, Any]) -> ContextArgs:
    """Validate a call's arguments, or raise InvalidArguments naming every bad field."""
    try:
        return spec.args.model_validate(arguments)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = ".".join(str(part) for part in err["loc"]) or "arguments"
            message = err["msg"]
            if err["type"] == "string_unicode":
                message = "not valid UTF-8 text (it holds an unpaired surrogate)"
            problems.append(f"{where}: {message}")
        raise InvalidArguments(f"{spec.name}: invalid arguments: " + "; ".join(problems)) from None
