"""The load and fault scenarios: each runs real memtap servers and real MCP clients, and returns a row."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from memtap.harness.checks import check_items, check_ledger, state_differences
from memtap.harness.load import Ack, Ledger, builtin_workload, graph_workload, run_clients
from memtap.harness.servers import child, in_process, run_on_connections
from memtap.verify import (
    BackendState,
    builtin_state,
    compare,
    graph_state,
    record_differences,
    trace_items,
)

__all__ = ["Row", "disk_fault", "kill_memtap", "load", "upstream_faults"]


@dataclass
class Row:
    scenario: str
    mode: str
    clients: int
    calls: int  # calls made
    acknowledged: int
    lost: int  # acknowledged calls with no event
    duplicated: int
    spilled: int = 0
    faults: int = 0
    items_wrong: int = 0  # acknowledged writes whose item the trace holds otherwise
    late: int = 0  # calls answered later than their timeout (+1 s of slack)
    differences_before: int = 0  # trace/state differences before `verify --record`
    differences: int = 0  # ... after it (the proxy's own reconciliation for wrapped servers)
    per_client: int = 0  # calls each client was to make
    unclear: int = 0  # refused calls whose error does not say what went wrong
    loss_window_ms: float = 0.0  # lost calls were all acknowledged within this long before the fault
    notes: list[str] = field(default_factory=list)


def _mode(durable: bool) -> str:
    return "durable" if durable else "default"


def _reconcile_builtin(db: Path) -> tuple[int, int]:
    """Differences between the builtin rows and the trace, before and after recording them."""
    found = _record_differences(db, "builtin", builtin_state(db))
    return found, state_differences(db, builtin_state(db), "builtin")


def _record_differences(db: Path, backend: str, state: BackendState) -> int:
    """``memtap verify --record``: the differences between ``state`` and the trace, recorded."""
    from memtap.trace.store import TraceStore

    store = TraceStore(db)
    try:
        found = compare(state, trace_items(store, backend))
        if found:
            record_differences(store, backend, state, found)
    finally:
        store.close()
    return len(found)


def _row(name: str, durable: bool, clients: int, db: Path, ledger: Ledger, per_client: int) -> Row:
    check = check_ledger(db, ledger)
    row = Row(
        name, _mode(durable), clients, check.calls, check.acknowledged, check.lost, check.duplicated,
        spilled=check.spilled, per_client=per_client,
    )  # fmt: skip
    if check.duplicated_markers:
        row.notes.append("more than one event: " + "; ".join(check.duplicated_markers[:3]))
    return row


async def load(folder: Path, *, clients: int, calls: int, durable: bool) -> Row:
    """Mixed load on ``memtap serve``; then a clean stop."""
    db = folder / f"load-{_mode(durable)}.db"
    server = child(db, ["--durable"] if durable else [])
    url = await anyio.to_thread.run_sync(server.start)
    try:
        ledger = await run_clients(url, clients=clients, calls=calls, workload=builtin_workload)
    finally:
        code = await anyio.to_thread.run_sync(server.stop)
    row = _row("load", durable, clients, db, ledger, calls)
    row.items_wrong = check_items(db, ledger)
    row.differences_before, row.differences = _reconcile_builtin(db)
    if code != 0:
        row.notes.append(f"server exit {code}")
    return row


async def kill_memtap(folder: Path, *, clients: int, calls: int, durable: bool) -> Row:
    """SIGKILL of ``memtap serve`` half-way through the load; acknowledged calls against the trace."""
    db = folder / f"kill-{_mode(durable)}.db"
    server = child(db, ["--durable"] if durable else [])
    url = await anyio.to_thread.run_sync(server.start)
    target = clients * calls // 2
    acked = 0
    killed_at: list[float] = []

    def on_ack(ack: Ack) -> None:
        nonlocal acked
        acked += ack.ok
        if acked >= target and not killed_at and server.proc is not None:
            server.proc.send_signal(signal.SIGKILL)
            killed_at.append(time.monotonic())

    try:
        ledger = await run_clients(
            url, clients=clients, calls=calls, workload=builtin_workload, on_ack=on_ack
        )
    finally:
        await anyio.to_thread.run_sync(server.stop)
    # Restart on the same file, as a person would: its recorder puts the events of the durable
    # journal (answered, not yet in the tables when the kill came) in first; then stop it.
    restarted = child(db, ["--durable"] if durable else [])
    base = (await anyio.to_thread.run_sync(restarted.start)).removesuffix("/mcp")
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=10) as resp:
            recovered = int(json.load(resp)["recorder"]["recovered"])
    finally:
        await anyio.to_thread.run_sync(restarted.stop)
    row = _row("SIGKILL memtap", durable, clients, db, ledger, calls)
    row.faults = len(killed_at)
    row.notes.append(f"the restart recovered {recovered} events from the durable journal")
    if killed_at and row.lost:
        by_marker = {a.marker: a for a in ledger.acks}
        check = check_ledger(db, ledger)
        row.loss_window_ms = max(killed_at[0] - by_marker[m].at for m in check.lost_markers) * 1000
        row.notes.append(
            f"the lost calls were acknowledged within {row.loss_window_ms:.0f} ms before the kill"
        )
    row.differences_before, row.differences = _reconcile_builtin(db)
    return row


async def disk_fault(
    folder: Path, *, clients: int, calls: int, durable: bool, kind: str, hold_s: float = 1.0
) -> Row:
    """The database fills up (``max_page_count``) or turns read-only (``query_only``) during the load,
    for ``hold_s`` seconds, on the backend's and the recorder's connections; then recovers."""
    db = folder / f"{kind}-{_mode(durable)}.db"
    server = in_process(db, durable=durable)
    await anyio.to_thread.run_sync(server.start)
    if kind == "disk full":
        on, off = "PRAGMA max_page_count = {pages}", "PRAGMA max_page_count = 1073741823"
        clear = "is full"
    else:
        on, off, clear = "PRAGMA query_only = 1", "PRAGMA query_only = 0", "read-only"
    started = anyio.Event()
    acked = 0

    def on_ack(ack: Ack) -> None:
        nonlocal acked
        acked += ack.ok
        if acked >= clients * calls // 4:
            started.set()

    finished = False
    injected = 0

    async def inject() -> None:
        nonlocal injected
        await started.wait()
        if finished:
            return
        await anyio.to_thread.run_sync(run_on_connections, server, on)
        injected += 1
        await anyio.sleep(hold_s)
        await anyio.to_thread.run_sync(run_on_connections, server, off)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(inject)
            ledger = await run_clients(
                server.mcp_url, clients=clients, calls=calls, workload=builtin_workload, on_ack=on_ack
            )
            finished = True
            started.set()
    finally:
        await anyio.to_thread.run_sync(server.stop)
    row = _row(kind, durable, clients, db, ledger, calls)
    row.items_wrong = check_items(db, ledger)
    row.faults = injected
    errors = ledger.errors()
    unclear = [a for a in errors if a.error is None or (clear not in a.error and "not found" not in a.error)]
    row.unclear = len(unclear)
    row.notes.append(f"{len(errors)} calls refused, {len(unclear)} without a clear '{clear}' message")
    if unclear:
        row.notes.append(f"e.g. {unclear[0].error!r}"[:160])
    row.differences_before, row.differences = _reconcile_builtin(db)
    return row


def _upstream_pid(base_url: str) -> int | None:
    with urllib.request.urlopen(f"{base_url}/healthz", timeout=5) as resp:
        pid = json.load(resp)["upstreams"]["memory"]["pid"]
    return int(pid) if pid else None


async def upstream_faults(
    folder: Path, *, clients: int, calls: int, memory_server: Path, timeout: float = 2.0, kills: int = 2
) -> Row:
    """``memtap proxy`` over the real reference memory server, SIGKILLed ``kills`` times and hung
    (SIGSTOP) once for longer than its timeout, during the load."""
    memory_file = folder / "memory.jsonl"
    config = folder / "upstream.json"
    entry = {
        "command": str(memory_server),
        "env": {"MEMORY_FILE_PATH": str(memory_file)},
        "memtap": {"timeout": timeout},
    }
    config.write_text(json.dumps({"mcpServers": {"memory": entry}}))
    db = folder / "upstream.db"
    server = child(db, ["--config", str(config)], command="proxy")
    url = await anyio.to_thread.run_sync(server.start)
    total = clients * calls
    acked = 0
    injected: list[str] = []
    finished = anyio.Event()

    def on_ack(ack: Ack) -> None:
        nonlocal acked
        acked += ack.ok

    async def when_acked(share: float) -> bool:
        while acked < total * share:
            if finished.is_set():
                return False
            await anyio.sleep(0.01)
        return True

    async def pid() -> int:
        with anyio.fail_after(60):
            while True:
                found = await anyio.to_thread.run_sync(_upstream_pid, server.base_url)
                if found:
                    return found
                await anyio.sleep(0.05)

    async def inject() -> None:
        for n in range(kills):
            if not await when_acked((n + 1) / (kills + 3)):
                return
            os.kill(await pid(), signal.SIGKILL)
            injected.append("SIGKILL")
        if not await when_acked((kills + 1) / (kills + 3)):
            return
        hung = await pid()
        os.kill(hung, signal.SIGSTOP)
        injected.append("SIGSTOP")
        try:
            await anyio.sleep(timeout * 1.5)
        finally:
            os.kill(hung, signal.SIGCONT)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(inject)
            ledger = await run_clients(
                url, clients=clients, calls=calls, workload=graph_workload, on_ack=on_ack
            )
            finished.set()
    finally:
        await anyio.to_thread.run_sync(server.stop)
    row = _row("upstream SIGKILL+hang", False, clients, db, ledger, calls)
    row.faults = len(injected)
    late = [a for a in ledger.acks if a.latency_s > timeout + 1.0]
    slowest = max((a.latency_s for a in ledger.acks), default=0.0)
    row.notes.append(
        f"{len(late)} calls answered later than timeout+1 s (slowest {slowest:.2f} s, timeout {timeout:g} s)"
    )
    row.notes.append(f"{len(ledger.errors())} calls failed")
    row.late = len(late)
    from memtap.adapters.graph_state import FileState

    state = graph_state(FileState(memory_file).scan_all(), f"file {memory_file}")
    row.differences_before = state_differences(db, state, "memory")
    _record_differences(db, "memory", state)
    row.differences = state_differences(db, state, "memory")
    return row
