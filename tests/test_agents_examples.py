"""The example agents of examples/agents/ (the OpenAI Agents SDK and LangGraph), each with memtap as
its long-term memory over MCP, replayed through a generated paradigms suite and scored.

Real parts: `memtap serve --http` on a SQLite file, each agent as its own process (its framework's
own MCP client and model client) behind its OpenAI-compatible endpoint, `memtap replay --target
openai:URL` and `memtap score`. Faked: only the hosted LLM, the fake upstream's scripted
``memory-agent`` model (tests/scripted_agent.py), which decides when to call the memory tools.

The LangGraph agent runs in an environment of its own (langchain-mcp-adapters needs the MCP SDK
1.x, memtap the 2.x): ``.venv-langgraph`` at the repository root (``make test`` builds it from
examples/agents/requirements-langgraph.txt) or the Python that ``MEMTAP_LANGGRAPH_PYTHON`` names.
A framework that is not installed skips its test, unless ``MEMTAP_REQUIRE_AGENTS=1`` (``make
test`` sets it), which fails it instead.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result
from conftest import ROOT, ServerProcess
from scripted_agent import MODEL

from memtap.cli.main import cli
from memtap.probes.suitefile import load_suite
from memtap.probes.targets._server import free_port, wait_healthy

AGENTS = ROOT / "examples" / "agents"
SCRIPTS = {"openai-agents": AGENTS / "openai_agents_memory.py", "langgraph": AGENTS / "langgraph_memory.py"}
LANGGRAPH_PYTHON = Path(
    os.environ.get("MEMTAP_LANGGRAPH_PYTHON") or ROOT / ".venv-langgraph" / "bin" / "python"
)


def run_cli(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def rows(db: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def agent_python(framework: str) -> str:
    """The Python that runs the framework's agent; skips (or, under make test, fails) without it."""
    if framework == "openai-agents":
        found, missing = importlib.util.find_spec("agents") is not None, "openai-agents is not installed (pip install -e '.[agents]')"  # fmt: skip
        python = sys.executable
    else:
        found, missing = LANGGRAPH_PYTHON.exists(), f"{LANGGRAPH_PYTHON} is missing (make test builds it)"
        python = str(LANGGRAPH_PYTHON)
    if not found:
        if os.environ.get("MEMTAP_REQUIRE_AGENTS") == "1":
            pytest.fail(missing)
        pytest.skip(missing)
    return python


@dataclass
class Agent:
    proc: subprocess.Popen[bytes]
    base: str
    network_log: Path


@pytest.fixture
def start_agent(tmp_path: Path) -> Iterator[Callable[..., Agent]]:
    """Start an example agent on a free port with memtap's MCP endpoint and the fake model."""
    started: list[Agent] = []

    def start(framework: str, memtap_url: str, model_url: str) -> Agent:
        python = agent_python(framework)
        port = free_port()
        network_log = tmp_path / f"{framework}-network.log"
        cmd = [python, str(SCRIPTS[framework]), "--memtap-url", memtap_url, "--model-url", model_url,
               "--model", MODEL, "--port", str(port)]  # fmt: skip
        log = (tmp_path / f"{framework}.log").open("wb")
        env = {**os.environ, "AGENT_NETWORK_LOG": str(network_log)}
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        agent = Agent(proc, f"http://127.0.0.1:{port}", network_log)
        started.append(agent)
        if wait_healthy(agent.base, proc, timeout=90) is None:
            pytest.fail(
                f"the {framework} agent did not start: {(tmp_path / f'{framework}.log').read_text()[-800:]}"
            )
        return agent

    yield start
    for agent in started:
        if agent.proc.poll() is None:
            agent.proc.terminate()
            agent.proc.wait(timeout=10)


def number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@pytest.mark.parametrize("framework", ["openai-agents", "langgraph"])
def test_framework_agent_replayed_through_a_paradigms_suite_is_scored_at_every_level_with_every_memory_event_attributed(
    framework: str, tmp_path: Path, db_path: Path, upstream: Any, start_http_server: Callable[..., ServerProcess],
    start_agent: Callable[..., Agent],
) -> None:  # fmt: skip
    suite = tmp_path / "suite.jsonl"
    made = run_cli("suite", "gen", "paradigms", "--seed", "7", "--episodes", "2", "-o", str(suite))
    assert made.exit_code == 0, made.output
    episodes = load_suite(suite).episodes
    memtap = start_http_server()
    agent = start_agent(framework, memtap.url, upstream.base_url)

    result = run_cli("replay", str(suite), "--target", f"openai:{agent.base}/v1", "--db", str(db_path),
                     "--run", "a1", "--reader", "none", "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(result.output)
    assert (summary["status"], summary["episodes_done"], summary["episodes_failed"]) == ("completed", 2, 0)
    assert memtap.stop() == 0  # flushes the trace

    # The model decided, from the tools the framework offered it over MCP: memtap's memory tools.
    offered = [{t["function"]["name"] for t in b.get("tools") or []} for b in upstream.state.received
               if b.get("model") == MODEL]  # fmt: skip
    assert offered and all({"memory_add", "memory_search"} <= names for names in offered)

    # Every memory event is the agent's, attributed to its run, episode, session and turn.
    namespaces = {ns for (ns,) in rows(db_path, "SELECT namespace FROM run_episodes WHERE run_id = 'a1'")}
    events = rows(db_path, """SELECT op, tool, namespace, run_id, episode, session, turn, role, requester, arguments
                              FROM events WHERE op IN ('write', 'update', 'delete', 'retrieve', 'read')""")  # fmt: skip
    assert events and all(e[3] == "a1" and e[2] in namespaces and None not in e[4:7] for e in events)
    assert {e[1] for e in events} == {"memory_add", "memory_search"}

    # A statement of the user is stored once, in its own turn and words; a question is searched.
    turns = {
        (e.episode_id, s.session_id, t.turn_id): t for e in episodes for s in e.sessions for t in s.turns
    }
    stated = {k for k, t in turns.items() if t.role != "assistant" and not t.content.strip().endswith("?")}
    writes = [e for e in events if e[0] == "write"]
    assert sorted((ep, s, t) for *_, ep, s, t, _, _, _ in writes) == sorted(stated)
    for *_, ep, s, t, role, _, args in writes:
        said, stored = turns[(ep, s, t)], json.loads(args)
        assert (stored["content"], role) == (said.content, said.role)
        # tagged by the model for the people its instructions named, so they may be told it again
        assert (
            stored["access"]["visibility"] == "participants"
            and said.speaker in stored["access"]["participants"]
        )
    # The user whose episode it is asks as the episode's namespace, which owns what was stored there.
    attempt = dict(rows(db_path, "SELECT episode_id, namespace FROM run_episodes WHERE run_id = 'a1'"))
    asked_as = {
        (e.episode_id, "probes", p.probe_id): attempt[e.episode_id]
        if e.requester_of(p) == e.owner()
        else e.requester_of(p)
        for e in episodes
        for p in e.probes
    }
    searched = {
        (ep, s, t): who for op, *_, ep, s, t, _, who, _ in events if op == "retrieve" and s == "probes"
    }
    assert searched == asked_as

    # Each probe's answer is the agent's reply, read off what its own search returned.
    for episode, probe, answer in rows(
        db_path, "SELECT episode_id, probe_id, answer FROM run_probes WHERE run_id = 'a1'"
    ):
        top = rows(db_path, """SELECT f.content_after FROM events e JOIN effects f ON f.event_id = e.id
                               WHERE e.run_id = 'a1' AND e.episode = ? AND e.session = 'probes' AND e.turn = ?
                               AND f.kind = 'retrieve' ORDER BY f.rank LIMIT 1""", episode, probe)  # fmt: skip
        assert json.loads(answer)["reply"] == (top[0][0] if top else "I don't know.")

    # memtap score: storage-, retrieval- and answer-level measures, computed from this trace.
    scored = run_cli("score", "a1", "--db", str(db_path), "--json")
    assert scored.exit_code == 0, scored.output
    score = json.loads(scored.output)
    for level, measure in [("storage", "capture_recall"), ("retrieval", "recall_at_all"),
                           ("answer", "answer_accuracy")]:  # fmt: skip
        value = score["measures"][measure]
        assert number(value["value"]) and value["n"] > 0, (level, measure, value)
    # The owner's probes found memories tagged for the owner: no retrieval counted as a leak.
    assert score["measures"]["retrieval_leak_rate"]["value"] == 0.0
    assert not agent.network_log.exists(), agent.network_log.read_text()  # nothing but loopback


def test_agent_endpoint_answers_bad_input_and_an_unreachable_memory_with_one_clear_error(
    upstream: Any, start_agent: Callable[..., Agent]
) -> None:
    agent = start_agent("openai-agents", f"http://127.0.0.1:{free_port()}/mcp", upstream.base_url)
    url = f"{agent.base}/v1/chat/completions"
    cases = [
        (b"{not json", 400, "not JSON"),
        (json.dumps({"messages": []}).encode(), 400, "messages: give a non-empty list"),
        (json.dumps({"messages": [{"role": "robot", "content": "hi"}]}).encode(), 400, "messages[0]: role"),
        (
            json.dumps({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}).encode(),
            400,
            "messages[0].content: a part's text must be text",
        ),
        (
            json.dumps({"messages": [{"role": "user", "content": "hi"}], "stream": True}).encode(),
            400,
            "stream",
        ),
        (json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode(), 502, "the agent failed"),
    ]
    for body, status, message in cases:
        response = httpx.post(url, content=body, headers={"Content-Type": "application/json"}, timeout=60)
        assert response.status_code == status, (body, response.text)
        assert message in response.json()["error"]["message"], response.text
