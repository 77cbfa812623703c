"""Plain-text rendering of events and items for the terminal."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from memtap.trace.models import MemoryEffect, MemoryItem, TraceEvent

__all__ = ["event_detail", "event_json", "event_line", "event_lines", "item_detail", "item_line", "table"]


def _short(text: str | None, width: int = 48) -> str:
    if text is None:
        return ""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _effect_summary(eff: MemoryEffect) -> str:
    if eff.reconciled:
        return "reconciled " + _effect_summary(eff.model_copy(update={"reconciled": False}))
    if eff.kind.value == "add":
        return f"+{eff.item_id} {_short(eff.content_after, 40)!r}"
    if eff.kind.value == "update":
        return f"~{eff.item_id} {_short(eff.content_before, 24)!r} -> {_short(eff.content_after, 24)!r}"
    if eff.kind.value == "delete":
        return f"-{eff.item_id} {_short(eff.content_before, 40)!r}"
    return f"#{eff.rank} {eff.item_id} ({eff.score})"


def event_line(event: TraceEvent) -> list[Any]:
    ctx = event.context
    where = "/".join(part for part in (ctx.session, ctx.turn) if part) or ""
    if event.status != "ok":
        what = f"ERROR {_short(event.error, 60)}"
    elif event.op.value == "retrieve":
        what = f"{len(event.effects)} hit(s): " + ", ".join(eff.item_id for eff in event.effects[:3])
    else:
        what = "; ".join(_effect_summary(eff) for eff in event.effects) or ""
    latency = f"{event.backend_ms:.2f}" if event.backend_ms is not None else ""
    return [
        event.id,
        event.started_at.strftime("%H:%M:%S.%f")[:-3],
        event.op.value,
        event.tool,
        ctx.namespace,
        where,
        ctx.role.value if ctx.role else "",
        latency,
        what,
    ]


EVENT_HEADERS = ["id", "time", "op", "tool", "namespace", "session/turn", "role", "ms", "effects"]


def event_lines(events: Sequence[TraceEvent]) -> str:
    return table(EVENT_HEADERS, [event_line(e) for e in events])


def event_json(event: TraceEvent) -> str:
    return event.model_dump_json(exclude_none=True)


def event_detail(event: TraceEvent) -> str:
    data = event.model_dump(mode="json", exclude_none=True)
    return json.dumps(data, indent=2, ensure_ascii=False)


def item_line(item: MemoryItem) -> list[Any]:
    state = "valid" if item.valid_to is None else f"closed {item.valid_to:%Y-%m-%d %H:%M:%S}"
    prov = item.provenance
    where = "/".join(part for part in (prov.session, prov.turn) if part)
    return [item.item_id, item.namespace, f"v{item.version}", state, where, _short(item.content, 56)]


ITEM_HEADERS = ["item", "namespace", "version", "state", "created in", "content"]


def item_detail(item: MemoryItem) -> str:
    prov = item.provenance
    lines = [
        f"item       {item.item_id}  ({item.backend})",
        f"namespace  {item.namespace}",
        f"state      {'valid' if item.valid_to is None else 'closed at ' + item.valid_to.isoformat()}",
        f"created    {item.valid_from.isoformat()} by event {prov.event_id}",
        f"provenance run={prov.run} episode={prov.episode} session={prov.session} turn={prov.turn} "
        f"role={prov.role.value if prov.role else None} principal={prov.principal}",
    ]
    if item.tags is not None:
        tags = item.tags
        lines.append(
            f"access     owner={tags.owner} visibility={tags.visibility.value}"
            f" allow={tags.allow} deny={tags.deny}"
            + (f" sensitivity={tags.sensitivity}" if tags.sensitivity else "")
        )
    if item.derived_from:
        lines.append(f"derived    from {', '.join(item.derived_from)}")
    lines.append("history:")
    for version in item.history:
        until = version.valid_to.isoformat() if version.valid_to else "now"
        lines.append(
            f"  v{version.version} [{version.op.value}] {version.valid_from.isoformat()} .. {until}"
            f"  event {version.event_id}"
        )
        lines.append(f"     {version.content}")
    if item.valid_to is not None:
        lines.append(f"  deleted at {item.valid_to.isoformat()}")
    return "\n".join(lines)
