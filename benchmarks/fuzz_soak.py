#!/usr/bin/env python
"""The long fuzz: a real ``memtap serve`` (``auto`` memory, a local fake upstream model) fuzzed
from its own OpenAPI description (schemathesis, positive and negative cases for every operation)
and on ``/mcp`` with malformed and edge-case JSON-RPC (hypothesis). ``make soak`` runs it.

    python benchmarks/fuzz_soak.py [--examples N]   (default: $MEMTAP_FUZZ_EXAMPLES or 200)

N cases per operation and mode, 10 x N JSON-RPC bodies, and 5 x N on ``memtap proxy`` wrapping the
reference memory server (when node_modules has it). Prints, and exits 1 unless 5xx is 0 and the
servers are up:

    fuzz cases 3200, 5xx 0
    server up after fuzzing: yes
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from fuzzing import FuzzReport, fuzz_mcp, fuzz_openapi  # noqa: E402

from memtap.probes.targets._server import MemtapServer, free_port  # noqa: E402


def _wait(url: str, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url}: the process exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{url} did not answer within {timeout:.0f} s")


REFERENCE_TOOLS = (
    "create_entities",
    "create_relations",
    "add_observations",
    "delete_entities",
    "delete_observations",
    "delete_relations",
    "read_graph",
    "search_nodes",
    "open_nodes",
)


def _fuzz_proxy(work: Path, examples: int) -> tuple[FuzzReport, bool] | None:
    """``memtap proxy`` over the reference memory server, its /mcp fuzzed; None without node."""
    memory = ROOT / "node_modules" / ".bin" / "mcp-server-memory"
    if not memory.exists():
        return None
    config = work / "proxy.json"
    server = {"command": str(memory), "env": {"MEMORY_FILE_PATH": str(work / "memory.jsonl")}}
    config.write_text(json.dumps({"mcpServers": {"memory": server}}))
    proxy = MemtapServer(work / "proxy.db", extra=["--config", str(config)], command="proxy")
    proxy.start()
    try:
        report = fuzz_mcp(f"{proxy.base_url}/mcp", examples, tools=REFERENCE_TOOLS)
        with urllib.request.urlopen(f"{proxy.base_url}/healthz", timeout=10) as answer:
            up = json.load(answer).get("status") == "ok"
    finally:
        proxy.stop()
    return report, up


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    default = int(os.environ.get("MEMTAP_FUZZ_EXAMPLES", "200"))
    parser.add_argument("--examples", type=int, default=default, help="cases per operation and mode")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        port = free_port()
        upstream = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_openai.py"), str(port)])
        server: MemtapServer | None = None
        try:
            _wait(f"http://127.0.0.1:{port}/healthz", upstream)
            config = work / "memtap.json"
            params = {"model": "openai/fake-1", "api_base": f"http://127.0.0.1:{port}/v1", "api_key": "sk-x"}
            models = [{"model_name": "gpt-fake", "litellm_params": params}]
            config.write_text(json.dumps({"model_list": models, "memtap": {"memory": "auto"}}))
            server = MemtapServer(work / "fuzz.db", extra=["--config", str(config)])
            server.start()
            started = time.perf_counter()
            http = fuzz_openapi(server.base_url, args.examples, model="gpt-fake")
            mcp = fuzz_mcp(f"{server.base_url}/mcp", 10 * args.examples)
            with urllib.request.urlopen(f"{server.base_url}/healthz", timeout=10) as answer:
                up = json.load(answer).get("status") == "ok"
            proxied = _fuzz_proxy(work, 5 * args.examples)
            seconds = time.perf_counter() - started
        finally:
            code = server.stop() if server is not None else None
            upstream.terminate()
            upstream.wait(timeout=10)
    print(http.line("memtap serve, openapi (schemathesis)"))
    print(mcp.line("memtap serve, /mcp json-rpc (hypothesis)"))
    reports = [http, mcp]
    if proxied is not None:
        print(proxied[0].line("memtap proxy, /mcp json-rpc (hypothesis)"))
        reports.append(proxied[0])
        up = up and proxied[1]
    else:
        print("memtap proxy: skipped (node_modules/.bin/mcp-server-memory is missing; run npm ci)")
    errors = [line for report in reports for line in report.server_errors]
    for line in errors[:20]:
        print("  5xx", line)
    print(f"fuzz cases {sum(r.cases for r in reports)}, 5xx {len(errors)}")
    print(f"server up after fuzzing: {'yes' if up else 'NO'}; clean exit: {code == 0}; {seconds:.0f} s")
    return 0 if not errors and up else 1


if __name__ == "__main__":
    sys.exit(main())
