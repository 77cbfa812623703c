"""A small OpenAI-compatible server standing in for a hosted LLM, at the network edge.

Deterministic, and it records what it received so tests can assert on the upstream
side. What it answers is steered by the last user message:

- ``[tool]``: a tool call (``get_weather`` with ``{"city": "Paris"}``);
- ``[chunks N]``: stream N content chunks (default 20);
- ``[status N]``: answer HTTP N with an OpenAI error body;
- ``[garbage]``: answer 500 with a body that is not JSON;
- ``[die]``: stream three chunks, then drop the connection mid-event;
- ``[obfuscate]`` (or every stream, with ``--obfuscation`` on the command line): end each streamed
  JSON event with an ``obfuscation`` field of padding, of a length that varies from event to event,
  as OpenAI's own streams do;
- ``[split]``: stream each event in two writes, cut mid-JSON, a moment apart (so a reader gets
  events split across reads);
- ``[endless]``: stream until the client goes away, then set ``cancelled``;
- ``[stall]``: send nothing for ten seconds (to hit a timeout).

And by the model asked for (non-streaming):

- ``memory-echo``: the system messages it was sent (what the chat proxy injected);
- ``paraphrase-keep``: the message after ``Message: `` prefixed with ``In other words, ``;
- ``paraphrase-lose``: ``Something was said.`` (every value lost);
- ``reader-json``: a JSON answer whose ``answer`` is memory ``[1]``'s text in the prompt (null
  when there is none);
- ``answer-check``: a LongMemEval-style judge's "Yes." or "No." (the correct answer inside the
  model response; for an unanswerable question, a response saying it is not known).
- ``memory-agent``: a tool-using agent's model, scripted (``scripted_agent.py``): it stores the
  facts the user states with the memory add tool, searches before answering a question, and
  answers from what the search returned (the example agents of ``examples/agents/`` run on it);
- ``mem0-extract``: mem0 2.x's fact extraction, scripted: the ``## New Messages`` of mem0's
  prompt, each sentence (split on ``.`` and ``;``) one fact, as ``{"memory": [{"text": ...}]}``;
  a message holding ``[unparseable]`` gets prose instead of JSON.

Embeddings: the model ``hash-bow`` gives a deterministic bag-of-words vector (each lower-cased
word hashed into one of ``HASH_DIMS`` dimensions, unit length), so texts sharing words are near;
any other model the three-number placeholder.

Used by the tests (in a thread) and by ``benchmarks/openai_overhead.py`` (as a process).
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import sys
import threading
import zlib
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from scripted_agent import MODEL as AGENT_MODEL
from scripted_agent import reply as agent_reply

CREATED = 1_764_460_800


def completion_text(n: int) -> list[str]:
    return [f"chunk-{i} " for i in range(n)]


@dataclass
class FakeState:
    received: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    cancelled: threading.Event = field(default_factory=threading.Event)
    record: bool = True
    obfuscation: bool = False  # pad every streamed event (``[obfuscate]`` pads one stream's)

    def reset(self) -> None:
        self.received.clear()
        self.headers.clear()
        self.cancelled.clear()


def _last_user(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages") or []):
        if message.get("role") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else json.dumps(content)
    return ""


def _usage(n: int) -> dict[str, int]:
    return {"prompt_tokens": 11, "completion_tokens": n, "total_tokens": 11 + n}


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    data = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


TOOL_CALL = {
    "id": "call_fake1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}


def _first_memory(text: str) -> str:
    found = re.search(r"^\[1\] \([^)]*\) (.*)$", text, re.MULTILINE)
    return json.dumps({"answer": found.group(1) if found else None})


def _answer_check(text: str) -> str:
    """A LongMemEval-style judge: "Yes." when the model response holds the correct answer (or, for
    an unanswerable question, says it is not known), else "No."."""
    found = re.search(r"(Correct Answer|Rubric|Explanation): (.*?)\n\nModel Response: (.*?)\n\n", text, re.S)
    if found is None:
        return "No."
    kind, answer, response = found.group(1), found.group(2).lower(), found.group(3).lower()
    ok = (
        "not mentioned" in response or "don't know" in response
        if kind == "Explanation"
        else answer in response
    )
    return "Yes." if ok else "No."


def _mem0_extract(text: str) -> str:
    new = text.split("## New Messages\n", 1)[-1].split("\n\n## ", 1)[0]
    if "[unparseable]" in new:
        return "Sure! The facts I found are: the user said something."
    facts: list[dict[str, str]] = []
    for line in new.splitlines():
        _, _, said = line.partition(": ")
        for sentence in re.split(r"[.;]\s*", said):
            if sentence.strip():
                facts.append({"text": sentence.strip()})
    return json.dumps({"memory": facts})


HASH_DIMS = 64


def hash_bow(text: str) -> list[float]:
    vector = [0.0] * HASH_DIMS
    for word in re.findall(r"\w+", text.lower()):
        vector[zlib.crc32(word.encode()) % HASH_DIMS] += 1.0
    norm = sum(v * v for v in vector) ** 0.5 or 1.0
    return [v / norm for v in vector]


STEERED = {
    "mem0-extract": _mem0_extract,
    "paraphrase-keep": lambda text: "In other words, " + text.split("Message: ", 1)[-1],
    "paraphrase-lose": lambda text: "Something was said.",
    "reader-json": _first_memory,
    "answer-check": _answer_check,
}


def _completion(model: str, content: str | dict[str, Any]) -> web.Response:
    message = content if isinstance(content, dict) else {"role": "assistant", "content": content}
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
    data = {"id": "chatcmpl-fake", "object": "chat.completion", "created": CREATED, "model": model,
            "choices": [choice], "usage": _usage(1)}  # fmt: skip
    return web.Response(body=json.dumps(data), content_type="application/json")


def build_app(state: FakeState) -> web.Application:
    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if state.record:
            state.received.append(body)
            state.headers.append(dict(request.headers))
        text = _last_user(body)
        model = body.get("model", "fake")
        if model == AGENT_MODEL and not body.get("stream"):
            return _completion(model, agent_reply(body))
        if model in STEERED and not body.get("stream"):
            return _completion(model, STEERED[model](text))
        if model == "memory-echo" and not body.get("stream"):  # repeats what was injected
            system = [m.get("content") for m in body.get("messages", []) if m.get("role") == "system"]
            return _completion(model, "\n".join(str(t) for t in system) or "nothing injected")
        if match := re.search(r"\[status (\d+)\]", text):
            status = int(match.group(1))
            error = {
                "message": f"fake upstream error {status}",
                "type": "fake_error",
                "param": None,
                "code": None,
            }
            return web.json_response({"error": error}, status=status)
        if "[garbage]" in text:
            return web.Response(status=500, text="<html>upstream exploded</html>")
        if "[stall]" in text:
            await asyncio.sleep(10)
        n = int(m.group(1)) if (m := re.search(r"\[chunks (\d+)\]", text)) else 20
        tool = "[tool]" in text
        if not body.get("stream"):
            message: dict[str, Any] = {
                "role": "assistant",
                "content": None if tool else "".join(completion_text(n)),
            }
            if tool:
                message["tool_calls"] = [TOOL_CALL]
            data = {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "created": CREATED,
                "model": model,
                "choices": [{"index": 0, "message": message, "logprobs": None,
                             "finish_reason": "tool_calls" if tool else "stop"}],
                "usage": _usage(n),
            }  # fmt: skip
            return web.Response(body=json.dumps(data, separators=(",", ":")), content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if state.obfuscation or "[obfuscate]" in text:
            unpadded = response.write
            padding = iter(range(1_000_000))

            async def padded(data: bytes) -> None:
                if data.startswith(b"data: {") and data.endswith(b"}\n\n"):
                    pad = "xK7q2ZpW9"[: next(padding) % 9]
                    data = data[:-3] + b',"obfuscation":"' + pad.encode() + b'"}\n\n'
                await unpadded(data)

            response.write = padded  # type: ignore[method-assign]
        if "[split]" in text:
            whole = response.write

            async def write(data: bytes) -> None:
                await whole(data[: len(data) // 2])
                await asyncio.sleep(0.002)  # the two halves leave in separate segments
                await whole(data[len(data) // 2 :])

            response.write = write  # type: ignore[method-assign]
        try:
            await response.write(_chunk(model, {"role": "assistant", "content": ""}))
            if tool:
                first = {**TOOL_CALL, "function": {"name": "get_weather", "arguments": ""}}
                await response.write(_chunk(model, {"tool_calls": [{"index": 0, **first}]}))
                for part in ('{"city"', ': "Paris"}'):
                    await response.write(
                        _chunk(model, {"tool_calls": [{"index": 0, "function": {"arguments": part}}]})
                    )
                await response.write(_chunk(model, {}, "tool_calls"))
            elif "[endless]" in text:
                i = 0
                while True:
                    await response.write(_chunk(model, {"content": f"more-{i} "}))
                    i += 1
                    await asyncio.sleep(0.005)
            else:
                for i, piece in enumerate(completion_text(n)):
                    await response.write(_chunk(model, {"content": piece}))
                    if "[die]" in text and i == 2:
                        await response.write(b'data: {"id":"chatcmpl-fake","choi')
                        assert request.transport is not None
                        request.transport.abort()
                        return response
                await response.write(_chunk(model, {}, "stop"))
            if (body.get("stream_options") or {}).get("include_usage"):
                usage = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": CREATED,
                         "model": model, "choices": [], "usage": _usage(n)}  # fmt: skip
                await response.write(b"data: " + json.dumps(usage, separators=(",", ":")).encode() + b"\n\n")
            await response.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            state.cancelled.set()
            raise
        return response

    async def embeddings(request: web.Request) -> web.Response:
        body = await request.json()
        if state.record:
            state.received.append(body)
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        embed = hash_bow if body["model"] == "hash-bow" else (lambda t: [float(len(t)), 1.0, 0.5])
        data = [{"object": "embedding", "index": i, "embedding": embed(str(t))} for i, t in enumerate(inputs)]
        usage = {"prompt_tokens": len(inputs), "total_tokens": len(inputs)}
        return web.json_response({"object": "list", "data": data, "model": body["model"], "usage": usage})

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=64 << 20)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_get("/healthz", healthz)
    return app


class FakeUpstream:
    """The fake server on a free loopback port, in a thread of its own."""

    def __init__(self) -> None:
        self.state = FakeState()
        self.port = 0
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="fake-openai", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeUpstream:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the fake OpenAI server did not start")
        return self

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        runner = web.AppRunner(build_app(self.state), access_log=None, handler_cancellation=True)
        await runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        await web.SockSite(runner, sock).start()
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


def main() -> None:
    """``python fake_openai.py PORT``: serve until killed (for the benchmark)."""
    state = FakeState(record=False, obfuscation="--obfuscation" in sys.argv[2:])
    web.run_app(build_app(state), host="127.0.0.1", port=int(sys.argv[1]), access_log=None, print=None)


if __name__ == "__main__":
    main()
