"""How memtap reads the reference server's state: its file, checked; open_nodes when the file lies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import ServerProcess
from mcp import Client, MCPError, StdioServerParameters
from mcp.types import INTERNAL_ERROR

from memtap.adapters.memory_server import entity_id, observation_id
from memtap.adapters.pool import UpstreamPool
from memtap.config import HttpServerConfig, StdioServerConfig
from memtap.proxy.forward import build_forward_server
from memtap.trace.models import EffectKind, Op
from memtap.trace.store import TraceStore
from memtap.trace.writer import Recorder

pytestmark = pytest.mark.anyio

A, D = EffectKind.ADD, EffectKind.DELETE


def effects_of(db: Path) -> list[tuple[str, list[tuple[Any, str]]]]:
    store = TraceStore(db)
    events = store.list_events()
    store.close()
    return [(e.tool, [(f.kind, f.item_id) for f in e.effects]) for e in events]


async def test_a_write_made_behind_memtaps_back_is_not_hidden_by_its_cache(
    memory_server: dict[str, Any], db_path: Path
) -> None:
    recorder = Recorder(db_path).start()
    pool = UpstreamPool({"memory": StdioServerConfig.model_validate(memory_server)}, recorder)
    direct = StdioServerParameters(command=memory_server["command"], env=memory_server["env"])
    async with pool.run(), Client(build_forward_server(pool, recorder)) as proxied:
        await proxied.call_tool("create_entities", {"entities": [
            {"name": "alice", "entityType": "person", "observations": ["seen by memtap"]}]})  # fmt: skip
        assert pool.get("memory").tap.method.startswith("file ")
        async with Client(direct) as behind:  # a second server on the same file: memtap never sees it
            await behind.call_tool("add_observations", {"observations": [
                {"entityName": "alice", "contents": ["unseen by memtap"]}]})  # fmt: skip
        await proxied.call_tool("delete_entities", {"entityNames": ["alice"]})
    recorder.close()
    assert effects_of(db_path) == [
        ("create_entities", [(A, entity_id("alice")), (A, observation_id("alice", "seen by memtap"))]),
        ("delete_entities", [
            (D, entity_id("alice")),
            (D, observation_id("alice", "seen by memtap")),
            (D, observation_id("alice", "unseen by memtap")),  # the file changed: read afresh
        ]),
    ]  # fmt: skip


async def test_a_file_that_is_not_the_servers_is_caught_and_open_nodes_used_instead(
    tmp_path: Path, memory_server: dict[str, Any], db_path: Path
) -> None:
    real = memory_server["env"]["MEMORY_FILE_PATH"]
    decoy = {"MEMORY_FILE_PATH": str(tmp_path / "decoy.jsonl")}  # what memtap is told
    launched = ["MEMORY_FILE_PATH=" + real, memory_server["command"]]  # what the server uses
    config = StdioServerConfig(command="env", args=launched, env=decoy)
    recorder = Recorder(db_path).start()
    pool = UpstreamPool({"memory": config}, recorder)
    async with pool.run(), Client(build_forward_server(pool, recorder)) as proxied:
        await proxied.call_tool("create_entities", {"entities": [
            {"name": "bob", "entityType": "person", "observations": ["one", "two"]}]})  # fmt: skip
        await proxied.call_tool("delete_observations", {"deletions": [
            {"entityName": "bob", "observations": ["two"]}]})  # fmt: skip
        assert pool.get("memory").tap.method == "open_nodes"
    recorder.close()
    assert effects_of(db_path) == [
        ("create_entities", [
            (A, entity_id("bob")), (A, observation_id("bob", "one")), (A, observation_id("bob", "two"))]),
        ("delete_observations", [(D, observation_id("bob", "two"))]),
    ]  # fmt: skip


async def test_streamable_http_upstream_passes_tools_through_and_is_classified_by_annotations(
    db_path: Path, tmp_path: Path, start_http_server: Any
) -> None:
    upstream: ServerProcess = start_http_server(
        db=tmp_path / "upstream.db"
    )  # memtap serve: a real HTTP MCP server
    recorder = Recorder(db_path).start()
    pool = UpstreamPool({"remote": HttpServerConfig(url=upstream.url)}, recorder)
    async with pool.run(), Client(build_forward_server(pool, recorder)) as proxied:
        tools = {t.name: t for t in (await proxied.list_tools()).tools}
        added = await proxied.call_tool("memory_add", {"content": "kept remotely"})
        found = await proxied.call_tool("memory_search", {"query": "remotely"})
        classes = {name: (c.kind.value, c.source) for name, c in pool.get("remote").classes.items()}
        assert upstream.stop() == 0  # the remote server goes away: a clear error, not a hang
        with pytest.raises(MCPError) as gone:
            await proxied.call_tool("memory_search", {"query": "remotely"})
    recorder.close()
    assert gone.value.code == INTERNAL_ERROR and f"upstream 'remote' at {upstream.url}" in gone.value.message
    assert tools["memory_add"].annotations is not None and tools["memory_add"].input_schema["required"] == [
        "content"
    ]
    assert not added.is_error and found.structured_content["results"][0]["content"] == "kept remotely"  # type: ignore[index]
    assert classes == {
        "memory_add": ("write", "annotations"), "memory_add_batch": ("write", "annotations"),
        "memory_search": ("retrieve", "annotations"),
        "memory_get": ("read", "annotations"), "memory_list": ("read", "annotations"),
        "memory_update": ("update", "annotations"), "memory_delete": ("delete", "annotations"),
        "memory_history": ("read", "annotations"),
    }  # fmt: skip
    store = TraceStore(db_path)
    events = store.list_events()
    store.close()
    assert [e.tool for e in events if e.front_door == "upstream"] == ["upstream/exit"]
    assert [(e.tool, e.op, e.backend, e.status) for e in events if e.front_door != "upstream"] == [
        ("memory_add", Op.WRITE, "remote", "ok"), ("memory_search", Op.RETRIEVE, "remote", "ok"),
        ("memory_search", Op.RETRIEVE, "remote", "error"),
    ]  # fmt: skip
    assert {e.context.upstream for e in events} == {"remote"}
