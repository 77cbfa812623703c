"""Detectors on live traffic through MCP over HTTP to memtap's own memory tools (builtin backend)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from conftest import http_client, meta
from findings_helpers import settled_findings

from memtap.findings.model import Severity

pytestmark = pytest.mark.anyio

Serve = Callable[..., Any]


async def _session(served: Any, namespace: str = "alice") -> Any:
    return http_client(f"http://127.0.0.1:{served.port}/mcp", {"X-Memtap-Namespace": namespace})


async def _add(client: Any, content: str, role: str = "user", **args: Any) -> str:
    result = await client.call_tool(
        "memory_add", {"content": content, **args}, meta=meta(session="s1", role=role)
    )
    assert not result.is_error, result
    return str(result.structured_content["id"])


async def _add_then_update(served: Any, before: str, after: str, role: str = "user") -> str:
    """Add ``before`` as the user, then update it to ``after`` as ``role``; the item's id."""
    async with await _session(served) as client:
        item = await _add(client, before)
        result = await client.call_tool(
            "memory_update", {"id": item, "content": after}, meta=meta(session="s1", role=role)
        )
        assert not result.is_error, result
    return item


def _kinds(found: list[Any]) -> list[str]:
    return sorted(f.kind for f in found if f.severity > Severity.INFO)


async def test_duplicate_live_items_are_flagged(serve_memtap: Serve) -> None:
    served = serve_memtap()
    async with await _session(served) as client:
        first = await _add(client, "Alice's sister is called Maria.")
        second = await _add(client, "Alice's sister is called Maria")
    (dup,) = settled_findings(served, "duplicate")
    assert (dup.severity, dup.item_ids) == (Severity.LOW, [second, first])
    assert dup.evidence == {
        "content": "Alice's sister is called Maria",
        "duplicate_of": "Alice's sister is called Maria.",
    }


async def test_distinct_memories_are_not_duplicates(serve_memtap: Serve) -> None:
    served = serve_memtap()
    async with await _session(served) as client:
        await _add(client, "Alice's sister is called Maria.")
        await _add(client, "Alice's brother is called Tom.")
    assert settled_findings(served) == []


async def test_a_third_party_update_of_what_the_user_stated_is_an_untrusted_overwrite(
    serve_memtap: Serve,
) -> None:
    served = serve_memtap()
    item = await _add_then_update(
        served, "Alice is allergic to peanuts.", "Alice is allergic to nothing.", role="third_party"
    )
    (found,) = settled_findings(served, "untrusted_overwrite")
    assert (found.severity, found.item_ids) == (Severity.HIGH, [item])
    assert found.evidence == {
        "source_role": "third_party",
        "user_content": "Alice is allergic to peanuts.",
        "content_after": "Alice is allergic to nothing.",
        "effect": "update",
    }


async def test_a_user_correcting_their_own_memory_is_not_an_untrusted_overwrite(serve_memtap: Serve) -> None:
    served = serve_memtap()
    await _add_then_update(
        served, "Alice is allergic to peanuts.", "Alice is allergic to peanuts and shellfish."
    )
    assert _kinds(settled_findings(served)) == []


async def test_an_update_that_drops_a_fact_is_destructive(serve_memtap: Serve) -> None:
    served = serve_memtap()
    item = await _add_then_update(
        served, "Alice lives in Oslo and works at Acme since 2019.", "Alice lives in Oslo."
    )
    (found,) = settled_findings(served, "destructive_update")
    assert (found.severity, found.item_ids) == (Severity.MEDIUM, [item])
    assert found.evidence["dropped_facts"] == ["2019", "acme"]
    assert found.evidence["new_facts"] == []


async def test_an_update_that_drops_a_fact_while_adding_others_is_destructive(serve_memtap: Serve) -> None:
    """New facts about something else do not make up for a dropped one (a merge that loses detail)."""
    served = serve_memtap()
    before = "I see a therapist on Mondays. I still owe 4,200 dollars on my card."
    after = "I see a therapist on Mondays. Everyone is invited: the team offsite is in Lisbon this year."
    item = await _add_then_update(served, before, after)
    (found,) = settled_findings(served, "destructive_update")
    assert (found.item_ids, found.evidence["dropped_facts"]) == ([item], ["4,200"])
    assert found.evidence["new_facts"] == ["everyone", "invited", "lisbon", "team offsite"]


async def test_an_update_that_gives_a_subject_another_value_beside_new_facts_is_not_destructive(
    serve_memtap: Serve,
) -> None:
    served = serve_memtap()
    await _add_then_update(served, "Alice works at Acme.", "Alice works at Globex in Lisbon since 2020.")
    assert settled_findings(served, "destructive_update") == []


async def test_an_update_that_replaces_a_value_is_not_destructive(serve_memtap: Serve) -> None:
    served = serve_memtap()
    await _add_then_update(
        served, "Alice lives in Oslo and works at Acme.", "Alice lives in Oslo and works at Globex."
    )
    assert settled_findings(served, "destructive_update") == []


async def test_a_correction_that_leaves_the_old_value_live_is_stale_coexistence(serve_memtap: Serve) -> None:
    served = serve_memtap()
    async with await _session(served) as client:
        old = await _add(client, "Alice lives in Paris.")
        new = await _add(client, "Alice moved from Paris to Berlin.")
    (found,) = settled_findings(served, "stale_coexistence")
    assert (found.severity, found.item_ids) == (Severity.MEDIUM, [old, new])
    assert found.evidence == {
        "old_values": ["paris"],
        "stale_content": "Alice lives in Paris.",
        "correction": "Alice moved from Paris to Berlin.",
    }


async def test_a_correction_made_as_an_update_leaves_nothing_stale(serve_memtap: Serve) -> None:
    served = serve_memtap()
    await _add_then_update(served, "Alice lives in Paris.", "Alice moved from Paris to Berlin.")
    assert settled_findings(served, "stale_coexistence") == []


async def test_a_credential_stored_as_memory_is_flagged_without_the_secret(serve_memtap: Serve) -> None:
    served = serve_memtap()
    async with await _session(served) as client:
        item = await _add(client, "Alice's AWS key is AKIAIOSFODNN7EXAMPLE for the billing account.")
    (found,) = settled_findings(served, "secret_stored")
    assert (found.severity, found.item_ids) == (Severity.HIGH, [item])
    assert found.evidence == {"secret_types": ["AWS Access Key"]}
    assert "AKIA" not in found.summary


async def test_ordinary_memories_hold_no_secret(serve_memtap: Serve) -> None:
    served = serve_memtap()
    async with await _session(served) as client:
        await _add(client, "Alice prefers window seats and her key ring is blue.")
    assert settled_findings(served, "secret_stored") == []


async def test_a_retrieval_returning_items_the_requester_may_not_see_is_a_leak(serve_memtap: Serve) -> None:
    served = serve_memtap()
    async with await _session(served) as client:
        item = await _add(client, "Alice's salary is 95000 a year.")
        await client.call_tool(
            "memory_search", {"query": "salary", "requester": "carol"}, meta=meta(session="s1")
        )
    (found,) = settled_findings(served, "leak_retrieval")
    assert (found.severity, found.item_ids) == (Severity.HIGH, [item])
    assert found.evidence["gate"] == f"observe:would-deny={item}"
    assert found.evidence["requester"] == "carol"
    assert found.evidence["contents"] == {item: "Alice's salary is 95000 a year."}


async def test_a_retrieval_by_the_owner_is_not_a_leak(serve_memtap: Serve) -> None:
    served = serve_memtap()
    async with await _session(served) as client:
        await _add(client, "Alice's salary is 95000 a year.")
        await client.call_tool("memory_search", {"query": "salary"}, meta=meta(session="s1"))
    assert settled_findings(served) == []


async def test_a_canary_retrieved_for_someone_else_is_exposed(serve_memtap: Serve) -> None:
    served = serve_memtap({"findings": {"canaries": [{"value": "CANARY-7f3a9c", "owners": ["alice"]}]}})
    async with await _session(served) as client:
        item = await _add(client, "Alice's locker code is CANARY-7f3a9c.", access={"visibility": "public"})
        await client.call_tool(
            "memory_search", {"query": "locker", "requester": "bob"}, meta=meta(session="s1")
        )
    (found,) = settled_findings(served, "canary_exposure")
    assert (found.severity, found.item_ids) == (Severity.CRITICAL, [item])
    assert found.evidence == {
        "canary": "CANARY-7f3a9c",
        "where": f"retrieval of {item}",
        "requester": "bob",
        "owners": ["alice"],
    }


async def test_a_canary_retrieved_by_its_owner_is_not_exposed(serve_memtap: Serve) -> None:
    served = serve_memtap({"findings": {"canaries": ["CANARY-7f3a9c"]}})
    async with await _session(served) as client:
        await _add(client, "Alice's locker code is CANARY-7f3a9c.")
        await client.call_tool("memory_search", {"query": "locker"}, meta=meta(session="s1"))
    assert settled_findings(served, "canary_exposure") == []
