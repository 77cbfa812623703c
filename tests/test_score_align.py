"""Alignment of memory items to gold memories: the default rules, and the stronger matchers as plain
functions and through a configured OpenAI-compatible upstream (a small local fake server)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from trace_builder import SAY_V0, SAY_V1, RunWriter, suite

from memtap.adapters.model_endpoint import resolve_model
from memtap.cli.main import cli
from memtap.errors import ConfigError
from memtap.probes.schema import GoldMemory
from memtap.scoring.align import Aligner, DefaultMatcher, EmbeddingMatcher, JudgeMatcher
from memtap.scoring.judges import make_matcher
from memtap.scoring.text import tokens


def gold(content: str, **metadata: Any) -> GoldMemory:
    return GoldMemory(content=content, type="fact", metadata=metadata)


def test_an_anchored_gold_memory_needs_its_value_and_half_its_words() -> None:
    m = DefaultMatcher()
    memory = gold("The user goes to CrossFit Central.", value="CrossFit Central")
    hit = m.judge("I switched to CrossFit Central.", "k", memory)
    assert (
        hit.matched
        and hit.reason == "anchor 'CrossFit Central' present; gold coverage 0.67 >= 0.5 (item coverage 0.67)"
    )
    assert m.judge("I go to FitLife.", "k", memory).reason.startswith("anchor 'CrossFit Central' absent")
    assert not m.judge("Central CrossFit", "k", memory).matched  # the value as a phrase, not its words


def test_an_unanchored_gold_memory_needs_coverage_both_ways() -> None:
    m = DefaultMatcher()
    memory = gold("The user asked for help planning a trip to Porto.")
    assert m.judge("Can you help me plan a trip to Porto?", "k", memory).matched
    dump = "Porto trip planning help asked " + " ".join(f"topic{i}" for i in range(60))
    decision = m.judge(dump, "k", memory)
    assert decision.gold_coverage == 1.0 and not decision.matched  # a dump of everything covers nothing
    assert tokens("The user's dentist is Dr. Brennan.") == {"dentist", "dr", "brennan"}


def test_an_item_cannot_hold_a_memory_created_after_it_was_written() -> None:
    episode = suite()[0]  # gym@v1 is created in s2
    aligner = Aligner(episode, DefaultMatcher())
    assert aligner.align("early", 1, SAY_V1, 0) == frozenset()
    assert aligner.align("late", 1, SAY_V1, 2) == {"gym@v1"}
    early = [d.reason for item, _, d in aligner.rows if item == "early" and d.key == "gym@v1"]
    assert early and "but gym@v1 is created in s2, after this item was written" in early[0]
    assert aligner.align("v0", 1, SAY_V0, 0) == {"gym@v0"}


def test_an_embedding_matcher_keeps_anchors_and_reports_the_cosine() -> None:
    vocabulary = ["gym", "fitlife", "crossfit", "workout", "go", "switch"]

    def embed(texts: list[str]) -> list[list[float]]:
        return [[float(word in t.lower()) for word in vocabulary] for t in texts]

    m = EmbeddingMatcher(embed, threshold=0.6)
    memory = gold("The user goes to FitLife for workouts.", value="FitLife")
    hit = m.judge("I go to fitlife for my workout", "k", memory)
    assert hit.matched and hit.reason.startswith("cosine 1.000")
    assert m.judge("I go to the gym for workouts", "k", memory).reason == "anchor 'FitLife' absent"


def test_a_judge_matcher_asks_only_about_plausible_pairs_and_records_its_answer() -> None:
    asked: list[str] = []

    def ask(prompt: str) -> str:
        asked.append(prompt)
        return '{"match": false, "why": "a friend\'s gym, not the user\'s"}'

    m = JudgeMatcher(ask)
    memory = gold("The user goes to CrossFit Central.", value="CrossFit Central")
    decision = m.judge("My friend Bob goes to CrossFit Central.", "k", memory)
    assert not decision.matched and decision.reason == "llm judge: False (a friend's gym, not the user's)"
    assert not m.judge("Any tips on sleeping better?", "k", memory).matched
    assert len(asked) == 1  # the second pair had no anchor: decided without asking


class _Upstream(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/v1/chat/completions":
            text = body["messages"][0]["content"]
            verdict = "CrossFit" in text.split("MEMORY:")[-1] or "FitLife" in text.split("MEMORY:")[-1]
            data: dict[str, Any] = {
                "choices": [{"message": {"content": json.dumps({"match": verdict, "why": "fake"})}}]
            }
        else:
            data = {"data": [{"embedding": [1.0, float(len(t) % 3)]} for t in body["input"]]}
        payload = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: Any) -> None: ...


@pytest.fixture
def upstream_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("MEMTAP_TEST_JUDGE_KEY", "judge-key")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    config = tmp_path / "memtap.yaml"
    base = f"http://127.0.0.1:{server.server_address[1]}/v1"
    config.write_text(
        "model_list:\n"
        f"  - model_name: judge\n    litellm_params: {{model: openai/tiny-judge, api_base: '{base}', api_key: os.environ/MEMTAP_TEST_JUDGE_KEY}}\n"
        f"  - model_name: embedder\n    litellm_params: {{model: tiny-embed, api_base: '{base}'}}\n"
    )
    yield config
    server.shutdown()
    thread.join(timeout=10)


def test_stronger_matchers_reach_a_model_of_the_config_files_model_list(
    upstream_config: Path, tmp_path: Path
) -> None:
    endpoint = resolve_model("judge", upstream_config)
    assert (endpoint.model, endpoint.api_key) == ("tiny-judge", "judge-key")
    assert json.loads(endpoint.chat("GOLD: x\nMEMORY: CrossFit"))["match"] is True
    assert resolve_model("embedder", upstream_config).embed(["ab", "abc"]) == [[1.0, 2.0], [1.0, 0.0]]
    with pytest.raises(ConfigError, match="'nope' is not in the model_list"):
        make_matcher("llm:nope", upstream_config)
    with pytest.raises(ConfigError, match="pass --config FILE"):
        make_matcher("llm:judge", None)
    w = RunWriter(tmp_path / "trace.db", "r", tmp_path / "suite.jsonl")
    w.start("upd", 3)
    w.add("upd", "s0", "a", SAY_V0)
    w.finish("upd")
    w.close()
    result = CliRunner().invoke(cli, ["score", "r", "--db", str(tmp_path / "trace.db"), "--json",
                                      "--matcher", "llm:judge", "--config", str(upstream_config)])  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["matcher"] == "llm:judge" and report["measures"]["capture_recall"]["value"] == 1.0
    import sqlite3

    with sqlite3.connect(tmp_path / "trace.db") as conn:
        reasons = [r[0] for r in conn.execute("SELECT reason FROM alignments WHERE matched = 1")]
    assert reasons == ["llm judge: True (fake)"]
