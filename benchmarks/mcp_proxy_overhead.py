"""What ``memtap proxy`` adds to each call to the reference MCP memory server.

One run, four paths, the same sequence of tool calls on each:

* direct -- the official ``mcp`` client over stdio to ``mcp-server-memory`` (npm);
* stdio  -- the same client to ``memtap proxy --stdio`` (launched as a subprocess, as a
  desktop client would), which wraps its own ``mcp-server-memory``;
* http   -- the same client over streamable HTTP to ``memtap proxy --http``;
* floor  -- the same client to ``benchmarks/naive_forwarder.py``: a Python MCP server that
  only forwards (the SDK's ``Server`` on memtap's stdio transport and stdio client), the
  least any Python stdio proxy adds.

Each path has its own server and storage file, pre-filled with the same graph
(``--entities`` entities of 5 observations, half as many relations), so the upstream
does the same work on each. A round is ``--iterations`` repetitions of seven calls on a
fresh entity: create_entities (2 observations), add_observations, search_nodes,
delete_observations, add_observations (the replacement), open_nodes, delete_entities.
Rounds rotate over the paths (``--rounds``), so drift on a noisy machine hits all of them.

Read the tables as: stdio - direct is what memtap adds over stdio (its MCP server hop,
the forwarding, the state diff of mutating calls, the recording); http - direct also
holds the streamable HTTP transport, which is the SDK's (about 3 ms per call measured
here), not memtap's. "memtap's own" is the ``overhead_ms`` memtap recorded for each call
in its trace (time in memtap's handler outside the upstream's call: routing, context, the
state reads before and after a write, building and queueing the event).

``--compare`` adds two more stdio paths to the same run: ``sdk`` (``memtap proxy --stdio``
with ``MEMTAP_LEAN_STDIO=0``: every ``tools/call`` through the SDK's server layers) and, with
``--baseline-tree DIR``, ``base`` (memtap's code from another checkout, main's say), and prints
each stdio path's p50 over the floor and the CPU its proxy process spent per call (from
``/proc``), with the load average.

Run: ``.venv/bin/python benchmarks/mcp_proxy_overhead.py`` (about a minute on 2 cores), or
``--quick`` for a smoke run. Needs node and ``npm ci`` (``make bench`` does both).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "node_modules" / ".bin" / "mcp-server-memory"
TOOLS = (
    "create_entities", "add_observations", "search_nodes", "delete_observations",
    "add_observations+", "open_nodes", "delete_entities",
)  # fmt: skip
MAIN = ("direct", "floor", "stdio", "http")
PATHS: tuple[str, ...] = MAIN
EXTRA: tuple[str, ...] = ()  # --compare: "sdk" and "base"
BASELINE_TREES: dict[str, Path] = {}  # path name -> a checkout

Call = Callable[[str, dict[str, Any], Any], Awaitable[Any]]


def fill_graph(path: Path, entities: int) -> None:
    lines = []
    for i in range(entities):
        observations = [f"person {i} likes topic {j}" for j in range(5)]
        lines.append(json.dumps({"type": "entity", "name": f"person{i}", "entityType": "person",
                                 "observations": observations}))  # fmt: skip
    for i in range(entities // 2):
        relation = {"type": "relation", "from": f"person{i}", "to": f"person{i + 1}", "relationType": "knows"}
        lines.append(json.dumps(relation))
    path.write_text("\n".join(lines))


def sequence(i: int) -> list[tuple[str, str, dict[str, Any]]]:
    """Seven calls on a fresh entity; the second add_observations replaces a deleted observation."""
    name = f"bench{i}"

    def observe(text: str) -> dict[str, Any]:
        return {"observations": [{"entityName": name, "contents": [text]}]}

    created = {"name": name, "entityType": "person", "observations": [f"fact {i} a", f"fact {i} b"]}
    return [
        ("create_entities", "create_entities", {"entities": [created]}),
        ("add_observations", "add_observations", observe(f"fact {i} c")),
        ("search_nodes", "search_nodes", {"query": f"fact {i} "}),
        ("delete_observations", "delete_observations",
         {"deletions": [{"entityName": name, "observations": [f"fact {i} a"]}]}),
        ("add_observations+", "add_observations", observe(f"fact {i} d")),
        ("open_nodes", "open_nodes", {"names": [name]}),
        ("delete_entities", "delete_entities", {"entityNames": [name]}),
    ]  # fmt: skip


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


@contextlib.asynccontextmanager
async def connect(path: str, work: Path, entities: int) -> AsyncIterator[tuple[Any, Path | None]]:
    """A connected client for one path (and the trace database memtap writes, if any)."""
    import httpx2
    from mcp import Client, StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client

    from memtap.probes.targets._server import free_port, wait_healthy

    folder = work / path
    folder.mkdir()
    memory = folder / "memory.jsonl"
    fill_graph(memory, entities)
    upstream = {"command": str(SERVER), "env": {"MEMORY_FILE_PATH": str(memory)}}
    config = folder / "memtap.json"
    config.write_text(json.dumps({"mcpServers": {"memory": upstream}}))
    db = folder / "trace.db"
    if path == "direct":
        async with Client(StdioServerParameters(command=str(SERVER), env=upstream["env"])) as client:
            yield client, None
    elif path == "floor":
        forwarder = str(ROOT / "benchmarks" / "naive_forwarder.py")
        env = {**os.environ, **upstream["env"]}
        async with Client(
            StdioServerParameters(command=sys.executable, args=[forwarder, str(SERVER)], env=env)
        ) as client:
            yield client, None
    elif path in ("stdio", "sdk", *BASELINE_TREES):
        args = ["-m", "memtap", "proxy", "--stdio", "--config", str(config), "--db", str(db)]
        env = dict(os.environ)
        if path == "sdk":
            env["MEMTAP_LEAN_STDIO"] = "0"
        if path in BASELINE_TREES:
            env["PYTHONPATH"] = str(BASELINE_TREES[path])
        # python -m puts the working directory first on sys.path: run in the tree whose code it is.
        tree = BASELINE_TREES.get(path, ROOT)
        params = StdioServerParameters(command=sys.executable, args=args, env=env, cwd=tree)
        async with Client(params) as client:
            yield client, db
    else:
        port = free_port()
        cmd = [sys.executable, "-m", "memtap", "proxy", "--http", f"127.0.0.1:{port}"]
        proc = subprocess.Popen(
            [*cmd, "--config", str(config), "--db", str(db)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            if wait_healthy(f"http://127.0.0.1:{port}", proc) is None:
                raise RuntimeError(
                    f"memtap proxy did not start: {proc.stderr.read().decode() if proc.stderr else ''}"
                )
            async with (
                httpx2.AsyncClient(timeout=60) as http,
                Client(streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http)) as client,
            ):
                yield client, db
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


async def run_rounds(
    clients: dict[str, Any],
    iterations: int,
    rounds: int,
    first: int = 0,
    procs: dict[str, int | None] | None = None,
    cpu: dict[str, list[float]] | None = None,
) -> dict[str, dict[str, list[float]]]:
    """Call times by path and call; ``first`` numbers the sequences (their entities and turns).
    With ``procs``, each round's CPU seconds per call of each proxy process go to ``cpu``."""
    from mcp.types import RequestParamsMeta

    paths = (*PATHS, *EXTRA)
    times: dict[str, dict[str, list[float]]] = {p: {t: [] for t in TOOLS} for p in paths}
    counter = first
    for r in range(rounds):
        # Rotating, and from the second lap on shuffled (seeded), so no path always follows the same one
        # (a memtap's recording after its last call overlaps the next path's first calls).
        order = paths[r % len(paths) :] + paths[: r % len(paths)]
        if r >= len(paths):
            order = tuple(random.Random(r).sample(order, len(order)))
        for path in order:
            client = clients[path]
            pid = (procs or {}).get(path)
            before = cpu_s(pid) if pid is not None else 0.0
            for _ in range(iterations):
                counter += 1
                for label, tool, args in sequence(counter):
                    meta = cast(RequestParamsMeta, {"memtap": {"session": "bench", "turn": str(counter)}})
                    started = time.perf_counter()
                    result = await client.call_tool(tool, args, meta=meta)
                    elapsed = (time.perf_counter() - started) * 1000
                    if result.is_error:
                        raise SystemExit(f"{path} {tool} failed: {result.content}")
                    times[path][label].append(elapsed)
            if pid is not None and cpu is not None:
                cpu.setdefault(path, []).append((cpu_s(pid) - before) / (iterations * len(TOOLS)))
    return times


def own_overhead(db: Path, first: int) -> dict[str, list[float]]:
    """memtap's recorded overhead_ms by call, for the measured sequences (turns above ``first``)."""
    from memtap.trace.store import TraceStore

    store = TraceStore(db)
    try:
        events = store.list_events()
    finally:
        store.close()
    out: dict[str, list[float]] = {t: [] for t in TOOLS}
    replaced: set[str] = set()
    for event in events:
        if int(event.context.turn or 0) <= first:
            continue  # warm-up
        label = event.tool
        if event.tool == "add_observations" and event.context.turn in replaced:
            label = "add_observations+"
        if event.tool == "add_observations":
            replaced.add(event.context.turn or "")
        if label in out and event.overhead_ms is not None and event.status == "ok":
            out[label].append(event.overhead_ms)
    return out


async def main(args: argparse.Namespace) -> None:
    if not SERVER.exists():
        raise SystemExit(f"{SERVER} is missing: run `make bench` (npm ci) first")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        async with contextlib.AsyncExitStack() as stack:
            clients: dict[str, Any] = {}
            dbs: dict[str, Path | None] = {}
            for path in (*PATHS, *EXTRA):
                clients[path], dbs[path] = await stack.enter_async_context(connect(path, work, args.entities))
            await run_rounds(clients, args.warmup, 3)  # warm up every path
            warmed = args.warmup * 3 * len(PATHS + EXTRA)
            procs = {p: proxy_pid(dbs[p]) for p in ("stdio", *EXTRA)}
            procs["floor"] = forwarder_pid()
            load = [os.getloadavg()[0]]
            cpu: dict[str, list[float]] = {}
            times = await run_rounds(clients, args.iterations, args.rounds, warmed, procs, cpu)
            load.append(os.getloadavg()[0])
        own = {p: own_overhead(db, warmed) for p, db in dbs.items() if db is not None}
        report(times, {p: own[p] for p in own if p in PATHS}, args)
        if EXTRA:
            compare(times, own, cpu, load, args)


def proxy_pid(db: Path | None) -> int | None:
    """The pid of the ``memtap proxy --stdio`` process writing ``db`` (a child of this one)."""
    if db is None:
        return None
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
                if b"proxy" in cmdline and str(db).encode() in cmdline:
                    return int(entry.name)
    return None


def forwarder_pid() -> int | None:
    """The pid of the floor's forwarder (a child of this process)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
                if any(part.endswith(b"naive_forwarder.py") for part in cmdline):
                    return int(entry.name)
    return None


def cpu_s(pid: int | None) -> float:
    """User plus system CPU seconds of ``pid`` so far."""
    if pid is None:
        return float("nan")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def compare(
    times: dict[str, dict[str, list[float]]],
    own: dict[str, dict[str, list[float]]],
    cpu: dict[str, list[float]],
    load: list[float],
    args: Any,
) -> None:
    """The stdio paths side by side: p50 over the floor, memtap's own time, CPU per call."""
    floor = pct([v for t in TOOLS for v in times["floor"][t]], 0.5)
    print(f"\n# stdio paths in the same run; load average {load[0]:.1f} -> {load[1]:.1f}")
    print(f"{'path':<8}{'p50':>8}{'-floor':>8}{'mean-of-7':>11}{'own':>8}{'cpu us/call':>13}{'min':>7}")
    for path in ("floor", "stdio", *EXTRA):
        p50 = pct([v for t in TOOLS for v in times[path][t]], 0.5)
        per_call = [pct(times[path][t], 0.5) - pct(times["floor"][t], 0.5) for t in TOOLS]
        mine = pct([v for t in TOOLS for v in own[path][t]], 0.5) if path in own else float("nan")
        print(
            f"{path:<8}{p50:>8.2f}{p50 - floor:>8.2f}{sum(per_call) / len(per_call):>11.2f}{mine:>8.3f}"
            f"{pct(cpu[path], 0.5) * 1e6:>13.0f}{min(cpu[path]) * 1e6:>7.0f}"
        )
    print("stdio: this tree (lean tools/call); sdk: this tree, MEMTAP_LEAN_STDIO=0; base...: --baseline-tree")
    print("cpu us/call: the proxy process's CPU per call, median (and min) over the rounds")


def report(
    times: dict[str, dict[str, list[float]]], own: dict[str, dict[str, list[float]]], args: Any
) -> None:
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    package = ROOT / "node_modules" / "@modelcontextprotocol" / "server-memory" / "package.json"
    version = json.loads(package.read_text())["version"]
    print(f"# memtap proxy overhead: {platform.platform()}, {os.cpu_count()} CPUs")
    print(f"# python {platform.python_version()}, node {node}, @modelcontextprotocol/server-memory {version}")
    print(
        f"# graph: {args.entities} entities x 5 observations + {args.entities // 2} relations;"
        f" {args.rounds} rounds x {args.iterations} sequences per path; times in ms\n"
    )
    header = (
        f"{'call':<20}{'direct':>8}{'p99':>7}{'floor':>8}{'p99':>7}{'stdio':>8}{'p99':>7}{'http':>8}{'p99':>7}"
        f"{'+stdio':>8}{'x':>6}{'-floor':>8}{'+http':>7}{'own':>7}{'p99':>7}"
    )
    print(header)
    print("-" * len(header))
    for row in [*TOOLS, "all calls"]:
        tools = TOOLS if row == "all calls" else (row,)
        by_path = {p: [v for t in tools for v in times[p][t]] if p in times else [] for p in MAIN}
        mine = [v for recorded in own.values() for t in tools for v in recorded[t]]
        d, f, s, h = (pct(by_path[p], 0.5) for p in MAIN)
        d99, f99, s99, h99 = (pct(by_path[p], 0.99) for p in MAIN)
        o50, o99 = pct(mine, 0.5), pct(mine, 0.99)
        print(
            f"{row:<20}{d:>8.2f}{d99:>7.2f}{f:>8.2f}{f99:>7.2f}{s:>8.2f}{s99:>7.2f}{h:>8.2f}{h99:>7.2f}"
            f"{s - d:>8.2f}{s / d:>6.2f}{s - f:>8.2f}{h - d:>7.2f}{o50:>7.3f}{o99:>7.3f}"
        )
    print(
        "\nmedians (p50) and p99 in ms. direct: client -> server; floor: client -> a forwarder that only"
        " forwards -> server;\nstdio, http: client -> memtap proxy -> server. +stdio, +http: median added"
        " over direct; x: stdio / direct;\n-floor: stdio minus floor (what recording, context and the state"
        " diff cost); own: overhead_ms in memtap's trace."
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=60, help="sequences per path per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--entities", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round of 5")
    parser.add_argument("--compare", action="store_true", help="also the sdk (and base) stdio paths")
    parser.add_argument(
        "--baseline-tree", type=Path, action="append", default=[],
        help="with --compare: a checkout to run as 'base' (again: 'base2', ...)",
    )  # fmt: skip
    parser.add_argument("--no-http", action="store_true", help="leave out the http path")
    options = parser.parse_args()
    if options.no_http:
        PATHS = ("direct", "floor", "stdio")
    if options.compare:
        trees = options.baseline_tree
        BASELINE_TREES = {("base" if i == 0 else f"base{i + 1}"): t.resolve() for i, t in enumerate(trees)}
        EXTRA = ("sdk", *BASELINE_TREES)
    if options.quick:
        options.iterations, options.rounds, options.warmup = 5, 1, 1
    import anyio

    anyio.run(main, options)
