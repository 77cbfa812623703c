"""The chat proxy as a memory layer (``auto`` mode): search, inject, capture.

Before the model is called, the last user message is the query for a search of the
namespace's memories; the top ``k`` are injected as one system message placed after
the conversation's leading system (or developer) messages. After the caller has its
answer, the user turn (and, if configured, the assistant reply) is written to the
backend. Search and writes go through the :class:`MemoryService`, so each is its own
recorded event (retrieve, write) with provenance and access tags, made while the chat
call is open: the events name the chat as their parent and their spans are children
of the chat span.

The injected message is :data:`MEMORY_HEADER` followed by one line per memory
(newlines inside a memory become spaces)::

    [1] (role=user, session=s1, time=2026-11-30T08:00:00Z, id=mem_01KB...) The user goes to FitLife.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from memtap.auth import Caller
from memtap.proxy.service import MemoryService

__all__ = ["MEMORY_HEADER", "CaptureResult", "MemoryLayer", "Recall", "format_memories", "message_text"]

MEMORY_HEADER = (
    "Memories recorded by memtap for this conversation, most relevant first. Each line gives who said it "
    "(role), the session it came from and when it was recorded; they may be out of date, and what is said "
    "in the conversation takes precedence."
)
log = logging.getLogger("memtap.memory_layer")
_LEADING_ROLES = frozenset({"system", "developer"})


def message_text(message: Mapping[str, Any]) -> str:
    """The text of a chat message: a string, or the text parts of a list of content parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, Mapping) and p.get("type") == "text"]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def _last_user(messages: list[Any]) -> tuple[int, str] | None:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, Mapping) and message.get("role") == "user":
            return index, message_text(message)
    return None


def _time(value: object) -> str:
    if not isinstance(value, str):
        return "unknown"
    try:
        return datetime.fromisoformat(value).strftime("%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return value


def format_memories(memories: Sequence[Mapping[str, Any]]) -> str:
    """The injected system message for ``memories`` (search results, best first)."""
    lines = [MEMORY_HEADER]
    for number, memory in enumerate(memories, start=1):
        provenance = memory.get("provenance") or {}
        role = provenance.get("role") or "unknown"
        session = provenance.get("session") or "none"
        when = _time(memory.get("updated_at") or memory.get("created_at"))
        content = " ".join(str(memory.get("content", "")).split())
        lines.append(
            f"[{number}] (role={role}, session={session}, time={when}, id={memory.get('id')}) {content}"
        )
    return "\n".join(lines)


@dataclass
class Recall:
    """What a search before the model call found and injected."""

    event_id: str | None = None
    memories: list[dict[str, Any]] = field(default_factory=list)
    ms: float = 0.0
    error: str | None = None
    query: str | None = None


@dataclass
class CaptureResult:
    event_ids: list[str] = field(default_factory=list)
    item_ids: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class MemoryLayer:
    """Search-inject-capture around chat calls, over one memory service."""

    def __init__(self, service: MemoryService, *, top_k: int = 5, capture: list[str] | None = None) -> None:
        self.service = service
        self.top_k = top_k
        self.capture_roles = set(capture if capture is not None else ["user"])

    async def recall(
        self, request: dict[str, Any], *, caller: Caller, layers: tuple[Mapping[str, Any], ...]
    ) -> Recall:
        """Search with the last user message and inject the results into ``request`` in place.

        Never raises: a memory failure must not fail the chat, which goes on without memories
        (the recall's ``error`` says why, and the chat event records it as ``search_error``)."""
        t0 = time.perf_counter()
        messages = request.get("messages")
        try:
            return await self._recall(request, caller=caller, layers=layers)
        except Exception as exc:
            log.exception("auto memory: the search before a chat failed")
            request["messages"] = messages  # nothing half-injected
            return Recall(ms=(time.perf_counter() - t0) * 1000, error=f"internal error: {type(exc).__name__}")

    async def _recall(
        self, request: dict[str, Any], *, caller: Caller, layers: tuple[Mapping[str, Any], ...]
    ) -> Recall:
        t0 = time.perf_counter()
        messages = request.get("messages")
        found = _last_user(messages) if isinstance(messages, list) else None
        if found is None or not found[1].strip() or self.top_k == 0:
            return Recall(ms=(time.perf_counter() - t0) * 1000)
        query = found[1]
        outcome = await self.service.call_tool(
            "memory_search",
            {"query": query, "limit": self.top_k},
            caller=caller,
            front_door="openai",
            layers=layers,
        )
        recall = Recall(event_id=outcome.event_id, query=query)
        if outcome.is_error:
            recall.error = outcome.error
        else:
            recall.memories = list(outcome.value.get("results", []))
        if recall.memories:
            assert isinstance(messages, list)
            at = 0
            while (
                at < len(messages)
                and isinstance(messages[at], Mapping)
                and messages[at].get("role") in _LEADING_ROLES
            ):
                at += 1
            injected = {"role": "system", "content": format_memories(recall.memories)}
            request["messages"] = [*messages[:at], injected, *messages[at:]]
        recall.ms = (time.perf_counter() - t0) * 1000
        return recall

    async def capture(
        self,
        request: dict[str, Any],
        reply: str | None,
        *,
        caller: Caller,
        layers: tuple[Mapping[str, Any], ...],
        model: str,
    ) -> CaptureResult:
        """Write the new user turn (a request that ends with a user message) and, if
        configured, the assistant's reply, with provenance; each write is its own event.
        Never raises (the chat is already answered): a failure is one of ``errors``."""
        result = CaptureResult()
        try:
            await self._capture(request, reply, result, caller=caller, layers=layers, model=model)
        except Exception as exc:
            log.exception("auto memory: capturing a chat turn failed")
            result.errors.append(f"internal error: {type(exc).__name__}")
        return result

    async def _capture(
        self,
        request: dict[str, Any],
        reply: str | None,
        result: CaptureResult,
        *,
        caller: Caller,
        layers: tuple[Mapping[str, Any], ...],
        model: str,
    ) -> CaptureResult:
        messages = request.get("messages")
        if not isinstance(messages, list) or not messages:
            return result
        last = messages[-1]
        if not (isinstance(last, Mapping) and last.get("role") == "user"):
            return result  # a tool-result round or a replay: the user turn was captured before
        turns = []
        if "user" in self.capture_roles:
            turns.append(("user", message_text(last)))
        if "assistant" in self.capture_roles and reply:
            turns.append(("assistant", reply))
        for role, text in turns:
            if not text.strip():
                continue
            outcome = await self.service.call_tool(
                "memory_add",
                {"content": text, "metadata": {"source": "chat", "model": model}},
                caller=caller,
                front_door="openai",
                # The turn's role is memtap's own knowledge, not a model's argument: the
                # strongest layer, over an X-Memtap-Role header.
                layers=(*layers, {"role": role}),
            )
            if outcome.event_id is not None:
                result.event_ids.append(outcome.event_id)
            if outcome.is_error:
                result.errors.append(outcome.error or "capture failed")
            elif isinstance(outcome.value, dict) and "id" in outcome.value:
                result.item_ids.append(str(outcome.value["id"]))
        return result
