from __future__ import annotations

import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memtap.adapters.builtin import BuiltinBackend
from memtap.errors import SchemaTooNew, StoreError
from memtap.ids import new_id
from memtap.trace.migrations import MIGRATIONS
from memtap.trace.models import AccessTags, Context, EffectKind, MemoryEffect, Op, Role, TraceEvent
from memtap.trace.store import TraceStore, immediate_transaction
from memtap.ui.queries import NOT_OK_SQL

T0 = datetime(2026, 1, 6, 13, 35, 57, tzinfo=UTC)


def _columns(db: Path, table: str) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]


def test_blank_database_is_migrated_with_plain_browsable_tables(db_path: Path) -> None:
    TraceStore(db_path).close()
    assert _columns(db_path, "events")[:8] == [
        "id", "started_at", "ended_at", "front_door", "backend", "tool", "op", "status",
    ]  # fmt: skip
    assert {"principal", "namespace", "requester", "run_id", "episode", "session", "turn", "role"} <= set(
        _columns(db_path, "events")
    )
    assert {"context", "arguments", "result", "backend_ms", "overhead_ms", "gate"} <= set(
        _columns(db_path, "events")
    )
    assert _columns(db_path, "effects") == [
        "event_id", "seq", "kind", "backend", "namespace", "item_id", "content_before", "content_after",
        "tags_before", "tags_after", "rank", "score", "derived_from", "reconciled", "evidence",
    ]  # fmt: skip
    assert {"item_id", "version", "valid_from", "valid_to", "retrieved_count"} <= set(
        _columns(db_path, "items")
    )
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        applied = [r[0] for r in conn.execute("SELECT name FROM _sqlite_migrations ORDER BY rowid")]
    assert applied == [
        "m001_create_events", "m002_create_items", "m003_add_chat_columns", "m004_create_runs", "m006_create_scores",
        "m008_create_purge_receipts", "m009_add_reconciled_effects", "m012_add_run_episode_counts",
        "m016_create_findings", "m017_create_hw_samples", "m019_create_ui_indexes", "m020_trim_event_indexes",
        "m021_create_denials_index", "m028_partial_event_indexes", "m025_create_run_writes",
    ]  # fmt: skip
    assert _columns(db_path, "purge_receipts") == [
        "id", "purge_id", "purged_at", "purged_by", "scope", "backend", "item_id", "namespace", "versions",
        "contents",
    ]  # fmt: skip
    assert applied == [m.name for m in MIGRATIONS._migrations]
    assert _columns(db_path, "hw_samples") == [
        "run_id", "device", "ts", "power_w", "energy_j", "gpu_util", "mem_util", "mem_used_mb", "temp_c",
        "sm_clock_mhz", "mem_clock_mhz", "cpu_util", "cpu_busy_s", "proc_cpu_s", "error",
    ]  # fmt: skip
    assert {"replay_run_id", "baseline_until_ts", "dropped", "gaps", "sampler_cpu_s"} <= set(
        _columns(db_path, "hw_runs")
    )
    assert _columns(db_path, "findings") == [
        "id", "kind", "severity", "severity_rank", "summary", "event_id", "namespace", "run_id", "episode",
        "session", "turn", "event_ids", "item_ids", "evidence", "detector_version", "created_at", "dedupe",
    ]  # fmt: skip
    assert _columns(db_path, "run_writes") == [
        "run_id", "episode_id", "attempt", "turn_id", "recorded_event", "tool", "status", "why", "source_items",
        "target_items", "ms", "at",
    ]  # fmt: skip
    assert {"total_ms", "parent_id", "model", "provider", "input_tokens", "output_tokens", "ttft_ms",
            "memory_ms", "links"} <= set(_columns(db_path, "events"))  # fmt: skip


def test_builtin_backend_adds_its_tables_and_full_text_index_to_the_same_file(db_path: Path) -> None:
    TraceStore(db_path).close()
    BuiltinBackend(db_path).conn.close()
    assert "valid_to" in _columns(db_path, "builtin_memory")
    with sqlite3.connect(db_path) as conn:
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'builtin_memory_fts'").fetchone()[0]
        sets = {r[0] for r in conn.execute("SELECT DISTINCT migration_set FROM _sqlite_migrations")}
    assert "fts5" in sql
    assert sets == {"memtap.trace", "memtap.builtin"}


def test_reopening_applies_nothing_twice(db_path: Path) -> None:
    TraceStore(db_path).close()
    TraceStore(db_path).close()
    with sqlite3.connect(db_path) as conn:
        applied = conn.execute("SELECT count(*) FROM _sqlite_migrations").fetchone()[0]
    assert applied == len(MIGRATIONS._migrations)


def test_database_from_a_newer_memtap_is_refused_by_name(db_path: Path) -> None:
    TraceStore(db_path).close()
    with sqlite3.connect(db_path) as conn:
        conn.execute(
            "INSERT INTO _sqlite_migrations (migration_set, name, applied_at) VALUES (?, ?, ?)",
            ("memtap.trace", "m099_from_the_future", "2030-01-01"),
        )
    with pytest.raises(SchemaTooNew, match="m099_from_the_future"):
        TraceStore(db_path)


def test_a_file_that_is_not_a_database_is_a_clear_store_error(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.db"
    bogus.write_text("this is not sqlite\n" * 100)
    with pytest.raises(StoreError, match="not a memtap database"):
        TraceStore(bogus)


def _event(op: Op, effects: list[MemoryEffect], *, at: datetime, **ctx: str) -> TraceEvent:
    return TraceEvent(
        id=new_id(),
        started_at=at,
        ended_at=at + timedelta(milliseconds=1),
        front_door="test",
        backend="builtin",
        tool=f"memory_{op.value}",
        op=op,
        context=Context(principal="alice", namespace="alice", role=Role.USER, **ctx),
        arguments={"x": 1},
        result={"ok": True},
        effects=effects,
        backend_ms=0.5,
        overhead_ms=0.1,
    )


def test_a_memory_event_writes_no_index_entry_for_the_columns_it_leaves_empty(db_path: Path) -> None:
    """Each index is pages written with every recorded call: the chat-only columns are indexed
    only where set, and the filters the dashboard pages use still walk an index."""
    store = TraceStore(db_path)
    store.write_events([_event(Op.WRITE, [], at=T0)])
    conn = store.db.conn
    partial = {r[1]: r[4] for r in conn.execute("PRAGMA index_list('events')")}
    assert partial["events_parent"] == partial["events_upstream_id"] == 1
    # A live call has no run and often no session, and most calls end ok (m028).
    assert {
        partial[n] for n in ("events_run", "events_run_id_id", "events_session_id", "events_status_id")
    } == {1}
    where = {
        r[0]: r[1].split(" WHERE ", 1)[1]
        for r in conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql LIKE '%WHERE%'"
        )
    }
    assert where["events_run"] == where["events_run_id_id"] == "run_id IS NOT NULL"
    assert where["events_session_id"] == "session IS NOT NULL"
    assert where["events_status_id"] == NOT_OK_SQL
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert not {"events_op", "events_namespace"} & names  # prefixes of events_op_id, events_namespace_id
    for sql, index in [
        ("SELECT id FROM events WHERE parent_id = 'x'", "events_parent"),
        ("SELECT id FROM events WHERE upstream = 'u' ORDER BY id DESC LIMIT 51", "events_upstream_id"),
        ("SELECT id FROM events WHERE op = 'write'", "events_op_id"),
        ("SELECT id FROM events WHERE namespace = 'alice'", "events_namespace_id"),
        ("SELECT id FROM events WHERE run_id = 'r' ORDER BY id DESC LIMIT 51", "events_run_id_id"),
        ("SELECT id FROM events WHERE run_id = 'r' AND episode = 'e' AND session = 's'", "events_run"),
        ("SELECT id FROM events WHERE session = 's' ORDER BY id DESC LIMIT 51", "events_session_id"),
        (
            f"SELECT id FROM events WHERE status = 'error' AND {NOT_OK_SQL} ORDER BY id DESC",
            "events_status_id",
        ),
        (
            "SELECT * FROM items WHERE namespace = 'alice' AND item_id > 'm' ORDER BY item_id",
            "items_namespace",
        ),
        (
            "SELECT count(*), sum(valid_to IS NULL) FROM items WHERE namespace > '' GROUP BY namespace",
            "COVERING",
        ),
    ]:
        plan = " ".join(str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql))
        assert index in plan and "SCAN events" not in plan and "TEMP B-TREE" not in plan, (sql, plan)
    store.close()


def test_events_round_trip_with_effects_and_context(db_path: Path) -> None:
    store = TraceStore(db_path)
    tags = AccessTags(owner="alice", visibility="participants", participants=["bob"])
    event = _event(
        Op.WRITE,
        [MemoryEffect(kind=EffectKind.ADD, item_id="m1", content_after="FitLife", tags_after=tags)],
        at=T0,
        session="s0",
        turn="s0-t0",
    )
    store.write_events([event])
    [back] = store.list_events()
    assert back == event.model_copy(
        update={"effects": [event.effects[0].model_copy(update={"namespace": "alice"})]}
    )
    assert store.get_event(event.id[:20]) == back
    store.close()


def test_items_materialise_versions_and_a_delete_closes_without_destroying(db_path: Path) -> None:
    store = TraceStore(db_path)
    add = _event(Op.WRITE, [MemoryEffect(kind=EffectKind.ADD, item_id="m1", content_after="v1")], at=T0)
    upd = _event(
        Op.UPDATE,
        [MemoryEffect(kind=EffectKind.UPDATE, item_id="m1", content_before="v1", content_after="v2")],
        at=T0 + timedelta(seconds=1),
        session="s1",
    )
    hit = _event(
        Op.RETRIEVE, [MemoryEffect(kind=EffectKind.RETRIEVE, item_id="m1", rank=1, score=2.0)],
        at=T0 + timedelta(seconds=2),
    )  # fmt: skip
    gone = _event(
        Op.DELETE,
        [MemoryEffect(kind=EffectKind.DELETE, item_id="m1", content_before="v2")],
        at=T0 + timedelta(seconds=3),
    )
    store.write_events([add, upd, hit, gone])
    assert store.list_items() == []
    [item] = store.list_items(include_closed=True)
    assert (item.content, item.version, item.valid_to) == ("v2", 2, gone.ended_at)
    full = store.get_item("m1")
    assert full is not None
    assert [(v.version, v.op.value, v.content) for v in full.history] == [
        (1, "add", "v1"),
        (2, "update", "v2"),
    ]
    assert full.history[0].valid_to == upd.ended_at
    assert full.history[1].valid_to == gone.ended_at
    assert full.provenance.event_id == add.id
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT retrieved_count FROM items").fetchone()[0] == 1
    store.close()


def test_list_events_filters_and_keeps_time_order(db_path: Path) -> None:
    store = TraceStore(db_path)
    events = [
        _event(Op.WRITE, [], at=T0, session="s0"),
        _event(Op.RETRIEVE, [], at=T0, session="s1"),
        _event(Op.WRITE, [], at=T0, session="s1"),
    ]
    store.write_events(events)
    assert [e.id for e in store.list_events(op="write")] == [events[0].id, events[2].id]
    assert [e.id for e in store.list_events(session="s1")] == [events[1].id, events[2].id]
    assert [e.id for e in store.list_events(limit=2, newest_first=True)] == [events[1].id, events[2].id]
    assert [e.id for e in store.list_events(after_id=events[0].id)] == [events[1].id, events[2].id]
    store.close()


def test_a_database_written_before_chat_columns_migrates_and_its_events_still_read(db_path: Path) -> None:
    from sqlite_utils import Database

    from memtap.trace.migrations import MIGRATIONS

    with sqlite3.connect(db_path) as conn:
        db = Database(conn)
        for migration in MIGRATIONS._migrations[:2]:  # what memtap 0.1.0 released
            migration.fn(db)
        conn.execute("CREATE TABLE _sqlite_migrations (id INTEGER PRIMARY KEY, migration_set TEXT, name TEXT,"
                     " applied_at TEXT)")  # fmt: skip
        for name in ("m001_create_events", "m002_create_items"):
            conn.execute("INSERT INTO _sqlite_migrations (migration_set, name, applied_at) VALUES (?, ?, ?)",
                         ("memtap.trace", name, "2026-01-01"))  # fmt: skip
        conn.execute(
            f"INSERT INTO events VALUES ({','.join('?' * 25)})",
            ("01OLD", T0.isoformat(), T0.isoformat(), "mcp-http", "builtin", "memory_search", "retrieve", "ok",
             None, "u", "u", None, None, None, None, None, None, None, None, '{"principal":"u","namespace":"u"}',
             "{}", None, 1.0, 0.1, None),
        )  # fmt: skip
    store = TraceStore(db_path)
    [event] = store.list_events()
    store.close()
    assert event.id == "01OLD" and event.links == [] and event.model is None and event.parent_id is None


@pytest.mark.parametrize("size", [1, 2, 3, 127, 300])
def test_a_batch_of_any_size_is_written_whole_and_in_order(db_path: Path, size: int) -> None:
    """Batches go in as multi-row inserts of powers of two (300 = 128 + 128 + 32 + 8 + 4)."""
    store = TraceStore(db_path)
    events = [
        _event(Op.RETRIEVE, [], at=T0 + timedelta(seconds=i), session=f"s{i}", turn=str(i)).model_copy(
            update={"arguments": {"query": f"q{i}"}, "result": {"n": i}}
        )
        for i in range(size)
    ]
    store.write_events(events)
    assert store.list_events() == events
    order = store.db.conn.execute("SELECT id FROM events ORDER BY rowid").fetchall()
    assert [row[0] for row in order] == [event.id for event in events]
    store.close()


def test_a_commit_that_fails_rolls_back_and_leaves_no_transaction_for_the_next_commit(tmp_path: Path) -> None:
    """A COMMIT can fail and leave its transaction open (here a deferred foreign key); those rows
    must not go out with the next commit on the connection after the caller counted them failed."""
    store = TraceStore(tmp_path / "t.db")
    conn = store.db.conn
    conn.execute("PRAGMA defer_foreign_keys = ON")  # checked at COMMIT, for this transaction
    effect = "INSERT INTO effects (event_id, seq, kind, backend, item_id) VALUES ('no-such-event', 0, 'add', 'b', 'i')"
    with pytest.raises(sqlite3.IntegrityError), immediate_transaction(store.db):
        conn.execute(effect)
    assert not conn.in_transaction
    store.write_events([_event(Op.WRITE, [], at=T0)])  # the next commit carries only its own rows
    assert conn.execute("SELECT count(*) FROM effects WHERE event_id = 'no-such-event'").fetchone() == (0,)
    store.close()
