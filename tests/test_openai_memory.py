"""The chat proxy as the memory layer (`auto`): search, inject, capture; and its spans."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import openai
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from served import ServedMemtap, chats

from memtap.adapters.builtin import BuiltinBackend
from memtap.proxy.memory_layer import MEMORY_HEADER, format_memories
from memtap.trace.models import Op, Role
from memtap.trace.store import TraceStore

Serve = Callable[..., ServedMemtap]


def _say(client: openai.OpenAI, text: str, **kwargs: Any) -> str:
    reply = client.chat.completions.create(
        model="gpt-fake", messages=[{"role": "system", "content": "You are kind."}, {"role": "user", "content": text}],
        **kwargs,
    )  # fmt: skip
    return reply.choices[0].message.content or ""


def _items(memtap: ServedMemtap, namespace: str) -> list[dict[str, Any]]:
    """The backend's items, read through the backend itself (its own connection, this thread)."""

    async def read() -> list[dict[str, Any]]:
        backend = BuiltinBackend(memtap.db)
        try:
            return list((await backend.list(namespace)).value["items"])
        finally:
            await backend.close()

    return anyio.run(read)


def test_auto_mode_injects_memories_upstream_and_captures_the_user_turn(
    serve_memtap: Serve, upstream: Any
) -> None:
    memtap = serve_memtap({"memory": "auto"})
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url,
                           default_headers={"X-Memtap-Session": "s1", "X-Memtap-Run": "r1"})  # fmt: skip
    _say(client, "I go to the FitLife gym on Tuesdays [chunks 2]", user="alice")
    memtap.events(lambda events: any(e.op == Op.WRITE for e in events))
    _say(client, "Which gym do I go to? [chunks 2]", user="alice", extra_headers={"X-Memtap-Session": "s2"})
    events = memtap.events(chats(2))

    # Upstream side: the first call had nothing to inject; the second got the memory, with
    # provenance, placed after the caller's own system prompt.
    first, second = (body["messages"] for body in upstream.state.received)
    assert [m["role"] for m in first] == ["system", "user"]
    assert [m["role"] for m in second] == ["system", "system", "user"]
    injected = second[1]["content"]
    assert injected.startswith(MEMORY_HEADER)
    assert "(role=user, session=s1, time=20" in injected and "I go to the FitLife gym on Tuesdays" in injected

    # Trace side: each chat names the search it made and the turn it captured, and they name it.
    chat1, chat2 = [e for e in events if e.op == Op.CHAT]
    [search1] = [e for e in events if e.parent_id == chat1.id and e.op == Op.RETRIEVE]
    [write1] = [e for e in events if e.parent_id == chat1.id and e.op == Op.WRITE]
    assert search1.effects == [] and search1.arguments["query"].startswith("I go to the FitLife gym")
    [search2] = [e for e in events if e.parent_id == chat2.id and e.op == Op.RETRIEVE]
    assert write1.effects[0].content_after == "I go to the FitLife gym on Tuesdays [chunks 2]"
    assert (write1.context.namespace, write1.context.session, write1.context.role) == (
        "alice",
        "s1",
        Role.USER,
    )
    assert write1.effects[0].tags_after is not None and write1.effects[0].tags_after.owner == "alice"
    assert chat1.links == [search1.id, write1.id] and chat1.result["memory"]["captured"] == [
        write1.effects[0].item_id
    ]
    assert search2.id in chat2.links and search2.effects[0].item_id == write1.effects[0].item_id
    assert chat2.result["memory"]["injected"] == [write1.effects[0].item_id]
    assert chat2.memory_ms is not None and chat2.memory_ms > 0
    assert chat2.total_ms is not None and chat2.backend_ms is not None and chat2.overhead_ms is not None
    assert abs(chat2.total_ms - chat2.backend_ms - chat2.memory_ms - chat2.overhead_ms) < 0.01
    # The recorded conversation is what the caller sent, not what memtap injected.
    assert [m["role"] for m in chat2.arguments["messages"]] == ["system", "user"]

    # Backend side: both user turns are items, with provenance.
    items = _items(memtap, "alice")
    assert [i["content"] for i in items] == ["I go to the FitLife gym on Tuesdays [chunks 2]",
                                             "Which gym do I go to? [chunks 2]"]  # fmt: skip
    assert items[0]["provenance"]["session"] == "s1" and items[0]["provenance"]["event_id"] == write1.id
    store = TraceStore(memtap.db)
    assert {i.item_id for i in store.list_items(namespace="alice")} == {i["id"] for i in items}
    store.close()


def test_namespaces_keep_memories_apart_and_the_header_names_the_namespace(
    serve_memtap: Serve, upstream: Any
) -> None:
    memtap = serve_memtap({"memory": "auto"})
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url)
    _say(client, "My locker code is 4711", extra_headers={"X-Memtap-Namespace": "bob"}, user="ignored")
    memtap.events(lambda events: any(e.op == Op.WRITE for e in events))
    _say(client, "What is my locker code?", user="carol")
    _say(client, "What is my locker code?", user="carol", extra_headers={"X-Memtap-Namespace": "bob"})
    memtap.events(chats(3))
    carol, bob = upstream.state.received[1]["messages"], upstream.state.received[2]["messages"]
    assert not any("4711" in m["content"] for m in carol[:-1])
    assert "My locker code is 4711" in bob[1]["content"]


def test_the_memory_header_turns_auto_off_per_request_and_routes_turn_it_on(
    serve_memtap: Serve, upstream: Any
) -> None:
    memtap = serve_memtap(
        {"memory": "off", "routes": {"remembering": {"memory": "auto"}}},
        models=[{"model_name": name, "litellm_params": {"model": "openai/fake-1", "api_base": upstream.base_url}}
                for name in ("gpt-fake", "remembering")],
    )  # fmt: skip
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url)
    client.chat.completions.create(model="gpt-fake", messages=[{"role": "user", "content": "plain"}])
    client.chat.completions.create(model="remembering", messages=[{"role": "user", "content": "kept"}],
                                   extra_headers={"X-Memtap-Memory": "off"})  # fmt: skip
    client.chat.completions.create(model="remembering", messages=[{"role": "user", "content": "remembered"}])
    events = memtap.events(
        lambda evs: sum(e.op == Op.CHAT for e in evs) == 3 and any(e.op == Op.WRITE for e in evs)
    )
    assert [e.result["memory"]["mode"] for e in events if e.op == Op.CHAT] == ["off", "off", "auto"]
    assert [e.effects[0].content_after for e in events if e.op == Op.WRITE] == ["remembered"]


def test_assistant_replies_are_captured_when_configured_and_tool_rounds_are_not(
    serve_memtap: Serve, upstream: Any
) -> None:
    memtap = serve_memtap({"memory": "auto", "capture": ["user", "assistant"]})
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url)
    stream = client.chat.completions.create(
        model="gpt-fake", messages=[{"role": "user", "content": "Tell me [chunks 3]"}], stream=True, user="u"
    )
    assert (
        "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "chunk-0 chunk-1 chunk-2 "
    )
    client.chat.completions.create(model="gpt-fake", user="u", messages=[
        {"role": "user", "content": "Weather? [tool]"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
                                                               "function": {"name": "w", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ])  # fmt: skip
    events = memtap.events(chats(2))
    writes = [e for e in events if e.op == Op.WRITE]
    assert [(w.context.role, w.effects[0].content_after) for w in writes] == [
        (Role.USER, "Tell me [chunks 3]"), (Role.ASSISTANT, "chunk-0 chunk-1 chunk-2 "),
    ]  # fmt: skip


def test_chat_span_is_the_parent_of_its_memory_spans(
    serve_memtap: Serve, spans: InMemorySpanExporter, upstream: Any
) -> None:
    memtap = serve_memtap({"memory": "auto"})
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url)
    _say(client, "I like green tea [chunks 4]", user="dana")
    memtap.events(chats(1))
    stream = client.chat.completions.create(
        model="gpt-fake", messages=[{"role": "user", "content": "what tea do I like? [chunks 4]"}],
        user="dana", stream=True, stream_options={"include_usage": True},
    )  # fmt: skip
    list(stream)
    events = memtap.events(lambda evs: sum(e.op == Op.CHAT for e in evs) == 2 and len(evs) == 6)
    chat_spans = [s for s in spans.get_finished_spans() if s.name == "chat gpt-fake"]
    assert len(chat_spans) == 2
    chat = chat_spans[1]
    attrs = dict(chat.attributes or {})
    assert attrs["gen_ai.operation.name"] == "chat"
    assert attrs["gen_ai.provider.name"] == "openai" and attrs["gen_ai.request.model"] == "gpt-fake"
    assert attrs["gen_ai.response.model"] == "fake-1"
    assert (attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"]) == (11, 4)
    assert 0 < float(attrs["gen_ai.response.time_to_first_chunk"]) < 10  # type: ignore[arg-type]
    assert attrs["memtap.event_id"] == [e for e in events if e.op == Op.CHAT][1].id
    # Every chat's search and capture are children of that chat's span, in the same trace.
    searches = [s for s in spans.get_finished_spans() if s.name == "search_memory builtin"]
    writes = [s for s in spans.get_finished_spans() if s.name == "create_memory builtin"]
    assert [s.parent.span_id if s.parent else None for s in searches] == [
        c.context.span_id for c in chat_spans
    ]
    assert [w.parent.span_id if w.parent else None for w in writes] == [c.context.span_id for c in chat_spans]
    assert [s.context.trace_id for s in searches] == [c.context.trace_id for c in chat_spans]


def test_injected_message_format_keeps_provenance() -> None:
    text = format_memories([
        {"id": "mem_1", "content": "Lives in\nLyon", "updated_at": "2026-11-30T08:00:00.123+00:00",
         "provenance": {"role": "user", "session": "s9"}},
        {"id": "mem_2", "content": "Bob says hi", "provenance": {}},
    ])  # fmt: skip
    assert text.splitlines() == [
        MEMORY_HEADER,
        "[1] (role=user, session=s9, time=2026-11-30T08:00:00Z, id=mem_1) Lives in Lyon",
        "[2] (role=unknown, session=none, time=unknown, id=mem_2) Bob says hi",
    ]


def test_auto_mode_over_a_wrapped_reference_memory_server(
    serve_memtap: Serve, upstream: Any, memory_server: dict[str, Any]
) -> None:
    memtap = serve_memtap({"memory": "auto", "backend": "mcp:memory"}, mcp_servers={"memory": memory_server})
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url, default_headers={"X-Memtap-Session": "s1"})
    _say(client, "I go to the FitLife gym on Tuesdays", user="alice")
    memtap.events(lambda events: any(e.op == Op.WRITE for e in events))
    _say(client, "Which gym do I go to?", user="alice", extra_headers={"X-Memtap-Session": "s2"})
    events = memtap.events(chats(2))

    # The upstream model saw the memory the reference server returned.
    second = upstream.state.received[1]["messages"]
    assert [m["role"] for m in second] == ["system", "system", "user"]
    assert "I go to the FitLife gym on Tuesdays" in second[1]["content"]

    # The capture is a real observation of a new entity for alice: two adds, entity and observation.
    write = next(e for e in events if e.op == Op.WRITE)
    entity, effect = write.effects
    assert (entity.kind.value, entity.item_id.startswith("ent_"), entity.content_after) == (
        "add",
        True,
        "alice (speaker)",
    )
    assert (write.backend, effect.kind.value, effect.content_after) == (
        "memory", "add", "I go to the FitLife gym on Tuesdays",
    )  # fmt: skip
    assert (write.context.namespace, write.context.session) == ("alice", "s1")
    stored = [
        json.loads(line) for line in Path(memory_server["env"]["MEMORY_FILE_PATH"]).read_text().splitlines()
    ]
    [alice] = [e for e in stored if e.get("type") == "entity" and e.get("name") == "alice"]
    assert alice["observations"][0] == "I go to the FitLife gym on Tuesdays"
    chat2 = [e for e in events if e.op == Op.CHAT][1]
    [search] = [e for e in events if e.parent_id == chat2.id and e.op == Op.RETRIEVE]
    assert [eff.item_id for eff in search.effects] == [effect.item_id]
    assert chat2.result["memory"]["injected"] == [effect.item_id]


def test_captured_roles_hold_against_a_role_header(serve_memtap: Serve, upstream: Any) -> None:
    memtap = serve_memtap({"memory": "auto", "capture": ["user", "assistant"]})
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url, default_headers={"X-Memtap-Role": "user"})
    reply = client.chat.completions.create(
        model="gpt-fake", messages=[{"role": "user", "content": "I like jazz [chunks 1]"}], user="alice"
    )
    assert reply.choices[0].message.content == "chunk-0 "
    events = memtap.events(lambda events: sum(e.op == Op.WRITE for e in events) == 2)
    writes = [e for e in events if e.op == Op.WRITE]
    assert [(w.status, w.context.role) for w in writes] == [("ok", Role.USER), ("ok", Role.ASSISTANT)]
