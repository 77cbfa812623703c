"""`memtap check` as a CI gate and `memtap findings list|show`, over traces recorded by the proxy
in front of the faulty and the correct memory server (live detection off, so check does the work)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import anyio
import pytest
from click.testing import CliRunner
from conftest import http_client, meta
from findings_helpers import faulty_server, serve_proxy

from memtap.cli.main import cli

ALICE = {
    "entities": [{"name": "alice", "entityType": "person", "observations": ["likes tea", "lives in Oslo"]}]
}
ADD = {"observations": [{"entityName": "alice", "contents": ["works at Acme"]}]}


def _record(db: Path, fault: str) -> None:
    async def play() -> None:
        served = serve_proxy(db, {"memory": faulty_server(fault)}, {"findings": {"live": False}})
        try:
            url = f"http://127.0.0.1:{served.port}/mcp"
            async with http_client(url, {"X-Memtap-Namespace": "alice", "X-Memtap-Run": "r1"}) as client:
                await client.call_tool(
                    "create_entities", ALICE, meta=meta(session="s1", turn="t1", role="user")
                )
                await client.call_tool(
                    "add_observations", ADD, meta=meta(session="s1", turn="t2", role="user")
                )
        finally:
            served.stop()

    anyio.run(play)


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def faulty_db(tmp_path: Path) -> Path:
    db = tmp_path / "faulty.db"
    _record(db, "overwrite")
    return db


def test_check_fails_on_high_findings_of_an_overwriting_backend(faulty_db: Path) -> None:
    code, out, err = _run("check", "--db", str(faulty_db), "--fail-on", "high")
    assert code == 1
    assert out.count("high      erasure") == 2
    assert "checked 2 events: 2 findings (erasure 2); 2 at or above high; 0 not judged" in err


def test_check_passes_the_correct_backend_on_the_same_script(tmp_path: Path) -> None:
    db = tmp_path / "correct.db"
    _record(db, "")
    code, out, err = _run("check", "--db", str(db), "--fail-on", "high")
    assert (code, out) == (0, "")
    assert "checked 2 events: 0 findings (none)" in err


def test_check_stores_findings_once_and_findings_list_and_show_read_them(faulty_db: Path) -> None:
    assert _run("check", "--db", str(faulty_db))[0] == 1
    assert _run("check", "--db", str(faulty_db))[0] == 1  # run again: nothing stored twice
    code, out, _ = _run("findings", "list", "--db", str(faulty_db), "--json", "--kind", "erasure")
    listed = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(listed) == 2
    assert {f["evidence"]["content_before"] for f in listed} == {"likes tea", "lives in Oslo"}
    assert {(f["severity"], f["namespace"], f["run"], f["session"], f["turn"]) for f in listed} == {
        ("high", "alice", "r1", "s1", "t2")
    }
    code, out, _ = _run("findings", "show", "--db", str(faulty_db), listed[0]["id"])
    assert code == 0 and f"id: {listed[0]['id']}" in out and '"lost_facts": [' in out
    assert _run("findings", "list", "--db", str(faulty_db), "--severity", "critical")[1] == ""
    assert _run("findings", "list", "--db", str(faulty_db), "--namespace", "bob")[2] == "no findings\n"


def test_check_json_prints_one_finding_per_line_and_filters_by_run_and_since(faulty_db: Path) -> None:
    code, out, _ = _run("check", "--db", str(faulty_db), "--json", "--run", "r1", "--no-save")
    assert code == 1 and [json.loads(line)["kind"] for line in out.splitlines()] == ["erasure", "erasure"]
    assert _run("check", "--db", str(faulty_db), "--run", "other")[0] == 0
    assert _run("check", "--db", str(faulty_db), "--since", "2999-01-01T00:00:00+00:00")[0] == 0
    assert _run("check", "--db", str(faulty_db), "--fail-on", "critical")[0] == 0


def _one_line_error(*args: str) -> str:
    """The command exits 2 with one ``memtap: error:`` line on stderr, and nothing on stdout."""
    code, out, err = _run(*args)
    assert (code, out) == (2, ""), (code, out, err)
    assert err.startswith("memtap: error: ") and err.count("\n") == 1, err
    return err


def test_check_bad_input_is_one_line_with_exit_2(faulty_db: Path, tmp_path: Path) -> None:
    err = _one_line_error("check", "--db", str(faulty_db), "--since", "yesterday")
    assert err.startswith("memtap: error: --since 'yesterday': give an ISO 8601 time")
    assert "unknown detector(s) nonsense" in _one_line_error(
        "check", "--db", str(faulty_db), "--detector", "nonsense"
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("memtap:\n  findings:\n    canaries: ['abc']\n")
    err = _one_line_error("check", "--db", str(faulty_db), "--config", str(bad))
    assert "canaries[0]: a canary must be at least 6 characters" in err
    assert "no finding 'nope'" in _one_line_error("findings", "show", "--db", str(faulty_db), "nope")
    not_a_trace = tmp_path / "not-a-trace.db"
    not_a_trace.write_text("plain text\n")
    for command in (["check"], ["findings", "list"]):
        err = _one_line_error(*command, "--db", str(not_a_trace))
        assert f"{not_a_trace} is not a memtap database" in err


def test_a_database_from_before_findings_is_migrated_by_check(faulty_db: Path) -> None:
    with sqlite3.connect(faulty_db) as db:
        db.execute("DROP TABLE findings")
        db.execute("DELETE FROM _sqlite_migrations WHERE name = 'm016_create_findings'")
    assert _run("check", "--db", str(faulty_db))[0] == 1
    with sqlite3.connect(faulty_db) as db:
        assert db.execute("SELECT count(*) FROM findings").fetchone() == (2,)
