"""The long fault and load harness: prints the reliability table (docs/reliability.md).

Runs, against real memtap servers and real MCP clients over streamable HTTP:

* load: ``--clients`` concurrent clients x ``--calls`` mixed calls (add, search, update, delete,
  list) on ``memtap serve``, default and ``--durable``;
* SIGKILL of ``memtap serve`` half-way through the load, default and durable;
* the disk filling up and the database turning read-only during the load, default and durable;
* ``memtap proxy`` over the real reference memory server, SIGKILLed twice and hung once;
* ``benchmarks/fuzz_soak.py`` when it is there (the HTTP fuzzer): its last JSON line is quoted.

Run: ``make soak`` or ``.venv/bin/python benchmarks/soak.py [--clients 64 --calls 60]``.
Exits 1 when a target is missed (see docs/reliability.md); the default-mode SIGKILL loss is
measured and reported, not a failure.
"""

from __future__ import annotations

import argparse
import logging
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memtap.harness.report import table  # noqa: E402
from memtap.harness.scenarios import Row, disk_fault, kill_memtap, load, upstream_faults  # noqa: E402

MEMORY_SERVER = ROOT / "node_modules" / ".bin" / "mcp-server-memory"


async def scenarios(folder: Path, clients: int, calls: int) -> list[Row]:
    rows: list[Row] = []
    for durable in (False, True):
        print(f"# load, {'durable' if durable else 'default'} ...", file=sys.stderr, flush=True)
        rows.append(await load(folder, clients=clients, calls=calls, durable=durable))
    for durable in (False, True):
        print("# SIGKILL of memtap ...", file=sys.stderr, flush=True)
        rows.append(await kill_memtap(folder, clients=clients, calls=calls, durable=durable))
    for kind in ("disk full", "read-only"):
        for durable in (False, True):
            print(f"# {kind} ...", file=sys.stderr, flush=True)
            rows.append(await disk_fault(folder, clients=clients, calls=calls, durable=durable, kind=kind))
    if MEMORY_SERVER.exists():
        print("# upstream SIGKILL and hang ...", file=sys.stderr, flush=True)
        rows.append(await upstream_faults(folder, clients=clients, calls=calls, memory_server=MEMORY_SERVER))
    return rows


def fuzz() -> tuple[str, bool] | None:
    """Run benchmarks/fuzz_soak.py when present: its summary, and whether it met its targets."""
    script = ROOT / "benchmarks" / "fuzz_soak.py"
    if not script.exists():
        return None
    print("# fuzz (benchmarks/fuzz_soak.py) ...", file=sys.stderr, flush=True)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=ROOT)
    lines = done.stdout.splitlines()
    counted = next((m for line in lines if (m := re.search(r"fuzz cases (\d+), 5xx (\d+)", line))), None)
    up = any(line.startswith("server up after fuzzing: yes") for line in lines)
    if counted is None:
        tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
        return f"benchmarks/fuzz_soak.py exited {done.returncode} without its summary: {tail}", False
    cases, errors = int(counted.group(1)), int(counted.group(2))
    summary = f"{cases} cases, {errors} answered 5xx, server up after fuzzing: {'yes' if up else 'NO'}"
    return summary, errors == 0 and up and done.returncode == 0


def missed(rows: list[Row]) -> list[str]:
    """The targets a row misses (the default-mode SIGKILL loss is a measured bound, not a target)."""
    found = []
    for r in rows:
        bounded = r.scenario == "SIGKILL memtap" and r.mode == "default"
        if r.lost and not bounded:
            found.append(f"{r.scenario} ({r.mode}): {r.lost} acknowledged calls lost")
        for what, value in (("duplicated", r.duplicated), ("late", r.late), ("items wrong", r.items_wrong),
                            ("refused without a clear message", r.unclear),
                            ("trace/state differences after reconciliation", r.differences)):  # fmt: skip
            if value:
                found.append(f"{r.scenario} ({r.mode}): {value} {what}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--calls", type=int, default=60, help="calls per client")
    args = parser.parse_args()
    logging.getLogger("memtap").setLevel(logging.CRITICAL)  # the faults are meant: keep the table readable
    with tempfile.TemporaryDirectory(prefix="memtap-soak-") as tmp:
        rows = anyio.run(scenarios, Path(tmp), args.clients, args.calls)
    fuzzed = fuzz()
    print(table(rows, fuzzed[0] if fuzzed else None))
    problems = missed(rows)
    if fuzzed is not None and not fuzzed[1]:
        problems.append(f"fuzz: {fuzzed[0]}")
    for problem in problems:
        print(f"MISSED: {problem}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
