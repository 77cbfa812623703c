"""Server-sent events of a chat completion stream: cutting at event boundaries, and
putting the streamed completion back together for the trace (off the hot path)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["StreamSummary", "complete_prefix", "summarise_stream"]


def complete_prefix(data: bytes) -> int:
    """How many leading bytes of ``data`` are whole events (end at a blank line)."""
    if data.endswith(b"\n\n"):
        return len(data)
    cut = 0
    for terminator in (b"\n\n", b"\r\n\r\n", b"\r\r"):
        at = data.rfind(terminator)
        if at >= 0:
            cut = max(cut, at + len(terminator))
    return cut


def _payloads(data: bytes) -> list[str]:
    """The data field of each event in ``data`` (whole events)."""
    text = data.decode("utf-8", "replace")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    out = []
    for block in text.split("\n\n"):
        if "\n" not in block:  # the usual event: one data line (no list of lines to build)
            if block.startswith("data:"):
                out.append(block[5:].removeprefix(" "))
            continue
        lines = [line[5:].removeprefix(" ") for line in block.split("\n") if line.startswith("data:")]
        if lines:
            out.append("\n".join(lines))
    return out


_DECODER = json.JSONDecoder()


def _parse(payload: str) -> Any:
    """``json.loads`` of a str without its wrappers (the same result, the same errors)."""
    return _DECODER.decode(payload)


@dataclass
class StreamSummary:
    """The completion a stream carried, as one response."""

    id: str | None = None
    model: str | None = None
    choices: dict[int, dict[str, Any]] = field(default_factory=dict)
    usage: dict[str, Any] | None = None
    events: int = 0
    done: bool = False
    first_token_at: float | None = None
    error: Any = None

    def result(self) -> dict[str, Any]:
        choices = [self.choices[i] for i in sorted(self.choices)]
        for choice in choices:
            calls = choice["message"].get("tool_calls")
            if isinstance(calls, dict):
                choice["message"]["tool_calls"] = [calls[i] for i in sorted(calls)]
        return {
            "id": self.id,
            "model": self.model,
            "choices": choices,
            "usage": self.usage,
            "finish_reasons": [c.get("finish_reason") for c in choices if c.get("finish_reason")],
            "stream": {"events": self.events, "done": self.done},
        }

    def add(self, payload: dict[str, Any], at: float) -> None:
        self.events += 1
        self.id = self.id or payload.get("id")
        self.model = self.model or payload.get("model")
        if isinstance(payload.get("usage"), dict):
            self.usage = payload["usage"]
        for delta_choice in payload.get("choices") or []:
            if not isinstance(delta_choice, dict):
                continue
            index = int(delta_choice.get("index") or 0)
            choice = self.choices.setdefault(index, {"index": index, "message": {"role": "assistant"}})
            message = choice["message"]
            delta = delta_choice.get("delta") or {}
            if delta_choice.get("finish_reason"):
                choice["finish_reason"] = delta_choice["finish_reason"]
            for key in ("content", "refusal", "reasoning_content"):
                piece = delta.get(key)
                if isinstance(piece, str) and piece:
                    message[key] = message.get(key, "") + piece
                    if self.first_token_at is None:
                        self.first_token_at = at
            for call in delta.get("tool_calls") or []:
                if self.first_token_at is None:
                    self.first_token_at = at
                calls = message.setdefault("tool_calls", {})
                slot = calls.setdefault(
                    int(call.get("index") or 0),
                    {"type": "function", "function": {"name": "", "arguments": ""}},
                )
                if call.get("id"):
                    slot["id"] = call["id"]
                if call.get("type"):
                    slot["type"] = call["type"]
                function = call.get("function") or {}
                slot["function"]["name"] += function.get("name") or ""
                slot["function"]["arguments"] += function.get("arguments") or ""


def summarise_stream(chunks: list[tuple[float, bytes]]) -> StreamSummary:
    """Rebuild the completion from the forwarded chunks and the times they were sent; an
    event counts as sent with the chunk that completed it."""
    summary = StreamSummary()
    buffer = b""
    pending: list[tuple[float, str]] = []
    for at, chunk in chunks:
        buffer = buffer + chunk if buffer else chunk
        cut = complete_prefix(buffer)
        if cut:
            pending.extend((at, payload) for payload in _payloads(buffer[:cut]))
            buffer = buffer[cut:]
    if buffer.strip() and chunks:
        pending.extend((chunks[-1][0], payload) for payload in _payloads(buffer))
    for at, payload in pending:
        if payload.strip() == "[DONE]":
            summary.done = True
            continue
        try:
            parsed = _parse(payload)
        except ValueError:
            continue
        if not isinstance(parsed, dict):
            continue
        if "error" in parsed and "choices" not in parsed:
            summary.error = parsed["error"]
            continue
        summary.add(parsed, at)
    return summary
