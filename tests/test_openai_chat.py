"""The OpenAI-compatible chat proxy, driven by the official openai client (sync, async,
streaming) against the real app on a free port, with a fake hosted LLM as the upstream."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from opentelemetry import trace
from secrets_check import assert_absent
from served import ServedMemtap, chats

import memtap.proxy.chat as chat_module
from memtap.probes.targets._server import free_port
from memtap.trace.models import Op

Serve = Callable[..., ServedMemtap]
HELLO = [{"role": "user", "content": "Say hello [chunks 20]"}]


def _raw_stream(url: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> bytes:
    with httpx.stream(
        "POST", url + "/chat/completions", json=body, headers=headers or {}, timeout=10
    ) as resp:
        assert resp.status_code == 200
        return b"".join(resp.iter_raw())


def test_non_streaming_answer_is_the_upstreams_and_the_chat_is_recorded(
    serve_memtap: Serve, upstream: Any
) -> None:
    memtap = serve_memtap()
    direct = openai.OpenAI(api_key="sk-direct", base_url=upstream.base_url)
    proxied = openai.OpenAI(api_key="sk-anything", base_url=memtap.base_url)
    via_memtap = proxied.chat.completions.create(model="gpt-fake", messages=HELLO, user="alice")
    straight = direct.chat.completions.create(model="fake-1", messages=HELLO, user="alice")
    assert via_memtap.model_dump() == straight.model_dump()
    assert via_memtap.usage is not None and via_memtap.usage.completion_tokens == 20
    # The upstream got the deployment's model name and key, never the caller's token.
    assert upstream.state.received[0]["model"] == "fake-1"
    assert upstream.state.headers[0]["Authorization"] == "Bearer sk-upstream-secret"
    [event] = memtap.events(chats(1))
    assert (event.op, event.front_door, event.model, event.provider) == (
        Op.CHAT,
        "openai",
        "gpt-fake",
        "openai",
    )
    assert event.context.namespace == "alice"  # the request's `user` names the namespace
    assert event.arguments["messages"] == HELLO
    assert event.result["choices"][0]["message"]["content"] == straight.choices[0].message.content
    assert (event.input_tokens, event.output_tokens) == (11, 20)
    assert event.ttft_ms is not None and event.backend_ms is not None and event.total_ms is not None
    assert 0 < event.backend_ms <= event.total_ms and event.ttft_ms <= event.total_ms
    assert event.overhead_ms is not None and event.overhead_ms >= 0
    assert_absent(memtap.db, "sk-anything", writer_open=True)  # the event is still in the WAL


def test_streamed_bytes_are_identical_to_the_upstreams_with_usage_in_the_final_chunk(
    serve_memtap: Serve, upstream: Any
) -> None:
    memtap = serve_memtap()
    body = {"model": "gpt-fake", "messages": HELLO, "stream": True, "stream_options": {"include_usage": True}}
    through = _raw_stream(memtap.base_url, body)
    straight = _raw_stream(upstream.base_url, {**body, "model": "fake-1"})
    assert through == straight
    assert through.endswith(b"data: [DONE]\n\n") and b'"usage":{"prompt_tokens":11' in through

    client = openai.OpenAI(api_key="x", base_url=memtap.base_url)
    chunks = list(client.chat.completions.create(**body))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "".join(
        f"chunk-{i} " for i in range(20)
    )
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 20
    events = memtap.events(chats(2))
    for event in events:
        assert event.result["stream"] == {"events": 23, "done": True}
        assert event.result["choices"][0]["message"]["content"].startswith("chunk-0 chunk-1")
        assert (event.input_tokens, event.output_tokens) == (11, 20)
        assert event.ttft_ms is not None and event.total_ms is not None
        assert 0 < event.ttft_ms <= event.total_ms


def test_a_stream_padded_as_openai_pads_it_is_forwarded_as_it_came_and_recorded_as_unpadded(
    serve_memtap: Serve, upstream: Any
) -> None:
    memtap = serve_memtap()
    plain = {
        "model": "gpt-fake",
        "messages": HELLO,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    padded = {**plain, "messages": [{"role": "user", "content": "Say hello [chunks 20] [obfuscate]"}]}
    through = _raw_stream(memtap.base_url, padded)
    assert through == _raw_stream(upstream.base_url, {**padded, "model": "fake-1"})
    assert through.count(b',"obfuscation":"') == 23  # every JSON event: the role, 20 texts, finish, usage
    _raw_stream(memtap.base_url, plain)
    with_padding, without = memtap.events(chats(2))
    assert with_padding.result == without.result
    assert with_padding.result["stream"] == {"events": 23, "done": True}
    assert (with_padding.input_tokens, with_padding.output_tokens) == (11, 20)


@pytest.mark.anyio
async def test_async_client_gets_tool_calls_streamed_and_whole(serve_memtap: Serve) -> None:
    memtap = serve_memtap()
    client = openai.AsyncOpenAI(api_key="x", base_url=memtap.base_url)
    ask = [{"role": "user", "content": "Weather in Paris? [tool]"}]
    whole = await client.chat.completions.create(model="gpt-fake", messages=ask)
    stream = await client.chat.completions.create(model="gpt-fake", messages=ask, stream=True)
    calls: dict[int, dict[str, str]] = {}
    async for chunk in stream:
        for call in chunk.choices[0].delta.tool_calls or []:
            slot = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
            slot["id"] += call.id or ""
            slot["name"] += (call.function and call.function.name) or ""
            slot["arguments"] += (call.function and call.function.arguments) or ""
    await client.close()
    [tool_call] = whole.choices[0].message.tool_calls or []
    assert whole.choices[0].finish_reason == "tool_calls"
    assert calls == {0: {"id": tool_call.id, "name": "get_weather", "arguments": '{"city": "Paris"}'}}
    events = memtap.events(chats(2))
    for event in events:
        [recorded] = event.result["choices"][0]["message"]["tool_calls"]
        assert recorded["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
        assert event.result["finish_reasons"] == ["tool_calls"]


def test_models_lists_the_aliases(serve_memtap: Serve) -> None:
    memtap = serve_memtap(models=[
        {"model_name": "a", "litellm_params": {"model": "openai/x", "api_base": "http://127.0.0.1:9/v1"}},
        {"model_name": "a", "litellm_params": {"model": "openai/y", "api_base": "http://127.0.0.1:9/v1"}},
        {"model_name": "b", "litellm_params": {"model": "hosted_vllm/z", "api_base": "http://127.0.0.1:9/v1"}},
    ])  # fmt: skip
    listed = openai.OpenAI(api_key="x", base_url=memtap.base_url).models.list()
    assert [m.id for m in listed.data] == ["a", "b"]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b'{"model": "gpt-fake", "messages": [', 400, "could not parse the JSON body"),
        (b'["not", "an", "object"]', 400, "must be a JSON object, not list"),
        (b'{"model": "gpt-fake"}', 400, "Missing required parameter: 'messages'."),
        (b'{"model": "gpt-fake", "messages": []}', 400, "'messages' must be a non-empty array."),
        (b'{"messages": [{"role": "user", "content": "x"}]}', 400, "Missing required parameter: 'model'."),
        (b'{"model": "nope", "messages": [{"role": "user", "content": "x"}]}', 404, "The model `nope` does not exist"),
        (b'{"model": "gpt-fake", "messages": [{"role": "user", "content": "' + b"x" * 5000 + b'"}]}', 413,
         "this server takes at most 4096 bytes"),
    ],
)  # fmt: skip
def test_bad_requests_get_openai_errors_and_are_recorded(
    serve_memtap: Serve, upstream: Any, body: bytes, status: int, message: str
) -> None:
    memtap = serve_memtap({"max_body_bytes": 4096})
    response = httpx.post(memtap.base_url + "/chat/completions", content=body, timeout=10,
                          headers={"Content-Type": "application/json"})  # fmt: skip
    assert response.status_code == status
    error = response.json()["error"]
    assert message in error["message"] and error["type"] == "invalid_request_error"
    assert upstream.state.received == []
    [event] = memtap.events(chats(1))
    assert event.status == "error" and message in (event.error or "")


def test_openai_client_raises_the_matching_errors(serve_memtap: Serve) -> None:
    memtap = serve_memtap()
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url, max_retries=0)
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.chat.completions.create(
            model="missing", messages=HELLO, user="ann",
            extra_headers={"X-Memtap-Run": "r-err", "X-Memtap-Session": "s-err"},
        )  # fmt: skip
    with pytest.raises(openai.RateLimitError, match="fake upstream error 429"):
        client.chat.completions.create(
            model="gpt-fake", messages=[{"role": "user", "content": "[status 429]"}]
        )
    with pytest.raises(openai.InternalServerError, match="upstream answered 500: <html>upstream exploded"):
        client.chat.completions.create(model="gpt-fake", messages=[{"role": "user", "content": "[garbage]"}])
    with pytest.raises(openai.BadRequestError, match="X-Memtap-Memory must be off or auto"):
        client.chat.completions.create(
            model="gpt-fake", messages=HELLO, extra_headers={"X-Memtap-Memory": "maybe"}
        )
    events = memtap.events(chats(4))
    assert [e.status for e in events] == ["error"] * 4
    # A call refused before its context was built (unknown model) keeps the context it sent.
    assert (events[0].context.run, events[0].context.session, events[0].context.namespace) == (
        "r-err", "s-err", "ann",
    )  # fmt: skip
    assert "fake upstream error 429" in (events[1].error or "")


def test_unreachable_and_stalled_upstreams_are_502_and_504(serve_memtap: Serve, upstream: Any) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    memtap = serve_memtap(models=[
        {"model_name": "dead", "litellm_params": {"model": "openai/x", "api_base": dead}},
        {"model_name": "slow", "litellm_params": {"model": "openai/x", "api_base": upstream.base_url, "timeout": 0.3}},
    ])  # fmt: skip
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url, max_retries=0)
    with pytest.raises(openai.APIStatusError) as unreachable:
        client.chat.completions.create(model="dead", messages=HELLO)
    assert (
        unreachable.value.status_code == 502 and "cannot reach upstream 'dead'" in unreachable.value.message
    )
    with pytest.raises(openai.APIStatusError) as stalled:
        client.chat.completions.create(model="slow", messages=[{"role": "user", "content": "[stall]"}])
    assert stalled.value.status_code == 504 and "timed out" in stalled.value.message
    events = memtap.events(chats(2))
    assert [e.status for e in events] == ["error", "error"]


def test_an_upstream_that_dies_mid_stream_gives_an_error_event_and_no_done(
    serve_memtap: Serve, upstream: Any
) -> None:
    memtap = serve_memtap()
    body = {"model": "gpt-fake", "messages": [{"role": "user", "content": "[die]"}], "stream": True}
    raw = _raw_stream(memtap.base_url, body)
    events = raw.split(b"\n\n")
    assert events[-1] == b"" and b"[DONE]" not in raw
    error = json.loads(events[-2].removeprefix(b"data: "))["error"]
    assert "broke off mid-stream" in error["message"]
    assert all(
        e.startswith(b"data: {") and e.endswith(b"}") for e in events[:-1]
    )  # the torn event is dropped
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url, max_retries=0)
    received = []
    with pytest.raises(openai.APIError, match="broke off mid-stream"):
        for chunk in client.chat.completions.create(**body):
            received.append(chunk.choices[0].delta.content)
    assert received == ["", "chunk-0 ", "chunk-1 ", "chunk-2 "]
    for event in memtap.events(chats(2)):
        assert event.status == "error" and "broke off mid-stream" in (event.error or "")
        assert event.result["partial"] is True
        assert event.result["choices"][0]["message"]["content"] == "chunk-0 chunk-1 chunk-2 "


def test_a_client_that_leaves_mid_stream_cancels_the_upstream_and_the_partial_chat_is_recorded(
    serve_memtap: Serve, upstream: Any
) -> None:
    memtap = serve_memtap()
    body = {"model": "gpt-fake", "messages": [{"role": "user", "content": "[endless]"}], "stream": True}
    with httpx.stream("POST", memtap.base_url + "/chat/completions", json=body, timeout=10) as response:
        lines = response.iter_lines()
        got = [line for _, line in zip(range(8), lines, strict=False)]
    assert any("more-" in line for line in got)
    assert upstream.state.cancelled.wait(10), "the upstream request was not cancelled"
    [event] = memtap.events(chats(1))
    assert event.status == "error" and event.error == "client disconnected mid-stream"
    assert event.result["partial"] is True and event.result["stream"]["done"] is False
    assert event.result["choices"][0]["message"]["content"].startswith("more-0 more-1")


def test_a_streams_summary_is_made_on_the_recorders_thread_and_records_what_a_durable_memtap_records(
    tmp_path: Path, upstream: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory off, not durable, no spans: nothing in the call reads the reply, so the stream's
    summary is left to the recorder's thread; durable, it is made before the answer ends. The
    trace is the same either way (a text stream, a padded one, tool calls, one cut off)."""
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)  # no tracer provider: no chat span to fill
    threads: list[str] = []
    summarise = chat_module.summarise_stream

    def watched(chunks: Any) -> Any:  # the real summary, noting the thread it runs on
        threads.append(threading.current_thread().name)
        return summarise(chunks)

    monkeypatch.setattr(chat_module, "summarise_stream", watched)
    config = {
        "model_list": [
            {
                "model_name": "gpt-fake",
                "litellm_params": {"model": "openai/fake-1", "api_base": upstream.base_url},
            }
        ]
    }
    prompts = ["Say hello [chunks 20]", "Say hello [chunks 5] [obfuscate]", "Weather? [tool]", "Go [die]"]
    recorded: dict[bool, list[Any]] = {}
    for durable in (False, True):
        threads.clear()
        served = ServedMemtap(tmp_path / f"durable-{durable}.db", config, durable=durable).start()
        try:
            for prompt in prompts:
                body = {"model": "gpt-fake", "messages": [{"role": "user", "content": prompt}], "stream": True,
                        "stream_options": {"include_usage": True}}  # fmt: skip
                _raw_stream(served.base_url, body)
            events = served.events(chats(len(prompts)))
        finally:
            served.stop()
        recorded[durable] = [
            (e.result, e.input_tokens, e.output_tokens, e.ttft_ms is not None, e.status, e.error)
            for e in events
        ]
        on_recorder = [name == "memtap-recorder" for name in threads]
        assert on_recorder == [not durable] * len(prompts)
    assert recorded[False] == recorded[True]
    texts = [r[0]["choices"][0]["message"].get("content") for r in recorded[False]]
    assert texts == ["".join(f"chunk-{i} " for i in range(20)), "".join(f"chunk-{i} " for i in range(5)), None,
                     "chunk-0 chunk-1 chunk-2 "]  # fmt: skip
    assert (
        recorded[False][2][0]["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    )
    assert [r[1:3] for r in recorded[False][:2]] == [(11, 20), (11, 5)] and all(r[3] for r in recorded[False])
    cut = recorded[False][3]
    assert cut[4] == "error" and "broke off mid-stream" in cut[5] and cut[0]["partial"] is True


def test_api_keys_name_principals_and_never_enter_the_trace(serve_memtap: Serve, upstream: Any) -> None:
    memtap = serve_memtap(api_keys={"sk-memtap-alice": "alice"})
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(api_key="sk-wrong", base_url=memtap.base_url, max_retries=0).chat.completions.create(
            model="gpt-fake", messages=HELLO
        )
    client = openai.OpenAI(api_key="sk-memtap-alice", base_url=memtap.base_url)
    client.chat.completions.create(model="gpt-fake", messages=HELLO)
    [event] = memtap.events(chats(1))
    assert (event.context.principal, event.context.namespace) == ("alice", "alice")
    assert upstream.state.headers[0]["Authorization"] == "Bearer sk-upstream-secret"
    assert_absent(memtap.db, "sk-memtap-alice", "sk-upstream-secret", "sk-wrong", writer_open=True)


def test_litellm_path_serves_the_same_answers(serve_memtap: Serve, upstream: Any) -> None:
    memtap = serve_memtap(
        {"routes": {"via-litellm": {"via": "litellm"}}},
        models=[{"model_name": "via-litellm",
                 "litellm_params": {"model": "openai/fake-1", "api_base": upstream.base_url, "api_key": "sk-up"}}],
    )  # fmt: skip
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url, max_retries=0)
    whole = client.chat.completions.create(model="via-litellm", messages=HELLO)
    assert whole.choices[0].message.content == "".join(f"chunk-{i} " for i in range(20))
    streamed = client.chat.completions.create(model="via-litellm", messages=HELLO, stream=True)
    assert (
        "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
        == whole.choices[0].message.content
    )
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(
            model="via-litellm", messages=[{"role": "user", "content": "[status 429]"}]
        )
    events = memtap.events(chats(3))
    assert [e.backend for e in events] == ["litellm"] * 3
    assert [e.status for e in events] == ["ok", "ok", "error"]
    assert events[0].output_tokens == 20


def test_memtap_serve_with_a_config_file_serves_chat_with_keys_from_it(
    start_http_server: Callable[..., Any], upstream: Any, tmp_path: Any
) -> None:
    config = tmp_path / "memtap.yaml"
    config.write_text(f"""
model_list:
  - model_name: gpt-fake
    litellm_params: {{model: openai/fake-1, api_base: "{upstream.base_url}", api_key: os.environ/FAKE_UPSTREAM_KEY}}
litellm_settings: {{drop_params: true}}
memtap:
  memory: auto
  api_keys: [{{key: os.environ/MEMTAP_TEST_KEY, principal: erin}}]
""")
    server = start_http_server(
        "--config", str(config), env={"MEMTAP_TEST_KEY": "sk-erin", "FAKE_UPSTREAM_KEY": "sk-up-env"}
    )
    base_url = f"http://127.0.0.1:{server.port}/v1"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(api_key="sk-nope", base_url=base_url, max_retries=0).models.list()
    client = openai.OpenAI(api_key="sk-erin", base_url=base_url)
    reply = client.chat.completions.create(
        model="gpt-fake", messages=[{"role": "user", "content": "hi [chunks 2]"}]
    )
    assert reply.choices[0].message.content == "chunk-0 chunk-1 "
    assert upstream.state.headers[-1]["Authorization"] == "Bearer sk-up-env"
    assert server.stop() == 0
    from memtap.trace.store import TraceStore

    store = TraceStore(server.db)
    events = store.list_events()
    store.close()
    assert [e.op for e in events] == [Op.CHAT, Op.RETRIEVE, Op.WRITE]
    assert {e.context.principal for e in events} == {"erin"}


def test_litellm_params_fill_request_defaults_and_litellm_keys_stay_home(
    serve_memtap: Serve, upstream: Any
) -> None:
    params = {
        "model": "openai/fake-1",
        "api_base": upstream.base_url,
        "temperature": 0.2,
        "rpm": 60,
        "weight": 2,
    }
    memtap = serve_memtap(models=[{"model_name": "fake-1", "litellm_params": params}])
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url)
    client.chat.completions.create(model="fake-1", messages=HELLO)
    client.chat.completions.create(model="fake-1", messages=HELLO, temperature=0.9)
    first, second = upstream.state.received
    assert first == {"model": "fake-1", "messages": HELLO, "temperature": 0.2}
    assert second["temperature"] == 0.9 and "rpm" not in second and "weight" not in second


def test_a_caller_cannot_send_the_configured_key_to_a_server_of_its_choosing(
    serve_memtap: Serve, upstream: Any
) -> None:
    # No api_base configured (litellm's default for the provider); the caller names one.
    memtap = serve_memtap(
        {"routes": {"hosted": {"via": "litellm"}}},
        models=[{"model_name": "hosted", "litellm_params": {"model": "openai/fake-1", "api_key": "sk-configured",
                                                            "timeout": 3, "max_retries": 0}}],
    )  # fmt: skip
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url, max_retries=0)
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(
            model="hosted", messages=HELLO, extra_body={"api_base": upstream.base_url}
        )
    assert upstream.state.received == []
