"""The lean ``tools/call`` path of ``memtap proxy --stdio`` answers and records exactly as the SDK's.

The same JSON-RPC lines go, over real pipes, to ``memtap proxy --stdio`` with the lean path (the
default) and without it (``MEMTAP_LEAN_STDIO=0``), in front of the real reference memory server
and a misbehaving upstream, in both protocol eras (the 2026-07-28 per-request envelope, and the
initialize handshake). Every answer and every recorded event (effects and lineage included) must
be the same. A second group drives :class:`LeanCalls` alone (no SDK server running), so the
lean path is shown to serve the calls, not to hand them all to the SDK.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import misbehaving_server, write_config

from memtap.adapters.pool import UpstreamPool
from memtap.config import load_config
from memtap.proxy.forward import build_forwarding
from memtap.proxy.lean import LeanCalls
from memtap.trace.store import TraceStore
from memtap.trace.writer import Recorder

pytestmark = pytest.mark.anyio

MODERN = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "raw-client", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
BIG = "n" * 5000  # a namespace over the 1,024-character cap on context fields


def _call(request_id: int | str, name: str, arguments: Any, **memtap: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if memtap:
        params["_meta"] = {"memtap": memtap}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


# (request, whether an answer is awaited before the next line)
SCRIPT: list[tuple[dict[str, Any], bool]] = [
    (_call(10, "create_entities", {"entities": [
        {"name": "alice", "entityType": "person", "observations": ["likes tea", "lives in Oslo"]}]},
        session="s1", turn="t1"), True),
    (_call(11, "add_observations", {"observations": [{"entityName": "alice", "contents": ["has a cat"]}]},
           session="s1", turn="t2"), True),
    (_call(12, "delete_observations", {"deletions": [{"entityName": "alice", "observations": ["lives in Oslo"]}]},
           turn="t3"), True),
    (_call(13, "memory__search_nodes", {"query": "tea"}, turn="t4"), True),
    (_call("s-14", "echo", {"text": "héllo ✓ \u2028"}), True),  # a string id; text JSON escapes differ on
    (_call(15, "nope", {}), True),  # an unknown tool: -32602, recorded
    (_call(16, "malformed", {}), True),  # the upstream answers nonsense: -32603, recorded
    (_call(17, "add_observations", {"observations": [{"entityName": "nobody", "contents": ["x"]}]}), True),
    (_call(18, "echo", "not an object"), True),  # the SDK's own parameter check: -32602, not recorded
    (_call(19, "echo", {"text": "over the cap"}, namespace=BIG), True),  # refused, recorded
    ({"jsonrpc": "2.0", "id": 20, "method": "tools/call"}, True),  # no params at all
    (_call(21, "hang", {}), False),  # never answered upstream: times out, but is cancelled first
    ({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 21}}, False),
    (_call(22, "delete_entities", {"entityNames": ["alice"]}, turn="t5"), True),
    (_call(23, "echo", {"text": "last"}), False),  # still in flight at end of input? answered or closed
]  # fmt: skip


def _with_envelope(message: dict[str, Any], era: str) -> dict[str, Any]:
    if era != "modern" or "id" not in message or "params" not in message:
        return message
    params = dict(message["params"])
    params["_meta"] = {**params.get("_meta", {}), **MODERN}
    return {**message, "params": params}


async def _session(
    folder: Path, memory: dict[str, Any], *, lean: bool, era: str, durable: bool = False
) -> dict[Any, Any]:
    """Run SCRIPT against a fresh ``memtap proxy --stdio``; the answers by request id."""
    folder.mkdir()
    memory = {**memory, "env": {"MEMORY_FILE_PATH": str(folder / "memory.jsonl")}}
    config = write_config(
        folder, {"memory": memory, "odd": {**misbehaving_server(), "memtap": {"timeout": 2}}}
    )
    env = {**os.environ, "MEMTAP_LEAN_STDIO": "1" if lean else "0"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "memtap", "proxy", "--stdio", "--config", str(config), "--db",
        str(folder / "trace.db"), *(["--durable"] if durable else []), env=env, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    answers: dict[Any, Any] = {}

    async def send(message: dict[str, Any]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        await proc.stdin.drain()

    async def answer(request_id: Any) -> Any:
        assert proc.stdout is not None
        while request_id not in answers:
            line = await proc.stdout.readline()
            assert line, f"no answer for {request_id!r}"
            got = json.loads(line)
            if "id" in got:
                answers[got["id"]] = got
        return answers[request_id]

    with anyio.fail_after(120):
        if era == "legacy":
            # A call before the handshake is the SDK's to refuse (the lean path waits for it too).
            await send(_call(1, "echo", {"text": "too early"}))
            await answer(1)
            init = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw-client", "version": "1"}}  # fmt: skip
            await send({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": init})
            await answer(2)
            await send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        else:
            await send({"jsonrpc": "2.0", "id": 2, "method": "server/discover", "params": {"_meta": MODERN}})
            await answer(2)
        await send(_with_envelope({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {}}, era))
        await answer(3)
        for message, wait in SCRIPT:
            await send(_with_envelope(message, era))
            if wait:
                await answer(message["id"])
        proc.stdin.close()
        rest = await proc.stdout.read()
        for line in rest.splitlines():
            got = json.loads(line)
            answers[got["id"]] = got
        assert await proc.wait() == 0
    return answers


def _events(db: Path) -> list[dict[str, Any]]:
    """The recorded events without what differs from run to run (ids, times)."""
    store = TraceStore(db)
    try:
        events = store.list_events()
    finally:
        store.close()
    out = []
    for event in events:
        data = event.model_dump(mode="json")
        for key in ("id", "started_at", "ended_at", "total_ms", "overhead_ms", "backend_ms", "parent_id"):
            data.pop(key, None)
        for effect in data.get("effects") or []:
            effect.pop("event_id", None)
            effect.pop("id", None)
        out.append(data)
    return out


@pytest.mark.parametrize(("era", "durable"), [("modern", False), ("legacy", False), ("modern", True)])
async def test_the_lean_path_answers_and_records_every_call_as_the_sdk_path_does(
    tmp_path: Path, memory_server: dict[str, Any], era: str, durable: bool
) -> None:
    lean = await _session(tmp_path / "lean", memory_server, lean=True, era=era, durable=durable)
    sdk = await _session(tmp_path / "sdk", memory_server, lean=False, era=era, durable=durable)
    assert lean == sdk
    assert 21 not in lean  # cancelled: never answered
    assert lean[15]["error"]["code"] == -32602 and "unknown tool 'nope'" in lean[15]["error"]["message"]
    assert lean[16]["error"]["code"] == -32603
    assert lean[18]["error"]["code"] == -32602
    assert lean["s-14"]["result"]["content"][0]["text"] == "héllo ✓ \u2028"
    if era == "modern":
        assert lean[10]["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "memtap"
    else:
        assert "error" in lean[1]  # before the handshake
        assert "_meta" not in lean[10]["result"]
    lean_events, sdk_events = _events(tmp_path / "lean" / "trace.db"), _events(tmp_path / "sdk" / "trace.db")
    assert lean_events == sdk_events
    by_tool = {(e["tool"], e["status"]) for e in lean_events}
    assert ("hang", "error") in by_tool  # the cancelled call ran to its timeout and was recorded
    assert [e["context"]["client"] for e in lean_events if e["tool"] == "create_entities"] == ["raw-client"]
    created = next(e for e in lean_events if e["tool"] == "create_entities")
    assert len(created["effects"]) == 3  # alice and her two observations, derived from the server's file


class _Pipe:
    """A real pipe for LeanCalls to write on, read back line by line."""

    async def __aenter__(self) -> _Pipe:
        loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()
        self.reader = asyncio.StreamReader()
        self.read_transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(self.reader), os.fdopen(read_fd, "rb", buffering=0)
        )
        transport, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, os.fdopen(write_fd, "wb", buffering=0)
        )
        self.writer = asyncio.StreamWriter(transport, protocol, None, loop)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.writer.close()
        self.read_transport.close()

    async def line(self) -> dict[str, Any]:
        with anyio.fail_after(30):
            return dict(json.loads(await self.reader.readline()))


async def test_the_lean_path_serves_calls_itself_and_leaves_the_rest_to_the_sdk(
    tmp_path: Path, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)  # no tracer (an earlier test may have set one)
    config = write_config(tmp_path, {"odd": misbehaving_server()})
    recorder = Recorder(db_path).start()
    pool = UpstreamPool(load_config(config).mcp_servers, recorder)
    try:
        async with pool.run(), _Pipe() as pipe:
            lean = LeanCalls(build_forwarding(pool, recorder))
            lean.attach(pipe.writer)
            echo = json.dumps(_with_envelope(_call(7, "echo", {"text": "hi"}, turn="t1"), "modern")).encode()
            assert not lean.take(echo)  # no request has decided the era yet: the SDK's
            lean.era = "modern"  # as a first modern request (server/discover) decides it
            for refused in (
                b"not json",
                json.dumps({"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": {"_meta": MODERN}}),
                json.dumps(_call(9, "echo", {"text": "no envelope"})),  # the SDK's ladder answers it
                json.dumps({**_with_envelope(_call(9, "echo", {}), "modern"), "extra": 1}),
                json.dumps(_with_envelope(_call(9, "echo", "text"), "modern")),
                json.dumps(_with_envelope({**_call(9, "echo", {}), "id": None}, "modern")),
            ):
                assert not lean.take(refused.encode() if isinstance(refused, str) else refused)
            monkeypatch.setattr(trace, "_TRACER_PROVIDER", TracerProvider())
            assert not lean.take(echo)  # with a tracer, the SDK's (its span per request)
            monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
            assert lean.take(echo)
            answer = await pipe.line()
            assert answer["id"] == 7 and answer["result"]["content"] == [{"type": "text", "text": "hi"}]
            assert answer["result"]["resultType"] == "complete"
            await recorder.answered_first.drain()
        recorder.flush()
        events = TraceStore(db_path).list_events()
        assert [(e.tool, e.front_door, e.context.turn, e.context.client) for e in events] == [
            ("echo", "mcp-stdio", "t1", "raw-client")
        ]
    finally:
        recorder.close()
