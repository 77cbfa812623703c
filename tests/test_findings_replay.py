"""The CI gate on replays: `memtap check --fail-on high` fails a faulty backend's replay of a
generated suite and passes the builtin backend's replay of the same suite."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from click.testing import CliRunner
from findings_helpers import FAULTY

from memtap.cli.main import cli
from memtap.findings.facts import facts, normalise
from memtap.probes.generators import generate
from memtap.probes.suitefile import write_suite
from memtap.trace.models import EffectKind
from memtap.trace.store import TraceStore


def _cli(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_check_fails_the_overwriting_backends_replay_and_passes_the_builtin_ones(tmp_path: Path) -> None:
    suite = tmp_path / "suite.jsonl"
    write_suite(generate("paradigms", seed=5, episodes=2), suite)
    config = tmp_path / "faulty.json"
    server = {"command": sys.executable, "args": [str(FAULTY)], "env": {"FAULT": "overwrite"},
              "memtap": {"profile": "server-memory"}}  # fmt: skip
    config.write_text(json.dumps({"mcpServers": {"memory": server}}))
    builtin_db, faulty_db = tmp_path / "builtin.db", tmp_path / "faulty.db"
    assert (
        _cli("replay", str(suite), "--target", "builtin", "--reader", "none", "--db", str(builtin_db))[0] == 0
    )
    target = f"mcp:{config}:memory"
    assert _cli("replay", str(suite), "--target", target, "--reader", "none", "--db", str(faulty_db))[0] == 0

    code, out, _ = _cli("check", "--db", str(faulty_db), "--fail-on", "high", "--json")
    assert code == 1
    flagged = [json.loads(line) for line in out.splitlines()]
    # Every finding is a high erasure of an observation the backend deleted on its own (the replay
    # never asks for a delete), naming the facts it lost; a deletion not flagged lost no fact: its
    # content had none ("Got it, I'll keep that in mind.") or the write that replaced it restates them.
    store = TraceStore(faulty_db)
    deletions = []  # (item id, content before, what the same call wrote)
    for e in store.list_events():
        written = " ".join(eff.content_after or "" for eff in e.effects if eff.kind == EffectKind.ADD)
        deletions += [(eff.item_id, eff.content_before or "", written) for eff in e.effects
                      if eff.kind == EffectKind.DELETE]  # fmt: skip
    store.close()
    flagged_ids = sorted(f["item_ids"][0] for f in flagged)
    assert flagged_ids and set(flagged_ids) <= {d[0] for d in deletions}
    for item_id, before, written in deletions:
        if item_id not in flagged_ids:
            kept = f" {normalise(written)} "
            assert all(f in facts(written) or f" {f} " in kept for f in facts(before)), before
    assert {(f["kind"], f["severity"], f["evidence"]["removed"], f["evidence"]["requested_by_call"])
            for f in flagged} == {("erasure", "high", "delete", False)}  # fmt: skip
    assert all(f["evidence"]["lost_facts"] for f in flagged)

    code, out, _ = _cli("check", "--db", str(builtin_db), "--fail-on", "high", "--json")
    assert code == 0, out
    assert all(json.loads(line)["severity"] in ("info", "low", "medium") for line in out.splitlines())
