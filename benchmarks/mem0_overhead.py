"""What memtap's effect derivation adds to each mem0 call.

One run, two paths over the same real mem0 (mem0ai 2.2, embedded qdrant in a temporary
folder, the scripted extraction model and the hashing embedder of ``tests/fake_openai.py``
on a loopback port):

* direct -- mem0's ``Memory`` called as an application would (``add``, ``search``,
  ``update``, ``delete``), on the backend's own thread;
* memtap -- the same calls through :class:`memtap.adapters.mem0_backend.Mem0Backend`, which
  adds what deriving the effects needs: reading the memory before an update or delete,
  reading it again after, checking mem0's ``history()``, parsing the captured extraction reply
  and, when mem0 skipped a fact, listing the namespace to name the memory it duplicates.

A round is ``--iterations`` repetitions of: an ``infer=True`` add of two facts (one of them
already stored, so mem0 skips it), a search, an update of the new fact and its delete. Rounds
alternate the paths (``--rounds``), each path on its own namespace. The ratio is the median
memtap call over the median direct call, per operation; recording the event (the trace
writer) is not part of either path: ``benchmarks/mcp_overhead.py`` measures it.

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/mem0_overhead.py`` (``--quick`` for a smoke run).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fake_openai import FakeUpstream  # noqa: E402

from memtap.adapters.mem0_backend import Mem0Backend, mem0_config  # noqa: E402

OPS = ("add", "search", "update", "delete")


def settings(base_url: str, data: Path) -> dict[str, Any]:
    endpoint = {"openai_base_url": base_url, "api_key": "sk-local"}
    return {
        "vector_store": {
            "provider": "qdrant",
            "config": {"path": str(data / "q"), "embedding_model_dims": 64},
        },
        "llm": {"provider": "openai", "config": {"model": "mem0-extract", **endpoint}},
        "embedder": {"provider": "openai", "config": {"model": "hash-bow", "embedding_dims": 64, **endpoint}},
        "history_db_path": str(data / "history.db"),
    }


async def direct_round(backend: Mem0Backend, ns: str, i: int, times: dict[str, list[float]]) -> None:
    memory = backend.memory

    async def timed(op: str, call: Any) -> Any:
        started = time.perf_counter()
        result = await backend.run(call)
        times[op].append((time.perf_counter() - started) * 1000)
        return result

    added = await timed("add", lambda: memory.add(f"{ns} likes tea. {ns} fact {i}", user_id=ns))
    new = next(r["id"] for r in added["results"] if r["memory"].endswith(f"fact {i}"))
    await timed("search", lambda: memory.search("likes tea", filters={"user_id": ns}, top_k=5))
    await timed("update", lambda: memory.update(new, text=f"{ns} fact {i} revised"))
    await timed("delete", lambda: memory.delete(new))


async def memtap_round(backend: Mem0Backend, ns: str, i: int, times: dict[str, list[float]]) -> None:
    async def timed(op: str, call: Any) -> Any:
        started = time.perf_counter()
        result = await call
        times[op].append((time.perf_counter() - started) * 1000)
        return result

    added = await timed("add", backend.add(ns, f"{ns} likes tea. {ns} fact {i}"))
    new = next(e.item_id for e in added.effects if (e.content_after or "").endswith(f"fact {i}"))
    await timed("search", backend.search(ns, "likes tea", limit=5))
    await timed("update", backend.update(ns, new, content=f"{ns} fact {i} revised"))
    await timed("delete", backend.delete(ns, new))


async def main(iterations: int, rounds: int) -> None:
    os.environ["MEM0_TELEMETRY"] = "False"
    upstream = FakeUpstream()
    upstream.state.record = False
    upstream.start()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        os.environ.setdefault("MEM0_DIR", str(data / "mem0dir"))
        backend = Mem0Backend(mem0_config(settings(upstream.base_url, data), {}, data))
        direct: dict[str, list[float]] = defaultdict(list)
        through: dict[str, list[float]] = defaultdict(list)
        try:
            await backend.add("warm", "warm likes tea")  # the tea fact each round re-sends, and warm-up
            await backend.run(lambda: backend.memory.add("d likes tea", user_id="d"))
            await backend.add("m", "m likes tea")
            for r in range(rounds):
                for i in range(iterations):
                    n = r * iterations + i
                    await direct_round(backend, "d", n, direct)
                    await memtap_round(backend, "m", n, through)
        finally:
            await backend.close()
            upstream.stop()
    print(f"mem0 effect derivation, {rounds} rounds x {iterations} iterations (median ms per call)")
    print(f"{'op':8} {'direct':>9} {'memtap':>9} {'ratio':>7} {'added':>8}")
    for op in OPS:
        d, m = statistics.median(direct[op]), statistics.median(through[op])
        print(f"{op:8} {d:9.2f} {m:9.2f} {m / d:7.2f} {m - d:8.2f}")
    total_d = sum(statistics.median(direct[op]) for op in OPS)
    total_m = sum(statistics.median(through[op]) for op in OPS)
    print(f"{'round':8} {total_d:9.2f} {total_m:9.2f} {total_m / total_d:7.2f} {total_m - total_d:8.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 3: a smoke run")
    args = parser.parse_args()
    if args.quick:
        args.iterations, args.rounds = 3, 2
    asyncio.run(main(args.iterations, args.rounds))
