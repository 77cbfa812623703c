"""``memtap score --answer-scorer``: the shared MemProbe sample (8 episodes, 32 probes) imported,
replayed on builtin with the extractive reader (which answers in MemProbe's JSON keys for a
MemProbe suite), and scored with ``memprobe`` and with ``strict``, to exact values; the default
follows the suite's origin; bad scorer names are one clear error."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner, Result
from conftest import SHARED_DATA

from memtap.cli.main import cli
from memtap.probes.dialects import MEMPROBE_SHAPES, in_dialect
from memtap.probes.importers import import_file
from memtap.probes.readers import parse_reply, reader_prompt
from memtap.probes.schema import Probe
from memtap.probes.targets.base import ProbeResult
from memtap.scoring.scorers import make_scorer

SAMPLE = SHARED_DATA / "memprobe" / "suite56-sample.jsonl"
SCHEMA = Path(__file__).resolve().parent.parent / "memtap" / "scoring" / "memtap-score-1.schema.json"
SHORT = {"correct": "C", "partial": "P", "incorrect": "I", "skip": "S"}
# One pytest-xdist worker runs this module, so the replayed sample (a module fixture) is built once.
pytestmark = pytest.mark.xdist_group("answer_scorer_cli")


def run_cli(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.fixture(scope="module")
def sample_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not SAMPLE.exists():
        pytest.skip(f"the MemProbe sample is not at {SAMPLE} (../shared is absent)")
    tmp = tmp_path_factory.mktemp("memprobe")
    suite, db = tmp / "suite.jsonl", tmp / "trace.db"
    assert run_cli("suite", "import", "memprobe", str(SAMPLE), "-o", str(suite)).exit_code == 0
    replay = run_cli("replay", str(suite), "--target", "builtin", "--db", str(db), "--run", "mp",
                     "--reader", "extractive", "--json")  # fmt: skip
    assert replay.exit_code == 0, replay.output
    return db


def score(db: Path, *extra: str) -> dict[str, Any]:
    result = run_cli("score", "mp", "--db", str(db), "--json", "--no-store", *extra)
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(result.stdout)
    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).validate(report)
    return report


def outcomes(report: dict[str, Any]) -> str:
    return "".join(SHORT[p["outcome"]] for e in report["episodes"]["probes"] for p in e["probes"])


def test_memprobe_scorer_on_the_replayed_sample_gives_exact_labels(sample_run: Path) -> None:
    report = score(sample_run, "--answer-scorer", "memprobe")
    assert report["answer_scorer"] == {
        "name": "memprobe",
        "version": "1",
        "reference": "jq-ding/MemProbe@4ef09390 src/eval/protocol.py score_answer",
        "chosen_by": "option",
        "note": "answer scorer memprobe 1 (--answer-scorer)",
    }
    # Episodes in suite order (01A, 01B, 02A, 02B, 03A, 03C, 20B, 20D), four probes each. The two
    # temporal probes without structured gold (01A, 03A) are partial by MemProbe's legacy rule: the
    # extractive answer names a change but not the user as its agent.
    assert outcomes(report) == "CICPIIIIICICCICCICCPCIIIICCICIII"
    assert report["measures"]["answer_accuracy"] == {"value": 0.4062, "ci": [0.25, 0.5312], "n": 32}
    by_type = {k: (v["value"], v["n"]) for k, v in report["breakdowns"]["accuracy_by_probe_type"].items()}
    assert by_type == {
        "change_detection": (0.625, 8),
        "conflict_value": (0.0, 4),
        "current_value": (0.5, 8),
        "previous_value": (0.75, 4),
        "source": (0.2, 5),
        "temporal": (0.0, 3),
    }
    assert (report["measures"]["plasticity"]["value"], report["measures"]["stability"]["value"]) == (
        0.5,
        0.3125,
    )


def test_strict_scorer_on_the_same_run_gives_its_own_exact_labels(sample_run: Path) -> None:
    report = score(sample_run, "--answer-scorer", "strict")
    assert (report["answer_scorer"]["name"], report["answer_scorer"]["chosen_by"]) == ("strict", "option")
    # strict demands the trigger: both legacy temporal probes are incorrect, not partial.
    assert outcomes(report) == "CICIIIIIICICCICCICCICIIIICCICIII"
    assert report["measures"]["answer_accuracy"] == {"value": 0.4062, "ci": [0.25, 0.5312], "n": 32}
    assert report["measures"]["temporal_fidelity"]["value"] == 0.0


def test_an_imported_suite_is_scored_by_its_benchmarks_scorer_by_default_and_says_so(
    sample_run: Path,
) -> None:
    report = score(sample_run)
    assert report["answer_scorer"]["name"] == "memprobe"
    assert report["answer_scorer"]["chosen_by"] == "origin"
    assert report["answer_scorer"]["note"] == "answer scorer memprobe 1 (the suite's origin, memprobe)"
    table = run_cli("score", "mp", "--db", str(sample_run), "--no-store")
    assert "memtap: answer scorer memprobe 1 (the suite's origin, memprobe)" in table.output


def test_a_scorer_that_does_not_know_a_probe_type_skips_it_and_says_which(sample_run: Path) -> None:
    report = score(sample_run, "--answer-scorer", "locomo")
    skipped = [p for e in report["episodes"]["probes"] for p in e["probes"] if p["outcome"] == "skip"]
    assert len(skipped) == 32
    assert "answer scorer locomo does not score probe type temporal: 3 probe(s) skipped" in report["warnings"]
    assert report["coverage"]["probes_without_gold"] == 32


def test_unknown_answer_scorer_and_a_judge_without_a_model_are_one_clear_error(sample_run: Path) -> None:
    for name, says in (
        (
            "ragas",
            "--answer-scorer 'ragas': use one of strict, memprobe, locomo, memarena, longmemeval:MODEL",
        ),
        ("longmemeval", "name its model: --answer-scorer longmemeval:MODEL --config FILE"),
    ):
        result = CliRunner().invoke(cli, ["score", "mp", "--db", str(sample_run), "--answer-scorer", name])
        assert result.exit_code == 2 and says in result.output and "Traceback" not in result.output


def test_the_extractive_reader_answered_the_memprobe_suite_in_memprobes_json_keys(sample_run: Path) -> None:
    with sqlite3.connect(sample_run) as conn:
        stored = conn.execute("SELECT probe_type, answer FROM run_probes WHERE run_id = 'mp'").fetchall()
    keys = {kind: set(json.loads(answer)) for kind, answer in stored}
    assert keys["conflict_value"] == {
        "conflict_value_mentioned", "conflict_value", "source", "source_class", "status", "status_class",
        "applies_to_target", "current_value", "reason",
    }  # fmt: skip
    assert keys["source"] == {
        "source_description",
        "source_class",
        "action",
        "accepted",
        "current_value",
        "reason",
    }
    assert keys["temporal"] == {"changed", "trigger", "old_value", "new_value", "timing", "reason"}
    assert keys["change_detection"] == {"changed", "current_value", "previous_value", "reason"}
    assert keys["current_value"] == {"answer", "reason"}


def test_the_llm_reader_is_asked_for_the_dialects_shape() -> None:
    probe = Probe.model_validate(
        {
            "probe_id": "p",
            "type": "conflict_value",
            "question": "Was X mentioned?",
            "time": "2026-01-01T00:00:00Z",
        }
    )
    result = ProbeResult(retrieved=[], retrieve_ms=0.0)
    assert MEMPROBE_SHAPES["conflict_value"] in reader_prompt(probe, "u", result, "memprobe")
    assert '"conflict": {"value"' in reader_prompt(probe, "u", result)
    # LoCoMo, MemArena and LongMemEval read text: a withheld or abstaining answer is written in their words
    assert in_dialect("permission", {"action": "withhold", "answer": None}, "memarena") == {
        "action": "withhold", "answer": "I cannot share that.",
    }  # fmt: skip
    assert in_dialect("abstention", {"action": "abstain", "answer": None}, "locomo")["answer"] == (
        "No information available."
    )


def test_published_labels_of_the_sample_are_reproduced_through_memtaps_own_import() -> None:
    """The 32 published probes of tests/data/memprobe_published_labels.json that belong to the
    shared sample, scored against the episodes memtap's importer wrote (the latent spec it keeps),
    with each prediction stored as the LLM reader stores a reply."""
    if not SAMPLE.exists():
        pytest.skip(f"the MemProbe sample is not at {SAMPLE} (../shared is absent)")
    published = json.loads((Path(__file__).parent / "data" / "memprobe_published_labels.json").read_text())
    episodes = {e.episode_id: e for e in import_file("memprobe", SAMPLE).episodes}
    scorer, checked = make_scorer("memprobe"), 0
    for case in published["probes"]:
        episode = episodes.get(case["episode"])
        if episode is None:
            continue
        probe = next(p for p in episode.probes if p.type == case["type"])
        stored = {**parse_reply(case["predicted"]), "raw_reply": case["predicted"]}
        assert scorer.score(episode, probe, stored).outcome == case["match"], (case["episode"], case["type"])
        checked += 1
    assert checked == 32


# MemProbe's always_preserve baseline (protocol.py run_always_preserve) on the sample, with the labels
# its report publishes (results/suite56/reports/baselines_report_gpt54_v2.json, key always_preserve);
# PILOT-01A is left out: its published entry was not read.
PRESERVE_LABELS = {
    "PILOT-01B": "CICC", "PILOT-02A": "IICI", "PILOT-02B": "CICC", "PILOT-03A": "IIII",
    "PILOT-03C": "CICC", "PILOT-20B": "IIII", "PILOT-20D": "CICC",
}  # fmt: skip


def _always_preserve(kind: str, initial: str) -> str:
    return {
        "current_value": initial,
        "change_detection": "No, the value has not changed",
        "previous_value": "None",
        "source": f"The value is {initial}, as originally stated by the user",
        "conflict_value": "No conflicting values were introduced",
        "temporal": f"The value has always been {initial}",
    }[kind]


def test_memprobes_always_preserve_baseline_gets_its_published_labels() -> None:
    if not SAMPLE.exists():
        pytest.skip(f"the MemProbe sample is not at {SAMPLE} (../shared is absent)")
    scorer = make_scorer("memprobe")
    for episode in import_file("memprobe", SAMPLE).episodes:
        if episode.episode_id not in PRESERVE_LABELS:
            continue
        initial = episode.metadata["memprobe"]["canonical_initial"]
        labels = "".join(
            SHORT[scorer.score(episode, p, {"reply": _always_preserve(p.type, initial)}).outcome]
            for p in episode.probes
        )
        assert labels == PRESERVE_LABELS[episode.episode_id], episode.episode_id


def test_compare_warns_when_the_runs_were_scored_by_different_answer_scorers(sample_run: Path) -> None:
    from memtap.scoring.compare import compare_scores

    result = compare_scores(
        score(sample_run, "--answer-scorer", "memprobe"), score(sample_run, "--answer-scorer", "strict")
    )
    assert any("different answer scorers (memprobe for A, strict for B)" in w for w in result["warnings"])
    assert result["measures"]["answer_accuracy"]["difference"]["value"] == 0.0
