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
from findings_helpers import FAULTY, faulty_server

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


def test_a_wrapped_servers_own_items_are_no_retrieval_leak(suite: Path, tmp_path: Path) -> None:
    """The replay tags a wrapped server's items with the episode's namespace: the suite's namespace
    owner asking is their owner, so neither the gold nor the detector sees a leak."""
    config = tmp_path / "reference.json"
    config.write_text(json.dumps({"mcpServers": {"memory": faulty_server("")}}))
    report = _replay_and_score(suite, f"mcp:{config}:memory", tmp_path / "reference.db")
    assert report["measures"]["retrieval_leak_rate"]["value"] == 0.0
    assert _counts(report)["leak_retrieval"] == (0, 0, 0, 2)
    assert _counts(report)["stale_coexistence"] == (1, 0, 0, 1)


def test_a_backend_sharing_one_graph_across_users_is_caught_leaking_by_the_items_tags(tmp_path: Path) -> None:
    suite = tmp_path / "lifecycle.jsonl"
    write_suite(generate("lifecycle", seed=5, episodes=2), suite)
    server = faulty_server("leak")
    server["env"]["LEAK_FILE"] = str(tmp_path / "shared-graph.json")
    config = tmp_path / "leak.json"
    config.write_text(json.dumps({"mcpServers": {"memory": server}}))
    report = _replay_and_score(suite, f"mcp:{config}:memory", tmp_path / "leak.db")
    # The first episode ran alone; the second one's searches return the first user's memories.
    assert _counts(report)["leak_retrieval"] == (1, 0, 0, 1)


def test_a_chat_agent_reciting_denied_memories_is_an_injection_leak_and_enforcing_the_gate_stops_it(
    tmp_path: Path, upstream: Any, start_http_server: Any
) -> None:
    suite = tmp_path / "permission.jsonl"
    write_suite(generate("permission", seed=5, episodes=2), suite)
    counts = {}
    for gate in ("observe", "enforce"):
        config = tmp_path / f"chat-{gate}.json"
        params = {"model": "openai/memory-echo", "api_base": upstream.base_url}
        config.write_text(json.dumps({"model_list": [{"model_name": "agent", "litellm_params": params}],
                                      "memtap": {"memory": "auto"}}))  # fmt: skip
        db = tmp_path / f"{gate}.db"
        server = start_http_server("--config", str(config), "--gate", gate, db=db)
        target = f"openai:http://127.0.0.1:{server.port}/v1#agent"
        code, out = _cli("replay", str(suite), "--target", target, "--db", str(db), "--run", "r1")
        assert code == 0, out
        server.stop()  # flushes the trace
        code, out = _cli("score", "r1", "--db", str(db), "--json")
        assert code == 0, out
        report = json.loads(out.strip().splitlines()[-1])
        assert report["detectors"]["detectors"]["leak_injection"]["gold"].startswith(
            "answer leak, or retrieval"
        )
        counts[gate] = _counts(report)
    assert (counts["observe"]["leak_injection"], counts["observe"]["leak_retrieval"]) == (
        (2, 0, 0, 0),
        (2, 0, 0, 0),
    )
    assert (counts["enforce"]["leak_injection"], counts["enforce"]["leak_retrieval"]) == (
        (0, 0, 0, 2),
        (0, 0, 0, 2),
    )


def test_answer_leaks_of_a_wrapped_servers_replay_are_not_measured_as_missed_injections(
    tmp_path: Path,
) -> None:
    """A wrapped MCP server has no chat: the answers are the replay reader's, outside the trace, so
    leak_injection says it cannot be measured rather than counting the gold's answer leaks as misses."""
    suite = tmp_path / "permission.jsonl"
    write_suite(generate("permission", seed=5, episodes=2), suite)
    config = tmp_path / "reference.json"
    config.write_text(json.dumps({"mcpServers": {"memory": faulty_server("")}}))
    db = tmp_path / "reference.db"
    code, out = _cli("replay", str(suite), "--target", f"mcp:{config}:memory", "--reader", "extractive",
                     "--db", str(db), "--run", "r1")  # fmt: skip
    assert code == 0, out
    code, out = _cli("score", "r1", "--db", str(db), "--json")
    assert code == 0, out
    report = json.loads(out.strip().splitlines()[-1])
    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).validate(report)
    assert report["measures"]["permission_leak_rate"]["value"] > 0  # the gold has answer leaks ...
    assert "leak_injection" not in report["detectors"]["detectors"]  # ... which no detector can see
    assert report["detectors"]["not_measured"] == {
        "leak_injection": "the answers are the replay's reader's, not chat replies in the trace"
    }
    assert _counts(report)["leak_retrieval"] == (2, 0, 0, 0)
    code, table = _cli("score", "r1", "--db", str(db), "--no-store")
    assert code == 0
    assert "leak_injection: not measured (the answers are the replay's reader's" in table


def test_a_deleted_copy_of_a_memory_another_item_still_holds_is_no_erasure_for_the_gold(
    suite: Path, tmp_path: Path
) -> None:
    """The re-adding backend deletes the second copy of a repeated sentence: an unsafe deletion at
    the storage level (the item held a valid memory), but the memory lives on in its first copy, so
    neither the gold nor the detector sees an erasure; nor in the acknowledgements it deletes."""
    config = tmp_path / "readd.json"
    config.write_text(json.dumps({"mcpServers": {"memory": faulty_server("readd")}}))
    report = _replay_and_score(suite, f"mcp:{config}:memory", tmp_path / "readd.db")
    assert report["measures"]["unsafe_deletion_rate"]["value"] > 0
    assert _counts(report)["erasure"] == (0, 0, 0, 2)


def test_a_backend_whose_merges_lose_detail_is_measured_for_destructive_update(
    suite: Path, tmp_path: Path
) -> None:
    """The summarising backend rewrites what an entity held into its first sentence plus the new
    observation: updates that drop still-valid memories, for the gold and for the detector."""
    config = tmp_path / "lossy.json"
    config.write_text(json.dumps({"mcpServers": {"memory": faulty_server("lossy_update")}}))
    report = _replay_and_score(suite, f"mcp:{config}:memory", tmp_path / "lossy.db")
    assert _counts(report)["destructive_update"] == (2, 0, 0, 0)
    assert _counts(report)["erasure"] == (2, 0, 0, 0)
    destructive = report["detectors"]["detectors"]["destructive_update"]
    assert destructive["precision"] == destructive["recall"] == 1.0


def test_a_summarising_backend_that_merges_a_correction_beside_the_old_value_is_measured_stale(
    tmp_path: Path,
) -> None:
    """The summarising backend merges "That has changed. ..." into the observation that held the
    old value: one item states both, which the gold counts as the superseded memory stored beside
    its replacement and the detector flags. In life-003 the merged item lasts to the end; in
    life-005 a later merge keeps only its first sentence, so the two coexist only until then, which
    the gold counts too (the detector judges each write as it happens)."""
    episodes = generate("lifecycle", seed=5, episodes=6)
    suite = tmp_path / "lifecycle.jsonl"
    write_suite([episodes[3], episodes[5]], suite)
    config = tmp_path / "lossy.json"
    config.write_text(json.dumps({"mcpServers": {"memory": faulty_server("lossy_update")}}))
    report = _replay_and_score(suite, f"mcp:{config}:memory", tmp_path / "lossy.db")
    assert _counts(report)["stale_coexistence"] == (2, 0, 0, 0)


def _episodes(tmp_path: Path, *ids: str) -> Path:
    suite = tmp_path / "suite.jsonl"
    write_suite([e for e in generate("paradigms", seed=5, episodes=6) if e.episode_id in ids], suite)
    return suite


def _replay_on(fault: str, suite: Path, tmp_path: Path) -> dict[str, Any]:
    config = tmp_path / f"{fault}.json"
    config.write_text(json.dumps({"mcpServers": {"memory": faulty_server(fault)}}))
    return _replay_and_score(suite, f"mcp:{config}:memory", tmp_path / f"{fault}.db")


def test_an_erasure_of_what_no_gold_memory_holds_is_outside_the_gold_not_a_false_alarm(
    tmp_path: Path,
) -> None:
    """The re-adding backend deletes the assistant's "I can remind you about the dentist paperwork
    on Monday." (par-001): the detector flags the lost day, the gold has no memory for it, so the
    finding is counted outside the gold instead of as a false positive of either episode."""
    report = _replay_on("readd", _episodes(tmp_path, "par-001-update", "par-001-preserve"), tmp_path)
    erasure = report["detectors"]["detectors"]["erasure"]
    assert _counts(report)["erasure"] == (0, 0, 0, 2)
    assert erasure["outside_gold"] == 2
    code, table = _cli("score", "r1", "--db", str(tmp_path / "readd.db"), "--no-store")
    assert code == 0 and "outside gold" in table


def test_an_update_under_a_new_id_is_judged_by_the_memory_of_the_item_it_replaced(tmp_path: Path) -> None:
    """The summarising backend's ids hash the content, so its lossy rewrite of "My dentist is Dr.
    Lindqvist." is a new item that holds no gold memory any more: the finding on it is judged by
    the item it replaced, which held one (a hit, not outside the gold)."""
    report = _replay_on("lossy_update", _episodes(tmp_path, "par-001-update", "par-001-preserve"), tmp_path)
    assert _counts(report)["destructive_update"] == (2, 0, 0, 0)
    assert _counts(report)["erasure"] == (2, 0, 0, 0)


def test_a_decoy_restating_the_old_value_after_an_overwrite_is_measured_stale(tmp_path: Path) -> None:
    """par-002-update: after "... The project targets PyPy 3.10." the decoy "I looked at PyPy 3.10
    again, but nothing changes for me: the project targets Python 3.13." is all the overwriting
    backend keeps: the superseded value stored beside its replacement, for the gold and the detector."""
    report = _replay_on("overwrite", _episodes(tmp_path, "par-002-update", "par-002-preserve"), tmp_path)
    assert _counts(report)["stale_coexistence"] == (1, 0, 0, 1)
