"""mem0 (the real mem0ai library) as memtap's backend: its extraction, dedup and storage paths
run against a scripted local model (``mem0-extract`` in fake_openai) and a hashing embedder."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ServerProcess, http_client, meta

from memtap.adapters.mem0_backend import Mem0Backend, mem0_config
from memtap.errors import BackendError, ConfigError, ItemNotFound
from memtap.trace.models import EffectKind, Op
from memtap.trace.store import TraceStore

pytestmark = pytest.mark.anyio
A, U, D = EffectKind.ADD, EffectKind.UPDATE, EffectKind.DELETE


def mem0_settings(upstream: Any, data_dir: Path) -> dict[str, Any]:
    """mem0's own config: a local qdrant, the scripted model, the hashing embedder."""
    return {
        "vector_store": {
            "provider": "qdrant",
            "config": {
                "path": str(data_dir / "qdrant"),
                "collection_name": "memtap",
                "embedding_model_dims": 64,
            },
        },
        "llm": {"provider": "openai", "config": {"model": "extractor"}},  # a model_list alias
        "embedder": {
            "provider": "openai",
            "config": {
                "model": "hash-bow",
                "openai_base_url": upstream.base_url,
                "api_key": "sk-local",
                "embedding_dims": 64,
            },
        },
        "history_db_path": str(data_dir / "history.db"),
    }


def model_list(upstream: Any) -> list[dict[str, Any]]:
    params = {"model": "openai/mem0-extract", "api_base": upstream.base_url, "api_key": "sk-local"}
    return [{"model_name": "extractor", "litellm_params": params}]


def open_mem0(upstream: Any, data_dir: Path, *, infer: bool = True, **overrides: Any) -> Mem0Backend:
    models = {"extractor": model_list(upstream)[0]["litellm_params"]}
    return Mem0Backend(
        mem0_config({**mem0_settings(upstream, data_dir), **overrides}, models, data_dir), infer=infer
    )


def effects_of(event: Any) -> list[tuple[Any, ...]]:
    return [(e.kind, e.item_id, e.content_before, e.content_after) for e in event.effects]


async def test_mem0_through_the_mcp_front_door_records_each_fact_skip_update_and_delete(
    start_http_server: Any, upstream: Any, tmp_path: Path
) -> None:
    data = tmp_path / "mem0"
    config = tmp_path / "memtap.json"
    config.write_text(json.dumps({
        "model_list": model_list(upstream),
        "memtap": {"backend": "mem0", "mem0": mem0_settings(upstream, data)},
    }))  # fmt: skip
    server: ServerProcess = start_http_server("--config", str(config))
    headers = {"X-Memtap-Namespace": "alice", "X-Memtap-Run": "r1", "X-Memtap-Session": "s1"}
    async with http_client(server.url, headers) as client:
        first = await client.call_tool(
            "memory_add",
            {"content": "Alice lives in Paris. Alice works at Acme; Alice likes tea"},
            meta=meta(turn="t1"),
        )
        second = await client.call_tool(
            "memory_add", {"content": "Alice likes tea. Alice owns a cat"}, meta=meta(turn="t2")
        )
        correction = await client.call_tool(
            "memory_add", {"content": "Alice lives in Berlin"}, meta=meta(turn="t3")
        )
        assert first.structured_content is not None and second.structured_content is not None
        ids = {r["memory"]: r["id"] for r in first.structured_content["results"]}
        ids.update({r["memory"]: r["id"] for r in second.structured_content["results"]})
        assert correction.structured_content is not None
        berlin = correction.structured_content["results"][0]["id"]
        found = await client.call_tool("memory_search", {"query": "who lives in which city", "limit": 2})
        paris, cat = ids["Alice lives in Paris"], ids["Alice owns a cat"]
        updated = await client.call_tool(
            "memory_update", {"id": paris, "content": "Alice lived in Paris until 2026"}, meta=meta(turn="t4")
        )
        deleted = await client.call_tool("memory_delete", {"id": cat}, meta=meta(turn="t5"))
        garbled = await client.call_tool("memory_add", {"content": "[unparseable] hm"}, meta=meta(turn="t6"))
    assert not updated.is_error and not deleted.is_error

    # the add mem0 split into three facts; the second add's repeated fact skipped, and why
    assert list(ids) == ["Alice lives in Paris", "Alice works at Acme", "Alice likes tea", "Alice owns a cat"]
    assert second.structured_content["extracted"] == ["Alice likes tea", "Alice owns a cat"]
    assert second.structured_content["skipped"] == [
        {
            "text": "Alice likes tea",
            "reason": "already stored (same md5 hash)",
            "duplicate_of": ids["Alice likes tea"],
        }
    ]
    # a corrected value leaves both the old and the new memory live (stale coexistence)
    assert found.structured_content is not None
    assert {r["id"] for r in found.structured_content["results"]} == {paris, berlin}
    assert garbled.is_error
    assert "mem0 could not parse the LLM's fact extraction" in garbled.content[0].text  # type: ignore[union-attr]

    server.stop()
    store = TraceStore(server.db)
    events = store.list_events()
    items = {item.item_id: item for item in store.list_items(include_closed=True)}
    store.close()
    writes = [e for e in events if e.op != Op.RETRIEVE]
    assert [e.backend for e in writes] == ["mem0"] * 6
    assert effects_of(writes[0]) == [
        (A, ids["Alice lives in Paris"], None, "Alice lives in Paris"),
        (A, ids["Alice works at Acme"], None, "Alice works at Acme"),
        (A, ids["Alice likes tea"], None, "Alice likes tea"),
    ]
    assert effects_of(writes[1]) == [(A, cat, None, "Alice owns a cat")]
    assert effects_of(writes[2]) == [(A, berlin, None, "Alice lives in Berlin")]
    assert effects_of(writes[3]) == [(U, paris, "Alice lives in Paris", "Alice lived in Paris until 2026")]
    assert effects_of(writes[4]) == [(D, cat, "Alice owns a cat", None)]
    assert (writes[5].status, writes[5].effects) == ("error", [])
    assert writes[5].error is not None and "reply began 'Sure! The facts" in writes[5].error
    # lineage: each fact's item carries the turn it came from; the update and delete are versions
    assert [items[ids[fact]].provenance.turn for fact in ids] == ["t1", "t1", "t1", "t2"]
    assert items[paris].content == "Alice lived in Paris until 2026" and items[paris].is_valid
    assert not items[cat].is_valid and items[berlin].is_valid

    # the same, as mem0's own history tells it
    backend = open_mem0(upstream, data)
    try:
        history = {
            key: await backend.run(lambda k=key: backend.memory.history(k)) for key in (paris, cat, berlin)
        }
        mem0_provenance = await backend.run(lambda: backend.memory.get(berlin))
    finally:
        await backend.close()
    assert [(h["event"], h["old_memory"], h["new_memory"]) for h in history[paris]] == [
        ("ADD", None, "Alice lives in Paris"), ("UPDATE", "Alice lives in Paris", "Alice lived in Paris until 2026"),
    ]  # fmt: skip
    assert [(h["event"], h["old_memory"], h["new_memory"]) for h in history[cat]] == [
        ("ADD", None, "Alice owns a cat"), ("DELETE", "Alice owns a cat", None),
    ]  # fmt: skip
    assert [h["event"] for h in history[berlin]] == ["ADD"]
    assert mem0_provenance["metadata"]["memtap"]["provenance"]["turn"] == "t3"


async def test_infer_false_stores_the_message_as_one_memory_without_asking_the_model(
    upstream: Any, tmp_path: Path
) -> None:
    backend = open_mem0(upstream, tmp_path / "mem0", infer=False)
    try:
        added = await backend.add("bob", "Bob likes tea. Bob owns a dog")
        again = await backend.add("bob", "Bob likes tea. Bob owns a dog")
        listed = await backend.list("bob")
        history = await backend.history("bob", added.effects[0].item_id)
        with pytest.raises(ItemNotFound):
            await backend.get("alice", added.effects[0].item_id)  # another namespace's memory
        with pytest.raises(ItemNotFound):
            await backend.delete("bob", "mem_not_a_mem0_id")
    finally:
        await backend.close()
    assert [(e.kind, e.content_after) for e in added.effects] == [(A, "Bob likes tea. Bob owns a dog")]
    assert len(again.effects) == 1  # without inference mem0 does not deduplicate
    assert listed.value["total"] == 2
    assert [v["content"] for v in history.value["versions"]] == ["Bob likes tea. Bob owns a dog"]
    assert not [r for r in upstream.state.received if "messages" in r]


async def test_a_config_mem0_rejects_names_the_key(upstream: Any, tmp_path: Path) -> None:
    bad = {"provider": "qdrant", "config": {"path": str(tmp_path / "q"), "colection_name": "typo"}}
    with pytest.raises(ConfigError) as raised:
        open_mem0(upstream, tmp_path, vector_store=bad)
    message = str(raised.value)
    assert message.startswith("mem0 rejected its config: memtap.mem0.vector_store:")
    assert "colection_name" in message


def test_memtap_serve_with_a_rejected_mem0_config_exits_with_one_line(upstream: Any, tmp_path: Path) -> None:
    config = tmp_path / "memtap.json"
    settings = {"vector_store": {"provider": "nowhere-db", "config": {}}}
    config.write_text(json.dumps({"memtap": {"backend": "mem0", "mem0": settings}}))
    done = subprocess.run(
        [sys.executable, "-m", "memtap", "serve", "--db", str(tmp_path / "t.db"), "--config", str(config)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, env={**os.environ},
    )  # fmt: skip
    assert done.returncode == 2
    assert "memtap.mem0.vector_store" in done.stderr and "nowhere-db" in done.stderr
    assert "Traceback" not in done.stderr


async def test_an_unparseable_extraction_fails_the_add_and_stores_nothing(
    upstream: Any, tmp_path: Path
) -> None:
    backend = open_mem0(upstream, tmp_path / "mem0")
    try:
        with pytest.raises(BackendError, match="could not parse the LLM's fact extraction"):
            await backend.add("carol", "Carol likes jazz [unparseable]")
        listed = await backend.list("carol")
    finally:
        await backend.close()
    assert listed.value["total"] == 0


def test_a_suite_replays_through_mem0_with_every_stored_fact_attributed_to_its_turn(
    upstream: Any, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from memtap.cli.main import cli
    from memtap.probes.generators import generate
    from memtap.probes.suitefile import write_suite

    episodes = generate("paradigms", seed=3, episodes=1)
    write_suite(episodes, tmp_path / "suite.jsonl")
    config = tmp_path / "mem0.json"
    config.write_text(json.dumps({
        "model_list": model_list(upstream),
        "memtap": {"backend": "mem0", "mem0": mem0_settings(upstream, tmp_path / "mem0")},
    }))  # fmt: skip
    db = tmp_path / "trace.db"
    runner = CliRunner()
    replayed = runner.invoke(cli, ["replay", str(tmp_path / "suite.jsonl"), "--target", f"mem0:{config}",
                                   "--db", str(db), "--run", "m0", "--json"], catch_exceptions=False)  # fmt: skip
    assert replayed.exit_code == 0, replayed.output
    summary = json.loads(replayed.output)
    assert (summary["status"], summary["episodes_done"], summary["target"]["target"]) == (
        "completed",
        1,
        "mem0",
    )
    assert summary["memory_events_without_context"] == 0
    store = TraceStore(db)
    events = [e for e in store.list_events() if e.context.run == "m0" and e.op == Op.WRITE]
    store.close()
    turns = [t for e in episodes for s in e.sessions for t in s.turns if t.content.strip()]
    assert len(events) == len(turns)
    assert all(e.backend == "mem0" and e.context.turn for e in events)
    for event in events:  # each extracted fact is stored (one effect) or skipped, with why
        assert len(event.effects) + len(event.result["skipped"]) == len(event.result["extracted"])
    assert max(len(e.effects) for e in events) > 1  # mem0 split a turn into facts
    scored = runner.invoke(cli, ["score", "m0", "--db", str(db), "--json"], catch_exceptions=False)
    assert scored.exit_code == 0, scored.output
    measures = json.loads(scored.output)["measures"]
    assert measures["capture_recall"]["value"] is not None  # storage level
    assert measures["recall_at_all"]["value"] is not None  # retrieval level


async def test_a_vector_store_another_backend_holds_is_refused_with_qdrant_s_reason(
    upstream: Any, tmp_path: Path
) -> None:
    first = open_mem0(upstream, tmp_path / "mem0")
    try:
        with pytest.raises(ConfigError, match=r"mem0 could not start with memtap.mem0: .*already accessed"):
            open_mem0(upstream, tmp_path / "mem0")
    finally:
        await first.close()


async def test_an_add_whose_every_fact_is_already_stored_is_a_call_with_no_effect(
    upstream: Any, tmp_path: Path
) -> None:
    backend = open_mem0(upstream, tmp_path / "mem0")
    try:
        first = await backend.add("dan", "Dan plays jazz piano")
        again = await backend.add("dan", "Dan plays jazz piano")
        listed = await backend.list("dan")
    finally:
        await backend.close()
    [stored] = first.effects
    assert again.effects == [] and again.value["results"] == []
    assert again.value["skipped"] == [
        {
            "text": "Dan plays jazz piano",
            "reason": "already stored (same md5 hash)",
            "duplicate_of": stored.item_id,
        }
    ]
    assert listed.value["total"] == 1


@pytest.mark.parametrize("spec", ["mem0", "mem0:"])
def test_a_mem0_target_without_a_config_says_it_needs_one(spec: str, tmp_path: Path) -> None:
    from memtap.probes.targets.mem0 import Mem0Target

    with pytest.raises(ConfigError, match=r"^--target mem0:CONFIG needs a memtap config file"):
        Mem0Target(spec, tmp_path / "t.db")
