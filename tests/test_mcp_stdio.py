"""The MCP front door over a real stdio subprocess, driven by the official mcp client."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from conftest import run_memory_script
from mcp import Client, StdioServerParameters

from memtap.trace.models import EffectKind, Op, Role
from memtap.trace.store import TraceStore

pytestmark = pytest.mark.anyio


def _params(db: Path, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "memtap", "serve", "--stdio", "--db", str(db), *extra],
        env=dict(os.environ),
    )


async def test_stdio_lists_memory_tools_with_schemas_and_annotations(db_path: Path) -> None:
    async with Client(_params(db_path)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == {
        "memory_add", "memory_add_batch", "memory_search", "memory_get", "memory_list", "memory_update",
        "memory_delete", "memory_history",
    }  # fmt: skip
    add = tools["memory_add"]
    assert add.input_schema["required"] == ["content"]
    # The context fields come from the connection: off the model-facing schemas by default.
    assert set(add.input_schema["properties"]) == {"content", "metadata", "access"}
    assert add.annotations is not None and add.annotations.read_only_hint is False
    assert tools["memory_search"].annotations.read_only_hint is True  # type: ignore[union-attr]
    assert tools["memory_delete"].annotations.destructive_hint is True  # type: ignore[union-attr]


async def test_context_args_put_the_context_fields_back_into_the_schemas(db_path: Path) -> None:
    async with Client(_params(db_path, "--context-args")) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert {"namespace", "session", "turn", "role", "requester", "run", "episode", "access"} <= set(
        tools["memory_add"].input_schema["properties"]
    )


async def test_access_sent_as_json_text_is_accepted(db_path: Path) -> None:
    async with Client(_params(db_path)) as client:
        added = await client.call_tool(
            "memory_add", {"content": "shared fact", "access": '{"visibility": "public"}'}
        )
    assert not added.is_error, added.content
    store = TraceStore(db_path)
    (event,) = store.list_events()
    store.close()
    assert event.effects[0].tags_after is not None
    assert event.effects[0].tags_after.visibility.value == "public"


async def test_stdio_calls_are_recorded_field_by_field(db_path: Path) -> None:
    async with Client(_params(db_path)) as client:
        ids = await run_memory_script(client)
    store = TraceStore(db_path)
    events = store.list_events()
    store.close()
    assert [(e.tool, e.op, e.status) for e in events] == [
        ("memory_add", Op.WRITE, "ok"),
        ("memory_add", Op.WRITE, "ok"),
        ("memory_update", Op.UPDATE, "ok"),
        ("memory_delete", Op.DELETE, "ok"),
        ("memory_search", Op.RETRIEVE, "ok"),
        ("memory_get", Op.READ, "error"),
    ]
    add, colour, update, delete, search, missing = events
    assert {e.front_door for e in events} == {"mcp-stdio"}
    assert (add.context.namespace, add.context.principal) == ("local", "local")
    assert (add.context.run, add.context.episode, add.context.session, add.context.turn, add.context.role) == (
        "r1", "e1", "s0", "s0-t0", Role.USER,
    )  # fmt: skip
    assert add.context.client == "mcp"
    assert add.arguments["content"] == "The user goes to FitLife on Tuesdays."
    [eff] = add.effects
    assert (eff.kind, eff.item_id, eff.content_before, eff.content_after) == (
        EffectKind.ADD, ids["gym"], None, "The user goes to FitLife on Tuesdays.",
    )  # fmt: skip
    assert eff.tags_after is not None and eff.tags_after.owner == "local"
    assert colour.effects[0].tags_after is not None
    assert colour.effects[0].tags_after.participants == ["bob"]
    [eff] = update.effects
    assert (eff.kind, eff.item_id, eff.content_before, eff.content_after) == (
        EffectKind.UPDATE, ids["gym"], "The user goes to FitLife on Tuesdays.",
        "The user switched to CrossFit Central.",
    )  # fmt: skip
    assert (update.context.session, update.context.turn) == ("s9", "s9-t0")
    [eff] = delete.effects
    assert (eff.kind, eff.item_id, eff.content_before) == (
        EffectKind.DELETE,
        ids["colour"],
        "Favourite colour: green.",
    )
    assert [(e.kind, e.item_id, e.rank) for e in search.effects] == [(EffectKind.RETRIEVE, ids["gym"], 1)]
    assert search.context.requester == "bob"
    assert search.gate == f"observe:would-deny={ids['gym']}"  # private to its owner, asked for bob
    assert (
        missing.effects == [] and missing.error is not None and "no memory item 'mem_nope'" in missing.error
    )
    for event in events:
        assert event.overhead_ms is not None and event.overhead_ms >= 0
        assert event.ended_at >= event.started_at
    assert all(e.backend_ms is not None and e.backend_ms > 0 for e in events if e.status == "ok")
