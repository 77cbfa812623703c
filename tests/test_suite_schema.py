"""The suite schema: what validates, and how each kind of problem is reported (file, line,
episode, field)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from memtap.probes.errors import SuiteInvalid
from memtap.probes.schema import Episode
from memtap.probes.suitefile import dump_episode, load_suite, write_suite


def example_episode() -> dict[str, Any]:
    """The contract's example episode (SUITE_FORMAT.md), completed with the session s9 it names."""
    return {
        "format": "memtap-suite/1",
        "episode_id": "int-gym-update",
        "suite": "paradigms",
        "paradigm": "interference",
        "condition": "authoritative_update",
        "expected_behavior": "update",
        "namespace": "user-7",
        "participants": [
            {"id": "user-7", "role": "user"},
            {"id": "assistant", "role": "assistant"},
            {"id": "bob", "role": "third_party"},
        ],
        "split_perturbation": False,
        "sessions": [
            {
                "session_id": "s0",
                "time": "2026-01-06T13:35:57Z",
                "phase": "encoding",
                "participants": ["user-7", "assistant"],
                "access": {"visibility": "participants", "allow": [], "deny": [], "sensitivity": None},
                "turns": [
                    {"turn_id": "s0-t0", "role": "user", "speaker": "user-7",
                     "content": "I go to FitLife on Tuesdays.", "time": "2026-01-06T13:35:57Z"}
                ],
                "gold": {"capture": ["gym@v0"], "update": {"delete": [], "add": []}},
            },
            {
                "session_id": "s9",
                "time": "2026-01-20T09:00:00Z",
                "phase": "perturbation",
                "participants": ["user-7", "assistant"],
                "turns": [
                    {"turn_id": "s9-t0", "role": "user", "speaker": "user-7",
                     "content": "I switched to CrossFit Central.", "time": "2026-01-20T09:00:00Z"}
                ],
                "gold": {"capture": [], "update": {"delete": ["gym@v0"], "add": ["gym@v1"]}},
            },
        ],
        "gold_memory": {
            "gym@v0": {"content": "The user goes to FitLife.", "type": "user_profile",
                       "source": "user", "created_in": "s0", "invalidated_in": "s9",
                       "access": {"visibility": "participants"}},
            "gym@v1": {"content": "The user switched to CrossFit Central.", "type": "user_profile",
                       "source": "user", "created_in": "s9", "replaces": ["gym@v0"]},
        },
        "probes": [
            {
                "probe_id": "p0",
                "type": "current_value",
                "requester": "user-7",
                "question": "What gym does the user currently go to?",
                "time": "2026-02-01T10:00:00Z",
                "expected_behavior": "update",
                "expected_action": "answer",
                "gold": {"answer": "CrossFit Central", "fields": {}},
                "support": ["gym@v1"],
                "evidence_turns": ["s9-t0"],
            }
        ],
        "metadata": {"source": "generated", "seed": 7},
    }  # fmt: skip


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def problems_of(path: Path) -> list[str]:
    with pytest.raises(SuiteInvalid) as info:
        load_suite(path)
    return [str(p) for p in info.value.problems]


def test_contract_example_validates_and_round_trips(tmp_path: Path) -> None:
    suite = load_suite(write_jsonl(tmp_path / "s.jsonl", [example_episode()]))
    episode = suite.episodes[0]
    assert episode.sessions[1].gold.update.delete == ["gym@v0"]
    out = tmp_path / "again.jsonl"
    write_suite(suite.episodes, out)
    again = load_suite(out).episodes[0]
    assert again == episode
    assert json.loads(dump_episode(again))["sessions"][0]["time"] == "2026-01-06T13:35:57Z"


def test_yaml_and_json_array_suites_report_the_line_each_episode_starts_on(tmp_path: Path) -> None:
    import yaml

    good, bad = example_episode(), example_episode()
    bad["episode_id"] = "second"
    bad["sessions"][0]["turns"][0]["role"] = "narrator"
    as_json = tmp_path / "suite.json"
    as_json.write_text(json.dumps([good, bad], indent=2), encoding="utf-8")
    line = next(i for i, text in enumerate(as_json.read_text().splitlines(), 1) if '"second"' in text)
    [problem] = problems_of(as_json)
    start = int(problem.split(":")[1])
    assert start < line and problem.startswith(
        f"{as_json}:{start}: episode second: sessions[0].turns[0].role:"
    )
    as_yaml = tmp_path / "suite.yaml"
    as_yaml.write_text(yaml.safe_dump([good, bad], sort_keys=False), encoding="utf-8")
    [problem] = problems_of(as_yaml)
    assert "episode second: sessions[0].turns[0].role: Input should be" in problem and "'narrator'" in problem


def test_unknown_keys_are_named_with_their_path(tmp_path: Path) -> None:
    ep = example_episode()
    ep["sessions"][0]["turns"][0]["speeker"] = "user-7"
    ep["probes"][0]["gold"]["fields"]["chnaged"] = True
    found = problems_of(write_jsonl(tmp_path / "s.jsonl", [{"x": 1}, ep]))
    assert (
        f"{tmp_path / 's.jsonl'}:2: episode int-gym-update: sessions[0].turns[0].speeker: unknown key"
        in found
    )
    assert (
        f"{tmp_path / 's.jsonl'}:2: episode int-gym-update: probes[0].gold.fields.chnaged: unknown key"
        in found
    )
    assert any(p.startswith(f"{tmp_path / 's.jsonl'}:1: format: missing required key") for p in found)


def test_gold_keys_that_do_not_exist_are_reported_everywhere_they_are_used(tmp_path: Path) -> None:
    ep = example_episode()
    ep["sessions"][0]["gold"]["capture"] = ["gym@v9"]
    ep["gold_memory"]["gym@v1"]["replaces"] = ["gym@vX"]
    ep["probes"][0]["support"] = ["nope"]
    found = "\n".join(problems_of(write_jsonl(tmp_path / "s.jsonl", [ep])))
    assert "sessions[0].gold.capture[0]: gold key 'gym@v9' does not exist in gold_memory" in found
    assert "gold_memory.gym@v1.replaces[0]: gold key 'gym@vX' does not exist" in found
    assert "probes[0].support[0]: gold key 'nope' does not exist" in found


def test_support_must_be_valid_at_probe_time_except_for_history_probes(tmp_path: Path) -> None:
    ep = example_episode()
    ep["probes"][0]["support"] = ["gym@v0"]
    history = copy.deepcopy(ep["probes"][0]) | {"probe_id": "p1", "type": "previous_value"}
    early = copy.deepcopy(ep["probes"][0]) | {
        "probe_id": "p2",
        "support": ["gym@v1"],
        "time": "2026-01-10T00:00:00Z",
    }
    ep["probes"] += [history, early]
    found = problems_of(write_jsonl(tmp_path / "s.jsonl", [ep]))
    assert len(found) == 2
    assert (
        "probes[0].support[0]: 'gym@v0' is no longer valid when the probe is asked (invalidated in 's9')"
        in found[0]
    )
    assert "probes[2].support[0]: 'gym@v1' is created in 's9', after the probe is asked" in found[1]


def test_sessions_out_of_time_order_and_duplicate_ids_are_refused(tmp_path: Path) -> None:
    ep = example_episode()
    ep["sessions"][1]["time"] = "2025-12-01T00:00:00Z"
    ep["sessions"][1]["turns"][0]["time"] = "2025-12-01T00:00:00Z"
    ep["probes"].append(copy.deepcopy(ep["probes"][0]))
    twin = example_episode()
    found = "\n".join(problems_of(write_jsonl(tmp_path / "s.jsonl", [ep, twin])))
    assert "sessions[1].time: session 's9' at 2025-12-01T00:00:00+00:00 comes before" in found
    assert "episode int-gym-update: probes: duplicate id 'p0'" in found
    assert "s.jsonl:2: episode int-gym-update: episode_id: duplicate episode id (first at" in found


def test_every_problem_is_listed_not_only_the_first(tmp_path: Path) -> None:
    bad = [{**example_episode(), "episode_id": f"e{i}", "paradigm": "nonsense"} for i in range(3)]
    lines = write_jsonl(tmp_path / "s.jsonl", bad).read_text().splitlines()
    lines.insert(1, "{not json")
    (tmp_path / "s.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(SuiteInvalid) as info:
        load_suite(tmp_path / "s.jsonl")
    assert len(info.value.problems) == 4
    assert "s.jsonl:2: not valid JSON" in str(info.value)
    assert str(info.value).startswith(f"{tmp_path / 's.jsonl'} has 4 problems:")


def test_times_without_a_zone_are_utc_and_numbers_as_answers_become_text() -> None:
    ep = example_episode()
    ep["sessions"][0]["time"] = "2026-01-06T13:35:57"
    ep["probes"][0]["gold"]["answer"] = 42
    episode = Episode.model_validate(ep)
    assert episode.sessions[0].time.utcoffset() is not None
    assert episode.probes[0].gold.answer == "42"
