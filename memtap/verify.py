"""Does the trace equal the state? A backend's whole state against the items the trace implies.

The trace's items are what its effects materialised (``items``, per backend). The
backend's state is read from where the backend keeps it:

- the builtin backend: its current rows in ``builtin_memory`` (the same SQLite file);
  an item whose last version is closed is *deleted* there;
- the reference memory server: its storage file (``MEMORY_FILE_PATH``), or, when that
  cannot be known, the server's own ``read_graph``; every entity, observation and
  relation is an item, with the ids of :mod:`memtap.adapters.memory_server`.

Every difference is one :class:`Difference`: ``missing_in_trace`` (the backend holds an
item the trace never saw), ``missing_in_backend`` (the trace holds an item the backend
never had, or no longer has and keeps no record of), ``content_differs``,
``deleted_in_trace_only`` and ``deleted_in_backend_only``. A content policy's receipt in the
trace (``hashed``, ``none``) is the same content as the text it was made of. :func:`record_differences`
writes one ``control`` event (``memtap/verify``) whose reconciled effects bring the
trace's items in line with the backend.
"""

from __future__ import annotations

import sqlite3
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from memtap.adapters.graph_state import Graph
from memtap.ids import new_id
from memtap.trace.models import AccessTags, Context, EffectKind, MemoryEffect, Op, TraceEvent, utc_now
from memtap.trace.privacy import TracePrivacy, receipt
from memtap.trace.store import TraceStore

__all__ = [
    "BackendState",
    "Difference",
    "builtin_state",
    "compare",
    "graph_state",
    "record_differences",
    "trace_items",
]

KINDS = (
    "missing_in_trace",
    "missing_in_backend",
    "content_differs",
    "deleted_in_trace_only",
    "deleted_in_backend_only",
)


@dataclass
class BackendState:
    """Item id -> (namespace, content) of what a backend holds; ids it holds as deleted."""

    current: dict[str, tuple[str | None, str]]
    deleted: set[str]
    read: str  # how it was read: "file PATH", "read_graph", "builtin_memory in PATH"
    read_at: str


@dataclass
class Difference:
    kind: str
    item_id: str
    namespace: str | None
    trace_content: str | None
    backend_content: str | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def graph_state(graph: Graph, read: str) -> BackendState:
    """The items of a reference memory server's graph."""
    from memtap.adapters.memory_server import entity_id, observation_id, relation_id, relation_text

    current: dict[str, tuple[str | None, str]] = {}
    for name, (kind, observations) in graph.entities.items():
        current[entity_id(name)] = (None, f"{name} ({kind})")
        for text in observations:
            current[observation_id(name, text)] = (None, text)
    for relation in graph.relations:
        current[relation_id(relation)] = (None, relation_text(relation))
    return BackendState(current, set(), read, utc_now().isoformat())


def builtin_state(db: Path) -> BackendState:
    """The builtin backend's items in ``db``: each item's last version, current or deleted."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        present = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'builtin_memory'"
        ).fetchone()
        rows = (
            conn.execute(
                "SELECT item_id, namespace, content, valid_to FROM builtin_memory b WHERE version ="
                " (SELECT max(version) FROM builtin_memory WHERE item_id = b.item_id)"
            ).fetchall()
            if present
            else []
        )
    finally:
        conn.close()
    current = {item_id: (ns, content) for item_id, ns, content, closed in rows if closed is None}
    deleted = {item_id for item_id, _, _, closed in rows if closed is not None}
    return BackendState(current, deleted, f"builtin_memory in {db}", utc_now().isoformat())


def trace_items(store: TraceStore, backend: str) -> dict[str, tuple[str | None, str, bool]]:
    """Item id -> (namespace, content, valid) for every item the trace holds for ``backend``."""
    rows = store.db.conn.execute(
        "SELECT item_id, namespace, content, valid_to IS NULL FROM items WHERE backend = ?", (backend,)
    )
    return {item_id: (ns, content, bool(valid)) for item_id, ns, content, valid in rows}


def _same_content(trace: str, backend: str) -> bool:
    """Whether the trace's content is the backend's: the same text, or the receipt a content
    policy recorded in its place (``hashed``: the same SHA-256; ``none``: the same size)."""
    if trace == backend:
        return True
    if trace.startswith("sha256:"):
        return trace == receipt(backend, "hashed")
    if trace.startswith("dropped;bytes="):
        return trace == receipt(backend, "none")
    return False


def compare(state: BackendState, items: dict[str, tuple[str | None, str, bool]]) -> list[Difference]:
    """Every difference between a backend's state and the trace's items, sorted by kind and id."""
    found: list[Difference] = []
    for item_id, (ns, content) in state.current.items():
        known = items.get(item_id)
        if known is None:
            found.append(Difference("missing_in_trace", item_id, ns, None, content))
        elif not known[2]:
            found.append(Difference("deleted_in_trace_only", item_id, known[0] or ns, known[1], content))
        elif not _same_content(known[1], content):
            found.append(Difference("content_differs", item_id, known[0] or ns, known[1], content))
    for item_id, (ns, content, valid) in items.items():
        if valid and item_id not in state.current:
            kind = "deleted_in_backend_only" if item_id in state.deleted else "missing_in_backend"
            found.append(Difference(kind, item_id, ns, content, None))
    found.sort(key=lambda d: (KINDS.index(d.kind), d.item_id))
    return found


def record_differences(
    store: TraceStore,
    backend: str,
    state: BackendState,
    differences: list[Difference],
    *,
    principal: str = "local",
    privacy: TracePrivacy | None = None,
) -> str:
    """One ``control`` event whose reconciled effects make the trace's items match ``state``;
    ``privacy`` (the serving process's content policy and secrets) is applied to it first, as
    the recorder applies it to every call's event."""
    evidence = {"why": "memtap verify --record", "read": state.read, "read_at": state.read_at}
    effects = []
    for diff in differences:
        ns = diff.namespace or principal
        if diff.kind in ("missing_in_trace", "deleted_in_trace_only", "content_differs"):
            kind = EffectKind.UPDATE if diff.kind == "content_differs" else EffectKind.ADD
            effects.append(
                MemoryEffect(
                    kind=kind, item_id=diff.item_id, namespace=ns, content_before=diff.trace_content,
                    content_after=diff.backend_content, tags_after=AccessTags(owner=ns),
                    reconciled=True, evidence={**evidence, "difference": diff.kind},
                )
            )  # fmt: skip
        else:
            effects.append(
                MemoryEffect(
                    kind=EffectKind.DELETE, item_id=diff.item_id, namespace=ns,
                    content_before=diff.trace_content, reconciled=True,
                    evidence={**evidence, "difference": diff.kind},
                )
            )  # fmt: skip
    now = utc_now()
    event = TraceEvent(
        id=new_id(),
        started_at=now,
        ended_at=now,
        front_door="cli",
        backend=backend,
        tool="memtap/verify",
        op=Op.CONTROL,
        context=Context(principal=principal, namespace=principal),
        arguments={"read": state.read},
        result={**evidence, "differences": len(differences)},
        effects=effects,
    )
    if privacy is not None:
        privacy.apply(event)
    store.write_events([event])
    return event.id
