"""OpenTelemetry spans of memory calls, captured with the SDK's in-memory exporter."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from memtap.adapters.builtin import BuiltinBackend
from memtap.proxy.service import MemoryService
from memtap.trace.writer import Recorder

pytestmark = pytest.mark.anyio


async def test_memory_calls_emit_genai_memory_spans(
    db_path: Path, spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMTAP_OTEL_CAPTURE_CONTENT", "true")
    recorder = Recorder(db_path).start()
    backend = BuiltinBackend(db_path)
    service = MemoryService(backend, recorder)
    ctx = ({"session": "s1", "turn": "t3", "run": "r9"},)
    added = await service.call_tool(
        "memory_add", {"content": "FitLife on Tuesdays"}, principal="u", front_door="t", layers=ctx
    )
    await service.call_tool(
        "memory_update", {"id": added.value["id"], "content": "CrossFit"}, principal="u", front_door="t"
    )
    await service.call_tool("memory_search", {"query": "CrossFit"}, principal="u", front_door="t")
    await service.call_tool("memory_delete", {"id": added.value["id"]}, principal="u", front_door="t")
    await service.call_tool("memory_get", {"id": "missing"}, principal="u", front_door="t")
    await backend.close()
    recorder.close()

    finished = spans.get_finished_spans()
    assert [s.name for s in finished] == [
        "create_memory builtin", "update_memory builtin", "search_memory builtin", "delete_memory builtin",
        "get_memory builtin",
    ]  # fmt: skip
    create, update, search, delete, get = (dict(s.attributes or {}) for s in finished)
    assert create["gen_ai.operation.name"] == "create_memory"
    assert create["gen_ai.memory.store.id"] == "builtin"
    assert create["gen_ai.memory.record.id"] == added.value["id"]
    assert (create["memtap.session"], create["memtap.turn"], create["memtap.run"]) == ("s1", "t3", "r9")
    assert create["memtap.event_id"] == added.event_id
    assert create["openinference.span.kind"] == "TOOL"
    assert search["openinference.span.kind"] == "RETRIEVER"
    assert search["gen_ai.memory.record.count"] == 1
    assert search["gen_ai.memory.query.text"] == "CrossFit"
    assert "CrossFit" in str(search["gen_ai.memory.records"])
    assert update["gen_ai.memory.record.id"] == delete["gen_ai.memory.record.id"] == added.value["id"]
    assert finished[4].status.status_code == StatusCode.ERROR
    assert get["error.type"] == "no memory item 'missing' in namespace 'u'"


async def test_query_text_is_not_exported_unless_asked(db_path: Path, spans: InMemorySpanExporter) -> None:
    recorder = Recorder(db_path).start()
    backend = BuiltinBackend(db_path)
    service = MemoryService(backend, recorder)
    await service.call_tool("memory_search", {"query": "secret words"}, principal="u", front_door="t")
    await backend.close()
    recorder.close()
    [span] = spans.get_finished_spans()
    assert "gen_ai.memory.query.text" not in (span.attributes or {})
    assert "gen_ai.memory.records" not in (span.attributes or {})
