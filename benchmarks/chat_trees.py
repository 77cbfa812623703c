"""The chat proxy (memory off) of two code trees, against the same upstream, in one run.

For a change to the chat path: ``memtap serve`` from each tree given (``--tree LABEL=PATH``,
a checkout's root; ``this`` is this tree), each on its own port with the same config, and
the same upstream (``tests/fake_openai.py``) called directly. In rotating rounds, so drift
on a shared machine hits every path alike: sequential calls (p50 and what it adds over
direct, interleaved call by call) and 32 concurrent calls (requests per second as a share
of direct's in the same round), non-streaming and 20-chunk streaming; and the CPU time each
memtap process spent per request (from ``/proc``: its event loop and its recorder thread),
which a loaded machine disturbs much less than wall-clock figures. ``bare`` is the floor for
a Python proxy on the same server stack (``bare_chat_proxy.py``: uvicorn and aiohttp,
forwarding only); its share is shown too (``--no-bare`` leaves it out). ``--obfuscation``: the
upstream pads every streamed event with an ``obfuscation`` field of varying length, as OpenAI's
own streams do (the summary's runs of alike events must see through it).

    .venv/bin/python benchmarks/chat_trees.py --tree before=/tmp/old-checkout [--rounds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from openai_overhead import ROOT, call, concurrent, fixed, free_port, pct, wait_for


def cpu_seconds(pid: int) -> float:
    """User plus system CPU of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(
    workdir: Path,
    trees: dict[str, Path],
    procs: list[subprocess.Popen[bytes]],
    *,
    bare: bool = True,
    obfuscation: bool = False,
) -> dict[str, Any]:
    up_port = free_port()
    padding = ["--obfuscation"] if obfuscation else []
    fake = [sys.executable, str(ROOT / "tests" / "fake_openai.py"), str(up_port), *padding]
    upstream = subprocess.Popen(fake)
    procs.append(upstream)
    wait_for(f"http://127.0.0.1:{up_port}/healthz", upstream)
    base = f"http://127.0.0.1:{up_port}/v1"
    params = {"model": "openai/fake-1", "api_base": base, "api_key": "sk-local"}
    config = workdir / "memtap.yaml"
    config.write_text(json.dumps({"model_list": [{"model_name": "fake-1", "litellm_params": params}]}))
    targets: dict[str, Any] = {"direct": (base, None)}
    if bare:
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "benchmarks" / "bare_chat_proxy.py"), str(port), base]
        )
        procs.append(proc)
        wait_for(f"http://127.0.0.1:{port}/healthz", proc)
        targets["bare"] = (f"http://127.0.0.1:{port}/v1", proc)
    for label, tree in trees.items():
        port = free_port()
        env = {**os.environ, "PYTHONPATH": str(tree)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "memtap", "serve", "--http", f"127.0.0.1:{port}",
             "--db", str(workdir / f"{label}.db"), "--config", str(config)],
            stderr=subprocess.DEVNULL, env=env, cwd=tree,  # -m puts the working directory first on the path
        )  # fmt: skip
        procs.append(proc)
        wait_for(f"http://127.0.0.1:{port}/healthz", proc)
        targets[label] = (f"http://127.0.0.1:{port}/v1", proc)
    return targets


async def measure(targets: dict[str, Any], rounds: int, sequential_n: int, concurrent_n: int) -> None:
    names = list(targets)
    rows: dict[tuple[str, bool], dict[str, list[float]]] = {}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64)) as session:
        for stream in (False, True):
            body = fixed("fake-1", stream)
            for r in range(rounds):
                order = names[r % len(names) :] + names[: r % len(names)]
                seq: dict[str, list[float]] = {n: [] for n in names}
                for i in range(sequential_n):
                    for name in order[i % len(order) :] + order[: i % len(order)]:
                        url = targets[name][0] + "/chat/completions"
                        seq[name].append((await call(session, url, body(i), stream))[0])
                rates: dict[str, float] = {}
                cpu: dict[str, float] = {}
                for name in order:
                    url, proc = targets[name][0] + "/chat/completions", targets[name][1]
                    before = cpu_seconds(proc.pid) if proc is not None else 0.0
                    rates[name], _ = await concurrent(session, url, body, concurrent_n, stream)
                    if proc is not None:
                        cpu[name] = (cpu_seconds(proc.pid) - before) / concurrent_n * 1e6
                for name in names:
                    row = rows.setdefault(
                        (name, stream), {k: [] for k in ("p50", "+p50", "rps", "share", "bare", "cpu")}
                    )
                    row["p50"].append(pct(seq[name], 0.5))
                    row["+p50"].append(pct(seq[name], 0.5) - pct(seq["direct"], 0.5))
                    row["rps"].append(rates[name])
                    row["share"].append(100 * rates[name] / rates["direct"])
                    if "bare" in rates:
                        row["bare"].append(100 * rates[name] / rates["bare"])
                    if name in cpu:
                        row["cpu"].append(cpu[name])
    print(
        f"chat proxy, memory off: medians over {rounds} rounds; sequential n={sequential_n} per round"
        f" (interleaved), {concurrent_n} calls at 32 concurrent per round; times in ms"
    )
    header = ("path", "kind", "p50", "+p50", "req/s @32", "% of direct", "% of bare", "CPU µs/req")
    print("  ".join(f"{h:>11}" for h in header))
    for (name, stream), row in rows.items():
        med = {k: statistics.median(v) if v else float("nan") for k, v in row.items()}
        kind = "stream 20" if stream else "non-stream"
        cells = (name, kind, f"{med['p50']:.3f}", f"{med['+p50']:.3f}", f"{med['rps']:.0f}",
                 f"{med['share']:.0f}%", f"{med['bare']:.0f}%", f"{med['cpu']:.0f}")  # fmt: skip
        print("  ".join(f"{c:>11}" for c in cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--tree", action="append", default=[], help="LABEL=PATH of another checkout")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--sequential", type=int, default=100, help="sequential calls per path per round")
    parser.add_argument("--concurrent", type=int, default=400, help="calls at 32 concurrent per round")
    parser.add_argument("--no-bare", action="store_true", help="leave out the bare uvicorn+aiohttp proxy")
    parser.add_argument("--obfuscation", action="store_true", help="stream events padded as OpenAI pads them")
    args = parser.parse_args()
    trees = {"this": ROOT, **{t.split("=", 1)[0]: Path(t.split("=", 1)[1]) for t in args.tree}}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            targets = start(Path(tmp), trees, procs, bare=not args.no_bare, obfuscation=args.obfuscation)
            asyncio.run(measure(targets, args.rounds, args.sequential, args.concurrent))
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
