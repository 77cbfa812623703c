"""Who may touch which memory, end to end: three keys over MCP HTTP, the chat proxy and the
replay clock of one real `memtap serve`, every refusal read back from the trace database."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import openai
import pytest
from conftest import ServerProcess, http_client, meta
from mcp import Client

from memtap.trace.models import TraceEvent
from memtap.trace.store import TraceStore

pytestmark = pytest.mark.anyio

StartServer = Callable[..., ServerProcess]

ALICE, BOB, APP = "k-alice-0123", "k-bob-4567", "k-app-89ab"
CONFIG = {
    "memtap": {
        "memory": "auto",
        "principals": {
            "alice": {
                "keys": [ALICE],
                "grants": {"{principal}": ["read", "write", "delete"], "shared/*": ["read"]},
            },
            "bob": {
                "keys": [BOB],
                "grants": {"bob": ["read", "write", "delete"], "shared/*": ["read", "write"]},
            },
            "app": {"keys": [APP], "grants": {"users/*": ["read", "write"]}, "act_for": ["users/*"]},
        },
    }
}


def _config(tmp_path: Path, upstream_url: str) -> Path:
    models = [
        {"model_name": "gpt-fake", "litellm_params": {"model": "openai/fake-1", "api_base": upstream_url}}
    ]
    path = tmp_path / "memtap.json"
    path.write_text(json.dumps({**CONFIG, "model_list": models}))
    return path


def _as(server: ServerProcess, key: str, **headers: str) -> Any:
    return http_client(server.url, {"Authorization": f"Bearer {key}", **headers})


def _text(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


async def _ok(client: Client, tool: str, args: dict[str, Any], **kw: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args, **kw)
    assert not result.is_error, _text(result)
    assert result.structured_content is not None
    return result.structured_content


async def _refused(client: Client, tool: str, args: dict[str, Any], **kw: Any) -> str:
    result = await client.call_tool(tool, args, **kw)
    assert result.is_error, result.structured_content
    return _text(result)


def _refusals(events: list[TraceEvent]) -> list[tuple[str, str, str, str, str]]:
    return sorted(
        (e.context.principal, e.tool, e.op.value, e.context.namespace, e.error or "")
        for e in events
        if e.status == "error"
    )


NO_GRANT = "none of its grants matches that namespace"


async def test_grants_hold_over_mcp_the_chat_proxy_and_the_replay_clock(
    start_http_server: StartServer, upstream: Any, tmp_path: Path
) -> None:
    server = start_http_server("--config", str(_config(tmp_path, upstream.base_url)))

    # What the grants allow works.
    async with _as(server, ALICE) as alice:
        a1 = (await _ok(alice, "memory_add", {"content": "alice's diagnosis: flu"}))["id"]
        found = await _ok(alice, "memory_search", {"query": "diagnosis"})
        assert [r["id"] for r in found["results"]] == [a1]
        assert (await _ok(alice, "memory_get", {"id": a1}))["id"] == a1
        assert "contradicts namespace='alice'" in await _refused(
            alice, "memory_search", {"query": "note", "namespace": "bob"}
        )
    async with _as(server, BOB) as bob:
        await _ok(bob, "memory_add", {"content": "bob's note"})
    async with _as(server, BOB, **{"X-Memtap-Namespace": "shared/team"}) as bob_shared:
        s1 = (await _ok(bob_shared, "memory_add", {"content": "team standup at nine"}))["id"]
        await _ok(bob_shared, "memory_update", {"id": s1, "content": "team standup at ten"})
        await _refused(bob_shared, "memory_update", {"id": s1, "access": {"visibility": "public"}})
    async with _as(server, APP, **{"X-Memtap-Namespace": "users/u1"}) as app:
        u1 = (await _ok(app, "memory_add", {"content": "u1 likes jazz"}))["id"]
        # Enforce is the default with keys; the requester defaults to users/u1, the owner.
        found = await _ok(app, "memory_search", {"query": "jazz"})
        assert [r["id"] for r in found["results"]] == [u1] and "withheld" not in found
        await _refused(app, "memory_delete", {"id": u1})
        await _refused(app, "memory_search", {"query": "jazz"}, meta=meta(requester="alice"))
    async with _as(server, APP, **{"X-Memtap-Namespace": "alice"}) as app_alice:
        await _refused(app_alice, "memory_list", {})

    # bob, naming alice's namespace in a header, is refused everything.
    async with _as(server, BOB, **{"X-Memtap-Namespace": "alice"}) as bob_on_alice:
        message = await _refused(bob_on_alice, "memory_search", {"query": "diagnosis"})
        assert message == f"principal 'bob' may not read namespace 'alice': {NO_GRANT}"
        await _refused(bob_on_alice, "memory_list", {})
        await _refused(bob_on_alice, "memory_get", {"id": a1})
        await _refused(bob_on_alice, "memory_history", {"id": a1})
        await _refused(bob_on_alice, "memory_add", {"content": "planted by bob"})
        await _refused(bob_on_alice, "memory_update", {"id": a1, "content": "changed by bob"})
        await _refused(bob_on_alice, "memory_update", {"id": a1, "access": {"visibility": "public"}})
        await _refused(bob_on_alice, "memory_delete", {"id": a1})
    async with _as(server, BOB) as bob:
        await _refused(bob, "memory_search", {"query": "diagnosis"}, meta=meta(requester="alice"))

    # The replay clock: marks only on what the caller may write, and only its own calls.
    marks = f"http://127.0.0.1:{server.port}/v1/memtap/replay/mark"
    async with httpx2.AsyncClient() as http:
        as_bob = {"Authorization": f"Bearer {BOB}"}
        refused = await http.post(marks, json={"namespace": "alice", "turn": "t1"}, headers=as_bob)
        assert refused.status_code == 403 and refused.json()["error"]["type"] == "permission_error"
        relabel = await http.post(marks, json={"principal": "alice", "turn": "t1"}, headers=as_bob)
        assert relabel.status_code == 403
        mine = await http.post(
            marks, json={"namespace": "alice", "turn": "t7"}, headers={"Authorization": f"Bearer {ALICE}"}
        )
        assert mine.status_code == 200
        assert (await http.delete(f"{marks}?namespace=alice", headers=as_bob)).status_code == 403

    # The chat proxy: capture (write) and injection (read) on behalf of the request's user.
    def chat(key: str, user: str, text: str, **headers: str) -> Any:
        client = openai.OpenAI(api_key=key, base_url=f"http://127.0.0.1:{server.port}/v1", max_retries=0)
        return client.chat.completions.create(
            model="gpt-fake", messages=[{"role": "user", "content": text}], user=user, extra_headers=headers
        )

    chat(ALICE, "alice", "I moved to Lyon [chunks 1]")
    chat(APP, "users/u2", "u2 prefers tea [chunks 1]")
    # The requester defaults to the end user the app acts for, so enforce injects u2's own memory.
    chat(APP, "users/u2", "what do I prefer? tea or coffee [chunks 1]")
    injected = upstream.state.received[-1]["messages"][0]["content"]
    assert "u2 prefers tea" in injected, upstream.state.received[-1]
    with pytest.raises(openai.PermissionDeniedError) as bob_as_alice:
        chat(BOB, "alice", "bob writes into alice's memory [chunks 1]")
    assert "may not act for requester 'alice'" in str(bob_as_alice.value)
    with pytest.raises(openai.PermissionDeniedError):
        chat(APP, "alice", "app reads alice [chunks 1]")
    read_only = chat(ALICE, "alice", "standup notes [chunks 1]", **{"X-Memtap-Namespace": "shared/team"})
    assert read_only.choices[0].message.content == "chunk-0 "  # read allowed: the chat is served
    assert server.stop() == 0

    store = TraceStore(server.db)
    events = store.list_events()
    items = store.list_items(include_closed=True)
    store.close()
    assert _refusals(events) == sorted(
        [
            ("alice", "memory_search", "retrieve", "bob",
             "argument namespace='bob' contradicts namespace='alice' fixed by the credential (context arguments "
             "are off) (principal 'alice'); context the connection sets cannot be changed by a tool argument"),
            ("bob", "memory_update", "update", "shared/team",
             "principal 'bob' may not admin namespace 'shared/team': its grants there give only read, write"),
            ("app", "memory_delete", "delete", "users/u1",
             "principal 'app' may not delete namespace 'users/u1': its grants there give only read, write"),
            ("app", "memory_search", "retrieve", "users/u1",
             "principal 'app' may not act for requester 'alice': no act_for pattern of it matches that requester"),
            ("app", "memory_list", "read", "alice", f"principal 'app' may not read namespace 'alice': {NO_GRANT}"),
            *[
                ("bob", tool, op, "alice", f"principal 'bob' may not {right} namespace 'alice': {NO_GRANT}")
                for tool, op, right in [
                    ("memory_search", "retrieve", "read"),
                    ("memory_list", "read", "read"),
                    ("memory_get", "read", "read"),
                    ("memory_history", "read", "read"),
                    ("memory_add", "write", "write"),
                    ("memory_update", "update", "write"),
                    ("memory_update", "update", "write"),
                    ("memory_delete", "delete", "delete"),
                ]
            ],
            ("bob", "memory_search", "retrieve", "bob",
             "principal 'bob' may not act for requester 'alice': no act_for pattern of it matches that requester"),
            ("bob", "replay.mark", "control", "alice", f"principal 'bob' may not write namespace 'alice': {NO_GRANT}"),
            ("bob", "replay.mark", "control", "bob",
             "principal 'bob' may not mark calls of principal 'alice': a caller may re-label only its own calls"),
            ("bob", "replay.mark", "control", "alice", f"principal 'bob' may not write namespace 'alice': {NO_GRANT}"),
            ("bob", "chat.completions", "chat", "alice",
             "principal 'bob' may not act for requester 'alice': no act_for pattern of it matches that requester"),
            ("app", "chat.completions", "chat", "alice",
             "principal 'app' may not act for requester 'alice': no act_for pattern of it matches that requester"),
            ("alice", "memory_add", "write", "shared/team",
             "principal 'alice' may not write namespace 'shared/team': its grants there give only read"),
        ]
    )  # fmt: skip

    # Nothing refused changed anything: alice's item is as she wrote it, nobody else's is in her namespace.
    by_namespace: dict[str, list[str]] = {}
    for item in items:
        by_namespace.setdefault(item.namespace, []).append(item.content or "")
    assert sorted(by_namespace["alice"]) == ["I moved to Lyon [chunks 1]", "alice's diagnosis: flu"]
    assert by_namespace["users/u2"] == [
        "u2 prefers tea [chunks 1]",
        "what do I prefer? tea or coffee [chunks 1]",
    ]
    assert by_namespace["shared/team"] == ["team standup at ten"]
    assert all(i.valid_to is None for i in items if i.namespace == "alice")
    [alice_item] = [i for i in items if i.item_id == a1]
    assert (
        alice_item.version == 1
        and alice_item.tags is not None
        and alice_item.tags.visibility.value == "private"
    )
    # What was allowed happened once: bob's, app's and the chats' writes.
    assert by_namespace["bob"] == ["bob's note"] and by_namespace["users/u1"] == ["u1 likes jazz"]
