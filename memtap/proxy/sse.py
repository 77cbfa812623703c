"""Server-sent events of a chat completion stream: cutting at event boundaries, and
putting the streamed completion back together for the trace (off the hot path).

The forwarder (:mod:`memtap.proxy.chat`) sends the upstream's bytes on as they come and keeps
them with the time each was sent; :func:`summarise_stream` rebuilds the completion from them
after the caller has its answer. It joins the chunks once, finds events by their blank lines
in bytes, and parses each event's JSON with the decoder's C scanner (no per-event wrappers);
the time of an event (for the time to first token) is looked up for the first token only; a
run of events alike but for their text is read at once (:mod:`memtap.proxy.sse_runs`). A stream
with carriage returns in it (``\\r\\n`` or ``\\r`` line ends, which the format allows) is put
back together chunk by chunk instead (:func:`summarise_by_chunk`); both give the same summary.
Bytes are searched with ``find``, not ``in`` (which on bytes first tries its operand as an
integer, building and dropping a TypeError each time).
"""

from __future__ import annotations

import bisect
import itertools
import json
import json.scanner
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memtap.proxy.sse_runs import text_run

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
# The C string scanner: (text, end) of the JSON string starting after the quote at end - 1.
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


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
    if block.find(b"\n") < 0:  # the usual event: one data line
        if not block.startswith(b"data:"):
            return None
        payload = block[5:].decode("utf-8", "replace")
        return payload[1:] if payload[:1] == " " else payload
    text = block.decode("utf-8", "replace")
    lines = [line[5:].removeprefix(" ") for line in text.split("\n") if line.startswith("data:")]
    return "\n".join(lines) if lines else None


def _event(summary: StreamSummary, payload: str) -> dict[str, Any] | None:
    """One event's payload as the chunk to add, or None (``[DONE]``, an error, not an object)."""
    if payload[:1] != "{" and payload.strip() == "[DONE]":
        summary.done = True
        return None
    try:
        parsed = _parse(payload)
    except ValueError:
        return None
    if not isinstance(parsed, dict):
        return None
    if "error" in parsed and "choices" not in parsed:
        summary.error = parsed["error"]
        return None
    return parsed


def _take(summary: StreamSummary, payload: str) -> bool:
    """Count one event's payload in; whether it carried the stream's first token."""
    parsed = _event(summary, payload)
    return parsed is not None and summary.add(parsed) and summary.first_token_at is None


def summarise_stream(chunks: list[tuple[float, bytes]]) -> StreamSummary:
    """Rebuild the completion from the forwarded chunks and the times they were sent; an
    event counts as sent with the chunk that completed it (bytes after the last blank line
    count as an event sent with the last chunk).

    An event that is a :class:`_Template`'s bytes with another text in its place is counted
    in without parsing it (a stream's text events usually differ in their text alone)."""
    if not chunks:
        return StreamSummary()
    data = chunks[0][1] if len(chunks) == 1 else b"".join([chunk for _, chunk in chunks])
    if data.find(b"\r") >= 0:
        return summarise_by_chunk(chunks)
    if data.find(_OBFUSCATION_KEY) >= 0:  # each event's own padding: out, so the events look alike
        chunks = [(at, _without_padding(chunk)) for at, chunk in chunks]
        data = chunks[0][1] if len(chunks) == 1 else b"".join([chunk for _, chunk in chunks])
    summary = StreamSummary()
    template: _Template | None = None
    tries = _TEMPLATE_TRIES
    runs = True  # whether to look for runs of events like the template's (text_run)
    end, size = 0, len(data)  # where the current event's blank line ends, in ``data``
    while end < size:
        if runs and template is not None and summary.first_token_at is not None:
            run = text_run(data, end, template.prefix, template.suffix)
            if run is not None:  # after the first token: no event's time is needed
                template.add_run(summary, run[0], run[2])
                end = run[1]
                continue
            runs = not data.startswith(template.prefix, end)  # a run it could not vouch for: not again
        cut = data.find(b"\n\n", end)
        block = data[end:cut] if cut >= 0 else data[end:]
        end = cut + 2 if cut >= 0 else size + 2
        token = False
        piece = template.text_of(block) if template is not None else None
        if piece is not None:
            assert template is not None
            token = template.add(summary, piece)
        else:
            payload = _payload_of(block)
            if payload is None:
                continue
            parsed = _event(summary, payload)
            if parsed is None:
                continue
            token = summary.add(parsed)
            if tries and block.find(b"\n") < 0:
                found = _Template.of(block, parsed, summary)
                if found is not None:
                    template, tries, runs = found, tries - 1, True
        if token and summary.first_token_at is None:
            ends = list(itertools.accumulate(len(chunk) for _, chunk in chunks))
            summary.first_token_at = chunks[min(bisect.bisect_left(ends, end), len(chunks) - 1)][0]
    return summary


# OpenAI's streams end every event with an ``obfuscation`` field: random padding of random length,
# which the summary does not read (nor keep). Taken out of an event's bytes where it is the last
# member, a plain string right before the event's blank line, after the end of a value (a string,
# number, ``true``, ``false``, ``null``, array or object), the event's JSON is the same object minus
# that field (and an invalid one stays invalid), so the events that differed in it alone are alike
# again for the templates and runs. Taken out chunk by chunk, so an event still ends in the chunk it
# ended in (its time is kept). The pattern begins with its literal, the look-behind after it: a
# character class before the literal makes the search ten times slower.
_OBFUSCATION_KEY = b',"obfuscation":"'
_OBFUSCATION = re.compile(rb',"obfuscation":"(?<=[\]}"0-9el],"obfuscation":")[^"\\\x00-\x1f]*"}\n\n')


def _without_padding(chunk: bytes) -> bytes:
    """``chunk`` without the ``obfuscation`` field of the events that end in it (see above)."""
    return _OBFUSCATION.sub(b"}\n\n", chunk)


_TEMPLATE_TRIES = 3  # templates made per stream at most (each costs a parse more)
_STRING_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"')
_PROBE = "\x00memtap-probe"
_PROBE_TOKEN = b'"\\u0000memtap-probe"'


class _Template:
    """A parsed text event's bytes around its ``content`` string: an event with the same bytes
    around another string is the same chunk with that text, and adds that text alone.

    Made from an event with one choice whose delta holds ``content`` and no other text or tool
    call, once the string's place is proven: the event with a probe string there must parse to
    the same chunk with the probe as its content (so nothing else in the event is that string).
    """

    __slots__ = ("message", "prefix", "size", "suffix")

    def __init__(self, prefix: bytes, suffix: bytes, message: dict[str, Any]) -> None:
        self.prefix, self.suffix, self.message = prefix, suffix, message
        self.size = len(prefix) + len(suffix) + 2

    @classmethod
    def of(cls, block: bytes, parsed: dict[str, Any], summary: StreamSummary) -> _Template | None:
        choices = parsed.get("choices")
        if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
            return None
        delta = choices[0].get("delta")
        if not isinstance(delta, dict) or delta.get("tool_calls"):
            return None
        content = delta.get("content")
        if not isinstance(content, str) or not content or content == _PROBE:
            return None  # no text (a stream's first event, with the role): later events have some
        if any(isinstance(delta.get(key), str) and delta[key] for key in ("refusal", "reasoning_content")):
            return None
        message = summary.choices.get(int(choices[0].get("index") or 0), {}).get("message")
        at = block.find(b'"content"')
        while at >= 0 and message is not None:
            start = at + 9
            while block[start : start + 1] in (b" ", b"\t"):
                start += 1
            if block[start : start + 1] == b":":
                start += 1
                while block[start : start + 1] in (b" ", b"\t"):
                    start += 1
                token = _STRING_TOKEN.match(block, start)
                if token is not None:
                    probe = _payload_of(block[:start] + _PROBE_TOKEN + block[token.end() :])
                    try:
                        probed = _parse(probe) if probe is not None else None
                    except ValueError:
                        probed = None
                    delta["content"] = _PROBE
                    same = probed == parsed
                    delta["content"] = content
                    if same:
                        return cls(block[:start], block[token.end() :], message)
            at = block.find(b'"content"', at + 9)
        return None

    def text_of(self, block: bytes) -> str | None:
        """The text of an event made like this one, or None if it is not."""
        if len(block) < self.size or not block.startswith(self.prefix) or not block.endswith(self.suffix):
            return None
        raw = block[len(self.prefix) : len(block) - len(self.suffix)]
        if raw[:1] != b'"':
            return None
        text = raw.decode("utf-8", "replace")
        try:
            value, end = _scanstring(text, 1)
        except ValueError:
            return None
        return value if end == len(text) else None

    def add_run(self, summary: StreamSummary, count: int, text: str) -> None:
        """Count in ``count`` events made like this one whose texts, joined, are ``text``."""
        summary.events += count
        if text:
            pieces = self.message.get("content")
            if pieces is None:
                self.message["content"] = [text]
            else:
                pieces.append(text)

    def add(self, summary: StreamSummary, piece: str) -> bool:
        """Count in an event with ``piece`` as its text (what :meth:`StreamSummary.add` would
        do with it); whether it carried a token."""
        summary.events += 1
        if not piece:
            return False
        pieces = self.message.get("content")
        if pieces is None:
            self.message["content"] = [piece]
        else:
            pieces.append(piece)
        return True


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
