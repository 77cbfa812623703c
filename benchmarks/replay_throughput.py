#!/usr/bin/env python
"""Replay throughput: suites played on ``builtin`` through the front door versus fed in-process.

For each suite (the imported MemProbe sample, when ``../shared/data`` is beside this checkout,
and a generated ``paradigms`` suite of at least 1,000 sessions):

- **in-process**: the same turns and probe searches fed straight to ``BuiltinBackend`` (its
  ``add`` and ``search``) in this process: no transport, no recording;
- **front door**: ``memtap replay --target builtin --reader none`` as the CLI runs it: a
  ``memtap serve`` on a free port, the official MCP client over streamable HTTP, every call
  recorded. Timed from the first episode's start to the last episode's end as the run
  records them (so the server's start-up and the final trace flush are not counted), with
  1 and 4 workers.

Prints sessions per second and the ratio of times (front door / in-process). Temporary
databases only; 127.0.0.1 only. ``--quick`` uses a small generated suite.
"""

from __future__ import annotations

import argparse
import sqlite3
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

MEMPROBE = ROOT.parent / "shared" / "data" / "memprobe" / "suite56-sample.jsonl"


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


async def front_door(suite_path: Path, db: Path, workers: int) -> float:
    suite = load_suite(suite_path)
    store = RunStore(db)
    run = f"bench-w{workers}"
    store.create_run(
        run,
        suite_path=suite.path,
        suite_sha256=suite.sha256,
        episodes=suite.episodes,
        target="builtin",
        config={"workers": workers},
        reader="none",
    )
    plan = ReplayPlan(run, suite.episodes, {}, workers, 5)
    summary = await replay_suite(
        suite, plan, BuiltinTarget(db), store, make_reader("none"), show_progress=False
    )
    assert summary["episodes_done"] == len(suite.episodes), summary
    first, last = store.conn.execute(
        "SELECT min(started_at), max(ended_at) FROM run_episodes WHERE run_id = ?", [run]
    ).fetchone()
    store.close()
    return (datetime.fromisoformat(last) - datetime.fromisoformat(first)).total_seconds()


def measure(name: str, episodes: list[Episode], tmp: Path) -> list[str]:
    suite_path = tmp / f"{name}.jsonl"
    write_suite(episodes, suite_path)
    sessions = sum(len(e.sessions) for e in episodes)
    turns = sum(e.turn_count() for e in episodes)
    base = anyio.run(in_process, episodes, tmp / f"{name}-inproc.db")
    rows = [
        f"| {name} | {len(episodes)} | {sessions} | {turns} | in-process backend | - | {base:.2f} | "
        f"{sessions / base:.0f} | 1.00 |"
    ]
    for workers in (1, 4):
        took = anyio.run(front_door, suite_path, tmp / f"{name}-w{workers}.db", workers)
        rows.append(
            f"| {name} | {len(episodes)} | {sessions} | {turns} | front door (MCP over HTTP) | {workers} | "
            f"{took:.2f} | {sessions / took:.0f} | {took / base:.1f} |"
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small generated suite only")
    args = parser.parse_args()
    suites: list[tuple[str, list[Episode]]] = []
    if MEMPROBE.exists() and not args.quick:
        suites.append(("memprobe-sample", import_file("memprobe", MEMPROBE).episodes))
    count = 10 if args.quick else 100
    generated = generate("paradigms", seed=7, episodes=count)
    suites.append((f"paradigms-{count}", generated))
    if not args.quick:
        assert sum(len(e.sessions) for e in generated) >= 1000
    print("| suite | episodes | sessions | turns | path | workers | seconds | sessions/s | time ratio |")
    print("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        for name, episodes in suites:
            for row in measure(name, episodes, Path(tmp)):
                print(row, flush=True)
    print(
        f"\n(sqlite {sqlite3.sqlite_version}; in-process = BuiltinBackend.add/search, no recording; "
        "front door = memtap replay through memtap serve, every call recorded)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
