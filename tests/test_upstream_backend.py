"""UpstreamMemoryBackend: the MemoryBackend protocol over a wrapped server (the chat proxy's memory)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from conftest import misbehaving_server

from memtap.adapters.base import MemoryBackend
from memtap.adapters.memory_server import entity_id, observation_id
from memtap.adapters.pool import UpstreamPool
from memtap.adapters.upstream_backend import UpstreamMemoryBackend
from memtap.config import StdioServerConfig
from memtap.errors import BackendError, ItemNotFound
from memtap.proxy.service import MemoryService
from memtap.trace.models import EffectKind, Provenance, Role
from memtap.trace.store import TraceStore
from memtap.trace.writer import Recorder

pytestmark = pytest.mark.anyio

A, D, U, R = EffectKind.ADD, EffectKind.DELETE, EffectKind.UPDATE, EffectKind.RETRIEVE


@pytest.fixture
async def pool(memory_server: dict[str, Any], db_path: Path) -> AsyncIterator[UpstreamPool]:
    recorder = Recorder(db_path).start()
    servers = {
        "memory": StdioServerConfig.model_validate(memory_server),
        "mem0ish": StdioServerConfig.model_validate(misbehaving_server()),
    }
    upstreams = UpstreamPool(servers, recorder)
    async with upstreams.run():
        yield upstreams
    recorder.close()


def kinds(effects: list[Any]) -> list[tuple[Any, ...]]:
    return [(e.kind, e.item_id, e.content_before, e.content_after, e.derived_from) for e in effects]


async def test_reference_server_as_a_memory_backend_reports_real_effects(pool: UpstreamPool) -> None:
    backend = pool.memory_backend("memory")
    assert isinstance(backend, MemoryBackend) and backend.name == "memory"
    said = Provenance(session="s1", turn="t1", role=Role.USER, principal="alice")
    first = await backend.add("alice", "Alice drinks green tea every morning", provenance=said)
    tea = observation_id("alice", "Alice drinks green tea every morning")
    assert first.value["id"] == tea and first.value["metadata"] == {"entity": "alice"}
    assert kinds(first.effects) == [
        (A, entity_id("alice"), None, "alice (speaker)", []),  # an entity per speaker, made on first use
        (A, tea, None, "Alice drinks green tea every morning", []),
    ]
    second = await backend.add("alice", "Alice moved to Bergen", metadata={"speaker": "alice"})
    again = await backend.add("alice", "Alice moved to Bergen")
    assert [e.kind for e in second.effects] == [A] and again.effects == []  # the server keeps one copy
    bob = await backend.add("alice", "Bob dislikes tea", metadata={"speaker": "bob"})
    assert [e.item_id for e in bob.effects] == [entity_id("bob"), observation_id("bob", "Bob dislikes tea")]

    found = await backend.search("alice", "Which green tea?", limit=5)
    results = [(r["content"], r["rank"]) for r in found.value["results"]]
    assert results == [("Alice drinks green tea every morning", 1), ("Bob dislikes tea", 2)]
    assert [(e.kind, e.item_id, e.rank) for e in found.effects] == [
        (R, tea, 1), (R, observation_id("bob", "Bob dislikes tea"), 2),
    ]  # fmt: skip
    assert found.effects[0].score is not None and found.effects[0].score > found.effects[1].score  # type: ignore[operator]

    bergen = observation_id("alice", "Alice moved to Bergen")
    changed = await backend.update("alice", bergen, content="Alice moved to Oslo")
    oslo = observation_id("alice", "Alice moved to Oslo")
    assert kinds(changed.effects) == [
        (D, bergen, "Alice moved to Bergen", None, []),
        (U, oslo, "Alice moved to Bergen", "Alice moved to Oslo", [bergen]),
    ]
    assert (await backend.get("alice", oslo)).value["content"] == "Alice moved to Oslo"
    listed = await backend.list("alice")
    assert listed.value["total"] == 3
    gone = await backend.delete("alice", oslo)
    assert kinds(gone.effects) == [(D, oslo, "Alice moved to Oslo", None, [])]
    with pytest.raises(ItemNotFound):
        await backend.get("alice", oslo)


async def test_memory_service_over_the_upstream_records_each_call_with_its_effects(
    pool: UpstreamPool, db_path: Path
) -> None:
    assert pool.recorder is not None
    service = MemoryService(pool.memory_backend("memory"), pool.recorder)
    added = await service.call_tool(
        "memory_add",
        {"content": "Likes jazz", "session": "s", "turn": "1"},
        principal="carol",
        front_door="chat",
    )
    found = await service.call_tool("memory_search", {"query": "jazz"}, principal="carol", front_door="chat")
    assert not added.is_error and not found.is_error
    pool.recorder.flush()
    store = TraceStore(db_path)
    events = store.list_events()
    item = store.get_item(observation_id("carol", "Likes jazz"), backend="memory")
    store.close()
    assert [(e.tool, e.backend, [f.kind for f in e.effects]) for e in events] == [
        ("memory_add", "memory", [A, A]),
        ("memory_search", "memory", [R]),
    ]
    assert item is not None and item.provenance.turn == "1" and item.tags is not None
    assert item.tags.owner == "carol"


async def test_other_profiles_write_and_search_through_the_tools_their_schema_names(
    pool: UpstreamPool,
) -> None:
    backend = pool.memory_backend("mem0ish")  # add_memory + search_memories: the Mem0 profile
    written = await backend.add("dana", "Dana owns a red bike")
    found = await backend.search("dana", "red bike")
    assert written.effects == [] and found.effects == []  # no effects claimed that were not derived
    assert found.value["raw"] == {"results": [{"text": "Dana owns a red bike", "user_id": "dana"}]}
    with pytest.raises(BackendError, match="supports only add and search through memtap"):
        await backend.list("dana")


async def test_an_upstream_without_a_memory_profile_is_refused_clearly(
    tmp_path: Path, memory_server: dict[str, Any]
) -> None:
    config = StdioServerConfig.model_validate({**memory_server, "memtap": {"profile": "none"}})
    pool = UpstreamPool({"plain": config}, None)
    async with pool.run():
        with pytest.raises(BackendError, match="matches no profile that can write and search"):
            await UpstreamMemoryBackend(pool.get("plain")).add("x", "y")
