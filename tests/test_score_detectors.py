"""`memtap score` measures the findings detectors against the gold of a replayed run: the builtin
backend's replay of a small paradigms suite and the overwriting faulty server's replay of the same
suite, both deterministic, with their exact per-episode confusion counts."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner
from findings_helpers import FAULTY

from memtap.cli.main import cli
from memtap.probes.generators import generate
from memtap.probes.suitefile import write_suite

SCHEMA = Path(__file__).resolve().parent.parent / "memtap" / "scoring" / "memtap-score-1.schema.json"


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("suite") / "suite.jsonl"
    write_suite(generate("paradigms", seed=5, episodes=2), path)
    return path


def _replay_and_score(suite: Path, target: str, db: Path) -> dict[str, Any]:
    code, out = _cli(
        "replay", str(suite), "--target", target, "--reader", "none", "--db", str(db), "--run", "r1"
    )
    assert code == 0, out
    code, out = _cli("score", "r1", "--db", str(db), "--json")
    assert code == 0, out
    report: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).validate(report)
    return report


def _counts(report: dict[str, Any]) -> dict[str, tuple[int, int, int, int]]:
    return {k: (d["tp"], d["fp"], d["fn"], d["tn"]) for k, d in report["detectors"]["detectors"].items()}


def test_builtin_replay_gets_detector_precision_and_recall_with_no_false_alarms(
    suite: Path, tmp_path: Path
) -> None:
    report = _replay_and_score(suite, "builtin", tmp_path / "builtin.db")
    det = report["detectors"]
    assert det["unit"] == "episode" and det["measured"] is True
    # no answers (--reader none): the answer-leak detector is not measured
    assert _counts(report) == {
        "erasure": (0, 0, 0, 2),
        "destructive_update": (0, 0, 0, 2),
        # builtin keeps the superseded value: the update episode's "That changed ... X is NEW" is flagged
        # beside the live "X is OLD"; the preserve episode's "nothing changes for me" is not
        "stale_coexistence": (1, 0, 0, 1),
        "leak_retrieval": (0, 0, 0, 2),
    }
    assert det["detectors"]["erasure"]["precision"] is None
    assert (
        det["detectors"]["stale_coexistence"]["precision"]
        == det["detectors"]["stale_coexistence"]["recall"]
        == 1.0
    )
    code, table = _cli("score", "r1", "--db", str(tmp_path / "builtin.db"), "--no-store")
    assert code == 0 and "Detectors against the gold (per episode)" in table
    assert "stale_coexistence" in table


def test_overwriting_backend_replay_gets_erasure_recall_one(suite: Path, tmp_path: Path) -> None:
    config = tmp_path / "faulty.json"
    server = {"command": sys.executable, "args": [str(FAULTY)], "env": {"FAULT": "overwrite"},
              "memtap": {"profile": "server-memory"}}  # fmt: skip
    config.write_text(json.dumps({"mcpServers": {"memory": server}}))
    report = _replay_and_score(suite, f"mcp:{config}:memory", tmp_path / "faulty.db")
    erasure = report["detectors"]["detectors"]["erasure"]
    assert (erasure["tp"], erasure["fp"], erasure["fn"]) == (2, 0, 0)
    assert erasure["precision"] == 1.0 and erasure["recall"] == 1.0
    assert report["detectors"]["findings"] > 0
