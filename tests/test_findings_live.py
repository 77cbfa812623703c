"""Live detection: findings on the call's span (or a span linked to it), the gate verdict as a span
attribute, notifications that fail or hang without touching the calls, and a user turn of the
chat proxy deciding whether a delete was asked for."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest
from conftest import http_client, meta
from findings_helpers import settled_findings
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from served import chats

from memtap.findings.model import Severity

pytestmark = pytest.mark.anyio

Serve = Callable[..., Any]


async def _leak(served: Any) -> str:
    async with http_client(f"http://127.0.0.1:{served.port}/mcp", {"X-Memtap-Namespace": "alice"}) as client:
        added = await client.call_tool("memory_add", {"content": "Alice's salary is 95000."})
        found = await client.call_tool("memory_search", {"query": "salary", "requester": "carol"})
    assert not found.is_error
    return str(added.structured_content["id"])  # type: ignore[index]


async def test_a_finding_is_a_span_linked_to_the_span_of_its_call(
    serve_memtap: Serve, spans: InMemorySpanExporter
) -> None:
    served = serve_memtap()
    item = await _leak(served)
    (finding,) = settled_findings(served, "leak_retrieval")
    search = next(s for s in spans.get_finished_spans() if s.name == "search_memory builtin")
    assert search.attributes is not None and search.attributes["memtap.gate"] == f"observe:would-deny={item}"
    linked = [s for s in spans.get_finished_spans() if s.name == "memtap.finding"]
    assert len(linked) == 1 and linked[0].attributes is not None
    assert linked[0].attributes["memtap.finding.kind"] == "leak_retrieval"
    assert linked[0].attributes["memtap.finding.severity"] == "high"
    assert linked[0].attributes["memtap.finding.id"] == finding.id
    assert tuple(linked[0].attributes["memtap.finding.item_ids"]) == (item,)  # type: ignore[arg-type]
    (link,) = linked[0].links
    assert link.context.span_id == search.context.span_id and link.context.trace_id == search.context.trace_id


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers: a hanging webhook."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield sock.getsockname()[1]
    sock.close()


async def test_a_hanging_webhook_and_a_failing_command_are_bounded_and_recorded(
    serve_memtap: Serve, silent_port: int
) -> None:
    served = serve_memtap({"findings": {
        "webhook": f"http://127.0.0.1:{silent_port}/hook",
        "command": [sys.executable, "-c",  # what it prints holds the chat upstream's key
                    "import sys; sys.stdin.read(); print('key sk-upstream-secret refused', file=sys.stderr); sys.exit(3)"],
        "notify_timeout_s": 0.5,
    }})  # fmt: skip
    await _leak(served)
    assert [f.kind for f in settled_findings(served)] == ["leak_retrieval"]
    events = served.events(lambda evs: any(e.tool == "findings.notify" for e in evs))
    (failure,) = [e for e in events if e.tool == "findings.notify"]
    assert failure.status == "error" and failure.op.value == "control"
    assert failure.error is not None
    assert "command exited 3: key [redacted] refused" in failure.error and "webhook failed: " in failure.error
    assert "sk-upstream-secret" not in failure.model_dump_json()  # redacted like every recorded event
    assert [e.status for e in events if e.tool.startswith("memory_")] == ["ok", "ok"]


def test_a_malformed_findings_configuration_is_one_clear_error() -> None:
    from pydantic import ValidationError

    from memtap.config import ConfigFile

    with pytest.raises(ValidationError, match=r"canaries\[0\]: a canary must be at least 6 characters"):
        ConfigFile.model_validate({"memtap": {"findings": {"canaries": ["abc"]}}})
    with pytest.raises(ValidationError, match="webhook"):
        ConfigFile.model_validate({"memtap": {"findings": {"webhook": "not a url"}}})
    with pytest.raises(ValidationError, match="notify_timeout_s"):
        ConfigFile.model_validate({"memtap": {"findings": {"notify_timeout_s": 0}}})


async def _chat_then_delete(serve_memtap: Serve, said: str) -> list[Any]:
    served = serve_memtap({"memory": "auto"})
    async with http_client(f"http://127.0.0.1:{served.port}/mcp", {"X-Memtap-Namespace": "alice"}) as client:
        added = await client.call_tool(
            "memory_add", {"content": "Alice lives at 12 Elm Street."}, meta=meta(session="s1", role="user")
        )
        chat = openai.OpenAI(
            api_key="x", base_url=served.base_url, default_headers={"X-Memtap-Session": "s1"}
        )
        chat.chat.completions.create(
            model="gpt-fake", user="alice", messages=[{"role": "user", "content": said}]
        )
        served.events(chats(1))  # the turn is recorded (after its answer) before the delete is made
        item = added.structured_content["id"]  # type: ignore[index]
        await client.call_tool("memory_delete", {"id": item}, meta=meta(session="s1", role="assistant"))
    return [f for f in settled_findings(served, "erasure") if f.item_ids == [item]]


async def test_a_delete_no_user_turn_asked_for_is_an_erasure(serve_memtap: Serve) -> None:
    (found,) = await _chat_then_delete(serve_memtap, "What's a good name for a cat?")
    assert found.severity == Severity.HIGH
    assert found.evidence["lost_facts"] == ["12", "alice", "elm street"]
    assert found.evidence["user_turns_known"] == 1 and found.evidence["requested_by_call"] is True


async def test_a_delete_the_user_asked_for_is_not_flagged(serve_memtap: Serve) -> None:
    assert await _chat_then_delete(serve_memtap, "I moved, please forget my old address.") == []


def test_after_commit_callbacks_see_every_committed_event_and_a_failing_one_stops_nothing(
    tmp_path: Any,
) -> None:
    from memtap.ids import new_id
    from memtap.trace.models import Context, Op, TraceEvent, utc_now
    from memtap.trace.store import TraceStore
    from memtap.trace.writer import Recorder

    seen: list[str] = []

    def broken(events: list[TraceEvent]) -> None:
        raise RuntimeError("a broken callback")

    recorder = Recorder(tmp_path / "t.db").start()
    recorder.after_commit.extend([broken, lambda events: seen.extend(e.id for e in events)])
    now = utc_now()
    ids = [new_id() for _ in range(5)]
    for event_id in ids:
        recorder.submit(TraceEvent(id=event_id, started_at=now, ended_at=now, front_door="test", backend="builtin",
                                   tool="memory_list", op=Op.READ, context=Context()))  # fmt: skip
    assert recorder.flush()
    assert seen == ids  # handed on before flush() returned
    recorder.close()
    store = TraceStore(tmp_path / "t.db")
    assert [e.id for e in store.list_events()] == ids
    store.close()


async def test_findings_the_detector_process_could_not_store_are_stored_after_the_next_commit(
    serve_memtap: Serve,
) -> None:
    import sqlite3

    served = serve_memtap()
    conn = sqlite3.connect(served.db)
    conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON findings BEGIN SELECT RAISE(ABORT, 'refused'); END")
    conn.commit()
    item = await _leak(served)
    assert settled_findings(served, "leak_retrieval") == []  # found, not stored
    conn.execute("DROP TRIGGER refuse")
    conn.commit()
    conn.close()
    async with http_client(f"http://127.0.0.1:{served.port}/mcp", {"X-Memtap-Namespace": "alice"}) as client:
        assert not (await client.call_tool("memory_list", {})).is_error
    (finding,) = settled_findings(served, "leak_retrieval")
    assert finding.item_ids == [item]


async def test_a_dead_detector_process_turns_live_detection_off_and_the_calls_go_on(
    serve_memtap: Serve,
) -> None:
    served = serve_memtap()
    live = served.runtime.findings
    live._worker.kill()
    async with http_client(f"http://127.0.0.1:{served.port}/mcp", {"X-Memtap-Namespace": "alice"}) as client:
        added = await client.call_tool("memory_add", {"content": "Alice likes tea."})
        assert not added.is_error
        assert not (await client.call_tool("memory_list", {})).is_error
    events = served.events(lambda evs: sum(e.tool.startswith("memory_") for e in evs) >= 2)
    assert [e.status for e in events if e.tool.startswith("memory_")] == ["ok", "ok"]
    assert live.wait_idle(timeout=20) is False  # the commits are never examined: it says so
    error = live.stats_dict()["worker_error"]  # whichever thread saw it first: the answers or the pokes
    assert error == "the detector process ended (exit code -9)" or error.startswith(
        "the detector process stopped reading: "
    )
