"""The one protocol every memory backend behind memtap implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from memtap.trace.models import AccessTags, MemoryEffect, Provenance

__all__ = ["BackendResult", "MemoryBackend", "StoredMemory", "StoredVersion"]


class StoredMemory(BaseModel):
    """One memory item as a backend returns it to a caller."""

    id: str
    namespace: str
    content: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    tags: AccessTags | None = None
    provenance: Provenance = Field(default_factory=Provenance)
    version: int = 1
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None = None
    score: float | None = None
    rank: int | None = None


class StoredVersion(BaseModel):
    """One version in an item's history; ``closed_by`` says what ended it."""

    version: int
    content: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    tags: AccessTags | None = None
    provenance: Provenance = Field(default_factory=Provenance)
    valid_from: datetime
    valid_to: datetime | None = None
    closed_by: str | None = None


@dataclass
class BackendResult:
    """What an operation returned to the caller, and what it did to which items."""

    value: Any
    effects: list[MemoryEffect] = field(default_factory=list)


@runtime_checkable
class MemoryBackend(Protocol):
    """A memory store behind memtap. Every method reports its real effects."""

    name: str

    async def add(
        self,
        namespace: str,
        content: str,
        *,
        metadata: dict[str, Any] | None = None,
        tags: AccessTags | None = None,
        provenance: Provenance | None = None,
    ) -> BackendResult: ...

    async def search(self, namespace: str, query: str, *, limit: int = 10) -> BackendResult: ...

    async def get(self, namespace: str, item_id: str) -> BackendResult: ...

    async def list(self, namespace: str, *, limit: int = 50, offset: int = 0) -> BackendResult: ...

    async def update(
        self,
        namespace: str,
        item_id: str,
        *,
        content: str | None = None,
        metadata: dict[str, Any] | None = None,
        tags: AccessTags | None = None,
        provenance: Provenance | None = None,
    ) -> BackendResult: ...

    async def delete(
        self, namespace: str, item_id: str, *, provenance: Provenance | None = None
    ) -> BackendResult: ...

    async def history(self, namespace: str, item_id: str) -> BackendResult: ...

    async def close(self) -> None: ...
