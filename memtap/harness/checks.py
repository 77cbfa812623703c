"""What the trace holds against what the clients were told, and against the backend's state."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from memtap.harness.load import Ledger
from memtap.verify import BackendState, compare, trace_items

__all__ = ["LedgerCheck", "check_items", "check_ledger", "state_differences"]


@dataclass
class LedgerCheck:
    calls: int  # calls the clients made
    acknowledged: int  # calls answered with a result that is not an error
    lost: int  # acknowledged calls with no event in the trace nor in the spill file
    spilled: int  # acknowledged calls whose event is only in the spill file beside the database
    duplicated: int  # calls with more than one event
    unanswered_recorded: int  # calls not acknowledged that have an event (an error event, or a cut-off call)
    lost_markers: list[str]
    duplicated_markers: list[str]


def _recorded_markers(db: Path) -> Counter[str]:
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT turn FROM events WHERE turn LIKE 'h%' AND front_door LIKE 'mcp-%'"
        ).fetchall()
    finally:
        conn.close()
    return Counter(turn for (turn,) in rows)


def _spilled_markers(db: Path) -> Counter[str]:
    path = db.with_name(db.name + ".unwritten.jsonl")
    found: Counter[str] = Counter()
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            turn = (json.loads(line).get("context") or {}).get("turn")
            if isinstance(turn, str):
                found[turn] += 1
    return found


def check_ledger(db: Path, ledger: Ledger) -> LedgerCheck:
    recorded, spilled = _recorded_markers(db), _spilled_markers(db)
    acked = ledger.acknowledged
    lost = [a.marker for a in acked if not recorded[a.marker] and not spilled[a.marker]]
    return LedgerCheck(
        calls=max(ledger.attempted, len(ledger.acks)),
        acknowledged=len(acked),
        lost=len(lost),
        spilled=sum(1 for a in acked if not recorded[a.marker] and spilled[a.marker]),
        duplicated=sum(1 for a in ledger.acks if recorded[a.marker] + spilled[a.marker] > 1),
        duplicated_markers=[
            f"{a.marker} ({a.tool}, {'ok' if a.ok else 'refused'}): {recorded[a.marker]} recorded, "
            f"{spilled[a.marker]} spilled"
            for a in ledger.acks
            if recorded[a.marker] + spilled[a.marker] > 1
        ],
        unanswered_recorded=sum(1 for a in ledger.acks if not a.ok and recorded[a.marker]),
        lost_markers=lost,
    )


def check_items(db: Path, ledger: Ledger, backend: str = "builtin") -> int:
    """Acknowledged writes whose item the trace does not hold as the client last saw it."""
    expected: dict[str, str | None] = {}  # item id -> content, None: deleted
    for ack in ledger.acknowledged:  # in the order each client was answered
        if ack.item_id is None:
            continue
        expected[ack.item_id] = None if ack.tool == "memory_delete" else ack.content
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute(
            "SELECT item_id, content, valid_to IS NULL FROM items WHERE backend = ?", (backend,)
        ).fetchall()
    finally:
        conn.close()
    items = {item_id: (content, bool(valid)) for item_id, content, valid in rows}
    wrong = 0
    for item_id, content in expected.items():
        held = items.get(item_id)
        if content is None:
            wrong += held is not None and held[1]
        else:
            wrong += held is None or held != (content, True)
    return wrong


def state_differences(db: Path, state: BackendState, backend: str) -> int:
    from memtap.trace.store import TraceStore

    store = TraceStore(db)
    try:
        return len(compare(state, trace_items(store, backend)))
    finally:
        store.close()
