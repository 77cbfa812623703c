"""Detector precision and recall on replayed suites, per backend: the figures of docs/findings.md.

For each suite (``memtap suite gen KIND --seed SEED --episodes N``) and each backend, the suite
is replayed (``memtap replay --reader none``; ``--reader extractive`` where a leak in the answer
is measured) and scored (``memtap score --json``); the detectors' per-episode confusion counts,
precision and recall are printed as one Markdown table.

Backends: ``builtin`` (memtap's own store, correct), the reference-behaving test server
(``tests/upstreams/faulty_memory.py`` without a fault) and each of its faults, wrapped by
``memtap proxy`` with the ``server-memory`` profile.

    PYTHONPATH=$PWD python scripts/detector_quality.py --out /tmp/dq [--suite paradigms] [--backend overwrite]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FAULTY = ROOT / "tests" / "upstreams" / "faulty_memory.py"
SUITES = ("paradigms", "lifecycle", "permission")
FAULTS = ("", "overwrite", "wrong_delete", "readd", "fail_add", "leak")
DETECTORS = ("erasure", "destructive_update", "stale_coexistence", "leak_retrieval", "leak_injection")


def memtap(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "memtap", *args], capture_output=True, text=True, check=False, cwd=ROOT
    )
    if done.returncode != 0:
        raise SystemExit(f"memtap {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return done.stdout


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
    memtap("replay", str(suite_file), "--target", target_for(backend, out), "--reader", reader,
           "--db", str(db), "--run", "r1", "--no-progress")  # fmt: skip
    report = json.loads(memtap("score", "r1", "--db", str(db), "--json").strip().splitlines()[-1])
    detectors: dict[str, Any] = report["detectors"]["detectors"]
    return detectors


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="folder for suites, databases, results")
    parser.add_argument("--suite", action="append", choices=SUITES)
    parser.add_argument("--backend", action="append", help="builtin, reference, or a fault of faulty_memory.py")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--episodes", type=int, default=6)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    backends = args.backend or ["builtin", "reference", *[f for f in FAULTS if f]]
    results: dict[str, dict[str, Any]] = {}
    print("| suite | backend | detector | precision | recall | tp | fp | fn | tn |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for suite in args.suite or ["paradigms", "lifecycle"]:
        for backend in backends:
            got = measure(suite, backend, args.out, args.seed, args.episodes)
            results[f"{suite}/{backend}"] = got
            for kind in DETECTORS:
                d = got.get(kind)
                if d is None:
                    continue
                print(
                    f"| {suite} | {backend} | {kind} | {_fmt(d['precision'])} | {_fmt(d['recall'])} "
                    f"| {d['tp']} | {d['fp']} | {d['fn']} | {d['tn']} |",
                    flush=True,
                )
    (args.out / "detector_quality.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
