"""The content policy wins over everything that could show a body: spans with content capture
on, chat messages and answers, and wrapped servers' tools."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from served import ServedMemtap, chats

from memtap.adapters.builtin import BuiltinBackend
from memtap.proxy.service import MemoryService
from memtap.trace.models import TraceEvent
from memtap.trace.privacy import ContentPolicy, TracePrivacy
from memtap.trace.store import TraceStore
from memtap.trace.writer import Recorder

Serve = Callable[..., ServedMemtap]


def _sha(text: str) -> str:
    return f"sha256:{hashlib.sha256(text.encode()).hexdigest()};bytes={len(text.encode())}"


@pytest.mark.anyio
async def test_hashed_policy_wins_over_span_content_capture(
    db_path: Path, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMTAP_OTEL_CAPTURE_CONTENT", "true")
    recorder = Recorder(db_path).start()
    recorder.privacy = TracePrivacy(ContentPolicy([("private-*", "hashed")]))
    backend = BuiltinBackend(db_path)
    service = MemoryService(backend, recorder)
    for ns in ("private-1", "public"):
        layers = ({"namespace": ns},)
        await service.call_tool("memory_add", {"content": f"OSPREY lives in {ns}"}, principal="u",
                                front_door="t", layers=layers)  # fmt: skip
        await service.call_tool("memory_search", {"query": "OSPREY lives"}, principal="u", front_door="t",
                                layers=layers)  # fmt: skip
    await backend.close()
    recorder.close()
    hashed_add, hashed_search, full_add, full_search = (
        dict(s.attributes or {}) for s in spans.get_finished_spans()
    )
    assert "gen_ai.memory.query.text" not in hashed_search
    assert json.loads(str(hashed_search["gen_ai.memory.records"]))[0]["content"] == _sha(
        "OSPREY lives in private-1"
    )
    assert "OSPREY" not in json.dumps([hashed_add, hashed_search], default=str)
    assert full_search["gen_ai.memory.query.text"] == "OSPREY lives"  # full: capture works as before
    assert "OSPREY lives in public" in str(full_add["gen_ai.memory.records"])


def test_a_hashed_chat_keeps_roles_ids_usage_and_timings_but_no_text(
    serve_memtap: Serve, upstream: Any
) -> None:
    memtap = serve_memtap({"content_policy": {"hidden-*": "hashed"}, "memory": "auto"})
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url, max_retries=0)
    ask = "Where is the HERON key? [chunks 3]"
    reply = client.chat.completions.create(
        model="gpt-fake", messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": ask}],
        user="hidden-7",
    )  # fmt: skip
    assert reply.choices[0].message.content == "chunk-0 chunk-1 chunk-2 "  # the caller's answer is untouched
    events = memtap.events(lambda evs: len(evs) >= 3 and chats(1)(evs))
    chat = next(e for e in events if e.op.value == "chat")
    assert chat.arguments["messages"] == [
        {"role": "system", "content": _sha("Be brief.")}, {"role": "user", "content": _sha(ask)},
    ]  # fmt: skip
    assert chat.result["choices"][0]["message"] == {
        "role": "assistant",
        "content": _sha("chunk-0 chunk-1 chunk-2 "),
    }
    assert chat.output_tokens == 3 and chat.total_ms is not None and chat.context.namespace == "hidden-7"
    capture = next(e for e in events if e.op.value == "write")
    assert capture.arguments["content"] == _sha(ask) and capture.effects[0].content_after == _sha(ask)
    _assert_no_heron_in_the_trace(memtap.db)


def test_a_hashed_stream_is_hashed_after_its_summary_is_made_off_the_callers_path(
    serve_memtap: Serve, upstream: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory off, no spans: the stream's summary is made on the recorder's thread, and the
    namespace's policy is applied to it there, before anything is stored."""
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    memtap = serve_memtap({"content_policy": {"hidden-*": "hashed"}})
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url, max_retries=0)
    ask = "Where is the HERON key? [chunks 3]"
    stream = client.chat.completions.create(
        model="gpt-fake", messages=[{"role": "user", "content": ask}], user="hidden-8", stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    assert (
        "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "chunk-0 chunk-1 chunk-2 "
    )
    [chat] = memtap.events(chats(1))
    assert chat.arguments["messages"] == [{"role": "user", "content": _sha(ask)}]
    assert chat.result["choices"][0]["message"] == {
        "role": "assistant",
        "content": _sha("chunk-0 chunk-1 chunk-2 "),
    }
    assert (chat.input_tokens, chat.output_tokens) == (11, 3) and chat.ttft_ms is not None
    _assert_no_heron_in_the_trace(memtap.db)


def _assert_no_heron_in_the_trace(db: Path) -> None:
    """The trace's tables (the backend's own table holds the captured memory: it is the memory)."""
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT arguments || coalesce(result, '') FROM events").fetchall()
        effects = conn.execute(
            "SELECT coalesce(content_before, '') || coalesce(content_after, '') FROM effects"
        )
        texts = [r[0] for r in rows] + [r[0] for r in effects.fetchall()]
    finally:
        conn.close()
    assert texts and not any("HERON" in t for t in texts)


def test_a_wrapped_servers_tool_call_is_reduced_whole() -> None:
    from datetime import UTC, datetime

    from memtap.trace.models import Context, Op

    privacy = TracePrivacy(ContentPolicy([("*", "none")]))
    now = datetime.now(UTC)
    event = TraceEvent(
        id="e1", started_at=now, ended_at=now, front_door="mcp-http", backend="memory", tool="create_entities",
        op=Op.WRITE, context=Context(namespace="n"),
        arguments={"entities": [{"name": "Ann", "observations": ["likes KESTRELS"]}]},
        result={"content": [{"type": "text", "text": "created Ann KESTRELS"}]},
    )  # fmt: skip
    privacy.apply(event)
    assert set(event.arguments) == {"entities"} and event.arguments["entities"].startswith("dropped;bytes=")
    assert isinstance(event.result, str) and event.result.startswith("dropped;bytes=")
    assert "KESTREL" not in event.model_dump_json()


def test_applying_the_policy_twice_to_one_calls_effects_gives_receipts_of_the_content() -> None:
    """A cancelled call and the backend committing its write may each build an event from the
    same effects: each event gets the receipt of the content, never a receipt of a receipt,
    and the backend's effects keep their content."""
    from datetime import UTC, datetime

    from memtap.trace.models import Context, EffectKind, MemoryEffect, Op

    privacy = TracePrivacy(ContentPolicy([("*", "hashed")]), secrets=["s3cret-token-1"])
    effects = [MemoryEffect(kind=EffectKind.ADD, item_id="m1", content_after="PLOVER s3cret-token-1")]
    now = datetime.now(UTC)
    built = []
    for _ in range(2):
        event = TraceEvent(
            id="e1", started_at=now, ended_at=now, front_door="t", backend="builtin", tool="memory_add",
            op=Op.WRITE, context=Context(namespace="n"), arguments={"content": "PLOVER"}, effects=effects,
        )  # fmt: skip
        privacy.apply(event)
        built.append(event)
    assert built[0].effects[0].content_after == _sha("PLOVER s3cret-token-1")
    assert built[1].effects == built[0].effects
    assert effects[0].content_after == "PLOVER s3cret-token-1"


@pytest.mark.anyio
async def test_an_event_finished_off_the_callers_path_is_private_even_when_finishing_it_fails(
    db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A front door that leaves its value to the recorder's thread (``CallRecord.deferred``): the
    namespace's policy is applied to what it filled in, and also when filling it in failed."""
    from memtap.trace.calls import recorded_call
    from memtap.trace.models import Context, Op

    recorder = Recorder(db_path).start()
    recorder.privacy = TracePrivacy(ContentPolicy([("hidden-*", "hashed")]))

    def answer(text: str) -> dict[str, Any]:
        return {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}

    def fills(event: TraceEvent) -> None:
        event.result = answer("the HERON key is under the mat")

    def breaks(event: TraceEvent) -> None:
        event.result = answer("the HERON key, half")
        raise RuntimeError("summary bug")

    for deferred in (fills, breaks):
        async with recorded_call(
            recorder, tool="chat.completions", op=Op.CHAT, front_door="test", backend="none",
            arguments={"messages": [{"role": "user", "content": "Where is the HERON key?"}]},
            fallback_context=lambda: Context(namespace="hidden-1"),
        ) as call:  # fmt: skip
            call.deferred = deferred
    assert recorder.flush(10)
    recorder.close()
    _assert_no_heron_in_the_trace(db_path)
    store = TraceStore(db_path)
    try:
        filled, broken = store.list_events()
    finally:
        store.close()
    assert filled.result == answer(_sha("the HERON key is under the mat"))
    assert broken.result == answer(_sha("the HERON key, half"))
    assert "summary bug" in caplog.text
