"""Reading events back for the detectors, in bulk and without validating them again.

``TraceStore.list_events`` validates every row into pydantic models (an event, its context and
each effect), which costs more than the detectors' own work: ``memtap check`` over a million
events spent most of its time there. The rows were validated when they were recorded, so here
each page is two queries (the events, then the effects of the whole page in one index range)
and the models are built with their field values set directly, as ``model_construct`` does,
minus its per-field bookkeeping. Contexts and access tags repeat (one per session, one per
owner) and are parsed once per distinct text. What comes back is equal, field for field, to
what ``list_events`` returns (``tests/test_findings_equivalence.py`` checks it).

``lean=True`` (``memtap check`` and the live detectors) reads only what the detectors read, into
slotted ``LeanEvent`` and ``LeanEffect`` objects (``model.py``) holding only the fields the rules read
(``model.EventView``, ``model.EffectView``: mypy checks that no rule reads another; an event's
timings, front door, model and token columns and an effect's tags before, rank, score, reconciled
flag and evidence are not read at all);
``result`` is parsed for chat calls only, and ``arguments`` only for chat calls and events that
removed something (a delete or update effect): the only ones a rule reads them from. A rule
that reads another field must add it here (``test_lean_reading_keeps_everything_the_detectors_read``
lists what the rules read).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import lru_cache
from sys import intern
from typing import Any

from memtap.errors import StoreError
from memtap.findings.model import EventView, LeanEffect, LeanEvent
from memtap.trace.models import (
    AccessTags,
    Context,
    EffectKind,
    MemoryEffect,
    Op,
    Role,
    TraceEvent,
    built_model,
)

__all__ = ["read_page", "tail_start"]
# The columns the detectors read (``lean``), in the order ``_lean_event`` and ``_read_lean_effects``
# take them.
_LEAN_EVENT_SQL = (
    "SELECT rowid, id, started_at, backend, tool, op, status, error, context, arguments, result, gate,"
    " parent_id, links FROM events"
)
_LEAN_EFFECT_COLUMNS = (
    "SELECT event_id, kind, item_id, namespace, content_before, content_after, tags_after, derived_from"
    " FROM effects"
)
_LEAN_EFFECT_SQL = _LEAN_EFFECT_COLUMNS + " WHERE event_id >= ? AND event_id <= ? ORDER BY event_id, seq"
# A page of some namespaces' events only: their effects by id (a range would hold the others' too).
_LEAN_EFFECT_OF_SQL = (
    _LEAN_EFFECT_COLUMNS + " WHERE event_id IN (SELECT value FROM json_each(?)) ORDER BY event_id, seq"
)
_REMOVING = frozenset({EffectKind.DELETE.value, EffectKind.UPDATE.value})


_EVENT_FIELDS = (
    "id",
    "started_at",
    "ended_at",
    "front_door",
    "backend",
    "tool",
    "op",
    "status",
    "error",
    "context",
    "arguments",
    "result",
    "backend_ms",
    "overhead_ms",
    "gate",
    "total_ms",
    "parent_id",
    "model",
    "provider",
    "input_tokens",
    "output_tokens",
    "ttft_ms",
    "memory_ms",
    "links",
)
_EVENT_SQL = "SELECT rowid, " + ", ".join(_EVENT_FIELDS) + " FROM events"
_EFFECT_FIELDS = (
    "kind",
    "item_id",
    "namespace",
    "content_before",
    "content_after",
    "tags_before",
    "tags_after",
    "rank",
    "score",
    "derived_from",
    "reconciled",
    "evidence",
)
_EFFECT_SQL = (
    "SELECT event_id, " + ", ".join(_EFFECT_FIELDS) + " FROM effects"
    " WHERE event_id >= ? AND event_id <= ? ORDER BY event_id, seq"
)
_KINDS = {k.value: k for k in EffectKind}
_OPS = {o.value: o for o in Op}
_ROLES = {r.value: r for r in Role}
_TRACE_EVENT_SET = frozenset(TraceEvent.model_fields)
_EFFECT_SET = frozenset(MemoryEffect.model_fields)
_CONTEXT_DEFAULTS = {name: f.default for name, f in Context.model_fields.items()}
_scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # the C scanner ``json.loads`` ends in, minus two Python frames


def _json(text: str) -> Any:
    """``json.loads(text)``, faster for what the recorder writes (compact JSON, nothing around it)."""
    try:
        value, end = _scan(text, 0)
    except (StopIteration, TypeError):
        return json.loads(text)  # leading whitespace, bytes, or not JSON: json's own answer or error
    return value if end == len(text) else json.loads(text)


# Namespaces and backends are interned as they are read: the state keeps one per live item (its
# namespace, its key's backend), and the rules compare them for every effect (an item's namespace
# against the call's): equal objects compare without reading their characters, and a million items
# share a few hundred strings.


@lru_cache(maxsize=4096)
def _context(text: str) -> Context:
    """One context per distinct JSON text (shared: nothing downstream changes it)."""
    data = _json(text)
    if not isinstance(data, dict) or not data.keys() <= _CONTEXT_DEFAULTS.keys():
        return Context.model_validate_json(text)
    role = data.get("role")
    turn = data.get("turn")
    if (role is not None and role not in _ROLES) or (turn is not None and not isinstance(turn, str)):
        return Context.model_validate_json(text)  # not what the recorder writes: validate it
    values = _CONTEXT_DEFAULTS.copy()  # every field, in order, then what the text sets
    values.update(data)
    if role is not None:
        values["role"] = _ROLES[role]
    namespace = values["namespace"]
    values["namespace"] = namespace if namespace is None else intern(namespace)
    return built_model(Context, values, frozenset(data))


@lru_cache(maxsize=4096)
def _tags(text: str) -> AccessTags:
    return AccessTags.model_validate_json(text)


def _load(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _effect(row: tuple[Any, ...]) -> MemoryEffect:
    (kind, item_id, namespace, before, after, tags_before, tags_after, rank, score, derived, rec, evid) = row
    return built_model(
        MemoryEffect,
        {
            "kind": _KINDS[kind],
            "item_id": item_id,
            "namespace": namespace,
            "content_before": before,
            "content_after": after,
            "tags_before": None if tags_before is None else _tags(tags_before),
            "tags_after": None if tags_after is None else _tags(tags_after),
            "rank": rank,
            "score": score,
            "derived_from": (json.loads(derived) or []) if derived is not None else [],
            "reconciled": bool(rec),
            "evidence": None if evid is None else json.loads(evid),
        },
        _EFFECT_SET,
    )


def _event(row: tuple[Any, ...], effects: list[MemoryEffect]) -> TraceEvent:
    values = dict(zip(_EVENT_FIELDS, row[1:], strict=True))
    values["started_at"] = datetime.fromisoformat(values["started_at"])
    values["ended_at"] = datetime.fromisoformat(values["ended_at"])
    values["op"] = _OPS[values["op"]]
    values["context"] = _context(values["context"])
    values["arguments"] = json.loads(values["arguments"])
    values["result"] = _load(values["result"])
    values["links"] = _load(values["links"]) or []
    values["effects"] = effects
    return built_model(TraceEvent, values, _TRACE_EVENT_SET)


def _read_lean_effects(
    rows: Iterable[tuple[Any, ...]], effects: dict[str, list[LeanEffect]], removing: set[str]
) -> None:
    """Each row's effect, made in this loop (millions of them: no other call per row), appended to
    its event's list; the events with a delete or update effect added to ``removing``."""
    lean, kinds, tags_of, loads = LeanEffect, _KINDS, _tags, _json
    for event_id, kind, item_id, namespace, before, after, tags_after, derived in rows:
        mine = effects.get(event_id)
        if mine is None:
            continue
        mine.append(
            lean(
                kinds[kind],
                item_id,
                namespace if namespace is None else intern(namespace),
                before,
                after,
                None if tags_after is None else tags_of(tags_after),
                (loads(derived) or []) if derived is not None else [],
            )
        )
        if kind in _REMOVING:
            removing.add(event_id)


def _lean_event(row: tuple[Any, ...], effects: list[LeanEffect], removing: bool) -> LeanEvent:
    (
        _,
        id_,
        started_at,
        backend,
        tool,
        op_text,
        status,
        error,
        context,
        arguments,
        result,
        gate,
        parent,
        links,
    ) = row
    op = _OPS[op_text]
    chat = op is Op.CHAT
    return LeanEvent(
        id_,
        datetime.fromisoformat(started_at),
        intern(backend),
        tool,
        op,
        _context(context),
        _json(arguments) if chat or removing else {},
        _load(result) if chat else None,
        effects,
        status,
        error,
        gate,
        parent,
        (_json(links) or []) if links is not None else [],
    )


def read_page(
    conn: sqlite3.Connection,
    *,
    after: str | int | None,
    limit: int,
    run: str | None = None,
    by_rowid: bool = False,
    lean: bool = False,
    namespaces: Sequence[str | None] | None = None,
) -> tuple[list[EventView], str | int | None]:
    """Up to ``limit`` events after ``after`` (an event id, or a rowid when ``by_rowid``: the order
    they were committed in), with their effects; and where the next page starts. ``lean``: only
    what the detectors read (the module's docstring). ``namespaces``: only the events of these
    (None: of no namespace)."""
    where: list[str] = []
    args: list[Any] = []
    if after is not None:
        where.append("rowid > ?" if by_rowid else "id > ?")
        args.append(after)
    if run is not None:
        where.append("run_id = ?")
        args.append(run)
    if namespaces is not None:
        named = [n for n in namespaces if n is not None]
        # ``+namespace``: the rows are walked in id order (the page's order, stopping at the limit),
        # not gathered from the namespace index and sorted.
        held = "+namespace IN (SELECT value FROM json_each(?))"
        where.append(f"({held} OR +namespace IS NULL)" if None in namespaces else held)
        args.append(json.dumps(named))
    sql = (_LEAN_EVENT_SQL if lean else _EVENT_SQL) + (" WHERE " + " AND ".join(where) if where else "")
    sql += (" ORDER BY rowid" if by_rowid else " ORDER BY id") + f" LIMIT {int(limit)}"
    removing: set[str] = set()
    try:
        rows = conn.execute(sql, args).fetchall()
        if not rows:
            return [], after
        ids = [row[1] for row in rows]
        # One index range over the page: events of other runs (or committed out of id order)
        # inside it are skipped.
        if lean:
            lean_effects: dict[str, list[LeanEffect]] = {i: [] for i in ids}
            query = (
                conn.execute(_LEAN_EFFECT_SQL, (min(ids), max(ids)))
                if namespaces is None
                else conn.execute(_LEAN_EFFECT_OF_SQL, (json.dumps(ids),))
            )
            _read_lean_effects(query, lean_effects, removing)
        else:
            effects: dict[str, list[MemoryEffect]] = {i: [] for i in ids}
            for erow in conn.execute(_EFFECT_SQL, (min(ids), max(ids))):
                mine = effects.get(erow[0])
                if mine is not None:
                    mine.append(_effect(erow[1:]))
    except sqlite3.Error as exc:
        raise StoreError(f"events could not be read: {exc}") from exc
    events: list[EventView]
    if lean:
        events = [_lean_event(row, lean_effects[row[1]], row[1] in removing) for row in rows]
    else:
        events = [_event(row, effects[row[1]]) for row in rows]
    return events, (rows[-1][0] if by_rowid else rows[-1][1])


def tail_start(conn: sqlite3.Connection) -> int:
    """The rowid of the last event committed so far (0 for none): a tail starts after it."""
    row = conn.execute("SELECT max(rowid) FROM events").fetchone()
    return int(row[0] or 0)
