#!/usr/bin/env python
"""Replay throughput: suites played on ``builtin`` through the front door versus fed in-process.

For each suite (the imported MemProbe sample, when ``../shared/data`` is beside this checkout,
and a generated ``paradigms`` suite of at least 1,000 sessions):

- **in-process**: the same turns and probe searches fed straight to ``BuiltinBackend`` (its
  ``add`` and ``search``) in this process: no transport, no recording;
- **MCP over stdio, per turn**: ``memtap replay --target builtin --reader none --ingest turn``
  as the CLI runs it: a ``memtap serve --stdio`` child, memtap's lean JSON-RPC client, one
  ``memory_add`` request per turn, pipelined (the turns of the sessions up to the next probe
  written at once and served in order), every call recorded;
- **MCP over stdio, per turn, one at a time**: the same, each call waiting for the one before
  (the per-turn path before pipelining, and what the HTTP transport still does);
- **MCP over stdio, batched**: the same with ``--ingest batch`` (the default): the turns of the
  sessions up to the next probe in one ``memory_add_batch``, still one recorded ``memory_add``
  event per turn;
- **MCP over HTTP, per turn** (``--http``): the path that was the default before: a ``memtap
  serve`` on a free port and the official MCP client over streamable HTTP (``--server`` takes it
  now).

Each replay is timed from the first episode's start to the last episode's end as the run
records them (so the server's start-up and the final trace flush are not counted), with 1
worker (``--workers``). The measurements run in rounds (``--repeat``, default 3: the in-process
baseline, then each path), so every path has a baseline measured beside it on this shared,
noisy machine. Prints the median seconds, sessions per second, and the median and range of the
rounds' ratios (path / that round's in-process time). Aims (issue 16): stdio per turn <= 5x,
batched <= 3x. Temporary databases only; 127.0.0.1 only. ``--quick`` uses a small generated suite.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memtap.adapters.builtin import BuiltinBackend  # noqa: E402
from memtap.probes.generators import generate  # noqa: E402
from memtap.probes.importers import import_file  # noqa: E402
from memtap.probes.readers import make_reader  # noqa: E402
from memtap.probes.replay import ReplayPlan, replay_suite  # noqa: E402
from memtap.probes.runs import RunStore  # noqa: E402
from memtap.probes.schema import Episode  # noqa: E402
from memtap.probes.suitefile import load_suite, write_suite  # noqa: E402
from memtap.probes.targets.builtin import BuiltinTarget  # noqa: E402
from memtap.trace.models import AccessTags, Provenance  # noqa: E402

# beside the checkout (../shared), or beside the worktrees folder a helper's checkout sits in
MEMPROBE = next(
    (
        base / "shared" / "data" / "memprobe" / "suite56-sample.jsonl"
        for base in (ROOT.parent, ROOT.parent.parent)
        if (base / "shared" / "data" / "memprobe" / "suite56-sample.jsonl").exists()
    ),
    ROOT.parent / "shared" / "data" / "memprobe" / "suite56-sample.jsonl",
)


async def in_process(episodes: list[Episode], db: Path) -> float:
    backend = BuiltinBackend(db)
    started = time.perf_counter()
    for episode in episodes:
        namespace = f"inproc/{episode.episode_id}"
        for session in episode.sessions:
            for turn in session.turns:
                if turn.content.strip():
                    tags = AccessTags(
                        owner=namespace,
                        visibility=session.access.visibility,
                        participants=session.participants,
                        allow=[episode.owner()],
                    )
                    prov = Provenance(
                        episode=episode.episode_id, session=session.session_id, turn=turn.turn_id
                    )
                    await backend.add(
                        namespace,
                        turn.content,
                        metadata={"speaker": turn.speaker},
                        tags=tags,
                        provenance=prov,
                    )
        for probe in episode.probes:
            await backend.search(namespace, probe.question, limit=5)
    elapsed = time.perf_counter() - started
    await backend.close()
    return elapsed


async def front_door(
    suite_path: Path, db: Path, workers: int, transport: str, ingest: str, pipelined: bool = True
) -> float:
    suite = load_suite(suite_path)
    store = RunStore(db)
    run = f"bench-{transport}-{ingest}-w{workers}"
    store.create_run(
        run,
        suite_path=suite.path,
        suite_sha256=suite.sha256,
        episodes=suite.episodes,
        target="builtin",
        config={"workers": workers},
        reader="none",
    )
    plan = ReplayPlan(run, suite.episodes, {}, workers, 5, ingest)
    target = BuiltinTarget(db, transport=transport)
    target.pipelined = pipelined
    summary = await replay_suite(suite, plan, target, store, make_reader("none"), show_progress=False)
    assert summary["episodes_done"] == len(suite.episodes), summary
    first, last = store.conn.execute(
        "SELECT min(started_at), max(ended_at) FROM run_episodes WHERE run_id = ?", [run]
    ).fetchone()
    store.close()
    return (datetime.fromisoformat(last) - datetime.fromisoformat(first)).total_seconds()


PATHS = [
    ("stdio", "turn", True, "MCP over stdio, per turn (pipelined)"),
    ("stdio", "turn", False, "MCP over stdio, per turn, one at a time (before)"),
    ("stdio", "batch", True, "MCP over stdio, batched ingest"),
]
HTTP_PATH = ("http", "turn", False, "MCP over HTTP, per turn")


def measure(
    name: str, episodes: list[Episode], tmp: Path, repeat: int, workers: int, http: bool
) -> list[str]:
    """Rounds of (in-process, then each path), so every path has a baseline measured beside it; the
    row's time is the median over rounds, its ratio the median of the rounds' ratios (min-max)."""
    suite_path = tmp / f"{name}.jsonl"
    write_suite(episodes, suite_path)
    sessions = sum(len(e.sessions) for e in episodes)
    turns = sum(e.turn_count() for e in episodes)
    paths = [*PATHS, HTTP_PATH] if http else PATHS
    base: list[float] = []
    took: dict[str, list[float]] = {label: [] for *_, label in paths}
    for round_ in range(repeat):
        base.append(anyio.run(in_process, episodes, tmp / f"{name}-inproc-{round_}.db"))
        for transport, ingest, pipelined, label in paths:
            db = tmp / f"{name}-{transport}-{ingest}-{pipelined}-{round_}.db"
            took[label].append(anyio.run(front_door, suite_path, db, workers, transport, ingest, pipelined))
    median = statistics.median(base)
    head = f"| {name} | {len(episodes)} | {sessions} | {turns}"
    rows = [f"{head} | in-process backend | - | {median:.2f} | {sessions / median:.0f} | 1.00 | - |"]
    for *_, label in paths:
        ratios = [t / b for t, b in zip(took[label], base, strict=True)]
        seconds = statistics.median(took[label])
        rows.append(
            f"{head} | {label} | {workers} | {seconds:.2f} | {sessions / seconds:.0f} | "
            f"{statistics.median(ratios):.2f} | {min(ratios):.2f}-{max(ratios):.2f} |"
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small generated suite only")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--workers", type=int, default=1, help="episodes in parallel on the MCP paths")
    parser.add_argument("--http", action="store_true", help="also the HTTP path (slow)")
    args = parser.parse_args()
    suites: list[tuple[str, list[Episode]]] = []
    if MEMPROBE.exists() and not args.quick:
        suites.append(("memprobe-sample", import_file("memprobe", MEMPROBE).episodes))
    count = 10 if args.quick else 100
    generated = generate("paradigms", seed=7, episodes=count)
    suites.append((f"paradigms-{count}", generated))
    if not args.quick:
        assert sum(len(e.sessions) for e in generated) >= 1000
    print(
        "| suite | episodes | sessions | turns | path | workers | seconds (median) | sessions/s | "
        "time ratio (median) | ratio range |"
    )
    print("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- |")
    load = f"{os.getloadavg()[0]:.2f}"
    with tempfile.TemporaryDirectory() as tmp:
        for name, episodes in suites:
            for row in measure(name, episodes, Path(tmp), args.repeat, args.workers, args.http):
                print(row, flush=True)
    print(
        f"\n(load average before: {load}; after: {os.getloadavg()[0]:.2f}; "
        f"sqlite {sqlite3.sqlite_version}; {args.repeat} rounds; in-process = BuiltinBackend.add/search, "
        "no recording; the MCP paths = memtap replay through memtap serve, every call recorded; time ratio = "
        "path / the in-process time of the same round; aims: stdio per turn <= 5x, batched <= 3x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
