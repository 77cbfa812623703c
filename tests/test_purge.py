"""`memtap purge` against a database a real `memtap serve` wrote (and is still serving) through
the MCP front door: no byte of the purged content remains in the file, its WAL or its shared
memory; one receipt per item; other namespaces untouched and still searchable."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import ServerProcess, http_client

from memtap.trace.store import TraceStore

StartServer = Callable[..., ServerProcess]
MARKER = "ZEBRAFINCH-4417"


def _files(db: Path) -> dict[str, bytes]:
    """The database file, its -wal and -shm (and anything else named after it), as on disk."""
    return {p.name: p.read_bytes() for p in sorted(db.parent.glob(db.name + "*"))}


def _hits(db: Path, needle: str) -> dict[str, int]:
    found = {name: data.count(needle.encode()) for name, data in _files(db).items()}
    return {name: n for name, n in found.items() if n}


def _purge(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memtap", "purge", "--db", str(db), *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def _dump(db: Path) -> list[str]:
    conn = sqlite3.connect(db)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


async def _call(client: Any, tool: str, args: dict[str, Any], namespace: str) -> dict[str, Any]:
    from conftest import meta

    result = await client.call_tool(tool, args, meta=meta(namespace=namespace))
    assert not result.is_error, result
    return dict(result.structured_content)


async def _write_both(url: str) -> dict[str, list[str]]:
    ids: dict[str, list[str]] = {"alice": [], "bob": []}
    async with http_client(url) as client:
        for i in range(3):
            added = await _call(client, "memory_add", {
                "content": f"{MARKER} note {i}: alice keeps her spare key under the blue pot",
                "metadata": {"tag": f"{MARKER}-meta-{i}"},
            }, "alice")  # fmt: skip
            ids["alice"].append(added["id"])
        added = await _call(client, "memory_add", {"content": "bob likes sailing on Tuesdays"}, "bob")
        ids["bob"].append(added["id"])
        found = await _call(
            client, "memory_search", {"query": f"{MARKER} spare key", "requester": "alice"}, "alice"
        )
        assert len(found["results"]) == 3 and MARKER in found["results"][0]["content"]
        await _call(client, "memory_update", {
            "id": ids["alice"][0], "content": f"{MARKER} moved: the key is now with the neighbour",
        }, "alice")  # fmt: skip
        await _call(client, "memory_get", {"id": ids["alice"][1]}, "alice")
    return ids


@pytest.mark.anyio
async def test_purge_of_a_namespace_leaves_no_byte_of_it_in_the_database_files(
    start_http_server: StartServer, db_path: Path
) -> None:
    server = start_http_server("--durable")  # every acknowledged call is committed
    ids = await _write_both(server.url)
    assert _hits(db_path, MARKER)  # it is there before

    purged = _purge(db_path, "--namespace", "alice", "--by", "dpo@example", "--json")
    assert purged.returncode == 0, purged.stderr
    report = json.loads(purged.stdout)
    assert sorted(i["item_id"] for i in report["items"]) == sorted(ids["alice"])
    assert report["checkpoint"] == "truncated"
    assert report["tables"]["builtin_memory"] == 4  # three adds and one update: every version
    assert report["tables"]["purge_receipts"] == 3

    # The server still serves from the same file: alice's index is rebuilt (empty), bob's works.
    async with http_client(server.url) as client:
        gone = await _call(client, "memory_search", {"query": "spare key", "requester": "alice"}, "alice")
        assert gone["results"] == []
        kept = await _call(client, "memory_search", {"query": "sailing", "requester": "bob"}, "bob")
        assert [r["id"] for r in kept["results"]] == ids["bob"]
    assert _hits(db_path, MARKER) == {}
    assert server.stop() == 0
    assert _hits(db_path, MARKER) == {}
    assert _hits(db_path, "blue pot") == {} and _hits(db_path, "neighbour") == {}

    store = TraceStore(db_path)
    try:
        rows = store.db.conn.execute(
            "SELECT item_id, namespace, versions, contents, purged_by, scope FROM purge_receipts ORDER BY item_id"
        ).fetchall()
        bob = store.list_items(namespace="bob")
        alice_events = store.db.conn.execute(
            "SELECT count(*) FROM events WHERE namespace = 'alice'"
        ).fetchone()[0]
    finally:
        store.close()
    assert [r[0] for r in rows] == sorted(ids["alice"])
    assert {(r[1], r[4], r[5]) for r in rows} == {("alice", "dpo@example", "namespace:alice")}
    first = next(r for r in rows if r[0] == ids["alice"][0])
    contents = json.loads(first[3])
    original = f"{MARKER} note 0: alice keeps her spare key under the blue pot"
    assert contents[0] == {"version": 1, "sha256": hashlib.sha256(original.encode()).hexdigest(),
                           "bytes": len(original.encode())}  # fmt: skip
    assert first[2] == len(contents) >= 2  # both versions, and the metadata
    assert [i.content for i in bob] == ["bob likes sailing on Tuesdays"]
    assert alice_events >= 6  # the calls stay, as receipts: who did what, when


def test_purge_of_an_unknown_namespace_or_item_is_one_clear_error_and_changes_nothing(
    tmp_path: Path, db_path: Path
) -> None:
    seeded = subprocess.run(
        [sys.executable, "-m", "memtap", "demo", "--db", str(db_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert seeded.returncode == 0, seeded.stderr
    before = _dump(db_path)
    for args, message in (
        (["--namespace", "nobody"], "namespace 'nobody' has no items or calls in"),
        (["--item", "mem_nope", "--item", "mem_nada"], "no memory item 'mem_nada', 'mem_nope' in"),
        ([], "purge takes either --namespace or one or more --item"),
    ):
        refused = _purge(db_path, *args)
        assert refused.returncode == 2
        assert refused.stderr.startswith("memtap: error: ") and message in refused.stderr
        assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
    assert _dump(db_path) == before
    missing = _purge(tmp_path / "absent.db", "--namespace", "x")
    assert missing.returncode == 2 and "no memtap database at" in missing.stderr


@pytest.mark.anyio
async def test_purge_of_one_item_keeps_its_neighbours_and_a_dry_run_changes_nothing(
    start_http_server: StartServer, db_path: Path
) -> None:
    server = start_http_server("--durable")
    ids = await _write_both(server.url)
    assert server.stop() == 0
    before = _dump(db_path)
    dry = _purge(db_path, "--item", ids["alice"][2], "--dry-run")
    assert dry.returncode == 0 and "would purge items: 1 item(s)" in dry.stdout
    assert _dump(db_path) == before
    done = _purge(db_path, "--item", ids["alice"][2])
    assert done.returncode == 0, done.stderr
    assert "purged items: 1 item(s)" in done.stdout and "builtin_memory: 1 row(s) changed" in done.stdout
    assert _hits(db_path, "note 2:") == {} and _hits(db_path, f"{MARKER}-meta-2") == {}
    assert _hits(db_path, "note 1:")  # the neighbours are untouched
    store = TraceStore(db_path)
    try:
        kept = {i.item_id for i in store.list_items(namespace="alice")}
        [receipt] = store.db.conn.execute("SELECT item_id, scope FROM purge_receipts").fetchall()
    finally:
        store.close()
    assert receipt == (ids["alice"][2], "items")
    assert ids["alice"][1] in kept


@pytest.mark.anyio
async def test_a_hashed_namespace_keeps_receipts_and_no_bodies(
    start_http_server: StartServer, db_path: Path
) -> None:
    server = start_http_server(
        "--durable", "--content-policy", "vault-*=hashed", "--content-policy", "void=none"
    )
    secret = "The vault code is 88-PELICAN-31"
    async with http_client(server.url) as client:
        added = await _call(
            client, "memory_add", {"content": secret, "metadata": {"k": "PELICAN-meta"}}, "vault-a"
        )
        found = await _call(
            client, "memory_search", {"query": "PELICAN vault code", "requester": "vault-a"}, "vault-a"
        )
        await _call(client, "memory_add", {"content": "nothing to see PELICAN-void"}, "void")
        await _call(client, "memory_add", {"content": "plain PELICAN-full"}, "open")
    # The backend still holds the memory (it is the memory): the search found it.
    assert found["results"][0]["content"] == secret
    assert server.stop() == 0
    store = TraceStore(db_path)
    try:
        events = store.list_events()
        item = store.get_item(added["id"])
    finally:
        store.close()
    write, search, void, full = events
    digest = hashlib.sha256(secret.encode()).hexdigest()
    assert write.arguments["content"] == f"sha256:{digest};bytes={len(secret.encode())}"
    assert write.arguments["metadata"].startswith("sha256:")
    assert search.arguments["query"].startswith("sha256:") and search.context.namespace == "vault-a"
    assert search.effects[0].content_after == write.arguments["content"]
    assert search.effects[0].item_id == added["id"] and search.effects[0].rank is not None
    assert item is not None and item.content == write.arguments["content"]
    assert void.arguments["content"] == f"dropped;bytes={len(b'nothing to see PELICAN-void')}"
    assert full.arguments["content"] == "plain PELICAN-full"
    # No body byte of the hashed or dropped namespaces outside the backend's own table.
    conn = sqlite3.connect(db_path)
    try:
        conn.execute("DELETE FROM builtin_memory")
        conn.execute("INSERT INTO builtin_memory_fts (builtin_memory_fts) VALUES ('delete-all')")
        conn.commit()
        conn.execute("VACUUM")
    finally:
        conn.close()
    assert _hits(db_path, "88-PELICAN") == {} and _hits(db_path, "PELICAN-void") == {}
    assert _hits(db_path, "PELICAN-meta") == {}
    assert _hits(db_path, "PELICAN-full")


def test_content_policy_is_read_from_the_config_and_refused_when_unknown(tmp_path: Path) -> None:
    from memtap.config import ConfigFile
    from memtap.errors import ConfigError
    from memtap.proxy.runtime import Settings
    from memtap.trace.privacy import parse_policy_rules

    config = ConfigFile.model_validate({"memtap": {"content_policy": {"hr-*": "none", "*": "hashed"}}})
    privacy = Settings(db=tmp_path / "x.db", config=config, content_policy=[("hr-public", "full")]).privacy()
    assert [privacy.policy_for(ns) for ns in ("hr-public", "hr-x", "other")] == ["full", "none", "hashed"]
    with pytest.raises(ConfigError, match="unknown policy 'secret'; use full, hashed or none"):
        parse_policy_rules(["a=secret"])
    with pytest.raises(ValueError, match="content_policy"):
        ConfigFile.model_validate({"memtap": {"content_policy": {"a": "maybe"}}})


def test_purge_of_a_replayed_namespace_reaches_runs_and_the_spill_file(tmp_path: Path, db_path: Path) -> None:
    """A trace-only backend (what a wrapped server reports), replay answers, and a spill file."""
    from trace_builder import GYM_V0, GYM_V1, RunWriter

    w = RunWriter(db_path, "r", tmp_path / "suite.jsonl")
    w.start("upd", 3)
    w.add("upd", "s0", "m1", GYM_V0)
    w.update("upd", "s2", "m1", GYM_V1)
    w.probe("upd", "p0", ["m1"], {"answer": "CrossFit Central, per the memory: " + GYM_V1})
    w.finish("upd")
    w.close()
    namespace = w.ns("upd")
    spill = db_path.with_name(db_path.name + ".unwritten.jsonl")
    spill.write_text(json.dumps({"effects": [{"content_after": GYM_V1}], "namespace": namespace}) + "\n")
    findings = [  # this namespace's, another namespace's that quotes the item, and one about neither
        ("f1", namespace, f"changed from {GYM_V0!r}", json.dumps({"after": GYM_V1})),
        ("f2", "elsewhere", "read another namespace's item", json.dumps({"content": GYM_V0})),
        ("f3", "elsewhere", "unrelated", json.dumps({"content": "swims on Fridays"})),
    ]
    conn = sqlite3.connect(db_path)
    with conn:
        conn.executemany(
            "INSERT INTO findings (id, kind, severity, severity_rank, summary, event_id, namespace, event_ids,"
            " item_ids, evidence, detector_version, created_at, dedupe)"
            " VALUES (?, 'k', 'low', 1, ?, 'e', ?, '[]', '[]', ?, '1', '2026-01-01', ?)",
            [(i, summary, ns, evidence, i) for i, ns, summary, evidence in findings],
        )
    conn.close()

    done = _purge(db_path, "--namespace", namespace, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [(i["backend"], i["item_id"], i["versions"]) for i in report["items"]] == [("hand", "m1", 2)]
    assert report["tables"]["run_probes"] == 1 and report["tables"]["item_versions"] == 2
    assert report["tables"]["findings"] == 2
    conn = sqlite3.connect(db_path)
    try:
        texts = [
            str(v)
            for table in (
                "events",
                "effects",
                "items",
                "item_versions",
                "run_probes",
                "purge_receipts",
                "findings",
            )
            for row in conn.execute(f"SELECT * FROM {table}")
            for v in row
        ]
        answer = conn.execute("SELECT answer FROM run_probes").fetchone()[0]
        unrelated = conn.execute("SELECT summary, evidence FROM findings WHERE id = 'f3'").fetchone()
    finally:
        conn.close()
    assert not any(GYM_V0 in t or GYM_V1 in t or "CrossFit" in t for t in texts)
    assert answer.startswith("purged;sha256:")
    assert unrelated == findings[2][2:]
    again = _purge(db_path, "--namespace", namespace, "--json")  # nothing left to purge: receipts stay
    assert again.returncode == 0, again.stderr
    assert "run_probes" not in json.loads(again.stdout)["tables"]
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("SELECT answer FROM run_probes").fetchone()[0] == answer
    finally:
        conn.close()
    assert GYM_V1 not in spill.read_text() and "purged;sha256:" in spill.read_text()
