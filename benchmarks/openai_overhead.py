"""What memtap's OpenAI-compatible proxy adds to a chat call, against the same upstream called directly.

One run: a local OpenAI-compatible upstream (fast, deterministic: tests/fake_openai.py in a
process of its own) called directly and through ``memtap serve --config`` with memory
``off``, with memory ``auto`` (search, inject, capture on the builtin backend; 50 namespaces
seeded with 100 memories each, a different question each call), and through
memtap's litellm path; non-streaming and 20-chunk streaming; sequential (direct and proxied
calls interleaved, so drift hits both alike) and 32 concurrent. Prints median and p99
latency, what memtap adds to them, time to first token and what memtap adds to it, and
requests per second at 32 concurrent.

``memtap auto +grants`` is the same auto path on a second memtap whose config names 1,000
principals (about 3,000 grant patterns), called with the key of an application principal
that acts for the benchmark's users: what the grant check and the pinned-context merge add
end to end (sequential rows only; against ``memtap auto`` in the same run). The same step is
also timed in-process (``auth_cost.py``), where the machine's noise does not drown it.

``memtap off +hw-probe`` is ``memtap off`` on a third memtap started with ``--hw-probe``
(10 Hz, docs/hardware.md): what sampling adds to call latency (+ columns against ``memtap
off``, interleaved in the same rounds), and the sampler thread's CPU time over the whole run as
a share of one core (from the probe's own record, written when that memtap stops).

    .venv/bin/python benchmarks/openai_overhead.py [--sequential 400] [--concurrent 1600]

Everything runs on this machine (loopback only); the client is aiohttp in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from memtap.probes.targets._server import free_port  # noqa: E402

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Say hello [chunks 20]"},
]


def wait_for(url: str, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{proc.args!r} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{url} did not answer within {timeout:.0f} s")


NAMESPACES = 50
NAMES = ["Ana", "Ben", "Chen", "Dita", "Emre", "Fatima", "Gus", "Hana", "Ivo", "Jun"]
THINGS = ["green tea", "the FitLife gym", "jazz records", "Lyon", "peanut allergy", "chess", "a red bike",
          "sourdough", "the night shift", "Python"]  # fmt: skip
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


async def seed_memories(db: Path, per_namespace: int = 100) -> None:
    """Give every benchmark namespace ``per_namespace`` distinct memories, written by the
    builtin backend itself before memtap starts on the same file."""
    from memtap.adapters.builtin import BuiltinBackend
    from memtap.trace.models import Provenance, Role

    backend = BuiltinBackend(db)
    for ns in range(NAMESPACES):
        for i in range(per_namespace):
            text = (f"{NAMES[i % 10]} mentioned {THINGS[(i // 10) % 10]} on a {DAYS[(i + ns) % 7]} "
                    f"(note {ns}-{i})")  # fmt: skip
            await backend.add(f"user-{ns}", text, provenance=Provenance(session="seed", role=Role.USER))
    await backend.close()


def auto_body(i: int, stream: bool) -> bytes:
    """A different question (and so a different captured turn) from one of the namespaces."""
    text = f"What did {NAMES[i % 10]} say about {THINGS[(i // 7) % 10]}? (ask {i}) [chunks 20]"
    return body_for("fake-auto", stream, text, user=f"user-{i % NAMESPACES}")


AUTH_HEADERS: dict[str, dict[str, str]] = {}  # URL prefix -> headers its calls carry
APP_KEY = "k-bench-app"


def grants_config() -> dict[str, Any]:
    """1,000 principals with three patterns each, and ``app`` acting for the benchmark's users."""
    principals: dict[str, Any] = {
        f"p{i}": {
            "keys": [f"k-bench-{i}"],
            "grants": {"{principal}": ["read", "write", "delete"], f"team-{i % 50}/*": ["read"],
                       f"proj-{i}/docs/*": ["read", "write"]},
            "act_for": [f"users-{i}/*"],
        }
        for i in range(1_000)
    }  # fmt: skip
    principals["app"] = {"keys": [APP_KEY], "grants": {"user-*": ["read", "write"]}, "act_for": ["user-*"]}
    return principals


def start_processes(workdir: Path, procs: list[subprocess.Popen[bytes]]) -> tuple[str, str, str, str]:
    """Start the upstream and memtap (appended to ``procs`` as they start, for the caller to stop)."""
    up_port, memtap_port, grants_port = free_port(), free_port(), free_port()
    upstream = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fake_openai.py"), str(up_port)])
    procs.append(upstream)
    wait_for(f"http://127.0.0.1:{up_port}/healthz", upstream)
    base = f"http://127.0.0.1:{up_port}/v1"
    params = {"model": "openai/fake-1", "api_base": base, "api_key": "sk-local"}
    config = {
        "model_list": [
            {"model_name": "fake-1", "litellm_params": params},
            {"model_name": "fake-auto", "litellm_params": params},
            {"model_name": "fake-litellm", "litellm_params": params},
        ],
        "memtap": {
            "memory": "off",
            "routes": {"fake-auto": {"memory": "auto"}, "fake-litellm": {"via": "litellm"}},
        },
    }
    path = workdir / "memtap.yaml"
    path.write_text(json.dumps(config))
    memtap = subprocess.Popen(
        [sys.executable, "-m", "memtap", "serve", "--http", f"127.0.0.1:{memtap_port}",
         "--db", str(workdir / "bench.db"), "--config", str(path)],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    procs.append(memtap)
    wait_for(f"http://127.0.0.1:{memtap_port}/healthz", memtap)
    # The same, with 1,000 principals configured (observe, as the first, so only the grants differ).
    config["memtap"] = {**config["memtap"], "gate": "observe", "principals": grants_config()}
    granted_path = workdir / "memtap-grants.yaml"
    granted_path.write_text(json.dumps(config))
    granted = subprocess.Popen(
        [sys.executable, "-m", "memtap", "serve", "--http", f"127.0.0.1:{grants_port}",
         "--db", str(workdir / "grants.db"), "--config", str(granted_path)],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    procs.append(granted)
    wait_for(f"http://127.0.0.1:{grants_port}/healthz", granted)
    granted_url = f"http://127.0.0.1:{grants_port}/v1"
    AUTH_HEADERS[granted_url] = {"Authorization": f"Bearer {APP_KEY}"}
    # The first memtap's config again, with the hardware probe sampling at 10 Hz.
    probe_port = free_port()
    probed = subprocess.Popen(
        [sys.executable, "-m", "memtap", "serve", "--http", f"127.0.0.1:{probe_port}",
         "--db", str(workdir / "probe.db"), "--config", str(path), "--hw-probe", "--hw-interval", "100",
         "--hw-baseline", "0"],
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    procs.append(probed)
    wait_for(f"http://127.0.0.1:{probe_port}/healthz", probed)
    return base, f"http://127.0.0.1:{memtap_port}/v1", granted_url, f"http://127.0.0.1:{probe_port}/v1"


def sampler_cost(db: Path) -> str:
    """The probed memtap's sampler CPU over its run, read from its hw_runs row."""
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        row = conn.execute(
            "SELECT sampler_cpu_s, ended_ts - started_ts, samples, dropped FROM hw_runs"
        ).fetchone()
    finally:
        conn.close()
    if row is None or row[0] is None:
        return "hw-probe: the probed memtap recorded no sampler time (did it stop cleanly?)"
    cpu, wall, samples, dropped = row
    return (
        f"hw-probe at 10 Hz: sampler thread {cpu:.3f} s CPU over {wall:.1f} s = "
        f"{100 * cpu / wall:.3f}% of one core ({samples} samples, {dropped} dropped)"
    )


async def call(session: aiohttp.ClientSession, url: str, body: bytes, stream: bool) -> tuple[float, float]:
    """(total seconds, seconds to the first content token)."""
    headers = {"Content-Type": "application/json"}
    for prefix, extra in AUTH_HEADERS.items():
        if url.startswith(prefix):
            headers.update(extra)
    t0 = time.perf_counter()
    async with session.post(url, data=body, headers=headers) as response:
        if response.status != 200:
            raise SystemExit(f"{url} answered {response.status}: {await response.text()}")
        if not stream:
            await response.read()
            total = time.perf_counter() - t0
            return total, total
        first = None
        async for chunk in response.content.iter_any():
            if first is None and b'"content":"chunk' in chunk:
                first = time.perf_counter() - t0
        return time.perf_counter() - t0, first or 0.0


def body_for(model: str, stream: bool, text: str | None = None, user: str = "bench") -> bytes:
    messages = MESSAGES if text is None else [MESSAGES[0], {"role": "user", "content": text}]
    request: dict[str, Any] = {"model": model, "messages": messages, "user": user}
    if stream:
        request["stream"] = True
    return json.dumps(request).encode()


Body = Callable[[int], bytes]


async def sequential(
    session: aiohttp.ClientSession, targets: dict[str, tuple[str, Body]], n: int, stream: bool
) -> dict[str, list[tuple[float, float]]]:
    """Interleaved: each round calls every target once, in a rotating order."""
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in targets}
    names = list(targets)
    for i in range(n):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            url, body = targets[name]
            samples[name].append(await call(session, url, body(i), stream))
    return samples


async def concurrent(
    session: aiohttp.ClientSession, url: str, body: Body, total: int, stream: bool, width: int = 32
) -> tuple[float, list[float]]:
    """(requests per second, latencies) with ``width`` requests in flight."""
    latencies: list[float] = []
    queue = iter(range(total))

    async def worker() -> None:
        for i in queue:
            latencies.append((await call(session, url, body(10_000 + i), stream))[0])

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(width)))
    return total / (time.perf_counter() - t0), latencies


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def fixed(model: str, stream: bool) -> Body:
    body = body_for(model, stream)
    return lambda _: body


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        await seed_memories(Path(tmp) / "bench.db")
        await seed_memories(Path(tmp) / "grants.db")
        procs: list[subprocess.Popen[bytes]] = []
        try:
            direct, memtap, granted, probed = start_processes(Path(tmp), procs)
            chat = f"{memtap}/chat/completions"
            probed_chat = f"{probed}/chat/completions"
            granted_chat = f"{granted}/chat/completions"
            connector = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(connector=connector) as session:
                # Warm up every path (litellm imports on first use).
                for stream in (False, True):
                    for i in range(20):
                        await call(session, f"{direct}/chat/completions", body_for("fake-1", stream), stream)
                        await call(session, chat, auto_body(20_000 + i, stream), stream)
                        await call(session, granted_chat, auto_body(20_000 + i, stream), stream)
                        await call(session, probed_chat, body_for("fake-1", stream), stream)
                        for model in ("fake-1", "fake-litellm"):
                            await call(session, chat, body_for(model, stream), stream)
                rows = []
                for stream in (False, True):
                    kind = "stream 20" if stream else "non-stream"
                    targets: dict[str, tuple[str, Body]] = {
                        "direct": (f"{direct}/chat/completions", fixed("fake-1", stream)),
                        "memtap off": (chat, fixed("fake-1", stream)),
                        "memtap auto": (chat, lambda i, s=stream: auto_body(i, s)),
                        "memtap auto +grants": (granted_chat, lambda i, s=stream: auto_body(i, s)),
                        "memtap off +hw-probe": (probed_chat, fixed("fake-1", stream)),
                    }
                    seq = await sequential(session, targets, args.sequential, stream)
                    litellm_target = (chat, fixed("fake-litellm", stream))
                    seq_litellm = await sequential(
                        session,
                        {"direct": targets["direct"], "via litellm": litellm_target},
                        args.sequential // 4,
                        stream,
                    )
                    base_total = [t for t, _ in seq["direct"]]
                    base_first = [f for _, f in seq["direct"]]
                    results = {**seq, "via litellm": seq_litellm["via litellm"]}
                    for name, samples in results.items():
                        url, body = targets.get(name, litellm_target)
                        if name == "memtap auto +grants":  # sequential only: compared with memtap auto
                            totals = [t for t, _ in samples]
                            auto = [t for t, _ in seq["memtap auto"]]
                            rows.append({
                                "path": name, "kind": kind, "p50": pct(totals, 0.5), "p99": pct(totals, 0.99),
                                "add50": pct(totals, 0.5) - pct(auto, 0.5),
                                "add99": pct(totals, 0.99) - pct(auto, 0.99),
                                "ttft": None, "addttft": None, "rps": 0.0, "c50": None, "c99": None,
                            })  # fmt: skip
                            continue
                        total = args.concurrent if name != "via litellm" else args.concurrent // 4
                        rps, conc = await concurrent(session, url, body, total, stream)
                        totals = [t for t, _ in samples]
                        firsts = [f for _, f in samples]
                        if name == "memtap off +hw-probe":  # compared with memtap off, not direct
                            off = seq["memtap off"]
                            off_first = [f for _, f in off]
                            rows.append({
                                "path": name, "kind": kind, "p50": pct(totals, 0.5), "p99": pct(totals, 0.99),
                                "add50": pct(totals, 0.5) - pct([t for t, _ in off], 0.5),
                                "add99": pct(totals, 0.99) - pct([t for t, _ in off], 0.99),
                                "ttft": pct(firsts, 0.5) if stream else None,
                                "addttft": pct(firsts, 0.5) - pct(off_first, 0.5) if stream else None,
                                "rps": rps, "c50": pct(conc, 0.5), "c99": pct(conc, 0.99),
                            })  # fmt: skip
                            continue
                        rows.append({
                            "path": name, "kind": kind,
                            "p50": pct(totals, 0.5), "p99": pct(totals, 0.99),
                            "add50": pct(totals, 0.5) - pct(base_total, 0.5),
                            "add99": pct(totals, 0.99) - pct(base_total, 0.99),
                            "ttft": pct(firsts, 0.5) if stream else None,
                            "addttft": pct(firsts, 0.5) - pct(base_first, 0.5) if stream else None,
                            "rps": rps, "c50": pct(conc, 0.5), "c99": pct(conc, 0.99),
                        })  # fmt: skip
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(timeout=30)
            cost = sampler_cost(Path(tmp) / "probe.db")
    print_table(rows, args)
    print("(memtap auto +grants: + columns against memtap auto, not direct; no concurrent run)")
    print("(memtap off +hw-probe: + columns against memtap off, not direct)")
    print(cost)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import auth_cost

    auth_cost.print_rows("authorisation, the HTTP gate, in-process", auth_cost.gate_rows())
    auth_cost.print_rows("authorisation, chat front door step, in-process", auth_cost.chat_rows())


def print_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    def f(value: float | None) -> str:
        return "" if value is None else f"{value:.3f}"

    print(f"memtap OpenAI proxy overhead ({os.cpu_count()} cores; sequential n={args.sequential} per path, "
          f"{args.concurrent} calls at 32 concurrent; litellm path n/4; times in ms)")  # fmt: skip
    header = [
        "path",
        "kind",
        "p50",
        "p99",
        "+p50",
        "+p99",
        "ttft p50",
        "+ttft",
        "req/s @32",
        "p50 @32",
        "p99 @32",
    ]
    table = [header] + [
        [r["path"], r["kind"], f(r["p50"]), f(r["p99"]), f(r["add50"]), f(r["add99"]), f(r["ttft"]),
         f(r["addttft"]), f"{r['rps']:.0f}" if r["rps"] else "", f(r["c50"]), f(r["c99"])]
        for r in rows
    ]  # fmt: skip
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for index, row in enumerate(table):
        print(
            "  ".join(cell.rjust(widths[i]) if i > 1 else cell.ljust(widths[i]) for i, cell in enumerate(row))
        )
        if index == 0:
            print("  ".join("-" * w for w in widths))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sequential", type=int, default=400, help="sequential calls per path and kind")
    parser.add_argument(
        "--concurrent", type=int, default=1600, help="calls at 32 concurrent per path and kind"
    )
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
