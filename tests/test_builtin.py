from __future__ import annotations

import math
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from rank_bm25 import BM25Okapi

from memtap.adapters.builtin import BuiltinBackend, fts_query, tokenize
from memtap.errors import ItemNotFound
from memtap.trace.models import AccessTags, EffectKind, Provenance, Role

pytestmark = pytest.mark.anyio


@pytest.fixture
async def backend(db_path: Path) -> AsyncIterator[BuiltinBackend]:
    b = BuiltinBackend(db_path)
    yield b
    await b.close()


async def _ids(backend: BuiltinBackend, ns: str, query: str, limit: int = 10) -> list[str]:
    result = await backend.search(ns, query, limit=limit)
    return [r["id"] for r in result.value["results"]]


async def test_add_returns_the_item_and_an_add_effect_with_tags(backend: BuiltinBackend) -> None:
    tags = AccessTags(owner="u7", visibility="participants", participants=["bob"], sensitivity="health")
    prov = Provenance(session="s0", turn="s0-t0", role=Role.USER)
    result = await backend.add(
        "u7", "I go to FitLife on Tuesdays.", metadata={"k": 1}, tags=tags, provenance=prov
    )
    assert result.value["content"] == "I go to FitLife on Tuesdays."
    assert result.value["version"] == 1
    assert result.value["provenance"] == {"session": "s0", "turn": "s0-t0", "role": "user"}
    [effect] = result.effects
    assert (effect.kind, effect.item_id, effect.content_after, effect.tags_after) == (
        EffectKind.ADD, result.value["id"], "I go to FitLife on Tuesdays.", tags,
    )  # fmt: skip


async def test_search_ranks_by_bm25_and_reports_retrieve_effects(backend: BuiltinBackend) -> None:
    gym = (await backend.add("u", "The user goes to the FitLife gym every Tuesday.")).value["id"]
    await backend.add("u", "The user likes green tea.")
    cafe = (await backend.add("u", "FitLife has a cafe; FitLife FitLife.")).value["id"]
    result = await backend.search("u", "FitLife gym")
    ids = [r["id"] for r in result.value["results"]]
    assert set(ids) == {gym, cafe}
    assert [(e.kind, e.rank) for e in result.effects] == [(EffectKind.RETRIEVE, 1), (EffectKind.RETRIEVE, 2)]
    scores = [e.score for e in result.effects]
    assert scores == sorted(scores, reverse=True) and all(s is not None and s > 0 for s in scores)


async def test_namespaces_are_isolated(backend: BuiltinBackend) -> None:
    mine = (await backend.add("alice", "secret plan")).value["id"]
    await backend.add("bob", "secret recipe")
    assert await _ids(backend, "alice", "secret") == [mine]
    with pytest.raises(ItemNotFound, match="namespace 'bob'"):
        await backend.get("bob", mine)


async def test_update_closes_the_old_version_and_the_index_follows(backend: BuiltinBackend) -> None:
    item = (await backend.add("u", "The user goes to FitLife.")).value["id"]
    result = await backend.update("u", item, content="The user switched to CrossFit Central.")
    [effect] = result.effects
    assert (effect.kind, effect.content_before, effect.content_after) == (
        EffectKind.UPDATE, "The user goes to FitLife.", "The user switched to CrossFit Central.",
    )  # fmt: skip
    assert await _ids(backend, "u", "FitLife") == []
    assert await _ids(backend, "u", "CrossFit") == [item]
    history = (await backend.history("u", item)).value["versions"]
    assert [(v["version"], v["content"], v.get("closed_by")) for v in history] == [
        (1, "The user goes to FitLife.", "update"),
        (2, "The user switched to CrossFit Central.", None),
    ]
    assert history[0]["valid_to"] == history[1]["valid_from"]
    got = (await backend.get("u", item)).value
    assert got["version"] == 2 and got["created_at"] == history[0]["valid_from"]


async def test_update_of_metadata_only_keeps_content_and_tags(backend: BuiltinBackend) -> None:
    tags = AccessTags(owner="u", visibility="public")
    item = (await backend.add("u", "fact", tags=tags)).value["id"]
    result = await backend.update("u", item, metadata={"checked": True})
    assert result.value["content"] == "fact" and result.value["metadata"] == {"checked": True}
    assert result.effects[0].tags_after == tags
    assert await _ids(backend, "u", "fact") == [item]


async def test_delete_hides_the_item_but_keeps_its_history(backend: BuiltinBackend) -> None:
    item = (await backend.add("u", "favourite colour green")).value["id"]
    result = await backend.delete("u", item)
    assert result.effects[0].kind == EffectKind.DELETE
    assert result.effects[0].content_before == "favourite colour green"
    assert await _ids(backend, "u", "green") == []
    assert (await backend.list("u")).value["total"] == 0
    with pytest.raises(ItemNotFound, match="was deleted at"):
        await backend.get("u", item)
    with pytest.raises(ItemNotFound):
        await backend.delete("u", item)
    [version] = (await backend.history("u", item)).value["versions"]
    assert version["closed_by"] == "delete" and version["valid_to"] is not None


async def test_unknown_item_ids_raise_item_not_found(backend: BuiltinBackend) -> None:
    for call in (backend.get, backend.history, backend.delete):
        with pytest.raises(ItemNotFound, match="no memory item 'nope'"):
            await call("u", "nope")
    with pytest.raises(ItemNotFound):
        await backend.update("u", "nope", content="x")


async def test_list_pages_current_items_oldest_first(backend: BuiltinBackend) -> None:
    ids = [(await backend.add("u", f"fact {i}")).value["id"] for i in range(5)]
    await backend.delete("u", ids[1])
    page = (await backend.list("u", limit=2, offset=1)).value
    assert page["total"] == 4
    assert [i["id"] for i in page["items"]] == [ids[2], ids[3]]


async def test_queries_with_fts_syntax_characters_are_plain_words(backend: BuiltinBackend) -> None:
    item = (await backend.add("u", 'He said "NEAR" AND OR NOT the end*')).value["id"]
    assert fts_query('"near" OR (end*) -') == '"near" OR "or" OR "end"'
    assert await _ids(backend, "u", 'NEAR( "unbalanced') == [item]
    assert await _ids(backend, "u", "  ?!  ") == []


async def test_ranking_agrees_with_rank_bm25_on_the_same_tokens(backend: BuiltinBackend) -> None:
    docs = [
        "alpha beta gamma", "alpha alpha delta", "beta epsilon zeta eta", "gamma gamma gamma alpha",
        "theta iota kappa", "alpha beta", "delta epsilon", "kappa lambda mu alpha",
    ]  # fmt: skip
    ids = [(await backend.add("u", d)).value["id"] for d in docs]
    okapi = BM25Okapi([tokenize(d) for d in docs], k1=1.2, b=0.75)
    for query in ("alpha gamma", "beta epsilon", "kappa"):
        scores = okapi.get_scores(tokenize(query))
        expected = [ids[i] for i in sorted(range(len(docs)), key=lambda i: -scores[i]) if scores[i] > 0]
        got = await _ids(backend, "u", query)
        assert set(got) == set(expected)
        assert got[0] == expected[0], query
        assert not math.isnan(scores.max())
