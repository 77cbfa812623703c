"""Generators: deterministic from the seed, valid, balanced, and not solvable by shortcuts."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from memtap.cli.main import cli
from memtap.probes.generators import KINDS, generate
from memtap.probes.generators._facts import FACTS
from memtap.probes.generators.paraphrase import verbatim_problems
from memtap.probes.stats import suite_stats, value_pattern
from memtap.probes.suitefile import check_episodes, dump_episode, load_suite


def gen(tmp_path: Path, *args: str) -> Path:
    out = tmp_path / f"{'-'.join(args)}.jsonl"
    result = CliRunner().invoke(cli, ["suite", "gen", *args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_generated_suites_validate_and_are_deterministic_from_the_seed(tmp_path: Path, kind: str) -> None:
    first = gen(tmp_path / "a", kind, "--seed", "11", "--episodes", "6").read_bytes()
    again = gen(tmp_path / "b", kind, "--seed", "11", "--episodes", "6").read_bytes()
    other = gen(tmp_path / "c", kind, "--seed", "12", "--episodes", "6").read_bytes()
    assert first == again and first != other
    episodes = load_suite(tmp_path / "a" / f"{kind}---seed-11---episodes-6.jsonl").episodes
    assert len(episodes) == 6
    assert [p for e in episodes for p in verbatim_problems(e)] == []


def test_paradigms_suite_of_56_is_balanced_split_typed_and_defeats_shortcuts() -> None:
    episodes = generate("paradigms", seed=7, episodes=56)
    stats = suite_stats(episodes)
    assert stats["paradigms"] == {
        p: 14 for p in ("interference", "misinformation", "consolidation", "reconsolidation")
    }
    assert stats["behaviour"] == {"update": 28, "preserve": 28}
    assert set(stats["probes_by_type"]) == {"current_value", "previous_value", "change_detection", "source",
                                            "conflict_value", "temporal"}  # fmt: skip
    split = [e for e in episodes if e.split_perturbation]
    assert Counter(e.expected_behavior for e in split) == {"update": 9, "preserve": 9}
    assert {e.paradigm for e in split} == set(stats["paradigms"])
    base = stats["shortcut_baselines"]
    assert base["episodes"] == 56 and base["probes"] == 112
    for name in ("always_update", "always_preserve", "latest_value"):
        assert abs(base[name] - 0.5) <= 0.05, (name, base[name])
    conditions = Counter(e.condition for e in episodes)
    assert set(conditions) == {"authoritative_update", "decoy_no_update", "user_explicit", "assistant_noise",
                               "third_party_noise", "stale_tool", "high", "low", "high_weak_challenge",
                               "low_weak_challenge", "reactivated", "direct", "reactivated_weak", "direct_weak"}  # fmt: skip


def test_paradigm_pairs_share_everything_but_the_perturbation_and_gold() -> None:
    episodes = generate("paradigms", seed=3, episodes=16)
    for update, preserve in zip(episodes[::2], episodes[1::2], strict=True):
        assert update.group_id == preserve.group_id and update.expected_behavior == "update"
        assert [p.question for p in update.probes] == [p.question for p in preserve.probes]
        assert [(s.time, s.phase) for s in update.sessions] == [(s.time, s.phase) for s in preserve.sessions]
        for a, b in zip(update.sessions, preserve.sessions, strict=True):
            if not (a.phase or "").startswith("perturbation"):
                assert [t.content for t in a.turns] == [t.content for t in b.turns]
        old, new = update.metadata["values"]["old"], update.metadata["values"]["new"]
        for episode in (update, preserve):  # the new value is the last value either perturbation mentions
            last_perturbation = [s for s in episode.sessions if (s.phase or "").startswith("perturbation")][
                -1
            ]
            text = " ".join(t.content.lower() for t in last_perturbation.turns)
            spots = [(m.start(), v) for v in (old, new) for m in value_pattern(v).finditer(text)]
            assert max(spots)[1] == new


def test_paradigms_draw_on_at_least_twelve_fact_types_with_unambiguous_values() -> None:
    assert len(FACTS) >= 12 and {f.domain for f in FACTS} == {"personal", "work", "agentic"}
    for fact in FACTS:
        for value in fact.values:
            others = [v for v in fact.values if v != value]
            assert not any(value_pattern(value).search(o.lower()) for o in others), (fact.name, value)
    used = {e.metadata["fact_type"] for e in generate("paradigms", seed=1, episodes=30)}
    assert len(used) >= 12
    fillers = Counter(
        s.metadata["session_type"] for e in generate("paradigms", seed=1, episodes=8) for s in e.sessions
    )
    assert {"weakly_related", "near_miss", "confusable", "decoy_nonupdate"} <= set(fillers)


def test_permission_pools_are_balanced_with_a_protected_fact_per_deny() -> None:
    episodes = generate("permission", seed=5, episodes=4)
    probes = [p for e in episodes for p in e.probes]
    assert Counter(p.expected_action for p in probes) == {"disclose": 20, "withhold": 20}
    kinds = Counter((p.metadata["requester_kind"], p.expected_action) for p in probes)
    assert kinds[("anonymous", "disclose")] and kinds[("anonymous", "withhold")]
    assert kinds[("named_requester", "withhold")] and kinds[("known_requester", "disclose")]
    assert kinds[("owner", "disclose")]
    for episode in episodes:
        assert {s.access.visibility for s in episode.sessions} == {"private", "participants", "public"}
        for probe in episode.probes:
            memory = episode.gold_memory[probe.metadata["fact_key"]]
            if probe.expected_action == "withhold":
                assert probe.gold.fields.protected_fact == memory.metadata["value"] and probe.support == []
                assert probe.gold.fields.protected_fact.lower() in memory.content.lower()
            else:
                assert probe.support == [probe.metadata["fact_key"]]
            session = next(s for s in episode.sessions if s.session_id == memory.created_in)
            allowed = (session.access.visibility == "public" or probe.requester == episode.namespace
                       or probe.requester in session.participants)  # fmt: skip
            assert allowed == (probe.expected_action == "disclose"), probe


def test_abstention_pairs_fabricated_premises_with_grounded_foils_from_real_turns() -> None:
    [episode] = generate("abstention", seed=2, episodes=1)
    pairs: dict[str, dict[str, str]] = {}
    turns = {t.turn_id: t.content for s in episode.sessions for t in s.turns}
    for probe in episode.probes:
        pairs.setdefault(probe.metadata["pair"], {})[probe.metadata["role"]] = probe.expected_action
        if probe.type == "qa":
            assert probe.gold.answer and probe.gold.answer in turns[probe.evidence_turns[0]]
        else:
            assert probe.gold.answer is None and probe.support == [] and probe.metadata["premise"]
    assert all(roles == {"grounded_foil": "answer", "fabricated": "abstain"} for roles in pairs.values())


def test_lifecycle_has_six_memory_types_supersedes_and_invalidations() -> None:
    episodes = generate("lifecycle", seed=4, episodes=3)
    for episode in episodes:
        bank = episode.gold_memory
        assert {m.type for m in bank.values()} == {"episodic", "user_profile", "fact", "agent_identity",
                                                   "agent_method", "agent_knowledge"}  # fmt: skip
        superseding = [k for k, m in bank.items() if m.replaces]
        invalidated_only = [
            k for k, m in bank.items() if m.invalidated_in and not any(k in n.replaces for n in bank.values())
        ]
        assert len(superseding) == 2 and len(invalidated_only) == 1
        adds = [k for s in episode.sessions for k in s.gold.update.add]
        deletes = [k for s in episode.sessions for k in s.gold.update.delete]
        assert sorted(adds) == sorted(superseding) and len(deletes) == 3
        assert Counter(p.type for p in episode.probes) == {"qa": 5, "abstention": 1}


def test_generators_refuse_a_bad_kind_and_zero_episodes(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = runner.invoke(cli, ["suite", "gen", "trivia", "-o", str(tmp_path / "x.jsonl")])
    assert bad.exit_code == 2 and "'trivia' is not one of" in bad.output
    zero = runner.invoke(
        cli, ["suite", "gen", "paradigms", "--episodes", "0", "-o", str(tmp_path / "x.jsonl")]
    )
    assert zero.exit_code == 2 and not (tmp_path / "x.jsonl").exists()


def test_paraphrase_without_a_config_naming_the_model_is_refused(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["suite", "gen", "paradigms", "--paraphrase", "gpt-4o-mini",
                                      "-o", str(tmp_path / "x.jsonl")])  # fmt: skip
    assert result.exit_code == 2
    assert "memtap: error: --paraphrase gpt-4o-mini: pass --config FILE whose model_list" in result.output
    assert not (tmp_path / "x.jsonl").exists()


def test_an_odd_episode_count_leaves_out_the_last_preserve_member() -> None:
    episodes = generate("paradigms", seed=9, episodes=5)
    assert [e.expected_behavior for e in episodes] == ["update", "preserve", "update", "preserve", "update"]
    _, _, problems = check_episodes((str(i), json.loads(dump_episode(e))) for i, e in enumerate(episodes))
    assert problems == []
