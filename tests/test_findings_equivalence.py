"""Live detection (a process of its own tailing the trace) and ``memtap check`` (offline, reading
in bulk) find the same findings on the same trace, and the bulk reader reads back exactly the
events the store does."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from conftest import http_client, meta
from findings_helpers import settled_findings

from memtap.findings.access import Canary
from memtap.findings.check import check_trace
from memtap.findings.engine import Engine, make_detectors
from memtap.findings.model import Finding
from memtap.findings.reader import _json as reader_json
from memtap.findings.reader import read_page
from memtap.trace.store import TraceStore

pytestmark = pytest.mark.anyio

Serve = Callable[..., Any]


async def _traffic(served: Any) -> None:
    """Calls that make most detectors fire: duplicates, a destructive update, a stale value, a
    third-party overwrite, deletes no turn asked for, a credential, a leak and a canary."""
    url = f"http://127.0.0.1:{served.port}/mcp"
    async with http_client(url, {"X-Memtap-Namespace": "alice"}) as client:

        async def add(content: str, role: str = "user") -> str:
            result = await client.call_tool(
                "memory_add", {"content": content}, meta=meta(session="s1", role=role)
            )
            assert not result.is_error, result
            return str(result.structured_content["id"])  # type: ignore[index]

        async def call(tool: str, args: dict[str, Any], role: str = "user") -> None:
            result = await client.call_tool(tool, args, meta=meta(session="s1", role=role))
            assert not result.is_error, result

        await add("Alice's sister is called Maria.")
        await add("Alice's sister is called Maria")
        lives = await add("Alice lives in Paris since 2019.")
        await add("Alice moved from Paris to Berlin.")
        salary = await add("Alice's salary is 95000 and her locker code is CANARY-7f3a9c.")
        await call("memory_update", {"id": lives, "content": "Alice lives somewhere."}, role="third_party")
        await add("The deploy key is AKIAIOSFODNN7EXAMPLE for the build.")
        await call("memory_search", {"query": "salary locker", "requester": "carol"})
        await call("memory_delete", {"id": salary}, role="assistant")
        for n in range(30):  # enough events for several commits
            item = await add(f"Alice note {n}: meeting with Bob on March {n % 28 + 1}.")
            if n % 3 == 0:
                await call("memory_delete", {"id": item}, role="assistant")
            if n % 5 == 0:
                await call("memory_search", {"query": f"note {n}"})


def _as_compared(findings: list[Finding]) -> list[tuple[Any, ...]]:
    return sorted(
        (
            f.kind,
            int(f.severity),
            f.summary,
            f.event_id,
            f.namespace,
            f.event_ids,
            f.item_ids,
            repr(f.evidence),
        )
        for f in findings
    )


async def test_check_finds_exactly_what_live_detection_found_on_the_same_trace(serve_memtap: Serve) -> None:
    served = serve_memtap({"findings": {"canaries": ["CANARY-7f3a9c"]}})
    await _traffic(served)
    live = settled_findings(served)
    kinds = {f.kind for f in live}
    assert {"duplicate", "destructive_update", "untrusted_overwrite", "erasure", "secret_stored"} <= kinds
    assert {"leak_retrieval", "canary_exposure", "stale_coexistence"} <= kinds
    store = TraceStore(served.db)
    try:
        offline = check_trace(store, canaries=[Canary("CANARY-7f3a9c")], save=False)
    finally:
        store.close()
    assert offline.detector_errors == 0
    assert _as_compared(offline.findings) == _as_compared(live)


async def test_events_read_in_bulk_equal_what_the_store_reads(serve_memtap: Serve) -> None:
    served = serve_memtap()
    await _traffic(served)
    served.settle()
    store = TraceStore(served.db)
    try:
        validated = store.list_events()
        by_id, _ = read_page(store.db.conn, after=None, limit=10_000)
        by_commit: list[Any] = []
        after: str | int | None = 0
        while True:  # small pages, in commit order, as the live worker reads them
            page, after = read_page(store.db.conn, after=after, limit=7, by_rowid=True)
            if not page:
                break
            by_commit.extend(page)
    finally:
        store.close()
    assert len(validated) == 55  # every call of _traffic
    assert [e.model_dump() for e in by_id] == [e.model_dump() for e in validated]
    assert sorted(e.id for e in by_commit) == [e.id for e in validated]
    assert {e.id: e.model_dump() for e in by_commit} == {e.id: e.model_dump() for e in validated}


def _detector_view(event: Any, with_arguments: bool) -> dict[str, Any]:
    """What the detectors read of an event (``reader.py``'s lean mode keeps exactly this)."""
    return {
        "fields": [
            event.id,
            event.started_at,
            event.backend,
            event.tool,
            event.op,
            event.status,
            event.error,
            event.context,
            event.gate,
            event.parent_id,
            event.links,
        ],
        "arguments": event.arguments if with_arguments else None,
        "result": event.result if event.op == "chat" else None,
        "effects": [
            (e.kind, e.item_id, e.namespace, e.content_before, e.content_after, e.tags_after, e.derived_from)
            for e in event.effects
        ],
    }


async def test_lean_reading_keeps_everything_the_detectors_read(serve_memtap: Serve) -> None:
    served = serve_memtap()
    await _traffic(served)
    served.settle()
    store = TraceStore(served.db)
    try:
        full, _ = read_page(store.db.conn, after=None, limit=10_000)
        lean, _ = read_page(store.db.conn, after=None, limit=10_000, lean=True)
    finally:
        store.close()
    assert len(lean) == len(full) == 55
    # What the rules find is the same from either reading: a rule that reads a field the lean
    # reader leaves out would judge differently (on this traffic, which fires nine detectors).
    canaries = [Canary("CANARY-7f3a9c")]
    from_full = Engine(make_detectors(canaries)).feed(full)
    from_lean = Engine(make_detectors(canaries)).feed(lean)
    assert len({f.kind for f in from_full}) >= 8
    assert _as_compared(from_lean) == _as_compared(from_full)
    removing = {e.id for e in full if any(x.kind in ("delete", "update") for x in e.effects)}
    assert removing  # the traffic deletes and updates: their arguments are read
    for a, b in zip(full, lean, strict=True):
        keep = a.op == "chat" or a.id in removing
        assert _detector_view(a, keep) == _detector_view(b, keep)
        if not keep:
            assert b.arguments == {}  # not parsed: no rule reads them


class _SeesEverything:
    """A detector shown every event, whatever its ``wants`` says (the engine before it chose)."""

    def __init__(self, detector: Any) -> None:
        self.detector = detector
        self.name, self.severity, self.rule = detector.name, detector.severity, detector.rule

    def wants(self, shape: Any) -> bool:
        return True

    def observe(self, event: Any, state: Any) -> Any:
        return self.detector.observe(event, state)


async def test_showing_each_detector_only_the_events_it_wants_loses_no_finding(serve_memtap: Serve) -> None:
    served = serve_memtap()
    await _traffic(served)
    served.settle()
    store = TraceStore(served.db)
    try:
        events, _ = read_page(store.db.conn, after=None, limit=10_000)
    finally:
        store.close()
    canaries = [Canary("CANARY-7f3a9c")]
    chosen = Engine(make_detectors(canaries))
    found = chosen.feed(events)
    everything = Engine([_SeesEverything(d) for d in make_detectors(canaries)]).feed(events)  # type: ignore[misc]
    assert len({f.kind for f in found}) >= 8
    assert _as_compared(found) == _as_compared(everything)
    # ... while most detectors were spared most events (what the choice is for).
    assert sum(len(chosen.detectors_for(e)) for e in events) < len(events) * len(chosen.detectors) / 2


@pytest.mark.parametrize(
    "text",
    ['{"a":[1,2.5,null,true],"b":"\\u00e9"}', "[]", '"x"', "12", ' {"a": 1} ', '{"a":1} '],
)
def test_lean_json_parses_as_json_loads_does(text: str) -> None:
    # The recorder's compact JSON takes the scanner directly; anything around it, json.loads.
    assert reader_json(text) == json.loads(text)


def test_lean_json_rejects_what_json_loads_rejects() -> None:
    for text in ("", "{", '{"a":1} x', "nope"):
        with pytest.raises(json.JSONDecodeError):
            reader_json(text)
