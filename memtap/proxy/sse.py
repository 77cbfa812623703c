"""Server-sent events of a chat completion stream: cutting at event boundaries, and
putting the streamed completion back together for the trace (off the hot path).

The forwarder (:mod:`memtap.proxy.chat`) sends the upstream's bytes on as they come and keeps
them with the time each was sent; :func:`summarise_stream` rebuilds the completion from them
after the caller has its answer. It joins the chunks once, finds events by their blank lines
in bytes, and parses each event's JSON with the decoder's C scanner (no per-event wrappers);
the time of an event (for the time to first token) is looked up for the first token only.
A stream with carriage returns in it (``\\r\\n`` or ``\\r`` line ends, which the format allows) is
put back together chunk by chunk instead (:func:`summarise_by_chunk`); both give the same summary.
"""

from __future__ import annotations

import bisect
import itertools
import json
import json.scanner
from dataclasses import dataclass, field
from typing import Any

__all__ = ["StreamSummary", "complete_prefix", "summarise_by_chunk", "summarise_stream"]


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
# The C scanner: (value, end) from a str and a start index (typeshed types its argument oddly).
_SCAN = json.scanner.make_scanner(_DECODER)  # type: ignore[arg-type]
_JSON_SPACE = " \t\n\r"


def _parse(payload: str) -> Any:
    """``json.loads`` of a str without its wrappers (the same result, the same errors)."""
    if payload[:1] == "{":  # the usual event: one object, nothing around it
        try:
            value, end = _SCAN(payload, 0)
        except StopIteration:
            raise ValueError("not JSON") from None
        if end == len(payload) or not payload[end:].strip(_JSON_SPACE):
            return value
        raise ValueError("extra data after the JSON value")
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
            message = choice["message"]
            for key in _TEXT_KEYS:
                pieces = message.get(key)
                if isinstance(pieces, list):
                    message[key] = "".join(pieces)
            calls = message.get("tool_calls")
            if isinstance(calls, dict):
                message["tool_calls"] = [calls[i] for i in sorted(calls)]
        return {
            "id": self.id,
            "model": self.model,
            "choices": choices,
            "usage": self.usage,
            "finish_reasons": [c.get("finish_reason") for c in choices if c.get("finish_reason")],
            "stream": {"events": self.events, "done": self.done},
        }

    def add(self, payload: dict[str, Any]) -> bool:
        """Count one event in; whether it carried a token (text or a tool call). Text comes in
        as a list of pieces per message field, joined by :meth:`result`."""
        self.events += 1
        if not self.id:
            self.id = payload.get("id")
        if not self.model:
            self.model = payload.get("model")
        usage = payload.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        token = False
        for delta_choice in payload.get("choices") or ():
            if not isinstance(delta_choice, dict):
                continue
            index = int(delta_choice.get("index") or 0)
            choice = self.choices.get(index)
            if choice is None:
                choice = self.choices[index] = {"index": index, "message": {"role": "assistant"}}
            message = choice["message"]
            delta = delta_choice.get("delta") or {}
            finish = delta_choice.get("finish_reason")
            if finish:
                choice["finish_reason"] = finish
            for key in _TEXT_KEYS:
                piece = delta.get(key)
                if piece and isinstance(piece, str):
                    token = True
                    pieces = message.get(key)
                    if pieces is None:
                        message[key] = [piece]
                    else:
                        pieces.append(piece)
            calls = delta.get("tool_calls")
            if calls:
                token = True
                self._add_tool_calls(message, calls)
        return token

    @staticmethod
    def _add_tool_calls(message: dict[str, Any], deltas: Any) -> None:
        for call in deltas:
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


_TEXT_KEYS = ("content", "refusal", "reasoning_content")


def _payload_of(block: bytes) -> str | None:
    """The data field of one event (its lines between blank lines), or None when it has none."""
    if b"\n" not in block:  # the usual event: one data line
        if not block.startswith(b"data:"):
            return None
        payload = block[5:].decode("utf-8", "replace")
        return payload[1:] if payload[:1] == " " else payload
    text = block.decode("utf-8", "replace")
    lines = [line[5:].removeprefix(" ") for line in text.split("\n") if line.startswith("data:")]
    return "\n".join(lines) if lines else None


def _take(summary: StreamSummary, payload: str) -> bool:
    """Count one event's payload in; whether it carried the stream's first token."""
    if payload[:1] != "{" and payload.strip() == "[DONE]":
        summary.done = True
        return False
    try:
        parsed = _parse(payload)
    except ValueError:
        return False
    if not isinstance(parsed, dict):
        return False
    if "error" in parsed and "choices" not in parsed:
        summary.error = parsed["error"]
        return False
    return summary.add(parsed) and summary.first_token_at is None


def summarise_stream(chunks: list[tuple[float, bytes]]) -> StreamSummary:
    """Rebuild the completion from the forwarded chunks and the times they were sent; an
    event counts as sent with the chunk that completed it (bytes after the last blank line
    count as an event sent with the last chunk)."""
    if not chunks:
        return StreamSummary()
    data = chunks[0][1] if len(chunks) == 1 else b"".join([chunk for _, chunk in chunks])
    if b"\r" in data:
        return summarise_by_chunk(chunks)
    summary = StreamSummary()
    blocks = data.split(b"\n\n")
    end = 0  # where the current event's blank line ends, in ``data``
    for block in blocks:
        end += len(block) + 2
        payload = _payload_of(block)
        if payload is not None and _take(summary, payload):
            ends = list(itertools.accumulate(len(chunk) for _, chunk in chunks))
            summary.first_token_at = chunks[min(bisect.bisect_left(ends, end), len(chunks) - 1)][0]
    return summary


def summarise_by_chunk(chunks: list[tuple[float, bytes]]) -> StreamSummary:
    """:func:`summarise_stream` event by event as the chunks came (any line ends)."""
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
        if _take(summary, payload):
            summary.first_token_at = at
    return summary
