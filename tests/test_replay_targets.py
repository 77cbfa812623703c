"""Replay through the mcp: and openai: targets: real `memtap proxy` in front of the real npm reference
memory server, real `memtap serve --config` chat proxy in front of the fake model upstream."""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from conftest import ServerProcess, write_config

from memtap.cli.main import cli
from memtap.probes.generators import generate
from memtap.probes.suitefile import load_suite, write_suite

StartServer = Callable[..., ServerProcess]


def run_cli(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def rows(db: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def memory_events_lacking_context(db: Path, run: str) -> int:
    return rows(db, """SELECT count(*) FROM events WHERE run_id = ? AND op IN ('write','update','delete','retrieve','read')
                       AND (episode IS NULL OR session IS NULL OR turn IS NULL)""", run)[0][0]  # fmt: skip


def test_mcp_target_replays_through_the_wrapped_reference_server_isolated_per_episode_and_scores(
    tmp_path: Path, memory_server: dict[str, Any]
) -> None:
    episodes = generate("paradigms", seed=3, episodes=2) + generate("lifecycle", seed=5, episodes=2)
    episodes += generate("permission", seed=5, episodes=1)
    write_suite(episodes, tmp_path / "suite.jsonl")
    config = write_config(tmp_path, {"memory": memory_server})
    db = tmp_path / "trace.db"
    result = run_cli("replay", str(tmp_path / "suite.jsonl"), "--target", f"mcp:{config}:memory", "--db", str(db),
                     "--run", "m1", "--workers", "3", "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert (summary["status"], summary["episodes_done"], summary["episodes_failed"]) == ("completed", 5, 0)
    assert summary["target"]["profile"] == "server-memory"
    assert summary["memory_events"] > 0 and summary["memory_events_without_context"] == 0
    assert memory_events_lacking_context(db, "m1") == 0

    # The wrapped server's own tools, recorded by the forwarding proxy, one turn each.
    events = rows(
        db, "SELECT tool, op, episode, session, turn, namespace, upstream FROM events WHERE run_id = 'm1'"
    )
    assert {tool for tool, *_ in events} == {"create_entities", "add_observations", "search_nodes"}
    assert {upstream for *_, upstream in events} == {"memory"}
    turns = {
        (e.episode_id, t.turn_id) for e in episodes for s in e.sessions for t in s.turns if t.content.strip()
    }
    writes = [(ep, turn) for tool, op, ep, _, turn, _, _ in events if op == "write"]
    assert sorted(writes) == sorted(turns)

    # Isolation: every item an episode retrieved was written in that episode's own namespace.
    added: dict[str, set[str]] = defaultdict(set)
    got: dict[str, set[str]] = defaultdict(set)
    for namespace, kind, item in rows(db, """SELECT e.namespace, f.kind, f.item_id FROM events e
                                            JOIN effects f ON f.event_id = e.id WHERE e.run_id = 'm1'"""):  # fmt: skip
        (added if kind == "add" else got)[namespace].add(item)
    assert got and all(items <= added[ns] for ns, items in got.items())
    assert len(added) == 5

    # Probe results are the trace's item ids (obs_...), among what the probe's own calls retrieved.
    answered = rows(db, "SELECT episode_id, probe_id, retrieved FROM run_probes")
    assert sum(1 for _, _, retrieved in answered if json.loads(retrieved)) > len(answered) // 2
    for episode, probe, retrieved in answered:
        ids = json.loads(retrieved)
        traced = {r[0] for r in rows(db, """SELECT f.item_id FROM events e JOIN effects f ON f.event_id = e.id
              WHERE e.run_id = 'm1' AND e.episode = ? AND e.session = 'probes' AND e.turn = ?""", episode, probe)}  # fmt: skip
        assert all(i.startswith("obs_") for i in ids) and set(ids) <= traced

    score = run_cli("score", "m1", "--db", str(db), "--json")
    assert score.exit_code == 0, score.output
    by_level = json.loads(score.output)["attribution"]["by_level"]
    # storage: a verbatim turn the default matcher does not align to its gold memory (capture_miss);
    # retrieval: a support item in no entity that the question's words match (retrieval_miss).
    assert by_level["storage"] > 0 and by_level["retrieval"] > 0, by_level
    table = run_cli("score", "m1", "--db", str(db), "--no-store")
    assert "Failure attribution" in table.output and "capture_miss" in table.output
    assert "retrieval_miss" in table.output


def chat_config(tmp_path: Path, upstream: Any, name: str = "chat.json") -> Path:
    path = tmp_path / name
    models = [
        {"model_name": alias, "litellm_params": {"model": f"openai/{model}", "api_base": upstream.base_url}}
        for alias, model in [("agent", "fake-1"), ("reader", "reader-json"), ("keep", "paraphrase-keep"),
                             ("lose", "paraphrase-lose")]
    ]  # fmt: skip
    path.write_text(json.dumps({"model_list": models, "memtap": {"memory": "auto"}}))
    return path


def test_openai_target_sends_turns_as_chats_and_reads_probe_retrieval_from_the_trace(
    tmp_path: Path, db_path: Path, upstream: Any, start_http_server: StartServer
) -> None:
    episodes = generate("paradigms", seed=3, episodes=1) + generate("lifecycle", seed=5, episodes=1)
    write_suite(episodes, tmp_path / "suite.jsonl")
    server = start_http_server("--config", str(chat_config(tmp_path, upstream)))
    url = f"http://127.0.0.1:{server.port}/v1"
    result = run_cli("replay", str(tmp_path / "suite.jsonl"), "--target", f"openai:{url}#agent", "--db",
                     str(db_path), "--run", "o1", "--reader", "none", "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert (summary["status"], summary["episodes_done"]) == ("completed", 2)
    assert summary["target"]["retrieval"] == "from the trace" and summary["target"]["replay_clock"] is True
    server.stop()  # flushes the trace
    assert memory_events_lacking_context(db_path, "o1") == 0

    # Every non-assistant turn is one chat, with its own session and turn; assistant turns are history.
    chats = rows(
        db_path, "SELECT episode, session, turn, role FROM events WHERE run_id = 'o1' AND op = 'chat'"
    )
    spoken = {(e.episode_id, s.session_id, t.turn_id, t.role) for e in episodes for s in e.sessions
              for t in s.turns if t.role != "assistant"}  # fmt: skip
    probes = {(e.episode_id, "probes", p.probe_id, "user") for e in episodes for p in e.probes}
    assert set(chats) == spoken | probes and len(chats) == len(spoken | probes)
    sent_history = [
        m for body in upstream.state.received for m in body["messages"] if m["role"] == "assistant"
    ]
    assistant_turns = {
        t.content for e in episodes for s in e.sessions for t in s.turns if t.role == "assistant"
    }
    assert sent_history and {m["content"] for m in sent_history} <= assistant_turns

    # Each probe's reply is the agent's; its retrieval is what the trace says the chat's search returned.
    for episode, probe, answer, retrieved in rows(db_path, "SELECT episode_id, probe_id, answer, retrieved"
                                                           " FROM run_probes WHERE run_id = 'o1'"):  # fmt: skip
        assert json.loads(answer)["reply"].startswith("chunk-0 ")
        traced = [r[0] for r in rows(db_path, """SELECT f.item_id FROM events e JOIN effects f ON f.event_id = e.id
            WHERE e.run_id = 'o1' AND e.episode = ? AND e.turn = ? AND e.op = 'retrieve' ORDER BY f.rank""",
            episode, probe)]  # fmt: skip
        assert json.loads(retrieved) == traced[:5]
    assert any(json.loads(r[0]) for r in rows(db_path, "SELECT retrieved FROM run_probes"))

    # The user whose episode it is asks as the episode's namespace, which owns what the chat proxy
    # captured there: the observing gate denies none of it, and no leak is found.
    attempt = dict(rows(db_path, "SELECT episode_id, namespace FROM run_episodes WHERE run_id = 'o1'"))
    searches = rows(db_path, """SELECT episode, namespace, requester, gate FROM events
                                WHERE run_id = 'o1' AND session = 'probes' AND op = 'retrieve'""")  # fmt: skip
    assert len(searches) == len(probes)
    assert all(e.requester_of(p) == e.owner() for e in episodes for p in e.probes)
    assert {(ep, ns, who) for ep, ns, who, _ in searches} == {(ep, ns, ns) for ep, ns in attempt.items()}
    assert {gate for *_, gate in searches} <= {"observe:allow", None} and "observe:allow" in {
        g for *_, g in searches
    }
    checked = run_cli("check", "--db", str(db_path), "--run", "o1", "--no-save", "--json")
    found = [json.loads(line)["kind"] for line in checked.stdout.splitlines()]
    assert not [kind for kind in found if kind.startswith("leak")], found


def test_llm_reader_answers_in_the_probe_shape_from_the_retrieved_memories(
    tmp_path: Path, db_path: Path, upstream: Any
) -> None:
    write_suite(generate("paradigms", seed=3, episodes=1), tmp_path / "suite.jsonl")
    config = chat_config(tmp_path, upstream)
    result = run_cli("replay", str(tmp_path / "suite.jsonl"), "--target", "builtin", "--db", str(db_path),
                     "--run", "r1", "--reader", "reader", "--config", str(config), "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    prompts = [b["messages"][0]["content"] for b in upstream.state.received if b["model"] == "reader-json"]
    answers = rows(db_path, "SELECT answer, retrieved FROM run_probes WHERE run_id = 'r1'")
    assert len(prompts) == len(answers) > 0
    assert all("Reply with one JSON object" in p and "Memories, most relevant first" in p for p in prompts)
    for answer, retrieved in answers:
        (top,) = rows(
            db_path,
            "SELECT content_after FROM effects WHERE item_id = ? AND kind = 'add'",
            json.loads(retrieved)[0],
        )
        assert json.loads(answer) == {"answer": top[0], "raw_reply": json.dumps({"answer": top[0]})}


def test_llm_reader_without_a_config_is_refused_before_anything_is_replayed(tmp_path: Path) -> None:
    write_suite(generate("paradigms", seed=3, episodes=1), tmp_path / "suite.jsonl")
    db = tmp_path / "trace.db"
    result = run_cli("replay", str(tmp_path / "suite.jsonl"), "--target", "builtin", "--reader", "gpt-x",
                     "--db", str(db))  # fmt: skip
    assert result.exit_code == 2 and "--reader gpt-x" in result.output and "--config FILE" in result.output
    assert not db.exists()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("mcp:{tmp}/missing.json", "cannot read config"),
        ("mcp:{tmp}/two.json", "has 2 servers (a, b); name one"),
        ("mcp:{tmp}/two.json:c", "no server 'c'"),
        ("openai:localhost", "give the API base URL"),
        ("openai:http://127.0.0.1:9/v1", "no OpenAI-compatible endpoint answers"),
    ],
)
def test_bad_targets_are_refused_with_one_clear_line(tmp_path: Path, spec: str, message: str) -> None:
    write_suite(generate("paradigms", seed=3, episodes=1), tmp_path / "suite.jsonl")
    write_config(tmp_path, {"a": {"command": "true"}, "b": {"command": "true"}}, name="two.json")
    target = spec.format(tmp=tmp_path)
    result = run_cli(
        "replay", str(tmp_path / "suite.jsonl"), "--target", target, "--db", str(tmp_path / "t.db")
    )
    assert result.exit_code == 2 and message in result.output, result.output
    assert "Traceback" not in result.output


def test_paraphrase_rewrites_turns_and_keeps_episodes_whose_gold_would_be_lost(
    tmp_path: Path, upstream: Any
) -> None:
    from memtap.probes.generators.paraphrase import verbatim_problems

    config = str(chat_config(tmp_path, upstream))
    original = generate("paradigms", seed=4, episodes=2)
    kept = run_cli("suite", "gen", "paradigms", "--seed", "4", "--episodes", "2", "--paraphrase", "keep",
                   "--config", config, "-o", str(tmp_path / "keep.jsonl"))  # fmt: skip
    assert kept.exit_code == 0, kept.output
    assert "paraphrased 2 of 2 episodes through keep; 0 kept their original wording" in kept.output
    rewritten = load_suite(tmp_path / "keep.jsonl").episodes
    for before, after in zip(original, rewritten, strict=True):
        pairs = [(a.content, b.content) for s, t in zip(before.sessions, after.sessions, strict=True)
                 for a, b in zip(s.turns, t.turns, strict=True)]  # fmt: skip
        assert all(b == f"In other words, {a}" for a, b in pairs if a.strip())
        assert verbatim_problems(after) == []

    lost = run_cli("suite", "gen", "paradigms", "--seed", "4", "--episodes", "2", "--paraphrase", "lose",
                   "--config", config, "-o", str(tmp_path / "lose.jsonl"))  # fmt: skip
    assert lost.exit_code == 0, lost.output
    assert "paraphrased 0 of 2 episodes through lose; 2 kept their original wording" in lost.output
    assert load_suite(tmp_path / "lose.jsonl").episodes == original

    missing = run_cli("suite", "gen", "paradigms", "--paraphrase", "keep", "-o", str(tmp_path / "x.jsonl"))
    assert missing.exit_code == 2 and "pass --config FILE" in missing.output
