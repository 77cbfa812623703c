"""What deriving real effects costs for the npm memory servers memtap wraps besides the reference one.

For each of ``mcp-memory-libsql`` and ``mcp-memory-keeper``, one run, three paths, the
same sequence of tool calls on each:

* direct -- the official ``mcp`` client over stdio to the server;
* plain  -- the same client to ``memtap proxy --stdio`` with the server's profile off
  (``"profile": "none"``): forwarding and recording only, no state read;
* derive -- the same, with the server's profile (memtap reads the rows each write names
  from the server's own SQLite file, before and after, and diffs them).

The effect derivation cost is derive - plain (medians), printed as a ratio to the direct
call; ``own`` is the ``overhead_ms`` memtap recorded for each call (time in memtap outside
the upstream's call, the state reads included). Each path has its own server and store,
pre-filled with ``--items`` memories, so the server does the same work on each. Rounds
rotate over the paths (``--rounds``), so drift on a noisy machine hits all of them.

libsql sequence, on a fresh entity: create_entities (2 observations), create_relations,
search_nodes, create_entities again (replaces the observations), delete_relation,
delete_entity. keeper sequence, on a fresh key: context_save, context_save (a new value:
an update), context_get, context_search, context_batch_delete.

Run: ``.venv/bin/python benchmarks/wrapped_servers_overhead.py`` (about two minutes on 2
cores), or ``--quick`` for a smoke run. Needs node and ``npm ci`` (``make bench`` does both).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "node_modules" / ".bin"
PATHS = ("direct", "plain", "derive")

Sequence = list[tuple[str, str, dict[str, Any]]]

_LIBSQL_SCHEMA = """
CREATE TABLE IF NOT EXISTS entities (name TEXT PRIMARY KEY, entity_type TEXT NOT NULL,
    created_at DATETIME DEFAULT CURRENT_TIMESTAMP);
CREATE TABLE IF NOT EXISTS observations (id INTEGER PRIMARY KEY AUTOINCREMENT, entity_name TEXT NOT NULL,
    content TEXT NOT NULL, created_at DATETIME DEFAULT CURRENT_TIMESTAMP,
    FOREIGN KEY (entity_name) REFERENCES entities(name));
CREATE TABLE IF NOT EXISTS relations (id INTEGER PRIMARY KEY AUTOINCREMENT, source TEXT NOT NULL,
    target TEXT NOT NULL, relation_type TEXT NOT NULL, created_at DATETIME DEFAULT CURRENT_TIMESTAMP,
    FOREIGN KEY (source) REFERENCES entities(name), FOREIGN KEY (target) REFERENCES entities(name));
"""


def libsql_fill(folder: Path, items: int) -> dict[str, str]:
    """The server's own schema (as it creates it), ``items`` entities of 5 observations."""
    path = folder / "graph.db"
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.executescript(_LIBSQL_SCHEMA)
        conn.executemany("INSERT INTO entities (name, entity_type) VALUES (?, 'person')",
                         [(f"person{i}",) for i in range(items)])  # fmt: skip
        facts = [(f"person{i}", f"person {i} likes topic {j}") for i in range(items) for j in range(5)]
        conn.executemany("INSERT INTO observations (entity_name, content) VALUES (?, ?)", facts)
        conn.executemany("INSERT INTO relations (source, target, relation_type) VALUES (?, ?, 'knows')",
                         [(f"person{i}", f"person{i + 1}") for i in range(items // 2)])  # fmt: skip
    return {"LIBSQL_URL": f"file:{path}"}


def libsql_sequence(i: int) -> Sequence:
    name = f"bench{i}"
    knows = {"source": name, "target": "person0", "type": "knows"}

    def entity(*facts: str) -> dict[str, Any]:
        return {
            "entities": [
                {"name": name, "entityType": "person", "observations": [f"fact {i} {f}" for f in facts]}
            ]
        }

    return [
        ("create_entities", "create_entities", entity("a", "b")),
        ("create_relations", "create_relations", {"relations": [knows]}),
        ("search_nodes", "search_nodes", {"query": f"fact {i} "}),
        ("create_entities+", "create_entities", entity("a", "c")),
        ("delete_relation", "delete_relation", knows),
        ("delete_entity", "delete_entity", {"name": name}),
    ]  # fmt: skip


async def keeper_fill(folder: Path, items: int) -> dict[str, str]:
    """``items`` context items saved through the server itself (its schema has many migrations)."""
    from mcp import Client, StdioServerParameters

    data = folder / "keeper"
    data.mkdir()
    env = {**os.environ, "DATA_DIR": str(data)}
    async with Client(StdioServerParameters(command=str(BIN / "mcp-memory-keeper"), env=env)) as client:
        for start in range(0, items, 100):
            batch = [{"key": f"note{i}", "value": f"person {i} likes topic {i % 7}"}
                     for i in range(start, min(items, start + 100))]  # fmt: skip
            await client.call_tool("context_batch_save", {"items": batch})
    return {"DATA_DIR": str(data)}


def keeper_sequence(i: int) -> Sequence:
    key = f"bench{i}"
    return [
        ("context_save", "context_save", {"key": key, "value": f"fact {i} a"}),
        ("context_save+", "context_save", {"key": key, "value": f"fact {i} b"}),
        ("context_get", "context_get", {"key": key}),
        ("context_search", "context_search", {"query": f"fact {i} b"}),
        ("context_batch_delete", "context_batch_delete", {"keys": [key]}),
    ]


SERVERS: dict[str, tuple[str, Callable[[int], Sequence]]] = {
    "mcp-memory-libsql": ("mcp-memory-libsql", libsql_sequence),
    "mcp-memory-keeper": ("mcp-memory-keeper", keeper_sequence),
}


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


@contextlib.asynccontextmanager
async def connect(server: str, path: str, work: Path, items: int) -> AsyncIterator[tuple[Any, Path | None]]:
    from mcp import Client, StdioServerParameters

    folder = work / f"{server}-{path}"
    folder.mkdir()
    env = libsql_fill(folder, items) if server == "mcp-memory-libsql" else await keeper_fill(folder, items)
    command = str(BIN / SERVERS[server][0])
    if path == "direct":
        async with Client(StdioServerParameters(command=command, env={**os.environ, **env})) as client:
            yield client, None
        return
    entry: dict[str, Any] = {"command": command, "env": env}
    if path == "plain":
        entry["memtap"] = {"profile": "none"}
    config = folder / "memtap.json"
    config.write_text(json.dumps({"mcpServers": {"memory": entry}}))
    db = folder / "trace.db"
    args = ["-m", "memtap", "proxy", "--stdio", "--config", str(config), "--db", str(db)]
    async with Client(
        StdioServerParameters(command=sys.executable, args=args, env=dict(os.environ))
    ) as client:
        yield client, db


async def run_rounds(
    server: str, clients: dict[str, Any], iterations: int, rounds: int, first: int = 0
) -> dict[str, dict[str, list[float]]]:
    from mcp.types import RequestParamsMeta

    make = SERVERS[server][1]
    labels = [label for label, _, _ in make(0)]
    times: dict[str, dict[str, list[float]]] = {p: {t: [] for t in labels} for p in PATHS}
    counter = first
    for r in range(rounds):
        for path in PATHS[r % len(PATHS) :] + PATHS[: r % len(PATHS)]:
            for _ in range(iterations):
                counter += 1
                for label, tool, args in make(counter):
                    meta = cast(RequestParamsMeta, {"memtap": {"session": "bench", "turn": str(counter)}})
                    started = time.perf_counter()
                    result = await clients[path].call_tool(tool, args, meta=meta)
                    elapsed = (time.perf_counter() - started) * 1000
                    if result.is_error:
                        raise SystemExit(f"{server} {path} {tool} failed: {result.content}")
                    times[path][label].append(elapsed)
    return times


def own_overhead(db: Path, first: int, labels: list[str]) -> tuple[dict[str, list[float]], int]:
    """memtap's recorded overhead_ms by call label (turns above ``first``), and the effects recorded."""
    from memtap.trace.store import TraceStore

    store = TraceStore(db)
    try:
        events = store.list_events()
    finally:
        store.close()
    out: dict[str, list[float]] = {t: [] for t in labels}
    seen: set[tuple[str, str]] = set()
    effects = 0
    for event in events:
        if int(event.context.turn or 0) <= first or event.status != "ok":
            continue
        turn = event.context.turn or ""
        label = event.tool + "+" if (event.tool, turn) in seen and event.tool + "+" in out else event.tool
        seen.add((event.tool, turn))
        effects += len(event.effects)
        if label in out and event.overhead_ms is not None:
            out[label].append(event.overhead_ms)
    return out, effects


async def bench(server: str, args: argparse.Namespace, work: Path) -> None:
    labels = [label for label, _, _ in SERVERS[server][1](0)]
    async with contextlib.AsyncExitStack() as stack:
        clients: dict[str, Any] = {}
        dbs: dict[str, Path | None] = {}
        for path in PATHS:
            clients[path], dbs[path] = await stack.enter_async_context(
                connect(server, path, work, args.items)
            )
        await run_rounds(server, clients, args.warmup, len(PATHS))
        warmed = args.warmup * len(PATHS) * len(PATHS)
        times = await run_rounds(server, clients, args.iterations, args.rounds, first=warmed)
    own = {p: own_overhead(db, warmed, labels) for p, db in dbs.items() if db is not None}
    print(f"\n## {server}: {args.items} items pre-filled; {args.rounds} rounds x {args.iterations} sequences"
          f" per path; effects recorded: plain {own['plain'][1]}, derive {own['derive'][1]}")  # fmt: skip
    header = (
        f"{'call':<22}{'direct':>8}{'plain':>8}{'derive':>8}{'p99':>8}"
        f"{'derive-plain':>14}{'/direct':>9}{'own plain':>11}{'own derive':>12}"
    )
    print(header)
    print("-" * len(header))
    for row in [*labels, "all calls"]:
        chosen = labels if row == "all calls" else [row]
        d, p, v = (pct([x for t in chosen for x in times[path][t]], 0.5) for path in PATHS)
        v99 = pct([x for t in chosen for x in times["derive"][t]], 0.99)
        op, ov = (pct([x for t in chosen for x in own[path][0][t]], 0.5) for path in ("plain", "derive"))
        print(f"{row:<22}{d:>8.2f}{p:>8.2f}{v:>8.2f}{v99:>8.2f}{v - p:>14.2f}{(v - p) / d:>9.2f}"
              f"{op:>11.3f}{ov:>12.3f}")  # fmt: skip


async def main(args: argparse.Namespace) -> None:
    for server in args.servers:
        if not (BIN / SERVERS[server][0]).exists():
            raise SystemExit(f"{BIN / server} is missing: run `make bench` (npm ci) first")
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    versions = {
        s: json.loads((ROOT / "node_modules" / s / "package.json").read_text())["version"] for s in SERVERS
    }
    print(f"# effect derivation cost of wrapped memory servers: {platform.platform()}, {os.cpu_count()} CPUs")
    print(f"# python {platform.python_version()}, node {node}, "
          + ", ".join(f"{s} {v}" for s, v in versions.items()))  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for server in args.servers:
            await bench(server, args, Path(tmp))
    print(
        "\nmedians (p50) in ms, p99 of derive. direct: client -> server; plain: client -> memtap proxy"
        " (profile none: recorded,\nno effects) -> server; derive: the same with the server's profile (rows"
        " read before and after each write).\nderive-plain: what deriving the effects adds; /direct: that as"
        " a ratio to the direct call; own: overhead_ms in memtap's trace."
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=30, help="sequences per path per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--items", type=int, default=1000, help="memories pre-filled in each store")
    parser.add_argument("--servers", nargs="+", choices=list(SERVERS), default=list(SERVERS))
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round of 5")
    options = parser.parse_args()
    if options.quick:
        options.iterations, options.rounds, options.warmup, options.items = 5, 1, 1, 200
    import anyio

    anyio.run(main, options)
