"""Fuzzing a real ``memtap serve`` (with a fake upstream model and ``auto`` memory): its HTTP API
from its own OpenAPI description (schemathesis), and its MCP endpoint with malformed JSON-RPC
(hypothesis). No case may be answered with a 5xx, and the server must still be up afterwards.

A short run here; ``MEMTAP_FUZZ_EXAMPLES=N`` makes it longer (``make soak`` runs
benchmarks/fuzz_soak.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest
from fuzzing import fuzz_mcp, fuzz_openapi

from memtap.trace.store import TraceStore

EXAMPLES = int(os.environ.get("MEMTAP_FUZZ_EXAMPLES", "12"))


@pytest.fixture
def fuzzed_server(start_http_server: Any, upstream: Any, tmp_path: Path) -> Any:
    config = tmp_path / "memtap.json"
    config.write_text(json.dumps({
        "model_list": [{"model_name": "gpt-fake",
                        "litellm_params": {"model": "openai/fake-1", "api_base": upstream.base_url, "api_key": "sk-x"}}],
        "memtap": {"memory": "auto"},
    }))  # fmt: skip
    return start_http_server("--config", str(config))


def test_the_http_api_fuzzed_from_its_openapi_description_answers_no_5xx(fuzzed_server: Any) -> None:
    base = f"http://127.0.0.1:{fuzzed_server.port}"
    report = fuzz_openapi(base, EXAMPLES, model="gpt-fake")
    print(report.line("openapi"))
    assert report.cases >= 7 * EXAMPLES  # every operation was fuzzed
    assert report.server_errors == [], "\n".join(report.server_errors[:20])
    assert httpx.get(f"{base}/healthz").json()["status"] == "ok"
    assert fuzzed_server.proc.poll() is None


def test_the_mcp_endpoint_fuzzed_with_malformed_json_rpc_answers_no_5xx_and_records_refusals(
    fuzzed_server: Any,
) -> None:
    base = f"http://127.0.0.1:{fuzzed_server.port}"
    report = fuzz_mcp(f"{base}/mcp", 10 * EXAMPLES)
    print(report.line("mcp"))
    assert report.cases >= 10 * EXAMPLES
    assert report.server_errors == [], "\n".join(report.server_errors[:20])
    assert sum(n for status, n in report.by_status.items() if 400 <= status < 500) > 0  # it did refuse some
    assert httpx.get(f"{base}/healthz").json()["status"] == "ok"
    assert fuzzed_server.stop() == 0
    store = TraceStore(fuzzed_server.db)
    refused = [e for e in store.list_events() if e.tool == "POST /mcp"]
    store.close()
    assert refused and all(e.status == "error" for e in refused)
    assert all((e.error or "").startswith(("HTTP 4", "JSON-RPC error: ")) for e in refused)
    assert any((e.error or "").startswith("HTTP 4") for e in refused)
