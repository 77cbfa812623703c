"""What the trace keeps of a streamed chat: the same completion however the stream's bytes were
cut into reads, and a stream split mid-event, with usage only in its last event or none at all,
forwarded byte for byte and recorded whole (the official openai client against the real app)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest
from served import ServedMemtap, chats

from memtap.proxy.sse import (
    StreamSummary,
    _without_padding,
    complete_prefix,
    summarise_by_chunk,
    summarise_stream,
)

Serve = Callable[..., ServedMemtap]


def _event(data: Any) -> bytes:
    return b"data: " + json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"


def _chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> dict[str, Any]:
    choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m-1",
        "choices": [choice],
    }


_LAST_ARGUMENTS = json.dumps(_chunk({"tool_calls": [{"index": 0, "function": {"arguments": ' "P"}'}}]}))
# One event's JSON over two data lines (a line break between two of its tokens).
SPLIT_LINES = b"data: " + _LAST_ARGUMENTS.replace(', "choices"', ',\ndata: "choices"').encode()
USAGE = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
PLAIN = b"".join(
    [
        _event(_chunk({"role": "assistant", "content": ""})),
        *(_event(_chunk({"content": piece})) for piece in ("Hél", "lo ", "wörld ✓")),
        _event(_chunk({}, "stop")),
        _event(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion.chunk",
                "model": "m-1",
                "choices": [],
                "usage": USAGE,
            }
        ),
        b"data: [DONE]\n\n",
    ]
)
MIXED = b"".join(
    [
        b": keep-alive\n\n",
        _event(_chunk({"role": "assistant", "reasoning_content": "think "})),
        _event(_chunk({"reasoning_content": "more", "content": "A"})),
        _event(_chunk({"refusal": "no"}, index=1)),
        _event(
            _chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_", "arguments": ""},
                        }
                    ]
                }
            )
        ),
        _event(
            _chunk(
                {
                    "tool_calls": [
                        {"index": 1, "id": "call_2", "function": {"name": "other", "arguments": "{}"}}
                    ]
                }
            )
        ),
        _event(
            _chunk({"tool_calls": [{"index": 0, "function": {"name": "weather", "arguments": '{"city":'}}]})
        ),
        b"event: delta\n" + SPLIT_LINES + b"\n\n",
        b"data: not json\n\n",
        b"data: [1, 2]\n\n",
        b'data: {"choices": [7, {"index": 0, "delta": {"content": "B"}}]}  \n\n',
        b'data: {"error": {"message": "late"}}\n\n',
        _event(_chunk({"content": "\ufffd bad: "})).replace(b"bad: ", b"bad: \xff\xfe"),
        _event(_chunk({}, "tool_calls")),
        _event(_chunk({}, "stop", index=1)),
        b'data: {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"content": "tail"}}]}',  # no blank line
    ]
)


def _text(content: Any, **extra: Any) -> bytes:
    return _event(
        {"id": "c", "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}], **extra}
    )


# Events that look alike around their text, and events that only seem to.
LOOKALIKE = b"".join(
    [
        _text("a"),
        _text('b\n"q" \u00e9 \\'),
        _text(None),
        _text(["not", "text"]),
        _text("c", obfuscation="xyz"),
        _text("d", obfuscation="xy"),
        b'data: {"id": "c", "choices": [{"index": 0, "delta": {"content": "e"}, "finish_reason": null}]}\n\n',
        _text("f").replace(b'"f"', b'"f","refusal":"r"'),
        _text("g").replace(b'"g"', b'"g\\x"'),  # an escape JSON does not have
        _text("h").replace(b'"h"', b'"h\x01"'),  # a control character inside the string
        _text("i", logprobs={"content": [{"token": "i"}]}),
        _text("j", logprobs={"content": [{"token": "j"}]}),
        _event({"id": "c", 'say "content': "k", "choices": [{"index": 0, "delta": {"content": "k"}}]}),
        _event({"id": "c", 'say "content': "l", "choices": [{"index": 0, "delta": {"content": "l"}}]}),
        _event({"id": "c", 'say "content': "m", "choices": [{"index": 0, "delta": {"content": "n"}}]}),
        _text("o").replace(b'"o"', b'"o"   '),
        _text("p", usage=USAGE),
        _text("q", usage={**USAGE, "completion_tokens": 4}),
        _text("\x00memtap-probe"),
        _text("r"),
    ]
)
NO_USAGE = PLAIN.replace(_event({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m-1",
                                 "choices": [], "usage": USAGE}), b"")  # fmt: skip
CRLF = PLAIN.replace(b"\n", b"\r\n")


def _cuts(data: bytes, rng: random.Random, pieces: int) -> list[bytes]:
    points = sorted(rng.sample(range(1, len(data)), pieces - 1))
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


def _forwarded(reads: list[bytes]) -> list[tuple[float, bytes]]:
    """What the forwarder keeps of ``reads``: cut at event boundaries, the rest sent at the end,
    each with a time (here: the read's number)."""
    sent: list[tuple[float, bytes]] = []
    pending = b""
    for at, read in enumerate(reads):
        data = pending + read
        cut = complete_prefix(data)
        if cut:
            sent.append((float(at), data[:cut]))
        pending = data[cut:]
    if pending:
        sent.append((float(len(reads)), pending))
    return sent


def _summary(summary: StreamSummary) -> tuple[dict[str, Any], float | None]:
    return summary.result(), summary.first_token_at


@pytest.mark.parametrize(
    "stream",
    [PLAIN, MIXED, NO_USAGE, CRLF, LOOKALIKE],
    ids=["plain", "mixed", "no-usage", "crlf", "lookalike"],
)
def test_the_summary_is_the_same_however_the_stream_was_cut_into_reads(stream: bytes) -> None:
    rng = random.Random(16)
    readings = [[stream], [stream[i : i + 1] for i in range(len(stream))]]
    readings += [_cuts(stream, rng, n) for n in (2, 3, 7, 30, 100) for _ in range(4)]
    for reads in readings:
        for sent in (_forwarded(reads), [(float(i), r) for i, r in enumerate(reads)]):
            assert _summary(summarise_stream(sent)) == _summary(summarise_by_chunk(sent))


def test_the_summary_holds_the_text_the_usage_and_the_first_token_time() -> None:
    first_token_ends = PLAIN.index(b"\n\n", PLAIN.index(b"H\xc3\xa9l")) + 2
    reads = [
        PLAIN[: first_token_ends - 5],
        PLAIN[first_token_ends - 5 : first_token_ends + 5],
        PLAIN[first_token_ends + 5 :],
    ]
    summary = summarise_stream(_forwarded(reads))
    assert summary.first_token_at == 1.0  # the read that completed the first event with text
    assert summary.result() == {
        "id": "chatcmpl-1",
        "model": "m-1",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Héllo wörld ✓"}, "finish_reason": "stop"}],
        "usage": USAGE,
        "finish_reasons": ["stop"],
        "stream": {"events": 6, "done": True},
    }  # fmt: skip
    assert summarise_stream([(0.0, NO_USAGE)]).result()["usage"] is None


def test_a_mixed_stream_keeps_every_field_the_trace_records() -> None:
    result = summarise_stream(_forwarded([MIXED])).result()
    first, second = result["choices"]
    assert first["message"] == {
        "role": "assistant",
        "reasoning_content": "think more",
        "content": "AB\ufffd bad: \ufffd\ufffdtail",
        "tool_calls": [
            {"type": "function", "id": "call_1", "function": {"name": "get_weather", "arguments": '{"city": "P"}'}},
            {"type": "function", "id": "call_2", "function": {"name": "other", "arguments": "{}"}},
        ],
    }  # fmt: skip
    assert second == {"index": 1, "message": {"role": "assistant", "refusal": "no"}, "finish_reason": "stop"}
    assert result["finish_reasons"] == ["tool_calls", "stop"]
    assert result["stream"] == {"events": 12, "done": False}


def _raw(url: str, body: dict[str, Any]) -> bytes:
    with httpx.stream("POST", url + "/chat/completions", json=body, timeout=10) as response:
        assert response.status_code == 200
        return b"".join(response.iter_raw())


@pytest.mark.parametrize("usage", [True, False], ids=["usage-last", "no-usage"])
def test_a_stream_split_mid_event_across_reads_is_forwarded_as_it_came_and_recorded_whole(
    serve_memtap: Serve, upstream: Any, usage: bool
) -> None:
    memtap = serve_memtap()
    ask = [{"role": "user", "content": "Count [chunks 6] [split]"}]
    extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if usage else {}
    body = {"model": "gpt-fake", "messages": ask, "stream": True, **extra}
    assert _raw(memtap.base_url, body) == _raw(upstream.base_url, {**body, "model": "fake-1"})
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url)
    chunks = list(client.chat.completions.create(model="gpt-fake", messages=ask, stream=True, **extra))
    text = "".join(f"chunk-{i} " for i in range(6))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    for event in memtap.events(chats(2)):
        assert event.result["choices"] == [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ]
        assert event.result["stream"] == {"events": 8 + usage, "done": True}
        assert event.result["usage"] == (
            {"prompt_tokens": 11, "completion_tokens": 6, "total_tokens": 17} if usage else None
        )
        assert (event.input_tokens, event.output_tokens) == ((11, 6) if usage else (None, None))
        assert (
            event.ttft_ms is not None and event.total_ms is not None and 0 < event.ttft_ms <= event.total_ms
        )


def test_events_alike_but_for_their_text_add_exactly_their_text() -> None:
    result = summarise_stream([(0.0, LOOKALIKE)]).result()
    assert result["choices"] == [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": 'ab\n"q" é \\cdefijklnopq\x00memtap-prober',
                "refusal": "r",
            },
        }
    ]
    assert result["usage"] == {**USAGE, "completion_tokens": 4}
    assert result["stream"] == {"events": 18, "done": False}


def _long_stream(texts: list[str], *, between: dict[int, bytes] | None = None, tail: bytes = b"") -> bytes:
    """A role event, then one text event per text (``between[i]`` before the i-th), a finish event."""
    events = [_event(_chunk({"role": "assistant", "content": ""}))]
    for i, text in enumerate(texts):
        events.append((between or {}).get(i, b""))
        events.append(_event(_chunk({"content": text})))
    events.append(_event(_chunk({}, "stop")))
    return b"".join(events) + tail


# Long runs of events alike but for their text (read as runs, in a few calls), and the ways a
# run can hold something that only reading the events one by one gets right.
RUNS = {
    "ascii": _long_stream([f"word{i} " for i in range(40)], tail=b"data: [DONE]\n\n"),
    "escapes": _long_stream([f'line {i}\n"q"\t\\ é ✓ 😀' for i in range(30)]),
    "empty-texts": _long_stream(["", "a", "", "", "b", ""] * 5),
    "split-surrogates": _long_stream(["x"] * 5 + ["HI", "LO"] * 4 + ["y"] * 5)
    .replace(b'"HI"', b'"\\ud83d"')
    .replace(b'"LO"', b'"\\ude00"'),
    "escaped-surrogate-halves": _long_stream(["x"] * 5).replace(b'"x"', b'"\\ud83d"', 3),
    "other-events-between": _long_stream(
        [f"t{i}" for i in range(30)],
        between={
            7: b": keep-alive\n\n",
            12: _event(_chunk({"content": "odd", "refusal": "r"})),
            20: _event({**_chunk({"content": "fp"}), "system_fingerprint": "fp_1"}),
        },
    ),
    "not-utf8": _long_stream([f"t{i}" for i in range(12)]).replace(b'"t5"', b'"t5\xff\xfe"'),
    "bad-escape": _long_stream([f"t{i}" for i in range(12)]).replace(b'"t5"', b'"t5\\x"'),
    "bad-unicode-escape": _long_stream([f"t{i}" for i in range(12)]).replace(b'"t5"', b'"t\\u12g4"'),
    "control-character": _long_stream([f"t{i}" for i in range(12)]).replace(b'"t5"', b'"t\x015"'),
    "two-strings": _long_stream([f"t{i}" for i in range(12)]).replace(b'"t5"', b'"t5","x":"y"'),
    "no-last-blank-line": _long_stream([f"t{i}" for i in range(12)])[:-2],
    "cut-mid-run": _long_stream([f"t{i}" for i in range(12)])[:-120],
    "suffix-in-text": _long_stream(["a", "b", '},"logprobs":null,"finish_reason":null}]}', "c", "d"]),
}


def _padded(stream: bytes, *, extra: dict[str, Any] | None = None, pad: bool = True) -> bytes:
    """``stream`` as OpenAI sends it: with ``extra`` fields, and (``pad``) each event padded with an
    ``obfuscation`` string of its own length (a one-line JSON object event only)."""
    rng = random.Random(len(stream))
    events = []
    for event in stream.split(b"\n\n")[:-1]:
        if event.startswith(b"data: {") and event.find(b"\n") < 0:
            data = {**json.loads(event[6:]), **(extra or {})}
            if pad:
                data["obfuscation"] = "".join(rng.choice("AbZ09") for _ in range(rng.randrange(0, 12)))
            events.append(_event(data))
        else:
            events.append(event + b"\n\n")
    return b"".join(events) + stream[stream.rfind(b"\n\n") + 2 :]


OPENAI_FIELDS = {"system_fingerprint": "fp_1", "service_tier": "default"}
RUNS["obfuscation"] = _padded(RUNS["ascii"], extra=OPENAI_FIELDS)
RUNS["obfuscation-with-usage"] = _padded(PLAIN, extra=OPENAI_FIELDS)
RUNS["obfuscation-escapes"] = _padded(RUNS["escapes"])
# Padding that is not the last member, not a plain string, not after a value, not followed by
# the event's blank line, or inside a delta: left in, and read event by event.
RUNS["obfuscation-lookalikes"] = (
    RUNS["obfuscation"]
    .replace(b'"word3 "}', b'"word3 ","obfuscation":"x"}')
    .replace(b'"obfuscation":"', b'"obfuscation":"\\"', 2)
    .replace(b'"word7 "},"logprobs":null', b'"word7 "},"logprobs":null,"obfuscation":"q","z":1')
    + b'data: {,"obfuscation":"x"}\n\ndata: {\ndata: "a":1\ndata: ,"obfuscation":"x"}\n\n'
    + (b'data: {"id":"c","choices":[],"obfuscation":"x"}\n')
)


def test_the_obfuscation_padding_is_taken_out_of_the_events_it_ends() -> None:
    assert _without_padding(_padded(RUNS["ascii"])) == RUNS["ascii"]
    unpadded = _padded(PLAIN, extra=OPENAI_FIELDS, pad=False)
    assert _without_padding(_padded(PLAIN, extra=OPENAI_FIELDS)) == unpadded != PLAIN
    # where the field is not the last member after a value, the bytes stay as they came
    for kept in (
        b'data: {,"obfuscation":"x"}\n\n',
        b'data: {"a":[1 ,"obfuscation":"x"}\n\n',
        b'data: {"a":1,"obfuscation":"x\\"y"}\n\n',
        b'data: {"a":1,"obfuscation":"x","b":2}\n\n',
        b'data: {"a":{"b":1,"obfuscation":"x"}}\n\n',
        b'data: {"a":1,"obfuscation":"x"}\n',
        b'data: {"a":1\ndata: ,"obfuscation":"x"}\n\n',
    ):
        assert _without_padding(kept) == kept


def test_a_padded_openai_stream_is_recorded_as_the_same_stream_unpadded() -> None:
    plain = summarise_stream([(0.0, PLAIN)]).result()
    padded = summarise_stream([(0.0, _padded(PLAIN, extra=OPENAI_FIELDS))]).result()
    assert padded == plain
    long = summarise_stream([(0.0, RUNS["obfuscation"])]).result()
    assert long == summarise_stream([(0.0, RUNS["ascii"])]).result()


@pytest.mark.parametrize("stream", list(RUNS.values()), ids=list(RUNS))
def test_runs_of_alike_events_are_summarised_as_one_by_one(stream: bytes) -> None:
    rng = random.Random(7)
    readings = [[stream], *(_cuts(stream, rng, n) for n in (2, 5, 40) for _ in range(3))]
    for reads in readings:
        for sent in (_forwarded(reads), [(float(i), r) for i, r in enumerate(reads)]):
            assert _summary(summarise_stream(sent)) == _summary(summarise_by_chunk(sent))


def test_a_run_adds_every_text_and_counts_every_event() -> None:
    result = summarise_stream([(0.0, RUNS["escapes"])]).result()
    assert result["choices"][0]["message"]["content"] == "".join(
        f'line {i}\n"q"\t\\ é ✓ 😀' for i in range(30)
    )
    assert result["stream"] == {"events": 32, "done": False}
    ascii_run = summarise_stream([(0.0, RUNS["ascii"])]).result()
    assert ascii_run["choices"][0]["message"]["content"] == "".join(f"word{i} " for i in range(40))
    assert ascii_run["stream"] == {"events": 42, "done": True}
