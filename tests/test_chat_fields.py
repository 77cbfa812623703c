"""Only OpenAI's request fields reach an upstream: on the pass-through path and through litellm,
unknown fields are dropped (named on the event), connection and credential fields are refused,
and upstream failures answer clean OpenAI errors. The official openai client drives the real
app; the fake hosted LLM records what it received."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest
from secrets_check import database_files
from served import ServedMemtap, chats

from memtap.probes.targets._server import free_port

Serve = Callable[..., ServedMemtap]
HELLO = [{"role": "user", "content": "Say hello [chunks 2]"}]
UPSTREAM_KEY = "sk-upstream-config-7f3a9c"


def _litellm_route(upstream: Any, alias: str = "via-litellm", api_base: str | None = None) -> dict[str, Any]:
    return {
        "model_name": alias,
        "litellm_params": {
            "model": "openai/fake-1",
            "api_base": api_base or upstream.base_url,
            "api_key": UPSTREAM_KEY,
            "max_retries": 0,
        },
    }


def _stored_bytes(memtap: ServedMemtap) -> bytes:
    """The database file and its -wal and -shm, as they are on disk."""
    assert memtap.runtime is not None
    memtap.runtime.recorder.flush()
    return b"".join(database_files(memtap.db, writer_open=True).values())  # fails without its WAL


def test_unknown_fields_are_dropped_and_named_on_the_event_on_the_pass_through_path(
    serve_memtap: Serve, upstream: Any
) -> None:
    memtap = serve_memtap()
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url, max_retries=0)
    reply = client.chat.completions.create(
        model="gpt-fake",
        messages=HELLO,
        temperature=0.5,
        extra_body={"frobnicate": "value-never-recorded-91", "store": True},
    )
    assert reply.choices[0].message.content == "chunk-0 chunk-1 "
    [received] = upstream.state.received
    assert received == {"model": "fake-1", "messages": HELLO, "temperature": 0.5}
    [event] = memtap.events(chats(1))
    assert event.arguments["memtap.dropped"] == ["frobnicate", "store"]
    assert "frobnicate" not in event.arguments
    assert b"value-never-recorded-91" not in _stored_bytes(memtap)


@pytest.mark.parametrize("via", ["passthrough", "litellm"])
def test_connection_and_credential_fields_are_refused_and_never_reach_the_upstream(
    serve_memtap: Serve, upstream: Any, via: str
) -> None:
    memtap = serve_memtap(
        {"routes": {"m": {"via": via}}},
        models=[_litellm_route(upstream, "m")],
    )
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url, max_retries=0)
    smuggled = [
        {"model_list": [{"model_name": "m", "litellm_params": {"model": "openai/x"}}]},
        {"model_list": 5},
        {"api_base": "http://127.0.0.1:9/v1"},
        {"api_key": "sk-callers-own"},
        {"base_url": "http://127.0.0.1:9/v1"},
        {"litellm_params": {"api_base": "http://127.0.0.1:9/v1"}},
        {"extra_headers": {"Authorization": "Bearer stolen"}},
        {"metadata": {"x": 1}},
    ]
    for body in smuggled:
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="m", messages=HELLO, extra_body=body)
        assert refused.value.status_code == 400
        [name] = body
        assert f"'{name}'" in refused.value.message and "may not be set by a request" in refused.value.message
        assert "Traceback" not in refused.value.response.text
    assert upstream.state.received == []
    events = memtap.events(chats(len(smuggled)))
    assert [e.status for e in events] == ["error"] * len(smuggled)
    assert [e.arguments["memtap.dropped"] for e in events] == [list(b) for b in smuggled]
    stored = _stored_bytes(memtap)
    assert UPSTREAM_KEY.encode() not in stored and b"sk-callers-own" not in stored


def test_a_litellm_route_forwards_only_allowed_fields_and_never_records_the_configured_key(
    serve_memtap: Serve, upstream: Any
) -> None:
    memtap = serve_memtap({"routes": {"via-litellm": {"via": "litellm"}}}, models=[_litellm_route(upstream)])
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url, max_retries=0)
    reply = client.chat.completions.create(
        model="via-litellm", messages=HELLO, seed=7, extra_body={"unknown_thing": 1}
    )
    assert reply.choices[0].message.content == "chunk-0 chunk-1 "
    [received] = upstream.state.received
    assert "unknown_thing" not in received and received["seed"] == 7
    assert upstream.state.headers[0]["Authorization"] == f"Bearer {UPSTREAM_KEY}"
    [event] = memtap.events(chats(1))
    assert event.arguments == {"model": "via-litellm", "messages": HELLO, "seed": 7,
                               "memtap.dropped": ["unknown_thing"]}  # fmt: skip
    assert UPSTREAM_KEY.encode() not in _stored_bytes(memtap)


def test_a_route_may_forward_named_vendor_fields(serve_memtap: Serve, upstream: Any) -> None:
    memtap = serve_memtap({"routes": {"gpt-fake": {"extra_fields": ["top_k"]}}})
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url, max_retries=0)
    client.chat.completions.create(model="gpt-fake", messages=HELLO, extra_body={"top_k": 5, "min_p": 0.1})
    [received] = upstream.state.received
    assert received["top_k"] == 5 and "min_p" not in received


def test_a_route_cannot_be_configured_to_forward_credentials(serve_memtap: Serve) -> None:
    from memtap.config import ConfigFile

    with pytest.raises(ValueError, match="api_base, model_list may choose where a call goes"):
        ConfigFile.model_validate({
            "model_list": [{"model_name": "m", "litellm_params": {"model": "openai/x"}}],
            "memtap": {"routes": {"m": {"extra_fields": ["top_k", "api_base", "model_list"]}}},
        })  # fmt: skip


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("temperature", "hot", "'temperature' must be a number, not str."),
        ("tools", 5, "'tools' must be an array, not int."),
        ("n", 1.5, "'n' must be an integer, not float."),
        ("stream_options", [], "'stream_options' must be an object, not list."),
    ],
)
@pytest.mark.parametrize("via", ["passthrough", "litellm"])
def test_a_forwarded_field_of_the_wrong_type_is_a_400_naming_it(
    serve_memtap: Serve, upstream: Any, via: str, field: str, value: Any, message: str
) -> None:
    memtap = serve_memtap({"routes": {"m": {"via": via}}}, models=[_litellm_route(upstream, "m")])
    response = httpx.post(
        memtap.base_url + "/chat/completions",
        json={"model": "m", "messages": HELLO, field: value},
        timeout=10,
    )
    assert response.status_code == 400
    assert response.json()["error"] == {
        "message": message, "type": "invalid_request_error", "param": field, "code": None,
    }  # fmt: skip
    assert upstream.state.received == []


def test_litellm_upstream_failures_answer_clean_502_and_504(serve_memtap: Serve, upstream: Any) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    slow = {**_litellm_route(upstream, "slow"), "litellm_params": {
        **_litellm_route(upstream, "slow")["litellm_params"], "timeout": 0.3}}  # fmt: skip
    memtap = serve_memtap(
        {
            "routes": {
                "dead": {"via": "litellm"},
                "via-litellm": {"via": "litellm"},
                "slow": {"via": "litellm"},
            }
        },
        models=[_litellm_route(upstream, "dead", dead), _litellm_route(upstream), slow],
    )
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url, max_retries=0)
    answers = []
    for model, text in (("dead", "hi"), ("via-litellm", "[garbage]"), ("slow", "[stall]")):
        with pytest.raises(openai.APIStatusError) as failed:
            client.chat.completions.create(model=model, messages=[{"role": "user", "content": text}])
        answers.append((failed.value.status_code, failed.value.response.json()["error"]["message"]))
    assert [status for status, _ in answers] == [502, 502, 504]
    for _, message in answers:
        assert "Traceback" not in message and "\n" not in message and len(message) < 700
        assert UPSTREAM_KEY not in message
    # The upstream's own 4xx still reaches the caller as it was.
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(
            model="via-litellm", messages=[{"role": "user", "content": "[status 429]"}]
        )


def test_embeddings_forward_only_openai_fields(serve_memtap: Serve, upstream: Any) -> None:
    memtap = serve_memtap(models=[
        {"model_name": "emb", "litellm_params": {"model": "openai/emb-1", "api_base": upstream.base_url}},
    ])  # fmt: skip
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url, max_retries=0)
    client.embeddings.create(model="emb", input=["a b"], extra_body={"novel": 1})
    assert upstream.state.received == [{"model": "emb-1", "input": ["a b"], "encoding_format": "base64"}]
    with pytest.raises(openai.BadRequestError, match="'api_base' may not be set"):
        client.embeddings.create(model="emb", input="a", extra_body={"api_base": "http://127.0.0.1:9"})
    assert len(upstream.state.received) == 1
