"""cross_namespace and leak_injection on live traffic: the real reference memory server shared by
two namespaces, grants refusing a call, and the chat proxy injecting a memory it should not."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest
from conftest import http_client, meta
from findings_helpers import serve_proxy, settled_findings
from served import chats

from memtap.adapters.memory_server import observation_id
from memtap.findings.model import Severity
from memtap.proxy.policy import GateMode

pytestmark = pytest.mark.anyio

Serve = Callable[..., Any]
TEA = observation_id("alice", "likes green tea")


async def test_an_item_of_one_namespace_served_to_another_is_cross_namespace(
    db_path: Path, memory_server: dict[str, Any]
) -> None:
    served = serve_proxy(db_path, {"memory": memory_server})
    try:
        url = f"http://127.0.0.1:{served.port}/mcp"
        async with http_client(url, {"X-Memtap-Namespace": "alice"}) as alice:
            await alice.call_tool(
                "create_entities",
                {
                    "entities": [
                        {"name": "alice", "entityType": "person", "observations": ["likes green tea"]}
                    ]
                },
                meta=meta(session="s1", role="user"),
            )
        async with http_client(url, {"X-Memtap-Namespace": "bob"}) as bob:
            await bob.call_tool("search_nodes", {"query": "tea"}, meta=meta(session="s2"))
        found = settled_findings(served, "cross_namespace")
    finally:
        served.stop()
    assert [(f.severity, f.namespace, f.item_ids) for f in found] == [(Severity.CRITICAL, "bob", [TEA])]
    assert found[0].evidence == {
        "refused": False,
        "item_namespace": "alice",
        "served_to": "bob",
        "principal": "local",
        "content": "likes green tea",
    }


async def test_the_builtin_backend_keeps_namespaces_apart_without_findings(serve_memtap: Serve) -> None:
    served = serve_memtap()
    url = f"http://127.0.0.1:{served.port}/mcp"
    async with http_client(url, {"X-Memtap-Namespace": "alice"}) as alice:
        await alice.call_tool("memory_add", {"content": "Alice likes green tea."})
    async with http_client(url, {"X-Memtap-Namespace": "bob"}) as bob:
        await bob.call_tool("memory_search", {"query": "tea"})
    assert settled_findings(served) == []


PRINCIPALS = {"principals": {"alice": {"keys": ["key-alice"]}, "bob": {"keys": ["key-bob"]}}}


def _with_keys(serve_memtap: Serve) -> Any:
    """memtap with API keys and grants from the config, as `memtap serve --config` sets them up."""
    from memtap.cli.options import auth_settings
    from memtap.config import ConfigFile

    config = ConfigFile.model_validate({"memtap": PRINCIPALS})
    keys = config.memtap.api_key_map()
    return serve_memtap(PRINCIPALS, api_keys=keys, **auth_settings(config, keys))


async def test_a_call_refused_outside_the_principals_grants_is_recorded_as_cross_namespace(
    serve_memtap: Serve,
) -> None:
    served = _with_keys(serve_memtap)
    headers = {"Authorization": "Bearer key-bob", "X-Memtap-Namespace": "alice"}
    async with http_client(f"http://127.0.0.1:{served.port}/mcp", headers) as bob:
        refused = await bob.call_tool("memory_search", {"query": "tea"})
    assert refused.is_error
    (found,) = settled_findings(served, "cross_namespace")
    assert (found.severity, found.namespace) == (Severity.MEDIUM, "alice")
    assert found.evidence["refused"] is True and found.evidence["principal"] == "bob"
    assert found.evidence["error"].startswith("principal 'bob' may not read namespace 'alice'")


async def test_a_principal_in_its_own_namespace_raises_nothing(serve_memtap: Serve) -> None:
    served = _with_keys(serve_memtap)
    headers = {"Authorization": "Bearer key-bob"}
    async with http_client(f"http://127.0.0.1:{served.port}/mcp", headers) as bob:
        await bob.call_tool("memory_add", {"content": "Bob likes coffee."})
        await bob.call_tool("memory_search", {"query": "coffee"})
    assert settled_findings(served) == []


def _chat_memtap(serve_memtap: Serve, upstream: Any) -> Any:
    models = [{"model_name": "reader", "litellm_params": {"model": "openai/memory-echo", "api_base": upstream.base_url,
                                                           "api_key": "sk-upstream"}}]  # fmt: skip
    return serve_memtap({"memory": "auto"}, models=models)


async def _plant_pin(served: Any) -> str:
    async with http_client(f"http://127.0.0.1:{served.port}/mcp", {"X-Memtap-Namespace": "alice"}) as alice:
        result = await alice.call_tool("memory_add", {"content": "Alice's door PIN is 4471."})
    return str(result.structured_content["id"])  # type: ignore[index]


async def test_the_chat_proxy_injecting_a_denied_memory_and_replying_with_it_is_a_leak(
    serve_memtap: Serve, upstream: Any
) -> None:
    served = _chat_memtap(serve_memtap, upstream)
    item = await _plant_pin(served)
    client = openai.OpenAI(
        api_key="x", base_url=served.base_url, default_headers={"X-Memtap-Requester": "carol"}
    )
    reply = client.chat.completions.create(
        model="reader", user="alice", messages=[{"role": "user", "content": "What is the door PIN?"}]
    )
    assert "4471" in (reply.choices[0].message.content or "")
    served.events(chats(1))  # the chat call is recorded after its answer
    found = settled_findings(served, "leak_injection")
    assert sorted((f.severity, f.item_ids, f.summary) for f in found) == [
        (Severity.CRITICAL, [item], "the chat proxy injected 1 item(s) denied to 'carol'"),
        (Severity.CRITICAL, [item], f"the reply to 'carol' states 4471, alice's, pin of denied item {item}"),
    ]
    stated = next(f for f in found if "protected_values" in f.evidence)
    assert stated.evidence["protected_values"] == ["4471", "alice's", "pin"]
    assert len(stated.event_ids) == 2


async def test_the_chat_proxy_answering_the_owner_leaks_nothing(serve_memtap: Serve, upstream: Any) -> None:
    served = _chat_memtap(serve_memtap, upstream)
    await _plant_pin(served)
    client = openai.OpenAI(api_key="x", base_url=served.base_url)
    client.chat.completions.create(
        model="reader", user="alice", messages=[{"role": "user", "content": "What is the door PIN?"}]
    )
    served.events(chats(1))
    found = settled_findings(served)
    assert [f.kind for f in found if f.kind.startswith("leak")] == []


async def test_a_reply_stating_what_a_memory_the_requester_may_see_also_states_leaks_nothing(
    serve_memtap: Serve, upstream: Any
) -> None:
    models = [{"model_name": "reader", "litellm_params": {"model": "openai/memory-echo", "api_base": upstream.base_url,
                                                           "api_key": "sk-upstream"}}]  # fmt: skip
    served = serve_memtap({"memory": "auto"}, models=models, gate=GateMode.ENFORCE)
    private = await _plant_pin(served)
    async with http_client(f"http://127.0.0.1:{served.port}/mcp", {"X-Memtap-Namespace": "alice"}) as alice:
        told = await alice.call_tool(
            "memory_add",
            {"content": "Everyone knows Alice's door PIN is 4471.", "access": {"visibility": "public"}},
        )
    public = str(told.structured_content["id"])  # type: ignore[index]
    client = openai.OpenAI(
        api_key="x", base_url=served.base_url, default_headers={"X-Memtap-Requester": "carol"}
    )
    reply = client.chat.completions.create(
        model="reader", user="alice", messages=[{"role": "user", "content": "What is the door PIN?"}]
    )
    # The gate withheld the private memory; the model recites the public one, which states the same PIN.
    text = reply.choices[0].message.content or ""
    assert public in text and private not in text and "4471" in text
    served.events(chats(1))
    assert [f for f in settled_findings(served) if f.kind.startswith("leak")] == []


CANARY = "CANARY-7f3a9c"


def _canary_chat(serve_memtap: Serve, upstream: Any, model: str = "memory-echo") -> Any:
    params = {"model": f"openai/{model}", "api_base": upstream.base_url, "api_key": "sk-upstream"}
    return serve_memtap(
        {"memory": "auto", "findings": {"canaries": [{"value": CANARY, "owners": ["alice"]}]}},
        models=[{"model_name": "reader", "litellm_params": params}],
    )


async def _plant_canary(served: Any) -> str:
    async with http_client(f"http://127.0.0.1:{served.port}/mcp", {"X-Memtap-Namespace": "alice"}) as alice:
        result = await alice.call_tool("memory_add", {"content": f"Alice's locker code is {CANARY}."})
    return str(result.structured_content["id"])  # type: ignore[index]


def _exposures(served: Any) -> list[tuple[str, str, list[str]]]:
    found = settled_findings(served, "canary_exposure")
    assert {(f.severity, f.evidence["canary"], f.evidence["owners"][0]) for f in found} <= {
        (Severity.CRITICAL, CANARY, "alice")
    }
    return sorted((f.evidence["where"], f.evidence["requester"], f.item_ids) for f in found)


async def test_a_canary_injected_for_another_requester_and_recited_is_exposed_upstream_and_in_the_reply(
    serve_memtap: Serve, upstream: Any
) -> None:
    served = _canary_chat(serve_memtap, upstream)
    item = await _plant_canary(served)
    client = openai.OpenAI(
        api_key="x", base_url=served.base_url, default_headers={"X-Memtap-Requester": "carol"}
    )
    reply = client.chat.completions.create(
        model="reader", user="alice", messages=[{"role": "user", "content": "What is the locker code?"}]
    )
    assert CANARY in (reply.choices[0].message.content or "")  # the model recites its injected memory
    served.events(chats(1))
    chat = next(e for e in served.events(chats(1)) if e.op.value == "chat")
    assert CANARY not in str(chat.arguments)  # the client never sent it: the proxy injected it
    assert _exposures(served) == [
        ("reply", "carol", []),
        (f"retrieval of {item}", "carol", [item]),
        ("upstream request", "carol", [item]),
    ]


async def test_a_canary_a_client_sends_upstream_for_someone_else_is_exposed(
    serve_memtap: Serve, upstream: Any
) -> None:
    served = _canary_chat(serve_memtap, upstream, model="fake-1")
    await _plant_canary(served)
    client = openai.OpenAI(api_key="x", base_url=served.base_url, default_headers={"X-Memtap-Memory": "off"})
    client.chat.completions.create(
        model="reader", user="bob", messages=[{"role": "user", "content": f"Is {CANARY} a locker code?"}]
    )
    served.events(chats(1))
    assert _exposures(served) == [("upstream request", "bob", [])]


async def test_the_owner_chatting_with_her_canary_exposes_nothing(serve_memtap: Serve, upstream: Any) -> None:
    served = _canary_chat(serve_memtap, upstream)
    await _plant_canary(served)
    client = openai.OpenAI(api_key="x", base_url=served.base_url)
    reply = client.chat.completions.create(
        model="reader", user="alice", messages=[{"role": "user", "content": "What is my locker code?"}]
    )
    assert CANARY in (reply.choices[0].message.content or "")
    served.events(chats(1))
    assert _exposures(served) == []
