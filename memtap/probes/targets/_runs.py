"""What the builtin target sends in runs and reads back: turns cut into runs a call (or one write
of pipelined calls) carries, and retrieved memories from a search's structured result."""

from __future__ import annotations

from typing import Any

from memtap.limits import MAX_BATCH_ITEMS
from memtap.probes.targets.base import Retrieved, TurnCall

__all__ = ["BATCH_BYTES", "chunks", "retrieved"]


BATCH_BYTES = 1 << 20
"""About how much turn content one memory_add_batch carries: well under the MCP body cap over HTTP
(4 MiB by default, docs/limits.md)."""


def chunks(sent: list[tuple[int, TurnCall]]) -> list[list[tuple[int, TurnCall]]]:
    """``sent`` in runs of at most MAX_BATCH_ITEMS turns and about BATCH_BYTES of content (one turn
    larger than that goes alone; the server's content cap judges it)."""
    chunks: list[list[tuple[int, TurnCall]]] = []
    size = 0
    for entry in sent:
        cost = len(entry[1].content.encode("utf-8", "surrogatepass")) + 512  # and its metadata and tags
        if not chunks or len(chunks[-1]) >= MAX_BATCH_ITEMS or size + cost > BATCH_BYTES:
            chunks.append([])
            size = 0
        chunks[-1].append(entry)
        size += cost
    return chunks


def retrieved(found: list[dict[str, Any]]) -> list[Retrieved]:
    return [
        Retrieved(
            item_id=str(m["id"]),
            content=str(m.get("content", "")),
            rank=int(m.get("rank") or i + 1),
            score=m.get("score"),
            tags=m.get("tags"),
            provenance=m.get("provenance") or {},
        )
        for i, m in enumerate(found)
    ]
