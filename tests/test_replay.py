"""Replay through memtap's MCP front door over streamable HTTP: a real `memtap serve`, a real
SQLite trace, the CLI through its runner (and, for Ctrl-C, as a real process)."""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from conftest import ServerProcess

from memtap.cli.main import cli
from memtap.probes.generators import generate
from memtap.probes.suitefile import load_suite, write_suite

StartServer = Callable[..., ServerProcess]


def small_suite(path: Path, paradigms: int = 4, permission: int = 1, seed: int = 3) -> Path:
    episodes = generate("paradigms", seed=seed, episodes=paradigms)
    if permission:
        episodes += generate("permission", seed=seed, episodes=permission)
    write_suite(episodes, path)
    return path


def replay(*args: str) -> Result:
    result = CliRunner().invoke(cli, ["replay", *args, "--json"], catch_exceptions=False)
    return result


def rows(db: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def played_sessions(db: Path, run: str) -> Counter[tuple[str, str]]:
    """(episode, session) of every turn write in the namespaces of the run's final attempts."""
    return Counter(rows(db, """
        SELECT e.episode, e.session FROM events e JOIN run_episodes r
          ON e.namespace = r.namespace AND r.run_id = ? AND r.status = 'done'
        WHERE e.op = 'write' GROUP BY e.episode, e.session, e.namespace""", run))  # fmt: skip


def test_replay_on_builtin_sends_every_turn_with_its_context_and_answers_every_probe(tmp_path: Path) -> None:
    suite_path = small_suite(tmp_path / "suite.jsonl")
    episodes = load_suite(suite_path).episodes
    db = tmp_path / "trace.db"
    result = replay(str(suite_path), "--target", "builtin", "--db", str(db), "--run", "r1", "--workers", "2")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert (summary["status"], summary["episodes_done"], summary["episodes_failed"]) == ("completed", 5, 0)
    assert summary["memory_events"] > 0 and summary["memory_events_without_context"] == 0
    assert summary["target"]["started_server"] is True

    expected_turns = {
        (e.episode_id, s.session_id, t.turn_id, t.role) for e in episodes for s in e.sessions for t in s.turns
    }
    writes = rows(db, "SELECT episode, session, turn, role, namespace, run_id, front_door, arguments FROM events"
                      " WHERE op = 'write'")  # fmt: skip
    assert {(ep, s, t, role) for ep, s, t, role, *_ in writes} == expected_turns
    assert len(writes) == len(expected_turns)
    assert {(ep, ns) for ep, _, _, _, ns, *_ in writes} == {
        (e.episode_id, f"r1/{e.episode_id}/1") for e in episodes
    }
    # the default without --server: memtap serve --stdio as the replay's child
    assert {(run, door) for *_, run, door, _ in writes} == {("r1", "mcp-stdio")}
    speaker = {(e.episode_id, t.turn_id): t.speaker for e in episodes for s in e.sessions for t in s.turns}
    for episode, _, turn, _, _, _, _, arguments in writes:
        assert json.loads(arguments)["metadata"]["speaker"] == speaker[(episode, turn)]
    missing = rows(db, "SELECT count(*) FROM events WHERE run_id = 'r1' AND (episode IS NULL OR session IS NULL"
                       " OR turn IS NULL)")  # fmt: skip
    assert missing == [(0,)]

    progress = rows(
        db, "SELECT episode_id, attempt, status, sessions_done, sessions_total, probes_done FROM run_episodes"
    )
    assert sorted(progress) == sorted((e.episode_id, 1, "done", len(e.sessions), len(e.sessions), len(e.probes))
                                      for e in episodes)  # fmt: skip
    answers = rows(
        db, "SELECT episode_id, probe_id, probe_type, requester, answer, retrieved FROM run_probes"
    )
    assert len(answers) == sum(len(e.probes) for e in episodes)
    for _, _, kind, _, answer, retrieved in answers:
        shape = set(json.loads(answer))
        assert shape == {"permission": {"action", "answer"}, "change_detection": {"answer", "changed"},
                         "source": {"answer", "source"}, "conflict_value": {"answer", "conflict"},
                         "temporal": {"answer", "temporal"}}.get(kind, {"answer"})  # fmt: skip
        assert isinstance(json.loads(retrieved), list)
    searches = rows(
        db, "SELECT turn, requester, session FROM events WHERE op = 'retrieve' AND episode = 'perm-000'"
    )
    permission = next(e for e in episodes if e.episode_id == "perm-000")
    assert sorted(searches) == sorted(
        (p.probe_id, permission.requester_of(p), "probes") for p in permission.probes
    )
    [(stored,)] = rows(
        db, "SELECT count(*) FROM suite_episodes WHERE suite_sha256 = ?", load_suite(suite_path).sha256
    )
    assert stored == len(episodes)
    [(status, config, versions)] = rows(db, "SELECT status, config, versions FROM runs WHERE id = 'r1'")
    assert status == "completed" and json.loads(config)["workers"] == 2 and "mcp" in json.loads(versions)


def test_a_suite_that_does_not_validate_is_refused_before_anything_is_replayed(tmp_path: Path) -> None:
    suite_path = small_suite(tmp_path / "suite.jsonl", paradigms=2, permission=0)
    lines = suite_path.read_text().splitlines()
    broken = json.loads(lines[1])
    broken["probes"][0]["support"] = ["ghost"]
    broken["sessions"][0]["turns"][0]["speaker"] = "nobody"
    lines[1] = json.dumps(broken)
    suite_path.write_text("\n".join(lines) + "\n")
    db = tmp_path / "trace.db"
    result = replay(str(suite_path), "--target", "builtin", "--db", str(db))
    assert result.exit_code == 2
    assert "has 2 problems" in result.output
    assert "suite.jsonl:2: episode par-000-preserve: sessions[0].turns[0].speaker: 'nobody'" in result.output
    assert "probes[0].support[0]: gold key 'ghost' does not exist" in result.output
    assert not db.exists()


# serial: runs alone, after the parallel part. Its Ctrl-C was once not acted on (the replay ran to
# the end and exited 0, in a pytest-xdist run at load ~7). With an LLM reader's request held, that
# was the reader's thread wait (fixed: memtap/probes/threads.py, and the test below); with no reader
# (this test) it was not reproduced again (6 of 6 runs gave 130 at load ~4).
@pytest.mark.serial
def test_interrupted_replay_resumes_without_duplicated_or_missing_sessions(tmp_path: Path) -> None:
    suite_path = small_suite(tmp_path / "suite.jsonl", paradigms=10, permission=0, seed=5)
    episodes = load_suite(suite_path).episodes
    db = tmp_path / "trace.db"
    cmd = [sys.executable, "-m", "memtap", "replay", str(suite_path), "--target", "builtin", "--db", str(db),
           "--run", "r2", "--reader", "none"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # wait until the run is under way: two episodes done
            try:
                if rows(db, "SELECT count(*) FROM run_episodes WHERE status = 'done'")[0][0] >= 2:
                    break
            except sqlite3.Error:
                pass
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err.decode()
    assert f"--resume r2 --db {db}" in err.decode()
    assert rows(db, "SELECT status FROM runs") == [("interrupted",)]
    before = dict(rows(db, "SELECT status, count(*) FROM run_episodes GROUP BY status"))
    assert before["done"] >= 2 and before["done"] < len(episodes)

    result = replay(
        str(suite_path), "--target", "builtin", "--db", str(db), "--resume", "r2", "--reader", "none"
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert (summary["status"], summary["episodes_done"]) == ("completed", len(episodes))
    final = rows(db, "SELECT episode_id, count(*) FROM run_episodes WHERE run_id = 'r2' AND status = 'done'"
                     " GROUP BY episode_id")  # fmt: skip
    assert sorted(final) == sorted((e.episode_id, 1) for e in episodes)
    played = played_sessions(db, "r2")
    assert played == Counter({(e.episode_id, s.session_id): 1 for e in episodes for s in e.sessions})
    assert rows(db, "SELECT status, resumed FROM runs") == [("completed", 1)]
    retried = rows(db, "SELECT count(*) FROM run_episodes WHERE status IN ('interrupted', 'running')")[0][0]
    assert summary["attempts"] == len(episodes) + retried


def test_ctrl_c_while_the_reader_waits_on_its_model_stops_the_replay_at_once(tmp_path: Path) -> None:
    """A model that never answers holds the reader's request (its timeout is ten minutes): one
    SIGINT still ends the replay promptly, as interrupted and resumable, without waiting for it."""
    model = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.extend(iter(lambda: model.accept()[0], None)), daemon=True).start()
    config = tmp_path / "models.json"
    entry = {
        "model": "openai/slow",
        "api_base": f"http://127.0.0.1:{model.getsockname()[1]}/v1",
        "timeout": 600,
    }
    config.write_text(json.dumps({"model_list": [{"model_name": "reader", "litellm_params": entry}]}))
    suite_path = small_suite(tmp_path / "suite.jsonl", paradigms=2, permission=0, seed=5)
    db = tmp_path / "trace.db"
    cmd = [sys.executable, "-m", "memtap", "replay", str(suite_path), "--target", "builtin", "--db", str(db),
           "--run", "r5", "--reader", "reader", "--config", str(config)]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not held:  # the reader's request reached the model, which holds it
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the reader never called its model"
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)  # before the fix: held for the request's 600 s
    finally:
        if proc.poll() is None:
            proc.kill()
        model.close()
        for conn in held:
            conn.close()
    assert proc.returncode == 130, err.decode()
    assert f"--resume r5 --db {db}" in err.decode()
    assert rows(db, "SELECT status FROM runs") == [("interrupted",)]
    assert rows(db, "SELECT count(*) FROM run_episodes WHERE status = 'done'") == [(0,)]


def test_a_target_failing_mid_run_marks_the_episode_failed_and_the_run_goes_on(
    tmp_path: Path, start_http_server: StartServer
) -> None:
    episodes = generate("paradigms", seed=8, episodes=3)
    long_turn = episodes[1].sessions[2].turns[0]
    long_turn.content = "x" * 500
    suite_path = tmp_path / "suite.jsonl"
    write_suite(episodes, suite_path)
    db = tmp_path / "shared.db"
    server = start_http_server("--max-content-bytes", "300", db=db)
    result = replay(
        str(suite_path), "--target", "builtin", "--db", str(db), "--server", server.url, "--run", "r3"
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert (summary["episodes_done"], summary["episodes_failed"]) == (2, 1)
    [(reason, count)] = summary["failures"].items()
    assert count == 1 and "memory_add failed" in reason and "the limit is 300 bytes" in reason
    [(episode, status, error, done)] = rows(db, "SELECT episode_id, status, error, sessions_done FROM run_episodes"
                                                " WHERE status != 'done'")  # fmt: skip
    assert (episode, status, done) == (episodes[1].episode_id, "failed", 2) and "300 bytes" in error
    # resuming plays the failed episode again, as a new attempt, and leaves the done ones alone
    again = replay(
        str(suite_path), "--target", "builtin", "--db", str(db), "--server", server.url, "--resume", "r3"
    )
    assert json.loads(again.output)["sessions_played"] == 2
    attempts = rows(db, "SELECT episode_id, attempt, status FROM run_episodes ORDER BY episode_id, attempt")
    failing = episodes[1].episode_id
    assert [(a, st) for e, a, st in attempts if e == failing] == [(1, "failed"), (2, "failed")]
    assert all((a, st) == (1, "done") for e, a, st in attempts if e != failing)


def test_replay_refuses_a_server_writing_to_another_database(
    tmp_path: Path, start_http_server: StartServer
) -> None:
    suite_path = small_suite(tmp_path / "suite.jsonl", paradigms=1, permission=0)
    server = start_http_server(db=tmp_path / "theirs.db")
    result = replay(
        str(suite_path), "--target", "builtin", "--db", str(tmp_path / "mine.db"), "--server", server.url
    )
    assert result.exit_code == 2
    assert f"writes to {tmp_path / 'theirs.db'}, not to {tmp_path / 'mine.db'}" in result.output
    assert rows(tmp_path / "mine.db", "SELECT status FROM runs") == [("failed",)]


def test_resume_refuses_an_unknown_run_a_changed_suite_and_another_target(tmp_path: Path) -> None:
    from memtap.probes.runs import RunStore

    suite_path = small_suite(tmp_path / "suite.jsonl", paradigms=2, permission=0)
    db = tmp_path / "trace.db"
    store = RunStore(db)
    store.create_run("old", suite_path=suite_path, suite_sha256="0" * 64, episodes=[], target="builtin",
                     config={}, reader="none")  # fmt: skip
    store.close()
    unknown = replay(str(suite_path), "--target", "builtin", "--db", str(db), "--resume", "nope")
    assert unknown.exit_code == 2 and f"no run 'nope' in {db}" in unknown.output
    changed = replay(str(suite_path), "--target", "builtin", "--db", str(db), "--resume", "old")
    assert changed.exit_code == 2 and "run old replayed a different suite" in changed.output
    clash = replay(str(suite_path), "--target", "builtin", "--db", str(db), "--run", "old")
    assert clash.exit_code == 2 and "run 'old' already exists" in clash.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target", "mcp:servers.yaml:memory"], "cannot read config servers.yaml"),
        (["--target", "openai:localhost:8000"], "give the API base URL"),
        (["--target", "ftp"], "unknown target 'ftp'"),
        (["--target", "builtin", "--reader", "gpt-4o-mini"], "pass --config FILE"),
    ],
)
def test_bad_targets_and_readers_are_refused_before_the_database_is_touched(
    tmp_path: Path, args: list[str], message: str
) -> None:
    suite_path = small_suite(tmp_path / "suite.jsonl", paradigms=1, permission=0)
    result = replay(str(suite_path), *args, "--db", str(tmp_path / "t.db"))
    assert result.exit_code == 2 and message in result.output
    assert not (tmp_path / "t.db").exists()


def test_blank_database_has_the_run_tables() -> None:
    conn = sqlite3.connect(":memory:")
    from sqlite_utils import Database

    from memtap.trace.migrations import MIGRATIONS

    MIGRATIONS.apply(Database(conn))
    columns = {t: [c[1] for c in conn.execute(f"PRAGMA table_info({t})")] for t in
               ("runs", "run_episodes", "run_probes", "suite_episodes")}  # fmt: skip
    assert {"id", "suite_path", "suite_sha256", "target", "config", "reader", "versions", "started_at", "ended_at",
            "status"} <= set(columns["runs"])  # fmt: skip
    assert {
        "run_id",
        "episode_id",
        "attempt",
        "namespace",
        "status",
        "error",
        "timings",
        "sessions_done",
        "counts",
    } <= set(columns["run_episodes"])
    assert {"probe_id", "requester", "answer", "retrieved", "latency_ms"} <= set(columns["run_probes"])


def test_generated_56_episode_paradigms_suite_replays_end_to_end_on_builtin(tmp_path: Path) -> None:
    """The acceptance run: the 56-episode suite, every memory event with run, episode, session, turn."""
    suite_path = tmp_path / "paradigms56.jsonl"
    write_suite(generate("paradigms", seed=7, episodes=56), suite_path)
    episodes = load_suite(suite_path).episodes
    db = tmp_path / "trace.db"
    result = replay(str(suite_path), "--target", "builtin", "--db", str(db), "--run", "p56", "--workers", "4",
                    "--reader", "none")  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert (summary["episodes_done"], summary["episodes_failed"]) == (56, 0)
    assert summary["sessions"] == sum(len(e.sessions) for e in episodes)
    assert summary["memory_events"] == sum(e.turn_count() + len(e.probes) for e in episodes)
    assert summary["memory_events_without_context"] == 0
    assert played_sessions(db, "p56") == Counter(
        {(e.episode_id, s.session_id): 1 for e in episodes for s in e.sessions}
    )
