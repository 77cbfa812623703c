"""memtap score and memtap compare through the CLI: a generated paradigms suite replayed on builtin,
the score file against its JSON Schema, and runs with problems reported, never silently."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner, Result
from trace_builder import SAY_V0, RunWriter

from memtap.cli.main import cli
from memtap.probes.generators import generate
from memtap.probes.suitefile import write_suite
from memtap.scoring.measures import HEADLINE

SCHEMA = Path(__file__).resolve().parent.parent / "memtap" / "scoring" / "memtap-score-1.schema.json"
# One pytest-xdist worker runs this module, so its two replays (a module fixture) are run once.
pytestmark = pytest.mark.xdist_group("score_cli")


def run_cli(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def validate(report: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).validate(report)


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A paradigms suite (4 matched pairs) and a permission episode, replayed twice on builtin:
    r1 retrieves 5 memories per probe, r2 only 1."""
    tmp = tmp_path_factory.mktemp("replayed")
    suite = tmp / "suite.jsonl"
    write_suite(generate("paradigms", seed=7, episodes=8) + generate("permission", seed=7, episodes=1), suite)
    db = tmp / "trace.db"
    for run, top_k in (("r1", "5"), ("r2", "1")):
        result = run_cli("replay", str(suite), "--target", "builtin", "--db", str(db), "--run", run,
                         "--top-k", top_k, "--workers", "2", "--json")  # fmt: skip
        assert result.exit_code == 0, result.output
    return db


def test_a_replayed_paradigms_suite_gets_a_complete_report_that_validates(replayed: Path) -> None:
    result = run_cli("score", "r1", "--db", str(replayed), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    validate(report)
    assert [m for m in report["measures"]] == [m.name for m in HEADLINE]
    headline = ("capture_f1", "op_f1", "recall_at_n", "f1_pu", "plasticity", "stability", "sp_balance",
                "retrieval_leak_rate", "answer_accuracy", "historical_fidelity", "source_fidelity")  # fmt: skip
    for name in headline:
        measure = report["measures"][name]
        assert (
            measure["value"] is not None
            and measure["n"] > 0
            and measure["ci"][0] <= measure["value"] <= measure["ci"][1]
        ), name
    # nothing here is undefined but what the suite cannot measure: no deletes, no qa, no abstention probes
    undefined = {name for name, m in report["measures"].items() if m["value"] is None}
    assert undefined == {"unsafe_deletion_rate", "qa_f1", "abstention_rate", "foil_answer_rate"}
    assert report["coverage"]["episodes_scored"] == 9 and report["warnings"] == []
    assert report["latency"]["search_ms"]["n"] == report["coverage"]["probes_total"]
    # matched pairs: each shortcut is right on exactly one member of every pair
    for name, baseline in report["baselines"].items():
        assert baseline["accuracy"]["value"] == pytest.approx(0.5, abs=0.1), name
    assert report["baselines"]["always_update"]["sp_balance"]["value"] == 0.0
    accuracy = report["measures"]["answer_accuracy"]
    wrong = accuracy["n"] - round(
        accuracy["value"] * accuracy["n"]
    )  # every wrong or partial answer is charged
    assert report["attribution"]["total"] == len(report["wrong_answers"]) == wrong > 0
    with sqlite3.connect(replayed) as conn:
        stored = conn.execute("SELECT format, json FROM scores WHERE run_id = 'r1'").fetchall()
        aligned = conn.execute("SELECT count(*), sum(matched) FROM alignments WHERE run_id = 'r1'").fetchone()
    assert stored[-1][0] == "memtap-score/1" and json.loads(stored[-1][1])["measures"] == report["measures"]
    assert aligned[0] > aligned[1] > 0


def test_the_score_table_lists_every_measure_and_the_attribution(replayed: Path) -> None:
    result = run_cli("score", "r1", "--db", str(replayed), "--no-store")
    assert result.exit_code == 0, result.output
    for m in HEADLINE:
        assert f" {m.name} " in result.output
    assert "Failure attribution" in result.output and "Shortcut baselines" in result.output
    markdown = run_cli("score", "r1", "--db", str(replayed), "--no-store", "--markdown").output
    assert markdown.startswith("# Score of run r1") and "| storage | capture_f1 |" in markdown


def test_compare_shows_paired_differences_with_intervals(replayed: Path) -> None:
    result = run_cli("compare", "r1", "r2", "--db", str(replayed), "--json")
    assert result.exit_code == 0, result.output
    compared = json.loads(result.stdout)
    assert compared["paired_episodes"] == 9
    recall = compared["measures"]["recall_at_all"]
    assert recall["b"] < recall["a"]  # one memory per probe finds less of the support than five
    diff = recall["difference"]
    assert diff["value"] == pytest.approx(recall["b"] - recall["a"], abs=1e-3)
    assert diff["ci"][0] <= diff["value"] <= diff["ci"][1] < 0
    same = compared["measures"]["capture_f1"]["difference"]  # the same turns were stored
    assert same["value"] == 0.0 and same["ci"] == [0.0, 0.0]
    table = run_cli("compare", "r1", "r2", "--db", str(replayed)).output
    assert "B = r2 minus A = r1 over 9 shared episodes" in table and "recall_at_all" in table


# -- bad input: reported, counted, never silent ------------------------------------------------------


def _small_run(tmp_path: Path, *, fail: str | None = None, skip_answer: bool = False) -> Path:
    w = RunWriter(tmp_path / "trace.db", "r", tmp_path / "suite.jsonl")
    for episode in ("upd", "pres", "perm"):
        w.start(episode, 1)
        w.add(episode, "s0", f"{episode}-1", SAY_V0 if episode != "perm" else "My door code is 4417.")
        if episode == fail:
            w.finish(episode, "failed", "TargetError: memory_add failed: boom")
            continue
        for p in next(e for e in w.episodes if e.episode_id == episode).probes:
            if skip_answer and (episode, p.probe_id) == ("upd", "p0"):
                continue
            w.probe(
                episode, p.probe_id, [f"{episode}-1"], {"answer": "FitLife"}, requester=p.requester or "u"
            )
        w.finish(episode)
    w.close()
    return tmp_path / "trace.db"


def test_a_suite_file_changed_since_the_replay_is_reported_and_strict_refuses(tmp_path: Path) -> None:
    db = _small_run(tmp_path)
    suite = tmp_path / "suite.jsonl"
    suite.write_text(suite.read_text().replace("FitLife", "FitLyfe"))
    result = run_cli("score", "r", "--db", str(db), "--json")
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert report["coverage"]["suite_file"] == "changed"
    assert (
        "changed since the replay" in report["warnings"][0]
        and "scored against the gold stored" in report["warnings"][0]
    )
    assert "memtap: warning: the suite file" in result.stderr
    assert report["measures"]["capture_recall"]["value"] == 1.0  # the stored gold, not the edited file
    strict = run_cli("score", "r", "--db", str(db), "--strict", "--no-store")
    assert strict.exit_code == 2 and "memtap: error: run r has 1 problem(s)" in strict.stderr


def test_failed_episodes_are_excluded_and_counted(tmp_path: Path) -> None:
    db = _small_run(tmp_path, fail="pres")
    report = json.loads(run_cli("score", "r", "--db", str(db), "--json").stdout)
    validate(report)
    assert report["coverage"]["episodes_failed"] == [
        {"episode": "pres", "error": "TargetError: memory_add failed: boom"}
    ]
    assert report["coverage"]["episodes_scored"] == 2 and report["episodes"]["ids"] == ["upd", "perm"]
    assert report["measures"]["stability"] == {
        "value": None,
        "ci": None,
        "n": 0,
    }  # only pres expected preserve
    assert "1 episode(s) failed in the replay and are excluded from every measure: pres" in report["warnings"]


def test_probes_without_an_answer_count_as_wrong_and_are_counted(tmp_path: Path) -> None:
    db = _small_run(tmp_path, skip_answer=True)
    report = json.loads(run_cli("score", "r", "--db", str(db), "--json").stdout)
    coverage = report["coverage"]
    assert (coverage["probes_without_row"], coverage["probes_unanswered"], coverage["probes_total"]) == (
        1,
        1,
        7,
    )
    assert report["measures"]["answer_accuracy"]["n"] == 7  # still in the denominator
    assert "1 probe(s) have no answer and count as wrong" in report["warnings"]
    outcome = next(
        p
        for e in report["episodes"]["probes"]
        if e["episode"] == "upd"
        for p in e["probes"]
        if p["probe"] == "p0"
    )
    assert (outcome["outcome"], outcome["reason"]) == (
        "incorrect",
        "unanswered: no answer row for this probe",
    )


def test_unknown_runs_and_missing_databases_are_one_line_errors(tmp_path: Path) -> None:
    db = _small_run(tmp_path)
    unknown = run_cli("score", "nope", "--db", str(db))
    assert (
        unknown.exit_code == 2
        and "memtap: error: no run 'nope' in this database; runs here: r" in unknown.stderr
    )
    missing = run_cli("score", "r", "--db", str(tmp_path / "none.db"))
    assert missing.exit_code == 2 and "no trace database at" in missing.stderr
    assert not (tmp_path / "none.db").exists()


def test_every_measure_is_defined_in_the_docs_and_required_by_the_schema() -> None:
    docs = (Path(__file__).resolve().parent.parent / "docs" / "scoring.md").read_text()
    schema = json.loads(SCHEMA.read_text())
    names = [m.name for m in HEADLINE]
    assert schema["properties"]["measures"]["required"] == names
    assert [name for name in names if f"| `{name}` |" not in docs] == []


def test_a_run_without_answers_is_scored_at_storage_and_retrieval_only(tmp_path: Path) -> None:
    w = RunWriter(tmp_path / "trace.db", "quiet", tmp_path / "suite.jsonl", reader="none")
    w.start("upd", 3)
    w.add("upd", "s0", "a", SAY_V0)
    for p in ("p0", "p1", "p2"):
        w.probe("upd", p, ["a"], None)
    w.finish("upd")
    w.close()
    report = json.loads(run_cli("score", "quiet", "--db", str(tmp_path / "trace.db"), "--json").stdout)
    m = report["measures"]
    assert m["capture_recall"]["value"] == 1.0 and m["recall_at_all"]["n"] == 3
    assert all(
        m[x.name] == {"value": None, "ci": None, "n": 0} for x in HEADLINE if x.level in ("answer", "profile")
    )
    assert report["coverage"]["answers_scored"] is False and report["coverage"]["probes_unanswered"] is None
    assert any("has no answers (reader none)" in w for w in report["warnings"])
    assert report["attribution"]["total"] == 0
