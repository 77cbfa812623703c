"""The harness's table: one line per scenario, the figures the reliability targets are judged on."""

from __future__ import annotations

from collections.abc import Sequence

from memtap.harness.scenarios import Row

__all__ = ["table"]

HEADERS = (
    "scenario", "mode", "load (clients x calls)", "calls", "acked", "lost", "dup", "spilled", "faults",
    "late", "items wrong", "diff (trace vs state)", "diff after verify --record",
)  # fmt: skip


def table(rows: Sequence[Row], fuzz: str | None = None) -> str:
    """The rows as an aligned text table, with the notes under it."""
    cells = [
        [
            r.scenario, r.mode, f"{r.clients} x {r.per_client}", str(r.calls), str(r.acknowledged),
            str(r.lost), str(r.duplicated), str(r.spilled), str(r.faults), str(r.late), str(r.items_wrong),
            str(r.differences_before), str(r.differences),
        ]
        for r in rows
    ]  # fmt: skip
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(HEADERS)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(HEADERS, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    notes = [f"- {r.scenario} ({r.mode}): {note}" for r in rows for note in r.notes]
    if fuzz is not None:
        notes.append(f"- fuzz: {fuzz}")
    return "\n".join(lines + (["", *notes] if notes else []))
