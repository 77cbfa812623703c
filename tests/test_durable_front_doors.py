"""``--durable`` means the same on every front door: the answer comes after its event's commit, and
a commit that fails is an error to the caller, never an answer that looks acknowledged.

A trigger that refuses every insert into ``events`` stands in for a trace that cannot be
committed (a damaged or refusing database): a permanent error, so the event is spilled at once.

These tests run on the path where each caller waits for its commit (``MEMTAP_DURABLE_JOURNAL=0``):
through the durable journal a lone call is answered once its event is in the synced journal, and
a database that refuses it afterwards spills it (tests/test_durable_journal.py covers that path).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from conftest import ServerProcess, http_client, write_config
from mcp.shared.exceptions import MCPError
from served import ServedMemtap

from memtap.trace.store import TraceStore

Serve = Callable[..., ServedMemtap]


@pytest.fixture(autouse=True)
def _commit_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMTAP_DURABLE_JOURNAL", "0")  # read by every Recorder these tests start


HELLO = [{"role": "user", "content": "Say hello [chunks 5]"}]
LOCAL = {"embeddings": {"tiny": {"provider": "hashing", "options": {"dimensions": 16}}}}


def _refuse_events(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TRIGGER refuse_events BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        )


def _accept_events(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TRIGGER refuse_events")


def _spilled(db: Path) -> list[dict[str, Any]]:
    spill = db.with_name(db.name + ".unwritten.jsonl")
    return [json.loads(line) for line in spill.read_text().splitlines()] if spill.exists() else []


def _committed(db: Path) -> list[str]:
    """The tools of the events in the file now (no flush, no waiting)."""
    store = TraceStore(db)
    try:
        return [event.tool for event in store.list_events()]
    finally:
        store.close()


@pytest.mark.anyio
async def test_durable_proxy_answers_an_uncommitted_call_with_an_error(
    tmp_path: Path, memory_server: dict[str, Any], start_http_server: Callable[..., ServerProcess]
) -> None:
    config = write_config(tmp_path, {"memory": memory_server})
    server = start_http_server("--config", str(config), "--durable", command="proxy")
    entity = {"entities": [{"name": "alice", "entityType": "person", "observations": ["likes tea"]}]}
    async with http_client(server.url) as client:
        await client.call_tool("read_graph", {})
        _refuse_events(server.db)
        with pytest.raises(MCPError) as refused:
            await client.call_tool("create_entities", entity)
        _accept_events(server.db)
        ok = await client.call_tool("open_nodes", {"names": ["alice"]})
        assert "open_nodes" in _committed(server.db)  # committed before the answer came
    assert "the call was carried out but its trace could not be committed" in refused.value.message
    assert "refused by the test" in refused.value.message
    assert [event["tool"] for event in _spilled(server.db)] == ["create_entities"]
    assert not ok.is_error


def test_durable_chat_answers_after_the_commit_and_refuses_to_answer_without_it(
    serve_memtap: Serve,
) -> None:
    memtap = serve_memtap(durable=True)
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url, max_retries=0)
    client.chat.completions.create(model="gpt-fake", messages=HELLO)
    assert _committed(memtap.db) == ["chat.completions"]  # in the file when the answer arrived
    body = {"model": "gpt-fake", "messages": HELLO, "stream": True}
    streamed = httpx.post(memtap.base_url + "/chat/completions", json=body, timeout=10).content
    assert streamed.endswith(b"data: [DONE]\n\n")
    assert _committed(memtap.db) == ["chat.completions"] * 2

    _refuse_events(memtap.db)
    with pytest.raises(openai.APIStatusError) as refused:
        client.chat.completions.create(model="gpt-fake", messages=HELLO)
    assert refused.value.status_code == 503
    assert "could not be committed" in str(refused.value.message)
    cut = httpx.post(memtap.base_url + "/chat/completions", json=body, timeout=10)
    assert cut.status_code == 200  # the stream had begun: it ends with an error event, not [DONE]
    assert b"[DONE]" not in cut.content
    last = cut.content.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
    assert last.startswith(b"data: ") and b"could not be committed" in last
    assert json.loads(last[len(b"data: ") :])["error"]["code"] == "trace_not_committed"
    assert [event["tool"] for event in _spilled(memtap.db)] == ["chat.completions"] * 2


def test_durable_embeddings_answer_after_the_commit_and_refuse_to_answer_without_it(
    serve_memtap: Serve,
) -> None:
    memtap = serve_memtap(LOCAL, durable=True)
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url, max_retries=0)
    client.embeddings.create(model="tiny", input="green tea")
    assert _committed(memtap.db) == ["embeddings"]
    _refuse_events(memtap.db)
    with pytest.raises(openai.APIStatusError) as refused:
        client.embeddings.create(model="tiny", input="green tea")
    assert refused.value.status_code == 503
    assert [event["tool"] for event in _spilled(memtap.db)] == ["embeddings"]
