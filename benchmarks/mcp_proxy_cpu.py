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

    .venv/bin/python benchmarks/mcp_proxy_cpu.py --tree /path/to/main [--calls 300] [--repeat 2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
SERVER = ROOT / "node_modules" / ".bin" / "mcp-server-memory"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proxy_pid(db: Path) -> int:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
                if b"proxy" in cmdline and str(db).encode() in cmdline:
                    return int(entry.name)
    raise SystemExit(f"no memtap proxy process writing {db}")


async def one(work: Path, label: str, env: dict[str, str], calls: int) -> tuple[float, float]:
    """(CPU seconds per call, wall seconds per call) of one fresh proxy."""
    from mcp import Client, StdioServerParameters

    folder = work / label
    folder.mkdir(parents=True)
    config = folder / "memtap.json"
    upstream = {"command": str(SERVER), "env": {"MEMORY_FILE_PATH": str(folder / "memory.jsonl")}}
    config.write_text(json.dumps({"mcpServers": {"memory": upstream}}))
    db = folder / "trace.db"
    args = ["-m", "memtap", "proxy", "--stdio", "--config", str(config), "--db", str(db)]
    params = StdioServerParameters(command=sys.executable, args=args, env={**os.environ, **env})
    async with Client(params) as client:
        for i in range(30):
            await client.call_tool("search_nodes", {"query": f"warm {i}"})
        pid = proxy_pid(db)
        cpu, wall = cpu_seconds(pid), time.perf_counter()
        for i in range(calls):
            entity = {"name": f"e{i}", "entityType": "thing", "observations": [f"fact {i}"]}
            await client.call_tool("create_entities", {"entities": [entity]})
            await client.call_tool("search_nodes", {"query": f"fact {i}"})
        return (cpu_seconds(pid) - cpu) / (2 * calls), (time.perf_counter() - wall) / (2 * calls)


async def main(args: argparse.Namespace) -> None:
    here = os.environ.get("PYTHONPATH", str(ROOT))
    paths = {"lean": {"PYTHONPATH": here}, "sdk": {"PYTHONPATH": here, "MEMTAP_LEAN_STDIO": "0"}}
    for i, tree in enumerate(args.tree):
        paths["base" if i == 0 else f"base{i + 1}"] = {"PYTHONPATH": str(tree.resolve())}
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


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, action="append", default=[], help="a checkout, repeatable")
    parser.add_argument("--calls", type=int, default=300, help="pairs of calls per run")
    parser.add_argument("--repeat", type=int, default=2, help="runs per path")
    if not SERVER.exists():
        raise SystemExit(f"{SERVER} is missing: run `npm ci` first")
    anyio.run(main, parser.parse_args())
