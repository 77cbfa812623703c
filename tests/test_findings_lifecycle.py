"""Lifecycle detectors on live traffic through `memtap proxy` over a deliberately faulty memory
server (tests/upstreams/faulty_memory.py), and the same script over its correct mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import http_client, meta
from findings_helpers import faulty_server, serve_proxy, settled_findings

from memtap.adapters.memory_server import observation_id
from memtap.findings.model import Severity
from memtap.trace.store import TraceStore

pytestmark = pytest.mark.anyio

TEA, OSLO = observation_id("alice", "likes tea"), observation_id("alice", "lives in Oslo")
ALICE = {
    "entities": [{"name": "alice", "entityType": "person", "observations": ["likes tea", "lives in Oslo"]}]
}


def _add(*texts: str) -> dict[str, Any]:
    return {"observations": [{"entityName": "alice", "contents": list(texts)}]}


def _delete(*texts: str) -> dict[str, Any]:
    return {"deletions": [{"entityName": "alice", "observations": list(texts)}]}


async def _play(db: Path, fault: str, script: list[tuple[str, str, dict[str, Any]]]) -> Any:
    served = serve_proxy(db, {"memory": faulty_server(fault)})
    try:
        async with http_client(
            f"http://127.0.0.1:{served.port}/mcp", {"X-Memtap-Namespace": "alice"}
        ) as client:
            for turn, tool, arguments in script:
                await client.call_tool(tool, arguments, meta=meta(session="s1", turn=turn, role="user"))
        return settled_findings(served)
    finally:
        served.stop()


def _flagged(found: list[Any]) -> list[tuple[str, str, list[str]]]:
    return sorted((f.kind, f.severity.label, f.item_ids) for f in found if f.severity > Severity.INFO)


OVERWRITE_SCRIPT = [("t1", "create_entities", ALICE), ("t2", "add_observations", _add("works at Acme"))]


async def test_a_backend_that_overwrites_on_every_new_value_is_flagged_for_erasure(db_path: Path) -> None:
    found = await _play(db_path, "overwrite", OVERWRITE_SCRIPT)
    assert _flagged(found) == [("erasure", "high", [TEA]), ("erasure", "high", [OSLO])]
    oslo = next(f for f in found if f.item_ids == [OSLO])
    assert oslo.evidence == {
        "removed": "delete",
        "content_before": "lives in Oslo",
        "content_after": None,
        "lost_facts": ["oslo"],
        "requested_by_call": False,
        "user_turns_known": 0,
    }
    assert (oslo.namespace, oslo.session, oslo.turn) == ("alice", "s1", "t2")


async def test_the_correct_backend_adding_a_value_has_no_findings(db_path: Path) -> None:
    assert await _play(db_path, "", OVERWRITE_SCRIPT) == []


DELETE_SCRIPT = [("t1", "create_entities", ALICE), ("t2", "delete_observations", _delete("lives in Oslo"))]


WORK = "Lives in Oslo. Works at Acme since 2019."
MERGED = "Lives in Oslo. Took up pottery."
LOSSY_SCRIPT = [
    (
        "t1",
        "create_entities",
        {"entities": [{"name": "alice", "entityType": "person", "observations": [WORK]}]},
    ),
    ("t2", "add_observations", _add("Took up pottery.")),
]


async def test_a_backend_whose_merge_loses_detail_records_an_update_flagged_as_destructive(
    db_path: Path,
) -> None:
    found = await _play(db_path, "lossy_update", LOSSY_SCRIPT)
    work, merged = observation_id("alice", WORK), observation_id("alice", MERGED)
    # The server rewrote the observation it held into its gist plus the new one: one update.
    store = TraceStore(db_path)
    try:
        (add,) = [e for e in store.list_events() if e.tool == "add_observations"]
    finally:
        store.close()
    assert [
        (e.kind.value, e.item_id, e.content_before, e.content_after, e.derived_from) for e in add.effects
    ] == [
        ("delete", work, WORK, None, []),
        ("update", merged, WORK, MERGED, [work]),
    ]
    assert _flagged(found) == [("destructive_update", "medium", [merged]), ("erasure", "high", [merged])]
    destructive = next(f for f in found if f.kind == "destructive_update")
    assert destructive.evidence == {
        "content_before": WORK,
        "content_after": MERGED,
        "dropped_facts": ["2019", "acme", "works"],
        "new_facts": ["took"],
    }
    assert destructive.summary == f"{merged}: update dropped 2019, acme, works"
    erasure = next(f for f in found if f.kind == "erasure")
    assert (erasure.evidence["removed"], erasure.evidence["lost_facts"]) == (
        "update",
        ["2019", "acme", "works"],
    )


async def test_the_correct_backend_adding_to_an_entity_rewrites_nothing(db_path: Path) -> None:
    assert await _play(db_path, "", LOSSY_SCRIPT) == []


async def test_a_backend_that_deletes_more_than_asked_is_flagged_and_the_asked_delete_is_not_judged(
    db_path: Path,
) -> None:
    found = await _play(db_path, "wrong_delete", DELETE_SCRIPT)
    assert _flagged(found) == [("erasure", "high", [TEA])]
    tea = next(f for f in found if f.severity == Severity.HIGH)
    assert tea.evidence["requested_by_call"] is False and tea.evidence["lost_facts"] == ["tea"]
    # The delete the call asked for cannot be judged without the user's turn: said, not guessed.
    (unjudged,) = [f for f in found if f.severity == Severity.INFO]
    assert unjudged.item_ids == [OSLO] and unjudged.evidence["judged"] is False


async def test_the_correct_backend_deleting_what_was_asked_raises_nothing_above_info(db_path: Path) -> None:
    found = await _play(db_path, "", DELETE_SCRIPT)
    assert _flagged(found) == []


READD_SCRIPT = [("t1", "create_entities", ALICE), ("t2", "add_observations", _add("likes tea"))]


async def test_a_backend_whose_readd_deletes_the_memory_is_flagged(db_path: Path) -> None:
    found = await _play(db_path, "readd", READD_SCRIPT)
    (readd,) = [f for f in found if f.kind == "readd_deletes"]
    assert (readd.severity, readd.item_ids) == (Severity.HIGH, [TEA])
    assert readd.evidence["deleted_content"] == "likes tea"
    assert readd.evidence["content_survives"] is False


async def test_the_correct_backend_ignores_a_readd_without_findings(db_path: Path) -> None:
    assert await _play(db_path, "", READD_SCRIPT) == []


REPLACE_SCRIPT = [
    ("t1", "create_entities", ALICE),
    ("t2", "delete_observations", _delete("lives in Oslo")),
    ("t2", "add_observations", _add("lives in Bergen")),
]


async def test_an_update_made_of_a_delete_and_a_failing_add_is_lost_on_failure(db_path: Path) -> None:
    found = await _play(db_path, "fail_add", REPLACE_SCRIPT)
    (lost,) = [f for f in found if f.kind == "lost_on_failure"]
    assert (lost.severity, lost.item_ids, lost.turn) == (Severity.HIGH, [OSLO], "t2")
    assert lost.evidence == {
        "removed_content": "lives in Oslo",
        "lost_facts": ["oslo"],
        "error": "upstream tool error: storage unavailable",
    }
    assert len(lost.event_ids) == 2


async def test_the_correct_backend_replacing_a_value_loses_nothing(db_path: Path) -> None:
    found = await _play(db_path, "", REPLACE_SCRIPT)
    assert _flagged(found) == []


OFFICE = "Our office address is 88 King Road."
MOVED = "That has changed. Our office address is 12 Harbour Street."
CORRECTION_SCRIPT = [
    (
        "t1",
        "create_entities",
        {"entities": [{"name": "alice", "entityType": "person", "observations": [OFFICE]}]},
    ),
    ("t2", "add_observations", _add(MOVED)),
]


async def test_a_summarising_backend_that_merges_a_correction_into_the_old_value_is_flagged_stale(
    db_path: Path,
) -> None:
    found = await _play(db_path, "lossy_update", CORRECTION_SCRIPT)
    merged = observation_id("alice", f"{OFFICE} {MOVED}")
    stale = [f for f in found if f.kind == "stale_coexistence"]
    assert [(f.severity.label, f.item_ids) for f in stale] == [("medium", [merged])]
    assert stale[0].evidence == {
        "old_values": ["88 king road"],
        "new_value": "12 harbour street",
        "subject": "our office address is",
        "stale_content": f"{OFFICE} {MOVED}",
        "correction": f"{OFFICE} {MOVED}",
    }
    assert stale[0].summary == (
        f"{merged} states 'our office address is' as '88 king road' and as '12 harbour street'"
    )


async def test_an_agent_that_replaces_the_corrected_value_on_the_correct_backend_leaves_nothing_stale(
    db_path: Path,
) -> None:
    script = [CORRECTION_SCRIPT[0], ("t2", "delete_observations", _delete(OFFICE)), CORRECTION_SCRIPT[1]]
    found = await _play(db_path, "", script)
    assert [f for f in found if f.kind == "stale_coexistence"] == []
    # Without the delete, the old observation is the stale one (another item), never the new one.
    found = await _play(db_path.with_name("kept.db"), "", CORRECTION_SCRIPT)
    stale = [f for f in found if f.kind == "stale_coexistence"]
    assert [f.item_ids for f in stale] == [[observation_id("alice", OFFICE), observation_id("alice", MOVED)]]
