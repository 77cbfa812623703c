#!/usr/bin/env python
"""A/B replay throughput: recorded traffic re-issued on ``builtin`` versus the same calls in-process.

One run, one recorded stretch: a live session through ``memtap serve`` (builtin backend, MCP over
streamable HTTP) of ``--writes`` writes in sessions of ten, with an update of an earlier write
after every fifth, a delete of another after every seventh and a search after every tenth. The
stretch is frozen as ``memtap replay --from-trace`` freezes it, then played two ways:

- **in-process**: the same recorded calls fed straight to a fresh ``BuiltinBackend`` in this
  process (``add``, ``update``, ``delete``, ``search``), with the same source-id -> target-id map
  for updates and deletes: no transport, no recording;
- **A/B replay**: the replay driver with the ``builtin`` target (a ``memtap serve`` of its own,
  the official MCP client over streamable HTTP, every call recorded and every recorded write's
  outcome stored in ``run_writes``), timed from the episode's start to its end as the run
  records them (the server's start-up and the final flush are not counted); the run's whole
  wall time is printed beside it.

Prints recorded calls per second on each path and the ratio of times (A/B / in-process).
Temporary databases only; 127.0.0.1 only. ``--quick`` for a smoke run.

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/ab_replay.py``
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memtap.adapters.builtin import BuiltinBackend  # noqa: E402
from memtap.probes.from_trace import TraceSelection, episodes_from_trace  # noqa: E402
from memtap.probes.readers import make_reader  # noqa: E402
from memtap.probes.replay import ReplayPlan, replay_suite  # noqa: E402
from memtap.probes.runs import RunStore  # noqa: E402
from memtap.probes.schema import Episode  # noqa: E402
from memtap.probes.suitefile import load_suite, write_suite  # noqa: E402
from memtap.probes.targets._server import MemtapServer  # noqa: E402
from memtap.probes.targets.builtin import BuiltinTarget  # noqa: E402

WORDS = ["gym", "tea", "rowing", "chess", "diary", "cat", "sailing", "paris", "berlin", "acme", "golf",
         "piano", "garden", "bread"]  # fmt: skip


async def record_source(db: Path, writes: int) -> None:
    """The live session the A/B replay re-issues (see the module's docstring)."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    server = MemtapServer(db)
    url = server.start()
    try:
        headers = {"X-Memtap-Namespace": "alice", "X-Memtap-Run": "src"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
        ):

            async def call(tool: str, args: dict[str, Any], session: str) -> dict[str, Any]:
                done = await client.call_tool(tool, args, meta=cast(Any, {"memtap": {"session": session}}))
                assert not done.is_error, done
                return dict(done.structured_content or {})

            live: list[str] = []
            for i in range(writes):
                session = f"s{i // 10}"
                text = f"note {i}: Alice likes {WORDS[i % len(WORDS)]} and {WORDS[(i * 3) % len(WORDS)]}"
                live.append(str((await call("memory_add", {"content": text}, session))["id"]))
                if i % 5 == 4:
                    await call("memory_update", {"id": live[-3], "content": text + " (updated)"}, session)
                if i % 7 == 6:
                    await call("memory_delete", {"id": live.pop(-4)}, session)
                if i % 10 == 9:
                    await call("memory_search", {"query": WORDS[i % len(WORDS)], "limit": 5}, session)
    finally:
        server.stop()


async def in_process(episodes: list[Episode], db: Path) -> tuple[float, int]:
    """The frozen calls straight on a BuiltinBackend, in the order the replay plays them."""
    backend = BuiltinBackend(db)
    calls = 0
    started = time.perf_counter()
    for episode in episodes:
        namespace = f"inproc/{episode.episode_id}"
        ids: dict[str, str] = {}
        pending = sorted(episode.probes, key=lambda p: p.time)
        for session in episode.sessions:
            while pending and pending[0].time < session.time:
                await backend.search(namespace, pending.pop(0).question, limit=5)
                calls += 1
            for turn in session.turns:
                tool, meta = turn.metadata["recorded_tool"], turn.metadata
                calls += 1
                if tool == "memory_add":
                    made = await backend.add(namespace, turn.content, metadata={"speaker": turn.speaker})
                    for source in meta["source_items"]:
                        ids[source] = str(made.value["id"])
                elif tool == "memory_update" and meta["source_id"] in ids:
                    await backend.update(namespace, ids[meta["source_id"]], content=turn.content)
                elif tool == "memory_delete" and meta["source_id"] in ids:
                    await backend.delete(namespace, ids.pop(meta["source_id"]))
        for probe in pending:
            await backend.search(namespace, probe.question, limit=5)
            calls += 1
    elapsed = time.perf_counter() - started
    await backend.close()
    return elapsed, calls


async def ab_replay(suite_path: Path, db: Path) -> tuple[float, float, int]:
    suite = load_suite(suite_path)
    store = RunStore(db)
    run = "ab-bench"
    store.create_run(run, suite_path=suite.path, suite_sha256=suite.sha256, episodes=suite.episodes,
                     target="builtin", config={"workers": 1}, reader="none")  # fmt: skip
    plan = ReplayPlan(run, suite.episodes, {}, 1, 5)
    summary = await replay_suite(
        suite, plan, BuiltinTarget(db), store, make_reader("none"), show_progress=False
    )
    assert summary["episodes_done"] == len(suite.episodes), summary
    assert summary["recorded_writes"]["failed"] == 0, summary
    first, last = store.conn.execute(
        "SELECT min(started_at), max(ended_at) FROM run_episodes WHERE run_id = ?", [run]
    ).fetchone()
    store.close()
    took = (datetime.fromisoformat(last) - datetime.fromisoformat(first)).total_seconds()
    calls = summary["turns"] + summary["probes"]
    return took, float(summary["wall_s"]), calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=300, help="recorded writes (default 300)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 40 writes")
    args = parser.parse_args()
    writes = 40 if args.quick else args.writes
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        source = folder / "source.db"
        t0 = time.perf_counter()
        anyio.run(record_source, source, writes)
        recording = time.perf_counter() - t0
        episodes = episodes_from_trace(TraceSelection(source, run="src"))
        suite_path = folder / "frozen.jsonl"
        write_suite(episodes, suite_path)
        base, calls = anyio.run(in_process, episodes, folder / "inproc.db")
        with contextlib.suppress(FileNotFoundError):
            (folder / "ab.db").unlink()
        took, wall, replayed = anyio.run(ab_replay, suite_path, folder / "ab.db")
    assert replayed == calls, (replayed, calls)
    tools: dict[str, int] = {}
    for episode in episodes:
        for session in episode.sessions:
            for turn in session.turns:
                tools[turn.metadata["recorded_tool"]] = tools.get(turn.metadata["recorded_tool"], 0) + 1
    probes = sum(len(e.probes) for e in episodes)
    mix = ", ".join(f"{n} {tool}" for tool, n in sorted(tools.items()))
    print(
        f"recorded stretch: {calls} calls ({mix}, {probes} memory_search); recorded live in {recording:.2f} s"
    )
    rows = [
        ("in-process BuiltinBackend (no transport, no recording)", base),
        ("A/B replay onto builtin (MCP over HTTP, recorded)", took),
        ("the same, whole run (server start and flush included)", wall),
    ]
    print("| path | seconds | calls/s | time ratio |")
    print("| --- | ---: | ---: | ---: |")
    for name, seconds in rows:
        print(f"| {name} | {seconds:.3f} | {calls / seconds:.0f} | {seconds / base:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
