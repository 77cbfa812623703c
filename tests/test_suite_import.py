"""Importers: the real MemProbe sample and DyadMem excerpt in ../shared/data, and small files
built here from the documented LoCoMo, LongMemEval, MemArena and DyadMem schemas."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import SHARED_DATA

from memtap.cli.main import cli
from memtap.probes.errors import SuiteInvalid
from memtap.probes.importers import import_file
from memtap.probes.stats import suite_stats
from memtap.probes.suitefile import load_suite

MEMPROBE = SHARED_DATA / "memprobe" / "suite56-sample.jsonl"
DYADMEM = SHARED_DATA / "formats" / "dyadmem-episode.json"
needs_shared = pytest.mark.skipif(not MEMPROBE.exists(), reason="../shared/data is not beside this checkout")


def write_json(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


# -- MemProbe (real data) --------------------------------------------------------------------------


@needs_shared
def test_memprobe_sample_imports_validates_and_matches_the_source_counts(tmp_path: Path) -> None:
    source = [json.loads(line) for line in MEMPROBE.read_text(encoding="utf-8").splitlines()]
    out = tmp_path / "memprobe.jsonl"
    result = CliRunner().invoke(cli, ["suite", "import", "memprobe", str(MEMPROBE), "-o", str(out)])
    assert result.exit_code == 0, result.output
    stats = suite_stats(load_suite(out).episodes)
    assert stats["episodes"] == len(source) == 8
    assert stats["sessions"] == sum(len(e["sessions"]) for e in source) == 173
    assert stats["turns"] == sum(len(s["dialogue"]) for e in source for s in e["sessions"])
    assert stats["probes_by_type"] == dict(Counter(p["probe_type"] for e in source for p in e["probes"]))
    assert stats["paradigms"] == dict(Counter(e["paradigm"] for e in source))
    assert stats["behaviour"] == {"update": 4, "preserve": 4}
    assert stats["split_episodes"] == 1


@needs_shared
def test_memprobe_split_episode_keeps_both_parts_and_its_lineage() -> None:
    [split] = [e for e in import_file("memprobe", MEMPROBE).episodes if e.episode_id == "PILOT-20B"]
    phases = {s.session_id: s.phase for s in split.sessions}
    assert (phases["s18"], phases["s19"], phases["s20"], phases["s21"]) == (
        "perturbation_p1", "filler", "perturbation_p2", "post",
    )  # fmt: skip
    assert split.split_perturbation and "p1_hint" in split.metadata["split_hints"]
    assert split.gold_memory["fact@v0"].invalidated_in == "s18"
    assert split.gold_memory["fact@v1"].created_in == "s20"
    assert split.gold_memory["fact@v1"].replaces == ["fact@v0"]
    assert {t.role for s in split.sessions for t in s.turns} == {"user", "assistant", "tool"}
    temporal = next(p for p in split.probes if p.type == "temporal")
    assert temporal.gold.fields.temporal is not None
    assert temporal.gold.fields.temporal.trigger == "upstream service timeout issues"
    current = next(p for p in split.probes if p.type == "current_value")
    assert current.gold.answer == "5 retries" and current.support == ["fact@v1"]
    assert current.evidence_turns and all(t.startswith("s20-") for t in current.evidence_turns)


@needs_shared
def test_memprobe_conflict_gold_becomes_structured_probe_gold() -> None:
    episodes = {e.episode_id: e for e in import_file("memprobe", MEMPROBE).episodes}
    noise = episodes["PILOT-02B"]
    conflict = next(p for p in noise.probes if p.type == "conflict_value").gold.fields.conflict
    assert conflict is not None
    assert (conflict.value, conflict.source, conflict.status, conflict.applies_to_target) == (
        "April 15", "assistant", "not_accepted", False,
    )  # fmt: skip
    assert next(p for p in noise.probes if p.type == "source").gold.fields.source == "assistant"
    assert all(p.gold.fields.changed is False for p in noise.probes)
    assert "fact@v1" not in noise.gold_memory


@needs_shared
def test_memprobe_malformed_record_is_reported_with_its_line_and_skipped_only_when_asked(
    tmp_path: Path,
) -> None:
    lines = MEMPROBE.read_text(encoding="utf-8").splitlines()
    broken = json.loads(lines[1])
    del broken["latent_spec"]
    lines[1] = json.dumps(broken)
    path = tmp_path / "broken.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(SuiteInvalid) as info:
        import_file("memprobe", path)
    [problem] = info.value.problems
    assert str(problem) == f"{path}:2: episode PILOT-01B: latent_spec: malformed record: missing"
    assert "--skip-malformed" in str(info.value)
    result = import_file("memprobe", path, skip_malformed=True)
    assert len(result.episodes) == 7 and len(result.skipped) == 1


# -- DyadMem -----------------------------------------------------------------------------------------


@needs_shared
def test_dyadmem_excerpt_imports_with_recalled_memories_from_elided_sessions() -> None:
    [episode] = import_file("dyadmem", DYADMEM).episodes
    assert episode.paradigm == "lifecycle" and len(episode.sessions) == 2
    assert len(episode.sessions[0].gold.capture) == 23
    [qa] = episode.probes
    assert qa.type == "qa" and qa.support == ["m123", "m127", "m272", "m274"]
    assert episode.gold_memory["m272"].created_in == "s1"
    assert episode.gold_memory["m123"].created_in is None
    assert episode.gold_memory["m123"].metadata == {"from": "recall_memories"}


def dyadmem_episode() -> dict[str, Any]:
    def turn(role: str, content: str, at: str) -> dict[str, str]:
        return {"role": role, "content": content, "timestamp": at}

    return {
        "episode_id": "ep_1",
        "data_type": "user_centric",
        "sessions": [
            {
                "time_anchor": "Mar 01, 2026, 09:00:00",
                "dialogue_turns": [turn("user", "I live in Leeds.", "Mar 01, 2026, 09:00:00"),
                                   turn("assistant", "Noted.", "Mar 01, 2026, 09:00:30")],
                "capture_memories": [{"memory_index": 0, "memory_type": "user_profile",
                                      "memory_content": "The user lives in Leeds."},
                                     {"memory_index": 1, "memory_type": "fact",
                                      "memory_content": "The user's door code is 1234."}],
                "update_memories": {"delete_memories": [], "add_memories": []},
            },
            {
                "time_anchor": "Mar 09, 2026, 18:00:00",
                "dialogue_turns": [turn("user", "I moved to York. Forget my door code.", "Mar 09, 2026, 18:00:00")],
                "capture_memories": [],
                "update_memories": {
                    "delete_memories": [{"memory_index": 1}],
                    "add_memories": [{"memory_type": "user_profile", "memory_content": "The user lives in York.",
                                      "replaces": [0]}],
                },
            },
        ],
        "QA_list": [{"query": "Where does the user live?", "answer": "York",
                     "recall_memories": [{"memory_index": 0, "memory_type": "user_profile",
                                          "memory_content": "The user lives in Leeds."}]}],
    }  # fmt: skip


def test_dyadmem_update_gold_becomes_lineage_with_supersede_and_invalidate(tmp_path: Path) -> None:
    episode = dyadmem_episode()
    episode["QA_list"][0]["recall_memories"][0] = {"memory_index": 0, "memory_type": "user_profile",
                                                   "memory_content": "The user lives in Leeds."}  # fmt: skip
    with pytest.raises(SuiteInvalid) as info:  # the QA cites the superseded memory as current support
        import_file("dyadmem", write_json(tmp_path / "d.json", [episode]))
    assert "'m0' is no longer valid when the probe is asked (invalidated in 's1')" in str(info.value)
    episode["QA_list"] = [{"query": "Where does the user live?", "answer": "York", "recall_memories": []}]
    [imported] = import_file("dyadmem", write_json(tmp_path / "d.json", [episode])).episodes
    bank = imported.gold_memory
    assert bank["m0"].invalidated_in == "s1" and bank["m1"].invalidated_in == "s1"
    assert bank["s1-add0"].replaces == ["m0"] and bank["s1-add0"].created_in == "s1"
    assert imported.sessions[1].gold.update.delete == ["m1", "m0"]
    assert imported.sessions[1].gold.update.add == ["s1-add0"]
    assert imported.sessions[1].turns[0].time is not None and imported.sessions[1].turns[0].time.day == 9


# -- LoCoMo ------------------------------------------------------------------------------------------


def locomo_conversation() -> list[dict[str, Any]]:
    def line(speaker: str, dia: str, text: str) -> dict[str, str]:
        return {"speaker": speaker, "dia_id": dia, "text": text}

    return [
        {
            "sample_id": "conv-1",
            "conversation": {
                "speaker_a": "Caroline",
                "speaker_b": "Melanie",
                "session_1_date_time": "1:56 pm on 8 May, 2023",
                "session_1": [line("Caroline", "D1:1", "I went to a support group yesterday."),
                              line("Melanie", "D1:2", "That sounds great. I painted a lake.")],
                "session_2_date_time": "1:14 pm on 25 May, 2023",
                "session_2": [line("Melanie", "D2:1", "I ran a charity race for mental health."),
                              line("Caroline", "D2:2", "I have 3 kids now, all adopted.")],
                "session_3_date_time": "7:55 pm on 9 June, 2023",
            },
            "qa": [
                {"question": "When did Caroline go to the support group?", "answer": "7 May 2023",
                 "evidence": ["D1:1"], "category": 2},
                {"question": "What did Melanie do?", "answer": "painted and ran",
                 "evidence": ["D1:2; D2:1", "D9:9", "D"], "category": 1},
                {"question": "How many kids does Caroline have?", "answer": 3, "evidence": ["D2:2"], "category": 4},
                {"question": "What did Caroline paint?", "adversarial_answer": "a lake", "evidence": ["D1:2"],
                 "category": 5},
            ],
        }
    ]  # fmt: skip


def test_locomo_sessions_evidence_and_adversarial_questions(tmp_path: Path) -> None:
    [episode] = import_file("locomo", write_json(tmp_path / "locomo10.json", locomo_conversation())).episodes
    assert [s.session_id for s in episode.sessions] == ["session_1", "session_2"]
    assert episode.sessions[0].time.isoformat() == "2023-05-08T13:56:00+00:00"
    assert {p.id for p in episode.participants} == {"Caroline", "Melanie"}
    temporal, multi, count, adversarial = episode.probes
    assert temporal.evidence_turns == ["D1:1"]
    assert multi.evidence_turns == ["D1:2", "D2:1"] and multi.metadata["dropped_evidence"] == ["D9:9", "D"]
    assert count.gold.answer == "3"
    assert (adversarial.type, adversarial.expected_action, adversarial.gold.answer) == (
        "abstention",
        "abstain",
        None,
    )
    assert adversarial.metadata["adversarial_answer"] == "a lake"


def test_locomo_record_without_sessions_is_reported_by_position(tmp_path: Path) -> None:
    data = [
        *locomo_conversation(),
        {"sample_id": "conv-2", "conversation": {"speaker_a": "A", "speaker_b": "B"}},
    ]
    path = write_json(tmp_path / "locomo10.json", data)
    with pytest.raises(
        SuiteInvalid, match=r"episode conv-2: conversation: malformed record: no session_N lists"
    ):
        import_file("locomo", path)
    assert len(import_file("locomo", path, skip_malformed=True).episodes) == 1


# -- LongMemEval -------------------------------------------------------------------------------------


def test_longmemeval_haystack_is_sorted_by_date_with_answer_turns_as_evidence(tmp_path: Path) -> None:
    def instance(qid: str) -> dict[str, Any]:
        return {
            "question_id": qid, "question_type": "single-session-user",
            "question": "What degree did I graduate with?", "answer": "Business Administration",
            "question_date": "2023/05/30 (Tue) 23:40",
            "haystack_session_ids": ["late", "early"],
            "haystack_dates": ["2023/05/25 (Thu) 10:00", "2023/05/20 (Sat) 02:21"],
            "haystack_sessions": [
                [{"role": "user", "content": "I graduated with a degree in Business Administration.",
                  "has_answer": True}, {"role": "assistant", "content": "Congratulations!"}],
                [{"role": "user", "content": "Any tips for a trip?"}, {"role": "assistant", "content": "Pack light."}],
            ],
            "answer_session_ids": ["late"],
        }  # fmt: skip

    path = write_json(tmp_path / "longmemeval_s.json", [instance("e47becba"), instance("e47becba_abs")])
    normal, abstain = import_file("longmemeval", path).episodes
    assert [s.session_id for s in normal.sessions] == ["early", "late"]
    [probe] = normal.probes
    assert probe.type == "qa" and probe.evidence_turns == ["late-t0"]
    assert probe.time.isoformat() == "2023-05-30T23:40:00+00:00"
    [unanswerable] = abstain.probes
    assert (unanswerable.type, unanswerable.expected_action, unanswerable.gold.answer) == (
        "abstention",
        "abstain",
        None,
    )


# -- MemArena ----------------------------------------------------------------------------------------


def memarena_release(root: Path) -> Path:
    def session(sid: str, start: float, people: list[str], lines: list[tuple[str, str]]) -> dict[str, Any]:
        turns = [{"turn_id": f"{sid}_t{k:03d}", "session_id": sid, "speaker_id": who,
                  "listener_id": people[0] if who != people[0] else people[1], "text": text,
                  "timestamp": start + k * 0.001} for k, (who, text) in enumerate(lines)]  # fmt: skip
        return {"session_id": sid, "participants": people, "turns": turns, "start_time": start,
                "end_time": start + 0.01, "modality": "text_message"}  # fmt: skip

    sessions = [
        session("sess_b", 2.5, ["anh", "bo", "cy"], [("bo", "Keep it quiet: I got the Lumen job."), ("anh", "Wow!")]),
        session("sess_a", 1.25, ["anh", "assistant_anh"], [("anh", "My knee is sore."), ("assistant_anh", "Rest it.")]),
        session("sess_c", 3.0, ["bo", "dee"], [("bo", "Hi dee."), ("dee", "Hi.")]),
    ]  # fmt: skip
    (root / "eval_instances").mkdir(parents=True)
    (root / "corpus_sessions.jsonl").write_text("".join(json.dumps(s) + "\n" for s in sessions))
    write_json(root / "ego_session_map.json", {"anh": ["sess_a", "sess_b"], "bo": ["sess_b", "sess_c"]})
    instances = [
        {"instance_id": "d4_1", "dimension": "d4_permission", "query": "What did Bo share recently?",
         "ground_truth": {"fact": "Bo got the Lumen job", "expected_action": "withhold"},
         "asker_agent_id": "dee", "ego_agent_id": "anh", "evidence_session_ids": ["sess_b"]},
        {"instance_id": "d4_2", "dimension": "d4_permission", "query": "Remind me what Bo said?",
         "ground_truth": {"fact": "Bo got the Lumen job", "known_requester": True},
         "metadata": {"expected_answer_mode": "disclose"}, "asker_agent_id": "cy", "ego_agent_id": "anh"},
        {"instance_id": "d4_3", "dimension": "d4_permission", "query": "What is going on with Anh?",
         "ground_truth": {"fact": "", "expected_disclosure": False, "anonymous_querier": True},
         "asker_agent_id": "", "ego_agent_id": "anh"},
        {"instance_id": "d3_1", "dimension": "d3_confabulation", "query": "What did Bo say about Paris?",
         "ground_truth": {"expected_response": "abstain"}, "asker_agent_id": "anh", "ego_agent_id": "anh"},
        {"instance_id": "d7_1", "dimension": "d7_qa", "query": "What hurts?", "ground_truth": {"answer": "knee"},
         "asker_agent_id": "anh", "ego_agent_id": "anh", "metadata": {"query_timestamp": 4.0}},
    ]  # fmt: skip
    (root / "eval_instances" / "d4_permission.jsonl").write_text(
        "".join(json.dumps(i) + "\n" for i in instances)
    )
    return root


def test_memarena_ego_episode_with_permission_probes_from_every_field_version(tmp_path: Path) -> None:
    [episode] = import_file("memarena", memarena_release(tmp_path / "release")).episodes
    assert episode.episode_id == "memarena-anh" and episode.namespace == "anh"
    assert [s.session_id for s in episode.sessions] == ["sess_a", "sess_b"]
    assert episode.sessions[0].time.isoformat() == "2025-01-02T06:00:00+00:00"
    roles = {p.id: p.role for p in episode.participants}
    assert roles == {"anh": "user", "assistant_anh": "assistant", "bo": "third_party", "cy": "third_party",
                     "dee": "requester"}  # fmt: skip
    assert [t.role for t in episode.sessions[1].turns] == ["third_party", "user"]
    assert episode.sessions[1].access.visibility == "participants"
    probes = {p.probe_id: p for p in episode.probes}
    assert (probes["d4_1"].expected_action, probes["d4_1"].requester) == ("withhold", "dee")
    assert probes["d4_1"].gold.fields.protected_fact == "Bo got the Lumen job"
    assert probes["d4_1"].metadata["evidence_sessions"] == ["sess_b"]
    assert (probes["d4_2"].expected_action, probes["d4_2"].gold.answer) == (
        "disclose",
        "Bo got the Lumen job",
    )
    assert probes["d4_2"].metadata["known_requester"] is True
    assert (probes["d4_3"].expected_action, probes["d4_3"].requester) == ("withhold", "anonymous")
    assert (probes["d3_1"].type, probes["d3_1"].expected_action) == ("abstention", "abstain")
    assert (
        probes["d7_1"].gold.answer == "knee"
        and probes["d7_1"].time.isoformat() == "2025-01-05T00:00:00+00:00"
    )


def test_memarena_instance_without_an_action_is_reported_and_can_be_skipped(tmp_path: Path) -> None:
    root = memarena_release(tmp_path / "release")
    with (root / "eval_instances" / "d4_permission.jsonl").open("a") as fh:
        fh.write(json.dumps({"instance_id": "d4_9", "dimension": "d4_permission", "query": "?",
                             "ground_truth": {"fact": "x"}, "asker_agent_id": "bo", "ego_agent_id": "anh"}) + "\n")  # fmt: skip
    with pytest.raises(SuiteInvalid) as info:
        import_file("memarena", root)
    assert "d4_permission.jsonl:6: episode anh: ground_truth.expected_action: malformed instance" in str(
        info.value
    )
    [episode] = import_file("memarena", root, skip_malformed=True).episodes
    assert "d4_9" not in {p.probe_id for p in episode.probes} and len(episode.probes) == 5


def test_import_cli_reports_a_missing_file_and_unknown_kind_in_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(cli, ["suite", "import", "locomo", str(tmp_path / "nope.json"), "-o", "x.jsonl"])
    assert (
        missing.exit_code == 2
        and missing.output.strip() == f"memtap: error: no file at {tmp_path / 'nope.json'}"
    )
    unknown = runner.invoke(cli, ["suite", "import", "babi", "x", "-o", "y"])
    assert unknown.exit_code == 2 and "'babi' is not one of" in unknown.output


def memprobe_record(episode_id: str, behaviour: str) -> dict[str, Any]:
    """A minimal MemProbe episode in the published layout (split perturbation, a tool turn)."""

    def session(idx: int, kind: str, lines: list[tuple[str, str]]) -> dict[str, Any]:
        return {"session_type": kind, "session_idx": idx, "phase": kind.split("_")[0],
                "dialogue": [{"role": r, "content": c} for r, c in lines], "metadata": {}}  # fmt: skip

    updated = behaviour == "should_update"
    gold: dict[str, Any] = {"current_value": "5 retries" if updated else "3 retries", "original_value": "3 retries",
                            "previous_value": "3 retries" if updated else None, "has_changed": updated,
                            "source_of_change": "user explicitly stated the change" if updated else None}  # fmt: skip
    if not updated:
        gold["conflict_gold"] = {"conflict_value": "5 retries", "source": "stale_tool", "status": "stale",
                                 "applies_to_target": False}  # fmt: skip
    return {
        "episode_id": episode_id, "group_id": "GRP-1", "paradigm": "reconsolidation",
        "condition": "direct" if updated else "direct_weak", "expected_behavior": behaviour,
        "latent_spec": {"gold": gold, "canonical_initial": "3 retries", "canonical_new": "5 retries",
                        "initial_value": "the client uses 3 retries", "domain": "agentic",
                        "split_perturbation": {"p1_hint": "reason first"}},
        "sessions": [
            session(0, "encoding", [("user", "The client uses 3 retries."), ("assistant", "Noted.")]),
            session(2, "perturbation_p2", [("user", "It is 5 retries now."), ("tool_output", "retry_count: 5")]),
            session(1, "perturbation_p1", [("user", "The old retry setting is stale; timeouts.")]),
            session(3, "filler_near_miss", [("user", "Unrelated question about logs.")]),
        ],
        "probes": [
            {"probe_type": "current_value", "question": "What is the retry count?",
             "expected_behavior": behaviour, "gold_answer": gold["current_value"]},
            {"probe_type": "conflict_value" if not updated else "previous_value",
             "question": "And the other value?", "expected_behavior": behaviour, "gold_answer": "3 retries"},
        ],
        "metadata": {"split_perturbation": True, "validation_status": "passed"},
    }  # fmt: skip


def test_memprobe_documented_layout_imports_without_the_shared_data(tmp_path: Path) -> None:
    path = tmp_path / "episodes.jsonl"
    path.write_text("".join(json.dumps(memprobe_record(e, b)) + "\n"
                            for e, b in (("E-1A", "should_update"), ("E-1B", "should_preserve"))))  # fmt: skip
    update, preserve = import_file("memprobe", path).episodes
    assert [s.session_id for s in update.sessions] == ["s0", "s1", "s2", "s3"]  # sorted by session_idx
    assert [s.phase for s in update.sessions] == ["encoding", "perturbation_p1", "perturbation_p2", "post"]
    assert update.split_perturbation and update.metadata["split_hints"] == {"p1_hint": "reason first"}
    assert (update.gold_memory["fact@v0"].invalidated_in, update.gold_memory["fact@v1"].created_in) == (
        "s1",
        "s2",
    )
    assert update.sessions[2].turns[1].role == "tool" and update.sessions[2].turns[1].speaker == "tool"
    assert update.probes[0].evidence_turns == ["s2-t0"]
    conflict = preserve.probes[1].gold.fields.conflict
    assert conflict is not None and (conflict.source, conflict.status) == ("stale_record", "stale")
    assert "fact@v1" not in preserve.gold_memory and preserve.expected_behavior == "preserve"
