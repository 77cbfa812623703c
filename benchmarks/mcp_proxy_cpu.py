"""The CPU ``memtap proxy --stdio`` spends per forwarded call: the lean path, the SDK's, other trees.

Wall-clock figures on a shared 2-core machine swing with the load; the CPU a process spends
per call swings much less. Each path gets a fresh ``memtap proxy --stdio`` in front of its own
reference memory server, is warmed up, and then serves ``--calls`` pairs of calls (a
``create_entities`` of a new entity and a ``search_nodes`` for it) from the official client,
one path after the other, ``--repeat`` times; printed: the proxy process's CPU per call (user
plus system, all its threads, from ``/proc``) and the wall time per call, with the load average.

* ``lean``: this tree (``tools/call`` on the lean path, ``proxy/lean.py``);
* ``sdk``: this tree with ``MEMTAP_LEAN_STDIO=0`` (every call through the SDK's server layers);
* ``base``, ``base2``, ...: the trees given with ``--tree`` (a checkout's root, main's say).

``--count-calls`` measures what the load cannot disturb: each path's proxy runs with a profile
hook counting every Python and C function call on its event loop thread (the recorder's thread,
started before, is not counted), over a run of 20 pairs and one of 120; the difference over 200
calls is the function calls per forwarded call.

    .venv/bin/python benchmarks/mcp_proxy_cpu.py --tree /path/to/main [--calls 300] [--repeat 2]
    .venv/bin/python benchmarks/mcp_proxy_cpu.py --tree /path/to/main --count-calls
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp_proxy_overhead import cpu_s, proxy_pid  # this folder is first on sys.path

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "node_modules" / ".bin" / "mcp-server-memory"


# Runs memtap proxy --stdio ARGS... with a profile hook counting function calls while it serves;
# the count goes to a file at the end.
COUNTING = """
import runpy, sys
count = [0]
def hook(frame, event, arg):
    if event in ("call", "c_call"):
        count[0] += 1
out, sys.argv = sys.argv[1], ["memtap", "proxy", "--stdio", *sys.argv[2:]]
import memtap.proxy.serve as serve
serving = serve._serve_stdio
async def counted(runtime):
    sys.setprofile(hook)
    try:
        await serving(runtime)
    finally:
        sys.setprofile(None)
        open(out, "w").write(str(count[0]))
serve._serve_stdio = counted
runpy.run_module("memtap", run_name="__main__")
"""


async def one(
    work: Path, label: str, env: dict[str, str], calls: int, count: Path | None = None
) -> tuple[float, float]:
    """(CPU seconds per call, wall seconds per call) of one fresh proxy; with ``count``, the
    proxy counts its function calls into that file."""
    from mcp import Client, StdioServerParameters

    folder = work / label
    folder.mkdir(parents=True)
    config = folder / "memtap.json"
    upstream = {"command": str(SERVER), "env": {"MEMORY_FILE_PATH": str(folder / "memory.jsonl")}}
    config.write_text(json.dumps({"mcpServers": {"memory": upstream}}))
    db = folder / "trace.db"
    args = ["-m", "memtap", "proxy", "--stdio", "--config", str(config), "--db", str(db)]
    if count is not None:
        args = ["-c", COUNTING, str(count), "--config", str(config), "--db", str(db)]
    # python -m (and -c) puts the working directory first on sys.path: run in the tree whose code it is.
    tree = env.get("PYTHONPATH", str(ROOT))
    params = StdioServerParameters(command=sys.executable, args=args, env={**os.environ, **env}, cwd=tree)
    async with Client(params) as client:
        for i in range(30 if count is None else 0):
            await client.call_tool("search_nodes", {"query": f"warm {i}"})
        pid = proxy_pid(db) if count is None else None
        if count is None and pid is None:
            raise SystemExit(f"no memtap proxy process writing {db}")
        cpu, wall = cpu_s(pid) if pid else 0.0, time.perf_counter()
        for i in range(calls):
            entity = {"name": f"e{i}", "entityType": "thing", "observations": [f"fact {i}"]}
            await client.call_tool("create_entities", {"entities": [entity]})
            await client.call_tool("search_nodes", {"query": f"fact {i}"})
        used = cpu_s(pid) - cpu if pid else 0.0
        return used / (2 * calls), (time.perf_counter() - wall) / (2 * calls)


async def main(args: argparse.Namespace) -> None:
    here = os.environ.get("PYTHONPATH", str(ROOT))
    paths = {"lean": {"PYTHONPATH": here}, "sdk": {"PYTHONPATH": here, "MEMTAP_LEAN_STDIO": "0"}}
    for i, tree in enumerate(args.tree):
        paths["base" if i == 0 else f"base{i + 1}"] = {"PYTHONPATH": str(tree.resolve())}
    if args.count_calls:
        await count_calls(paths)
        return
    results: dict[str, list[tuple[float, float]]] = {label: [] for label in paths}
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeat):
            for label, env in paths.items():
                results[label].append(await one(Path(tmp) / f"{label}-{r}", label, env, args.calls))
    load.append(os.getloadavg()[0])
    print(f"# memtap proxy --stdio, CPU per forwarded call; {args.calls} x (create_entities, search_nodes)"
          f" per run, {args.repeat} runs per path; load average {load[0]:.1f} -> {load[1]:.1f}")  # fmt: skip
    print(f"{'path':<8}{'cpu us/call (each run)':>28}{'wall ms/call (each run)':>28}")
    for label, runs in results.items():
        cpus = " ".join(f"{c * 1e6:.0f}" for c, _ in runs)
        walls = " ".join(f"{w * 1e3:.2f}" for _, w in runs)
        print(f"{label:<8}{cpus:>28}{walls:>28}")


async def count_calls(paths: dict[str, dict[str, str]]) -> None:
    print("# memtap proxy --stdio: function calls on the event loop thread per forwarded call")
    print(f"{'path':<8}{'calls/call':>12}")
    with tempfile.TemporaryDirectory() as tmp:
        for label, env in paths.items():
            counts = []
            for pairs in (20, 120):
                out = Path(tmp) / f"{label}-{pairs}.count"
                await one(Path(tmp) / f"{label}-{pairs}", label, env, pairs, out)
                counts.append(int(out.read_text()))
            print(f"{label:<8}{(counts[1] - counts[0]) / 200:>12.0f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, action="append", default=[], help="a checkout, repeatable")
    parser.add_argument("--calls", type=int, default=300, help="pairs of calls per run")
    parser.add_argument("--repeat", type=int, default=2, help="runs per path")
    parser.add_argument("--count-calls", action="store_true", help="function calls per call instead")
    if not SERVER.exists():
        raise SystemExit(f"{SERVER} is missing: run `npm ci` first")
    anyio.run(main, parser.parse_args())
