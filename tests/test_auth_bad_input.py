"""Bad authorisation input: each case one clear error, recorded when a call was made, and
nothing changed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ServerProcess, http_client, meta

from memtap.cli.main import cli
from memtap.trace.store import TraceStore

StartServer = Callable[..., ServerProcess]


def _text(result: object) -> str:
    return " ".join(getattr(c, "text", "") for c in getattr(result, "content", []))


@pytest.mark.anyio
async def test_a_key_without_grants_uses_only_its_own_namespace_and_may_act_only_for_itself(
    start_http_server: StartServer,
) -> None:
    server = start_http_server("--api-key", "k-carol=carol")
    auth = {"Authorization": "Bearer k-carol"}
    async with http_client(server.url, auth) as carol:
        assert not (await carol.call_tool("memory_add", {"content": "carol's own"})).is_error
        on_dave = await carol.call_tool("memory_add", {"content": "into dave"}, meta=meta(namespace="dave"))
        for_dave = await carol.call_tool("memory_search", {"query": "own"}, meta=meta(requester="dave"))
    async with http_client(server.url, {**auth, "X-Memtap-Namespace": "dave"}) as carol_on_dave:
        listed = await carol_on_dave.call_tool("memory_list", {})
    assert server.stop() == 0
    assert _text(on_dave) == (
        "principal 'carol' may not write namespace 'dave': it has no grants configured, "
        "so it may use only the namespace named like it"
    )
    assert _text(for_dave) == (
        "principal 'carol' may not act for requester 'dave': no act_for pattern of it matches that requester"
    )
    assert listed.is_error
    store = TraceStore(server.db)
    events = store.list_events()
    items = store.list_items(include_closed=True)
    store.close()
    assert [(e.tool, e.status, e.context.namespace, e.context.requester) for e in events] == [
        ("memory_add", "ok", "carol", None),
        ("memory_add", "error", "dave", None),
        ("memory_search", "error", "carol", "dave"),
        ("memory_list", "error", "dave", None),
    ]
    assert [(i.namespace, i.content) for i in items] == [("carol", "carol's own")]


@pytest.mark.anyio
async def test_a_grant_pattern_that_matches_nothing_is_named_at_start_up(
    start_http_server: StartServer, db_path: Path
) -> None:
    first = start_http_server("--api-key", "k-alice=alice")
    async with http_client(first.url, {"Authorization": "Bearer k-alice"}) as alice:
        await alice.call_tool("memory_add", {"content": "seen"})
    assert first.stop() == 0
    second = start_http_server("--api-key", "k-alice=alice", "--grant", "alice=shraed/*:read")
    assert second.stop() == 0
    stderr = second.stderr()
    assert "grant 'shraed/*' of principal 'alice' matches no namespace in the database" in stderr
    assert "grant '{principal}'" not in stderr  # her own namespace exists: not named


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--grant", "alice=shared/*:read,raed"],
         "--grant alice=shared/*:read,raed: principal 'alice': unknown right 'raed' "
         "(rights are read, write, delete, admin)"),
        (["--grant", "alice=shared/*"], "--grant takes PRINCIPAL=PATTERN:RIGHTS"),
        (["--grant", "alice={user}:read"], "grant pattern '{user}': unknown placeholder {user} (only {principal})"),
        (["--act-for", "app"], "--act-for takes PRINCIPAL=PATTERN"),
    ],
)  # fmt: skip
def test_bad_grant_flags_are_one_line_errors(tmp_path: Path, args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["serve", "--db", str(tmp_path / "t.db"), *args])
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "t.db").exists()  # refused before anything was opened


def test_an_unknown_right_in_the_config_names_the_principal_and_the_right(tmp_path: Path) -> None:
    config = tmp_path / "memtap.json"
    config.write_text(
        json.dumps({"memtap": {"principals": {"bob": {"keys": ["k"], "grants": {"bob": ["raed"]}}}}})
    )
    result = CliRunner().invoke(cli, ["serve", "--db", str(tmp_path / "t.db"), "--config", str(config)])
    assert result.exit_code == 2
    assert (
        f"config {config}: memtap.principals.bob.grants: grant 'bob': unknown right 'raed' "
        "(rights are read, write, delete, admin)"
    ) in result.output


@pytest.mark.anyio
async def test_a_header_contradicting_the_operators_pin_is_refused_and_recorded(
    start_http_server: StartServer, tmp_path: Path
) -> None:
    config = tmp_path / "memtap.json"
    config.write_text(
        json.dumps(
            {
                "memtap": {
                    "principals": {
                        "kiosk": {
                            "keys": ["k-kiosk"],
                            "namespace": "lobby",
                            "grants": {"lobby": ["read", "write"]},
                        }
                    }
                }
            }
        )
    )
    server = start_http_server("--config", str(config))
    auth = {"Authorization": "Bearer k-kiosk"}
    async with http_client(server.url, auth) as kiosk:
        assert not (await kiosk.call_tool("memory_add", {"content": "welcome"})).is_error
    async with http_client(server.url, {**auth, "X-Memtap-Namespace": "office"}) as escaping:
        refused = await escaping.call_tool("memory_search", {"query": "welcome"})
    assert server.stop() == 0
    assert _text(refused) == (
        "namespace='office' in the request contradicts namespace='lobby' fixed for principal 'kiosk' by the operator"
    )
    store = TraceStore(server.db)
    events = store.list_events()
    store.close()
    assert [(e.tool, e.status, e.context.namespace) for e in events] == [
        ("memory_add", "ok", "lobby"),
        ("memory_search", "error", "office"),
    ]


@pytest.mark.anyio
async def test_a_failed_call_is_recorded_with_the_namespace_and_session_it_asked_for(
    start_http_server: StartServer,
) -> None:
    server = start_http_server("--api-key", "k-alice=alice", "--context-args")
    async with http_client(server.url, {"Authorization": "Bearer k-alice"}) as alice:
        bad = await alice.call_tool(
            "memory_add", {"content": "x", "namespace": "bob", "role": "villain", "session": "s5"}
        )
    assert server.stop() == 0
    assert bad.is_error and "role" in _text(bad)
    store = TraceStore(server.db)
    [event] = store.list_events()
    store.close()
    assert (event.context.principal, event.context.namespace, event.context.session, event.context.role) == (
        "alice", "bob", "s5", None,
    )  # fmt: skip
