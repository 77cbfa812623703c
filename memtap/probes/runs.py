"""Replay runs in the trace database: runs, episode attempts, probe answers, the suite itself.

Every attempt at an episode is a row of ``run_episodes`` with its own fresh namespace; an
attempt that did not finish (interrupted, failed, or cut off by a crash while ``running``) is
kept, and a resumed run plays the episode again as the next attempt in a new namespace. The
trace of an episode is therefore the events whose namespace is that of its last ``done``
attempt: never a session twice, never one missing. :meth:`RunStore.final_attempts` gives them.
"""

from __future__ import annotations

import contextlib
import json
import platform
import sqlite3
from collections import Counter
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memtap import __version__
from memtap.errors import StoreError
from memtap.probes.errors import ReplayError
from memtap.probes.schema import FORMAT, Episode
from memtap.trace.migrations import MIGRATIONS
from memtap.trace.sqlite import describe_sqlite_error, open_database
from memtap.trace.store import immediate_transaction

__all__ = ["RunStore", "versions"]


def _now() -> str:
    return datetime.now(UTC).isoformat()


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {"memtap": __version__, "suite_format": FORMAT, "python": platform.python_version()}
    for package in ("mcp", "pydantic"):
        with contextlib.suppress(PackageNotFoundError):
            found[package] = version(package)
    found["platform"] = platform.platform()
    return found


class RunStore:
    """The replay driver's side of the trace database (the server records the events)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.db = open_database(self.path, MIGRATIONS)
        self.conn = self.db.conn

    def close(self) -> None:
        self.conn.close()

    def _exec(self, sql: str, args: Iterable[Any] = ()) -> sqlite3.Cursor:
        try:
            return self.conn.execute(sql, tuple(args))
        except sqlite3.Error as exc:
            raise StoreError(describe_sqlite_error(self.path, exc)) from exc

    def _rows(self, sql: str, args: Iterable[Any] = ()) -> Iterator[dict[str, Any]]:
        cursor = self._exec(sql, args)
        names = [d[0] for d in cursor.description]
        for row in cursor.fetchall():
            yield dict(zip(names, row, strict=True))

    # -- runs --------------------------------------------------------------------------------

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        rows = list(self._rows("SELECT * FROM runs WHERE id = ?", [run_id]))
        if not rows:
            return None
        row = rows[0]
        for key in ("config", "versions", "summary"):
            row[key] = json.loads(row[key]) if row[key] else None
        return row

    def list_runs(self) -> list[dict[str, Any]]:
        return [
            r
            for r in (
                self.get_run(row["id"]) for row in self._rows("SELECT id FROM runs ORDER BY started_at")
            )
            if r
        ]

    def create_run(
        self,
        run_id: str,
        *,
        suite_path: Path,
        suite_sha256: str,
        episodes: list[Episode],
        target: str,
        config: dict[str, Any],
        reader: str,
    ) -> None:
        if self.get_run(run_id) is not None:
            raise ReplayError(
                f"run {run_id!r} already exists in {self.path}; resume it with --resume {run_id}"
            )
        self._exec(
            "INSERT INTO runs (id, suite_path, suite_sha256, episodes_total, target, config, reader,"
            " versions, started_at, status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'running')",
            [
                run_id,
                str(suite_path),
                suite_sha256,
                len(episodes),
                target,
                json.dumps(config),
                reader,
                json.dumps(versions()),
                _now(),
            ],
        )
        self.store_suite(suite_sha256, episodes)

    def store_suite(self, sha256: str, episodes: list[Episode]) -> None:
        rows = [
            (sha256, e.episode_id, i, e.model_dump_json(exclude_none=True)) for i, e in enumerate(episodes)
        ]
        try:
            with immediate_transaction(self.db):
                self.conn.executemany("INSERT OR IGNORE INTO suite_episodes VALUES (?, ?, ?, ?)", rows)
        except sqlite3.Error as exc:
            raise StoreError(describe_sqlite_error(self.path, exc)) from exc

    def reopen_run(self, run_id: str) -> None:
        self._exec(
            "UPDATE runs SET status = 'running', ended_at = NULL, resumed = resumed + 1 WHERE id = ?",
            [run_id],
        )

    def end_run(self, run_id: str, status: str, summary: dict[str, Any]) -> None:
        self._exec(
            "UPDATE runs SET status = ?, ended_at = ?, summary = ? WHERE id = ?",
            [status, _now(), json.dumps(summary), run_id],
        )

    # -- episodes ----------------------------------------------------------------------------

    def last_attempts(self, run_id: str) -> dict[str, dict[str, Any]]:
        """Each episode's latest attempt in the run."""
        latest: dict[str, dict[str, Any]] = {}
        for row in self._rows("SELECT * FROM run_episodes WHERE run_id = ? ORDER BY attempt", [run_id]):
            latest[row["episode_id"]] = row
        return latest

    def final_attempts(self, run_id: str) -> list[dict[str, Any]]:
        """The ``done`` attempt of every finished episode: the namespaces whose events are the run's trace."""
        return [row for row in self.last_attempts(run_id).values() if row["status"] == "done"]

    def start_episode(
        self, run_id: str, episode_id: str, attempt: int, namespace: str, sessions: int
    ) -> None:
        self._exec(
            "INSERT INTO run_episodes (run_id, episode_id, attempt, namespace, status, started_at,"
            " sessions_total) VALUES (?, ?, ?, ?, 'running', ?, ?)",
            [run_id, episode_id, attempt, namespace, _now(), sessions],
        )

    def progress(
        self, run_id: str, episode_id: str, attempt: int, *, sessions: int, turns: int, probes: int
    ) -> None:
        self._exec(
            "UPDATE run_episodes SET sessions_done = ?, turns_done = ?, probes_done = ?"
            " WHERE run_id = ? AND episode_id = ? AND attempt = ?",
            [sessions, turns, probes, run_id, episode_id, attempt],
        )

    def finish_episode(
        self,
        run_id: str,
        episode_id: str,
        attempt: int,
        *,
        status: str,
        duration_ms: float,
        timings: dict[str, Any],
        error: str | None = None,
        counts: dict[str, int] | None = None,
    ) -> None:
        self._exec(
            "UPDATE run_episodes SET status = ?, error = ?, ended_at = ?, duration_ms = ?, timings = ?,"
            " counts = ? WHERE run_id = ? AND episode_id = ? AND attempt = ?",
            [
                status,
                error,
                _now(),
                round(duration_ms, 3),
                json.dumps(timings),
                None if counts is None else json.dumps(counts),
                run_id,
                episode_id,
                attempt,
            ],
        )

    def record_probe(
        self,
        run_id: str,
        episode_id: str,
        attempt: int,
        *,
        probe_id: str,
        probe_type: str,
        requester: str | None,
        answer: Any,
        retrieved: list[str],
        retrieve_ms: float | None,
        reader_ms: float | None,
        status: str = "ok",
        error: str | None = None,
    ) -> None:
        latency = (retrieve_ms or 0.0) + (reader_ms or 0.0)
        self._exec(
            "INSERT INTO run_probes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                run_id,
                episode_id,
                attempt,
                probe_id,
                probe_type,
                requester,
                status,
                error,
                None if answer is None else json.dumps(answer),
                json.dumps(retrieved),
                None if retrieve_ms is None else round(retrieve_ms, 3),
                None if reader_ms is None else round(reader_ms, 3),
                round(latency, 3),
                _now(),
            ],
        )

    def record_write(
        self,
        run_id: str,
        episode_id: str,
        attempt: int,
        *,
        turn_id: str,
        recorded_event: str | None,
        tool: str,
        status: str,
        why: str | None,
        source_items: list[str],
        target_items: list[str],
        ms: float | None,
    ) -> None:
        """One recorded write, update or delete as an A/B replay played it (``run_writes``)."""
        self._exec(
            "INSERT OR REPLACE INTO run_writes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [run_id, episode_id, attempt, turn_id, recorded_event, tool, status, why,
             json.dumps(source_items), json.dumps(target_items), None if ms is None else round(ms, 3),
             _now()],
        )  # fmt: skip

    def write_counts(self, run_id: str) -> dict[str, int]:
        """The run's recorded writes by status (``done``, ``skipped``, ``failed``); empty for a suite."""
        rows = self._exec(
            "SELECT status, count(*) FROM run_writes WHERE run_id = ? GROUP BY status", [run_id]
        ).fetchall()
        return {status: n for status, n in rows}

    # -- reading back --------------------------------------------------------------------------

    def summary(self, run_id: str) -> dict[str, Any]:
        latest = self.last_attempts(run_id)
        statuses = Counter(row["status"] for row in latest.values())
        failures = Counter(
            (row["error"] or "unknown error").splitlines()[0][:200]
            for row in latest.values()
            if row["status"] == "failed"
        )
        done = [row for row in latest.values() if row["status"] == "done"]
        probes = self._exec(
            "SELECT count(*) FROM run_probes p JOIN run_episodes e ON p.run_id = e.run_id"
            " AND p.episode_id = e.episode_id AND p.attempt = e.attempt"
            " WHERE p.run_id = ? AND e.status = 'done'",
            [run_id],
        ).fetchone()[0]
        attempts = self._exec("SELECT count(*) FROM run_episodes WHERE run_id = ?", [run_id]).fetchone()[0]
        return {
            "episodes_done": statuses["done"],
            "episodes_failed": statuses["failed"],
            "episodes_unfinished": statuses["interrupted"] + statuses["running"],
            "attempts": attempts,
            "failures": dict(failures.most_common(10)),
            "sessions": sum(row["sessions_done"] for row in done),
            "turns": sum(row["turns_done"] for row in done),
            "probes": probes,
            "busy_ms": round(sum(row["duration_ms"] or 0.0 for row in done), 1),
        }
