"""``memtap check`` split by namespace over several processes finds exactly what one engine finds,
in the same order; a trace whose namespaces meet is checked on one engine."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from memtap.cli.main import cli
from memtap.findings.check import check_trace
from memtap.findings.model import Finding
from memtap.findings.parallel import worker_env
from memtap.findings.storage import list_findings
from memtap.ids import new_id
from memtap.trace.models import AccessTags, Context, EffectKind, MemoryEffect, Op, Role, TraceEvent
from memtap.trace.store import TraceStore

T0 = datetime(2026, 3, 1, 9, tzinfo=UTC)
NAMESPACES = ("alice", "bob", "carol", "dave")


class _Trace:
    """Events as the builtin backend records them, numbered in trace order."""

    def __init__(self) -> None:
        self.events: list[TraceEvent] = []

    def call(
        self, ns: str, tool: str, op: Op, effects: list[MemoryEffect], args: dict[str, Any], **kw: Any
    ) -> None:
        at = T0 + timedelta(seconds=len(self.events))
        role = kw.pop("role", Role.USER)
        self.events.append(
            TraceEvent(
                id=new_id(),
                started_at=at,
                ended_at=at,
                front_door="test",
                backend="builtin",
                tool=tool,
                op=op,
                context=Context(namespace=ns, session=f"{ns}-s{len(self.events) // 7}", role=role),
                arguments=args,
                effects=effects,
                **kw,
            )
        )

    def add(self, ns: str, item: str, content: str, role: Role = Role.USER) -> None:
        eff = MemoryEffect(
            kind=EffectKind.ADD,
            item_id=item,
            namespace=ns,
            content_after=content,
            tags_after=AccessTags(owner=ns),
        )
        self.call(ns, "memory_add", Op.WRITE, [eff], {"content": content}, role=role)

    def update(self, ns: str, item: str, before: str, after: str, role: Role = Role.USER) -> None:
        eff = MemoryEffect(
            kind=EffectKind.UPDATE, item_id=item, namespace=ns, content_before=before, content_after=after
        )
        self.call(ns, "memory_update", Op.UPDATE, [eff], {"id": item, "content": after}, role=role)

    def delete(self, ns: str, item: str, before: str) -> None:
        eff = MemoryEffect(kind=EffectKind.DELETE, item_id=item, namespace=ns, content_before=before)
        self.call(ns, "memory_delete", Op.DELETE, [eff], {"id": item})

    def search(self, ns: str, hits: list[tuple[str, str, str]]) -> None:
        effects = [
            MemoryEffect(kind=EffectKind.RETRIEVE, item_id=i, namespace=owner, content_after=c, rank=r)
            for r, (i, owner, c) in enumerate(hits, 1)
        ]
        self.call(ns, "memory_search", Op.RETRIEVE, effects, {"query": "where"}, gate="observe:allow")


def _lifecycle(trace: _Trace) -> None:
    """In every namespace: duplicates, a destructive update, a correction left stale, an untrusted
    overwrite, deletes no turn asked for, a stored credential, a failed write after a delete."""
    for n in range(3):
        for ns in NAMESPACES:
            p = f"{ns}-{n}-"
            trace.add(ns, p + "home", f"{ns.title()} lives in Paris since 2019 with Maria.")
            trace.add(ns, p + "dup", f"{ns.title()} lives in Paris since 2019 with Maria")
            trace.add(ns, p + "job", f"{ns.title()} works at Acme on project Falcon {n}.")
            trace.add(ns, p + "move", f"{ns.title()} moved from Paris to Berlin.")
            trace.update(
                ns, p + "job", f"{ns.title()} works at Acme on project Falcon {n}.", f"{ns.title()} works."
            )
            trace.update(
                ns,
                p + "home",
                f"{ns.title()} lives in Paris since 2019 with Maria.",
                "Lives nowhere.",
                Role.THIRD_PARTY,
            )
            trace.add(ns, p + "key", "The deploy key is AKIAIOSFODNN7EXAMPLE for the build.")
            trace.search(ns, [(p + "dup", ns, "x"), (p + "move", ns, "y")])
            trace.delete(ns, p + "move", f"{ns.title()} moved from Paris to Berlin.")
            trace.call(ns, "memory_add", Op.WRITE, [], {"content": "x"}, status="error", error="backend down")


def _write(path: Path, trace: _Trace) -> TraceStore:
    store = TraceStore(path)
    store.write_events(trace.events)
    return store


def _dumped(findings: list[Finding]) -> list[dict[str, Any]]:
    out = []
    for finding in findings:
        data = finding.as_dict()
        data.pop("id"), data.pop("created_at")
        out.append(data)
    return out


def test_check_split_by_namespace_finds_exactly_what_one_engine_finds_in_the_same_order(
    tmp_path: Path,
) -> None:
    trace = _Trace()
    _lifecycle(trace)
    store = _write(tmp_path / "t.db", trace)
    try:
        one = check_trace(store, save=False, workers=1)
        split = check_trace(store, save=False, workers=3)
    finally:
        store.close()
    kinds = {f.kind for f in one.findings}
    assert {"duplicate", "destructive_update", "stale_coexistence", "untrusted_overwrite", "erasure"} <= kinds
    assert {"secret_stored", "lost_on_failure"} <= kinds
    assert (one.processes, split.processes) == (1, 3)
    assert one.part_cpu_s == [] and len(split.part_cpu_s) == 3 and all(s > 0 for s in split.part_cpu_s)
    assert split.events == one.events == len(trace.events)
    assert _dumped(split.findings) == _dumped(one.findings)
    assert split.detector_errors == one.detector_errors == 0


def test_check_of_a_trace_whose_namespaces_meet_runs_on_one_engine_with_the_same_findings(
    tmp_path: Path,
) -> None:
    trace = _Trace()
    _lifecycle(trace)
    # bob is served an item of alice's (its effect names alice's namespace): the two meet.
    trace.search("bob", [("alice-0-dup", "alice", "Alice lives in Paris since 2019 with Maria")])
    store = _write(tmp_path / "t.db", trace)
    try:
        one = check_trace(store, save=False, workers=1)
        split = check_trace(store, save=False, workers=2)
    finally:
        store.close()
    assert split.processes == 1
    assert [f.item_ids for f in split.findings if f.kind == "cross_namespace"] == [["alice-0-dup"]]
    assert _dumped(split.findings) == _dumped(one.findings)


def test_an_item_two_parts_touch_joins_them(tmp_path: Path) -> None:
    trace = _Trace()
    _lifecycle(trace)
    # carol's call deletes an item alice wrote, its effect recorded in carol's namespace: only the
    # item id joins the two namespaces.
    trace.delete("carol", "alice-1-job", "Alice works.")
    store = _write(tmp_path / "t.db", trace)
    try:
        one = check_trace(store, save=False, workers=1)
        split = check_trace(store, save=False, workers=4)
    finally:
        store.close()
    assert split.processes == 1
    assert _dumped(split.findings) == _dumped(one.findings)


def test_since_keeps_the_findings_of_events_started_then_or_later_on_every_process_count(
    tmp_path: Path,
) -> None:
    trace = _Trace()
    _lifecycle(trace)
    store = _write(tmp_path / "t.db", trace)
    middle = trace.events[len(trace.events) // 2].started_at.isoformat()
    try:
        every = check_trace(store, save=False, workers=1)
        one = check_trace(store, save=False, workers=1, since=middle)
        split = check_trace(store, save=False, workers=2, since=middle)
    finally:
        store.close()
    started = {e.id: e.started_at.isoformat() for e in trace.events}
    expected = [f for f in every.findings if started[f.event_id] >= middle]
    assert 0 < len(expected) < len(every.findings)
    assert _dumped(one.findings) == _dumped(split.findings) == _dumped(expected)


def test_memtap_check_on_two_workers_prints_and_stores_what_one_worker_does(tmp_path: Path) -> None:
    trace = _Trace()
    _lifecycle(trace)
    dbs = [tmp_path / "one.db", tmp_path / "two.db"]
    for db in dbs:
        _write(db, trace).close()
    outputs = []
    for db, workers in zip(dbs, ("1", "2"), strict=True):
        result = CliRunner().invoke(cli, ["check", "--db", str(db), "--json", "--workers", workers])
        assert result.exit_code == 1, result.output  # high findings (erasure, secret_stored)
        lines = [json.loads(line) for line in result.stdout.splitlines()]
        outputs.append([{k: v for k, v in f.items() if k not in ("id", "created_at")} for f in lines])
        store = TraceStore(db)
        try:
            assert len(list_findings(store.db, limit=10_000)) == len(lines)
        finally:
            store.close()
    assert outputs[0] == outputs[1] and outputs[0]
    assert CliRunner().invoke(cli, ["check", "--db", str(dbs[0]), "--workers", "0"]).exit_code == 2


def test_part_workers_are_started_asking_for_huge_pages_beside_the_callers_glibc_tunables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[dict[str, str]] = []
    real_popen = subprocess.Popen

    def popen(*args: Any, **kwargs: Any) -> Any:  # the real child, its environment noted
        started.append(kwargs["env"])
        return real_popen(*args, **kwargs)

    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")
    monkeypatch.setattr(subprocess, "Popen", popen)
    trace = _Trace()
    _lifecycle(trace)
    store = _write(tmp_path / "t.db", trace)
    try:
        split = check_trace(store, save=False, workers=2)
    finally:
        store.close()
    assert split.processes == 2 and split.events == len(trace.events)
    assert [env["GLIBC_TUNABLES"] for env in started] == [
        "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    ] * 2


def test_worker_env_adds_huge_pages_and_keeps_the_callers_glibc_tunables() -> None:
    assert worker_env({"PATH": "/bin"}) == {"PATH": "/bin", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
    kept = worker_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"})
    assert kept["GLIBC_TUNABLES"] == "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"
    # The caller's own hugetlb setting wins (0 turns huge pages off for the workers too).
    assert (
        worker_env({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"})["GLIBC_TUNABLES"] == "glibc.malloc.hugetlb=0"
    )
