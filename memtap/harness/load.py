"""Concurrent MCP clients with a mixed workload, and the ledger of what each call was told.

Every call carries a unique marker as its turn (``_meta.memtap.turn``), so the trace
can be checked against the ledger call by call: an *acknowledged* call (the client got
a result, not an error) must have exactly one event; an acknowledged write must be in
the trace's items as the client last saw it. Each client works in its own session and,
on the builtin backend, its own namespace, so its calls are ordered and its items are
its own.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

__all__ = ["Ack", "Ledger", "builtin_workload", "graph_workload", "run_clients"]


@dataclass
class Ack:
    """One call as its client saw it."""

    marker: str
    tool: str
    ok: bool  # acknowledged: a result that is not an error
    error: str | None
    latency_s: float
    at: float  # time.monotonic() when the answer came
    item_id: str | None = None
    content: str | None = None
    broken: bool = False  # the connection broke: no answer at all


@dataclass
class Ledger:
    acks: list[Ack] = field(default_factory=list)
    attempted: int = 0  # calls started (a call cut off with its connection has no Ack)

    @property
    def acknowledged(self) -> list[Ack]:
        return [a for a in self.acks if a.ok]

    def errors(self) -> list[Ack]:
        return [a for a in self.acks if not a.ok]


Step = Callable[[Any, int, int, "_ClientState"], Awaitable[Ack]]


@dataclass
class _ClientState:
    client_no: int
    rng: random.Random
    items: dict[str, str] = field(default_factory=dict)  # item id -> last acknowledged content
    entities: list[str] = field(default_factory=list)


def _marker(client_no: int, call_no: int) -> str:
    return f"h{client_no}-{call_no}"


async def _call(
    client: Any, tool: str, args: dict[str, Any], marker: str, session: str, namespace: str | None
) -> tuple[Any, Ack]:
    from mcp import MCPError

    meta: dict[str, Any] = {"turn": marker, "session": session}
    if namespace is not None:
        meta["namespace"] = namespace
    started = time.monotonic()
    try:
        result = await client.call_tool(tool, args, meta={"memtap": meta})
    except MCPError as exc:
        now = time.monotonic()
        return None, Ack(marker, tool, False, f"MCP error {exc.code}: {exc}", now - started, now)
    except Exception as exc:  # the connection broke (the server was killed): not acknowledged
        now = time.monotonic()
        error = f"{type(exc).__name__}: {exc}"
        return None, Ack(marker, tool, False, error, now - started, now, broken=True)
    now = time.monotonic()
    if result.is_error:
        text = " ".join(getattr(c, "text", "") for c in result.content)
        return result, Ack(marker, tool, False, text, now - started, now)
    return result, Ack(marker, tool, True, None, now - started, now)


async def builtin_workload(client: Any, client_no: int, call_no: int, state: _ClientState) -> Ack:
    """memtap's memory tools: mostly adds, with searches, updates, deletes and listings."""
    marker, session, ns = _marker(client_no, call_no), f"s{client_no}", f"h{client_no}"
    roll = state.rng.random()
    if not state.items or roll < 0.45:
        content = f"client {client_no} fact {call_no}: the {state.rng.choice(['red', 'blue', 'green'])} door"
        result, ack = await _call(client, "memory_add", {"content": content}, marker, session, ns)
        if ack.ok:
            ack.item_id, ack.content = result.structured_content["id"], content
            state.items[ack.item_id] = content
        return ack
    if roll < 0.65:
        _, ack = await _call(client, "memory_search", {"query": "red door"}, marker, session, ns)
        return ack
    if roll < 0.8:
        item = state.rng.choice(sorted(state.items))
        content = f"client {client_no} fact {call_no}: updated"
        _, ack = await _call(client, "memory_update", {"id": item, "content": content}, marker, session, ns)
        if ack.ok:
            ack.item_id, ack.content = item, content
            state.items[item] = content
        return ack
    if roll < 0.9:
        item = state.rng.choice(sorted(state.items))
        _, ack = await _call(client, "memory_delete", {"id": item}, marker, session, ns)
        if ack.ok:
            ack.item_id = item
            del state.items[item]
        return ack
    _, ack = await _call(client, "memory_list", {"limit": 20}, marker, session, ns)
    return ack


async def graph_workload(client: Any, client_no: int, call_no: int, state: _ClientState) -> Ack:
    """The reference memory server's tools: entities, observations added and deleted, searches."""
    marker, session = _marker(client_no, call_no), f"s{client_no}"
    name = f"entity-{client_no}"
    if not state.entities:
        args = {"entities": [{"name": name, "entityType": "harness", "observations": []}]}
        _, ack = await _call(client, "create_entities", args, marker, session, None)
        if ack.ok:
            state.entities.append(name)
        return ack
    roll = state.rng.random()
    if roll < 0.6 or not state.items:
        text = f"observation {client_no}.{call_no}"
        args = {"observations": [{"entityName": name, "contents": [text]}]}
        _, ack = await _call(client, "add_observations", args, marker, session, None)
        if ack.ok:
            state.items[text] = text
        return ack
    if roll < 0.75:
        text = state.rng.choice(sorted(state.items))
        args = {"deletions": [{"entityName": name, "observations": [text]}]}
        _, ack = await _call(client, "delete_observations", args, marker, session, None)
        if ack.ok:
            del state.items[text]
        return ack
    if roll < 0.9:
        _, ack = await _call(
            client, "search_nodes", {"query": f"observation {client_no}."}, marker, session, None
        )
        return ack
    _, ack = await _call(client, "open_nodes", {"names": [name]}, marker, session, None)
    return ack


async def run_clients(
    url: str,
    *,
    clients: int,
    calls: int,
    workload: Step,
    seed: int = 14,
    stop: anyio.Event | None = None,
    on_ack: Callable[[Ack], None] | None = None,
    http_timeout: float = 60.0,
) -> Ledger:
    """``clients`` MCP clients over streamable HTTP, ``calls`` calls each (fewer when ``stop`` is set
    or the server goes away: a client stops at its first broken connection)."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    ledger = Ledger()

    async def one(client_no: int) -> None:
        state = _ClientState(client_no, random.Random(seed * 1000 + client_no))
        try:
            async with (
                httpx2.AsyncClient(timeout=http_timeout) as http,
                Client(streamable_http_client(url, http_client=http), mode="legacy") as client,
            ):
                for call_no in range(calls):
                    if stop is not None and stop.is_set():
                        return
                    ledger.attempted += 1
                    ack = await workload(client, client_no, call_no, state)
                    ledger.acks.append(ack)
                    if on_ack is not None:
                        on_ack(ack)
                    if ack.broken:  # the server went away: this client is done
                        return
        except Exception:  # the session itself broke (the server was killed): the ledger has the rest
            return

    async with anyio.create_task_group() as tg:
        for n in range(clients):
            tg.start_soon(one, n)
    return ledger
