"""Detector precision and recall on replayed suites, per backend: the figures of docs/findings.md.

For each suite (``memtap suite gen KIND --seed SEED --episodes N``) and each backend, the suite
is replayed (``memtap replay --reader none``; ``--reader extractive`` where a leak in the answer
is measured) and scored (``memtap score --json``); the detectors' per-episode confusion counts,
precision and recall are printed as one Markdown table.

Backends: ``builtin`` (memtap's own store, correct), the reference-behaving test server
(``tests/upstreams/faulty_memory.py`` without a fault) and each of its faults, wrapped by
``memtap proxy`` with the ``server-memory`` profile; and two chat agents behind memtap's chat
proxy (``memory: auto``, the builtin store) over the fake model server ``tests/fake_openai.py``:
``chat-echo`` (the gate observes; the model recites the memories injected into its prompt, a
leaky agent) and ``chat-enforce`` (the same agent, the gate withholds denied memories).

    PYTHONPATH=$PWD python scripts/detector_quality.py --out /tmp/dq [--suite paradigms] [--backend overwrite]
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FAULTY = ROOT / "tests" / "upstreams" / "faulty_memory.py"
SUITES = ("paradigms", "lifecycle", "permission")
FAULTS = ("", "overwrite", "wrong_delete", "readd", "fail_add", "lossy_update", "leak")
DETECTORS = ("erasure", "destructive_update", "stale_coexistence", "leak_retrieval", "leak_injection")


def memtap(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "memtap", *args], capture_output=True, text=True, check=False, cwd=ROOT
    )
    if done.returncode != 0:
        raise SystemExit(f"memtap {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done.stdout


class ChatAgent:
    """``memtap serve`` with the chat proxy over the fake model server, as processes."""

    def __init__(self, out: Path, gate: str) -> None:
        self.out, self.gate = out, gate
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, db: Path) -> str:
        model_port, serve_port = free_port(), free_port()
        self.procs.append(
            subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_openai.py"), str(model_port)])
        )
        config = self.out / f"chat-{self.gate}.json"
        params = {
            "model": "openai/memory-echo",
            "api_base": f"http://127.0.0.1:{model_port}/v1",
            "api_key": "sk",
        }
        config.write_text(json.dumps({"model_list": [{"model_name": "agent", "litellm_params": params}],
                                      "memtap": {"memory": "auto"}}))  # fmt: skip
        self.procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "memtap",
                    "serve",
                    "--config",
                    str(config),
                    "--gate",
                    self.gate,
                    "--http",
                    f"127.0.0.1:{serve_port}",
                    "--db",
                    str(db),
                ],
                stderr=subprocess.DEVNULL,
                cwd=ROOT,
            )
        )
        wait_for(f"http://127.0.0.1:{model_port}/healthz")
        wait_for(f"http://127.0.0.1:{serve_port}/healthz")
        return f"openai:http://127.0.0.1:{serve_port}/v1#agent"

    def stop(self) -> None:
        for proc in reversed(self.procs):
            proc.terminate()
            proc.wait(30)
        self.procs.clear()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(url: str, limit_s: float = 120) -> None:
    deadline = time.monotonic() + limit_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"{url} did not answer within {limit_s:g} s") from None
            time.sleep(0.5)


def target_for(backend: str, out: Path) -> str:
    if backend == "builtin":
        return "builtin"
    fault = "" if backend == "reference" else backend
    config = out / f"faulty-{backend}.json"
    env = {"FAULT": fault}
    if fault == "leak":  # one graph shared by every episode's server, started afresh per replay
        env["LEAK_FILE"] = str(out / "leak-graph.json")
        Path(env["LEAK_FILE"]).unlink(missing_ok=True)
    server = {
        "command": sys.executable,
        "args": [str(FAULTY)],
        "env": env,
        "memtap": {"profile": "server-memory"},
    }
    config.write_text(json.dumps({"mcpServers": {"memory": server}}))
    return f"mcp:{config}:memory"


def measure(suite: str, backend: str, out: Path, seed: int, episodes: int) -> dict[str, Any]:
    suite_file = out / f"{suite}.jsonl"
    if not suite_file.exists():
        memtap("suite", "gen", suite, "--seed", str(seed), "--episodes", str(episodes), "-o", str(suite_file))
    db = out / f"{suite}-{backend}.db"
    db.unlink(missing_ok=True)
    reader = "extractive" if suite == "permission" else "none"
    agent = (
        ChatAgent(out, backend.removeprefix("chat-").replace("echo", "observe"))
        if backend.startswith("chat-")
        else None
    )
    try:
        target = agent.start(db) if agent is not None else target_for(backend, out)
        memtap("replay", str(suite_file), "--target", target, "--reader", reader,
               "--db", str(db), "--run", "r1", "--no-progress")  # fmt: skip
    finally:
        if agent is not None:
            agent.stop()  # flushes the trace
    report = json.loads(memtap("score", "r1", "--db", str(db), "--json").strip().splitlines()[-1])
    detectors: dict[str, Any] = report["detectors"]["detectors"]
    return detectors


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="folder for suites, databases, results")
    parser.add_argument("--suite", action="append", choices=SUITES)
    parser.add_argument(
        "--backend", action="append", help="builtin, reference, or a fault of faulty_memory.py"
    )
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--episodes", type=int, default=6)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    backends = args.backend or [
        "builtin",
        "reference",
        *[f for f in FAULTS if f],
        "chat-echo",
        "chat-enforce",
    ]
    results: dict[str, dict[str, Any]] = {}
    print("| suite | backend | detector | precision | recall | tp | fp | fn | tn | outside gold |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for suite in args.suite or ["paradigms", "lifecycle", "permission"]:
        for backend in backends:
            got = measure(suite, backend, args.out, args.seed, args.episodes)
            results[f"{suite}/{backend}"] = got
            for kind in DETECTORS:
                d = got.get(kind)
                if d is None:
                    continue
                print(
                    f"| {suite} | {backend} | {kind} | {_fmt(d['precision'])} | {_fmt(d['recall'])} "
                    f"| {d['tp']} | {d['fp']} | {d['fn']} | {d['tn']} | {d['outside_gold']} |",
                    flush=True,
                )
    (args.out / "detector_quality.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
