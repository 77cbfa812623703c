"""Schema of the trace database: one small named function per change.

Never edit a migration that has been released; add a new one. The store applies
pending migrations when it opens a database, so new and old files take one path.
Tables are plain and columns hold JSON text where a value is structured, so
Datasette or ``sqlite3`` can browse a trace as it is.
"""

from __future__ import annotations

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

__all__ = ["MIGRATIONS"]

MIGRATIONS = Migrations("memtap.trace")


@MIGRATIONS()
def m001_create_events(db: Database) -> None:
    db.execute(
        """
        CREATE TABLE events (
            id TEXT PRIMARY KEY,
            started_at TEXT NOT NULL,
            ended_at TEXT NOT NULL,
            front_door TEXT NOT NULL,
            backend TEXT NOT NULL,
            tool TEXT NOT NULL,
            op TEXT NOT NULL,
            status TEXT NOT NULL,
            error TEXT,
            principal TEXT,
            namespace TEXT,
            requester TEXT,
            run_id TEXT,
            episode TEXT,
            session TEXT,
            turn TEXT,
            role TEXT,
            client TEXT,
            upstream TEXT,
            context TEXT NOT NULL,
            arguments TEXT NOT NULL,
            result TEXT,
            backend_ms REAL,
            overhead_ms REAL,
            gate TEXT
        )
        """
    )
    db.execute("CREATE INDEX events_op ON events(op)")
    db.execute("CREATE INDEX events_namespace ON events(namespace)")
    db.execute("CREATE INDEX events_run ON events(run_id, episode, session)")
    db.execute(
        """
        CREATE TABLE effects (
            event_id TEXT NOT NULL REFERENCES events(id),
            seq INTEGER NOT NULL,
            kind TEXT NOT NULL,
            backend TEXT NOT NULL,
            namespace TEXT,
            item_id TEXT NOT NULL,
            content_before TEXT,
            content_after TEXT,
            tags_before TEXT,
            tags_after TEXT,
            rank INTEGER,
            score REAL,
            derived_from TEXT,
            PRIMARY KEY (event_id, seq)
        )
        """
    )
    db.execute("CREATE INDEX effects_item ON effects(backend, item_id)")


@MIGRATIONS()
def m002_create_items(db: Database) -> None:
    db.execute(
        """
        CREATE TABLE items (
            backend TEXT NOT NULL,
            item_id TEXT NOT NULL,
            namespace TEXT,
            content TEXT NOT NULL,
            tags TEXT,
            version INTEGER NOT NULL,
            created_event TEXT,
            principal TEXT,
            run_id TEXT,
            episode TEXT,
            session TEXT,
            turn TEXT,
            role TEXT,
            valid_from TEXT NOT NULL,
            valid_to TEXT,
            derived_from TEXT,
            retrieved_count INTEGER NOT NULL DEFAULT 0,
            last_event TEXT,
            PRIMARY KEY (backend, item_id)
        )
        """
    )
    db.execute("CREATE INDEX items_namespace ON items(namespace, valid_to)")
    db.execute(
        """
        CREATE TABLE item_versions (
            backend TEXT NOT NULL,
            item_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            content TEXT NOT NULL,
            tags TEXT,
            op TEXT NOT NULL,
            event_id TEXT,
            valid_from TEXT NOT NULL,
            valid_to TEXT,
            PRIMARY KEY (backend, item_id, version)
        )
        """
    )


@MIGRATIONS()
def m003_add_chat_columns(db: Database) -> None:
    """Chat and embedding calls: model, provider, token usage and the latency decomposition;
    every call: its total time and the call it ran inside (``parent_id``); ``links``: a JSON
    list of the events a call caused."""
    for column, kind in (
        ("total_ms", "REAL"),
        ("parent_id", "TEXT"),
        ("model", "TEXT"),
        ("provider", "TEXT"),
        ("input_tokens", "INTEGER"),
        ("output_tokens", "INTEGER"),
        ("ttft_ms", "REAL"),
        ("memory_ms", "REAL"),
        ("links", "TEXT"),
    ):
        db.execute(f"ALTER TABLE events ADD COLUMN {column} {kind}")
    db.execute("CREATE INDEX events_parent ON events(parent_id)")


@MIGRATIONS()
def m004_create_runs(db: Database) -> None:
    """Replay runs: one row per run, per episode attempt, and per probe answer; and the suite's
    episodes themselves (content-addressed by the suite's sha256), so a run can be scored from
    this database alone. (Numbered 004: 003 is taken by the chat proxy's columns.)"""
    db.execute(
        """
        CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            suite_path TEXT NOT NULL,
            suite_sha256 TEXT NOT NULL,
            episodes_total INTEGER NOT NULL,
            target TEXT NOT NULL,
            config TEXT NOT NULL,
            reader TEXT NOT NULL,
            versions TEXT NOT NULL,
            started_at TEXT NOT NULL,
            ended_at TEXT,
            status TEXT NOT NULL,
            resumed INTEGER NOT NULL DEFAULT 0,
            summary TEXT
        )
        """
    )
    db.execute(
        """
        CREATE TABLE run_episodes (
            run_id TEXT NOT NULL REFERENCES runs(id),
            episode_id TEXT NOT NULL,
            attempt INTEGER NOT NULL,
            namespace TEXT NOT NULL,
            status TEXT NOT NULL,
            error TEXT,
            started_at TEXT NOT NULL,
            ended_at TEXT,
            duration_ms REAL,
            sessions_total INTEGER NOT NULL,
            sessions_done INTEGER NOT NULL DEFAULT 0,
            turns_done INTEGER NOT NULL DEFAULT 0,
            probes_done INTEGER NOT NULL DEFAULT 0,
            timings TEXT,
            PRIMARY KEY (run_id, episode_id, attempt)
        )
        """
    )
    db.execute("CREATE INDEX run_episodes_status ON run_episodes(run_id, status)")
    db.execute(
        """
        CREATE TABLE run_probes (
            run_id TEXT NOT NULL REFERENCES runs(id),
            episode_id TEXT NOT NULL,
            attempt INTEGER NOT NULL,
            probe_id TEXT NOT NULL,
            probe_type TEXT NOT NULL,
            requester TEXT,
            status TEXT NOT NULL,
            error TEXT,
            answer TEXT,
            retrieved TEXT NOT NULL,
            retrieve_ms REAL,
            reader_ms REAL,
            latency_ms REAL,
            answered_at TEXT NOT NULL,
            PRIMARY KEY (run_id, episode_id, attempt, probe_id)
        )
        """
    )
    db.execute(
        """
        CREATE TABLE suite_episodes (
            suite_sha256 TEXT NOT NULL,
            episode_id TEXT NOT NULL,
            position INTEGER NOT NULL,
            episode TEXT NOT NULL,
            PRIMARY KEY (suite_sha256, episode_id)
        )
        """
    )


@MIGRATIONS()
def m006_create_scores(db: Database) -> None:
    """Scores of replayed runs (``memtap score``): one row per scoring, the score file as JSON;
    and every alignment decision behind it (which memory item counted for which gold memory, and
    why), keyed by the score. (Numbered 006: 005 is taken on another branch.)"""
    db.execute(
        """
        CREATE TABLE scores (
            id INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL,
            created_at TEXT NOT NULL,
            format TEXT NOT NULL,
            matcher TEXT NOT NULL,
            json TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX scores_run ON scores(run_id, id)")
    db.execute(
        """
        CREATE TABLE alignments (
            score_id INTEGER NOT NULL REFERENCES scores(id),
            run_id TEXT NOT NULL,
            episode_id TEXT NOT NULL,
            item_id TEXT NOT NULL,
            version INTEGER NOT NULL,
            gold_key TEXT,
            matched INTEGER NOT NULL,
            gold_coverage REAL,
            item_coverage REAL,
            reason TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX alignments_item ON alignments(score_id, episode_id, item_id)")


@MIGRATIONS()
def m008_create_purge_receipts(db: Database) -> None:
    """``memtap purge``: one receipt per purged item (what was removed, its hashes and sizes,
    when and by whom); the content itself is gone from every table. (Numbered 008: 005 and
    007 are taken on other branches.)"""
    db.execute(
        """
        CREATE TABLE purge_receipts (
            id INTEGER PRIMARY KEY,
            purge_id TEXT NOT NULL,
            purged_at TEXT NOT NULL,
            purged_by TEXT NOT NULL,
            scope TEXT NOT NULL,
            backend TEXT NOT NULL,
            item_id TEXT NOT NULL,
            namespace TEXT,
            versions INTEGER NOT NULL,
            contents TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX purge_receipts_item ON purge_receipts(backend, item_id)")


@MIGRATIONS()
def m009_add_reconciled_effects(db: Database) -> None:
    """Effects found by reading a backend's state rather than observed on the call
    (``reconciled`` 1), with the evidence as JSON: what was read, when and why."""
    db.execute("ALTER TABLE effects ADD COLUMN reconciled INTEGER NOT NULL DEFAULT 0")
    db.execute("ALTER TABLE effects ADD COLUMN evidence TEXT")


@MIGRATIONS()
def m012_add_run_episode_counts(db: Database) -> None:
    """What a replay attempt sent and what the target acknowledged (JSON: writes sent, acknowledged
    and refused, searches, probes, escape attempts refused, ...), which the isolation canary's
    score checks against the recorded events. (Numbered 012: 007 to 011 are other branches'.)"""
    db.execute("ALTER TABLE run_episodes ADD COLUMN counts TEXT")


@MIGRATIONS()
def m016_create_findings(db: Database) -> None:
    """Findings of the detectors (``memtap check``, live detection): one row per finding, with its
    rule's name, severity, where it happened, the events and items it is about, and its evidence.
    ``dedupe`` keys a finding so running ``memtap check`` twice stores it once."""
    db.execute(
        """
        CREATE TABLE findings (
            id TEXT PRIMARY KEY,
            kind TEXT NOT NULL,
            severity TEXT NOT NULL,
            severity_rank INTEGER NOT NULL,
            summary TEXT NOT NULL,
            event_id TEXT NOT NULL,
            namespace TEXT,
            run_id TEXT,
            episode TEXT,
            session TEXT,
            turn TEXT,
            event_ids TEXT NOT NULL,
            item_ids TEXT NOT NULL,
            evidence TEXT NOT NULL,
            detector_version TEXT NOT NULL,
            created_at TEXT NOT NULL,
            dedupe TEXT NOT NULL UNIQUE
        )
        """
    )
    db.execute("CREATE INDEX findings_kind ON findings(kind, severity_rank)")
    db.execute("CREATE INDEX findings_event ON findings(event_id)")
    db.execute("CREATE INDEX findings_namespace ON findings(namespace)")
    db.execute("CREATE INDEX findings_run ON findings(run_id, episode, session)")
    db.execute("CREATE INDEX findings_created ON findings(created_at)")


@MIGRATIONS()
def m017_create_hw_samples(db: Database) -> None:
    """The hardware probe (``--hw-probe``): one row per probed run (the command, the replay run it
    watched, its idle-baseline window, the one-line device note, samples dropped and gaps), the
    devices described once per run, and the samples, indexed by time (``ts``: Unix seconds).
    (Numbered 017: the numbers between are taken on other branches.)"""
    db.execute(
        """
        CREATE TABLE hw_runs (
            id TEXT PRIMARY KEY,
            command TEXT NOT NULL,
            replay_run_id TEXT,
            started_at TEXT NOT NULL,
            ended_at TEXT,
            started_ts REAL NOT NULL,
            baseline_until_ts REAL,
            ended_ts REAL,
            interval_ms REAL NOT NULL,
            note TEXT NOT NULL,
            samples INTEGER NOT NULL DEFAULT 0,
            dropped INTEGER NOT NULL DEFAULT 0,
            gaps INTEGER NOT NULL DEFAULT 0,
            write_errors INTEGER NOT NULL DEFAULT 0,
            sampler_cpu_s REAL,
            status TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX hw_runs_replay ON hw_runs(replay_run_id)")
    db.execute("CREATE INDEX hw_runs_time ON hw_runs(started_ts)")
    db.execute(
        """
        CREATE TABLE hw_devices (
            run_id TEXT NOT NULL REFERENCES hw_runs(id),
            device TEXT NOT NULL,
            kind TEXT NOT NULL,
            name TEXT NOT NULL,
            info TEXT NOT NULL,
            PRIMARY KEY (run_id, device)
        )
        """
    )
    db.execute(
        """
        CREATE TABLE hw_samples (
            run_id TEXT NOT NULL REFERENCES hw_runs(id),
            device TEXT NOT NULL,
            ts REAL NOT NULL,
            power_w REAL,
            energy_j REAL,
            gpu_util REAL,
            mem_util REAL,
            mem_used_mb REAL,
            temp_c REAL,
            sm_clock_mhz REAL,
            mem_clock_mhz REAL,
            cpu_util REAL,
            cpu_busy_s REAL,
            proc_cpu_s REAL,
            error TEXT
        )
        """
    )
    db.execute("CREATE INDEX hw_samples_run ON hw_samples(run_id, device, ts)")
    db.execute("CREATE INDEX hw_samples_time ON hw_samples(ts)")


@MIGRATIONS()
def m019_create_ui_indexes(db: Database) -> None:
    """Indexes for the dashboard's keyset pages: the newest events of one op, namespace,
    session, principal, upstream, run or status, newest first, and one namespace's items by id.
    (Numbered 019: the numbers between are other branches'.)"""
    for column in ("op", "namespace", "session", "principal", "upstream", "run_id", "status"):
        db.execute(f"CREATE INDEX IF NOT EXISTS events_{column}_id ON events({column}, id)")
    db.execute("CREATE INDEX IF NOT EXISTS items_namespace_id ON items(namespace, item_id)")


@MIGRATIONS()
def m020_trim_event_indexes(db: Database) -> None:
    """Fewer index pages written with every event (each recorded call pays for each index).

    ``events_op`` and ``events_namespace`` are prefixes of m019's ``events_op_id`` and
    ``events_namespace_id``, which serve every query they served. ``events_parent`` and
    ``events_upstream_id`` index columns that memory calls leave empty; as partial indexes
    (``IS NOT NULL``) they still serve ``parent_id = ?``, ``upstream = ?`` and the list of
    upstreams, and a memory call's event no longer touches them. One index of items by
    namespace, ``(namespace, item_id, valid_to)``, serves both m002's counts of current items
    (covering) and m019's pages by id."""
    for name in ("events_op", "events_namespace", "events_parent", "events_upstream_id"):
        db.execute(f"DROP INDEX IF EXISTS {name}")
    for name in ("items_namespace", "items_namespace_id"):
        db.execute(f"DROP INDEX IF EXISTS {name}")
    db.execute("CREATE INDEX items_namespace ON items(namespace, item_id, valid_to)")
    db.execute("CREATE INDEX events_parent ON events(parent_id) WHERE parent_id IS NOT NULL")
    db.execute("CREATE INDEX events_upstream_id ON events(upstream, id) WHERE upstream IS NOT NULL")


@MIGRATIONS()
def m021_create_denials_index(db: Database) -> None:
    """A partial index of the gate's denials and the refused calls, newest first, for the
    dashboard's findings page: without it each view scanned every event with four LIKEs (about
    140 ms at 200,000 events). Only a denied or refused call's event adds an entry. The WHERE is
    ``memtap.ui.queries.DENIAL_SQL`` word for word, which SQLite needs to use the index."""
    db.execute(
        "CREATE INDEX IF NOT EXISTS events_denials ON events(id) WHERE "
        "(status = 'error' AND (error LIKE '%may not %' OR error LIKE '%contradicts%')) "
        "OR gate LIKE 'observe:would-deny%' OR gate LIKE 'enforce:withheld=%'"
    )


@MIGRATIONS()
def m028_partial_event_indexes(db: Database) -> None:
    """Index only the events a filter can find, so a live call writes fewer index pages.

    A call from a live client carries no run and often no session, and most calls end
    ``ok``: the run, session and status indexes became partial (``run_id IS NOT NULL``,
    ``session IS NOT NULL``, ``status <> 'ok'``). ``run_id = ?`` and ``session = ?`` imply
    ``IS NOT NULL``, so every query that used them still does; the dashboard's status filter
    adds ``status <> 'ok'`` for any other status so SQLite can use the partial index, and
    finds ``ok`` events newest first along the table itself (most events are ``ok``).
    Each index is a page written with every recorded call: a live call now writes four
    fewer (about 20 pages per durable commit before, 16 after)."""
    for name, sql in (
        ("events_run", "events(run_id, episode, session) WHERE run_id IS NOT NULL"),
        ("events_run_id_id", "events(run_id, id) WHERE run_id IS NOT NULL"),
        ("events_session_id", "events(session, id) WHERE session IS NOT NULL"),
        ("events_status_id", "events(status, id) WHERE status <> 'ok'"),
    ):
        db.execute(f"DROP INDEX IF EXISTS {name}")
        db.execute(f"CREATE INDEX {name} ON {sql}")


@MIGRATIONS()
def m025_create_run_writes(db: Database) -> None:
    """What an A/B replay of recorded traffic (``replay --from-trace``) did with each recorded
    write, update and delete: ``status`` ``done``, ``skipped`` (with ``why``: an update or delete
    whose source item has no item on the target) or ``failed`` (the target refused the call: its
    error in ``why``); the source item ids the recorded call touched, the target item ids the
    replayed call touched (JSON lists), and its time. ``memtap compare --writes`` reads it with the
    run's events. (Numbered 025, merged after 028: it follows 028 in the list.)"""
    db.execute(
        """
        CREATE TABLE run_writes (
            run_id TEXT NOT NULL REFERENCES runs(id),
            episode_id TEXT NOT NULL,
            attempt INTEGER NOT NULL,
            turn_id TEXT NOT NULL,
            recorded_event TEXT,
            tool TEXT NOT NULL,
            status TEXT NOT NULL,
            why TEXT,
            source_items TEXT NOT NULL,
            target_items TEXT NOT NULL,
            ms REAL,
            at TEXT NOT NULL,
            PRIMARY KEY (run_id, episode_id, attempt, turn_id)
        )
        """
    )
