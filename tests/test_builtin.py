from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from rank_bm25 import BM25Okapi

from memtap.adapters.builtin import BuiltinBackend, fts_query, tokenize
from memtap.errors import ItemNotFound
from memtap.ids import new_id
from memtap.trace.models import AccessTags, Context, EffectKind, Op, Provenance, Role, TraceEvent, utc_now
from memtap.trace.store import TraceStore

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
    assert ids == [gym, cafe]
    assert [(e.kind, e.item_id, e.rank) for e in result.effects] == [
        (EffectKind.RETRIEVE, gym, 1),
        (EffectKind.RETRIEVE, cafe, 2),
    ]
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


async def _hits(backend: BuiltinBackend, ns: str, query: str, limit: int = 10) -> list[tuple[str, float]]:
    result = await backend.search(ns, query, limit=limit)
    assert [r["rank"] for r in result.value["results"]] == list(range(1, len(result.value["results"]) + 1))
    assert [(e.item_id, e.rank, e.score) for e in result.effects] == [
        (r["id"], r["rank"], r["score"]) for r in result.value["results"]
    ]
    return [(r["id"], r["score"]) for r in result.value["results"]]


def _okapi_hits(ids: list[str], docs: list[str], query: str, limit: int = 10) -> list[tuple[str, float]]:
    """BM25Okapi (its defaults) over ``docs``: the items holding a query word, best first, ties by age."""
    tokens = list(dict.fromkeys(tokenize(query)))
    corpus = [tokenize(d) for d in docs]
    okapi = BM25Okapi(corpus)
    scores = okapi.get_scores(tokens)
    # memtap reports the score above the query's floor: each word with a negative idf at its
    # lowest, idf * (k1 + 1); 0 when no idf is negative.
    floor = sum(min(0.0, okapi.idf[t]) * (okapi.k1 + 1) for t in tokens if t in okapi.idf)
    matching = [i for i, doc in enumerate(corpus) if set(tokens) & set(doc)]
    ranked = sorted(matching, key=lambda i: (-scores[i], i))[:limit]
    return [(ids[i], round(float(scores[i]) - floor, 6)) for i in ranked]


async def test_ranking_and_scores_equal_rank_bm25_okapi(backend: BuiltinBackend) -> None:
    docs = [
        "alpha beta gamma", "alpha alpha delta", "beta epsilon zeta eta", "gamma gamma gamma alpha",
        "theta iota kappa", "alpha beta", "delta epsilon", "kappa lambda mu alpha",
    ]  # fmt: skip
    ids = [(await backend.add("u", d)).value["id"] for d in docs]
    for query in ("alpha gamma", "beta epsilon", "kappa", "alpha", "mu zeta alpha", "nothing here"):
        assert await _hits(backend, "u", query) == _okapi_hits(ids, docs, query), query
    assert await _hits(backend, "u", "alpha", limit=2) == _okapi_hits(ids, docs, "alpha", limit=2)


async def test_a_single_matching_memory_scores_non_negative(backend: BuiltinBackend) -> None:
    only = (await backend.add("u", "The user drinks green tea")).value["id"]
    assert BM25Okapi([tokenize("The user drinks green tea")]).get_scores(["tea"])[0] < 0  # -0.27
    [(item, score)] = await _hits(backend, "u", "tea")
    assert item == only
    assert score > 0


async def test_scores_equal_bm25okapi_when_no_query_word_has_a_negative_idf(backend: BuiltinBackend) -> None:
    docs = ["green tea", "the gym", "a walk", "lemon cake", "blue sky"]
    ids = [(await backend.add("u", d)).value["id"] for d in docs]
    corpus = [tokenize(d) for d in docs]
    raw = BM25Okapi(corpus).get_scores(["tea"])
    assert await _hits(backend, "u", "tea") == [(ids[0], round(float(raw[0]), 6))]


async def test_scores_use_the_namespace_s_own_statistics(backend: BuiltinBackend, db_path: Path) -> None:
    docs = ["green tea every morning", "the gym on Tuesday", "tea with lemon", "a walk in the park"]
    ids = [(await backend.add("a", d)).value["id"] for d in docs]
    before = await _hits(backend, "a", "green tea park")
    assert before == _okapi_hits(ids, docs, "green tea park")
    for i in range(30):
        await backend.add("b", f"green tea and more tea, note {i}")
    assert await _hits(backend, "a", "green tea park") == before
    second = BuiltinBackend(db_path)
    try:
        assert await _hits(second, "a", "green tea park") == before
    finally:
        await second.close()


async def test_index_follows_adds_updates_and_deletes_like_a_fresh_build(
    backend: BuiltinBackend, db_path: Path
) -> None:
    texts = ["tea and cake", "coffee and cake", "green tea", "tea tea tea", "running shoes", "cake shop"]
    ids = [(await backend.add("u", t)).value["id"] for t in texts]
    assert await _ids(backend, "u", "tea") != []  # builds the namespace's index
    built = backend._indexes.built("u")
    await backend.update("u", ids[0], content="herbal tea and scones")
    await backend.delete("u", ids[1])
    await backend.update("u", ids[2], metadata={"note": "same text, new version"})
    ids.append((await backend.add("u", "cake and tea at noon")).value["id"])
    await backend.delete("u", ids[4])
    await backend.update("u", ids[3], content="tea")
    assert backend._indexes.built("u") is built  # kept in step, not rebuilt
    fresh = BuiltinBackend(db_path)
    try:
        for query in ("tea", "cake", "tea cake scones", "coffee", "shoes", "noon herbal"):
            assert await _hits(backend, "u", query) == await _hits(fresh, "u", query), query
    finally:
        await fresh.close()
    current = [(item["id"], item["content"]) for item in (await backend.list("u")).value["items"]]
    for query in ("tea", "tea cake scones"):
        expected = _okapi_hits([i for i, _ in current], [c for _, c in current], query)
        assert await _hits(backend, "u", query) == expected
    assert backend._indexes.built("u") is built


async def test_a_second_backend_writing_the_file_is_seen_by_the_next_search(
    backend: BuiltinBackend, db_path: Path
) -> None:
    kept = (await backend.add("u", "the blue notebook")).value["id"]
    gone = (await backend.add("u", "the red notebook")).value["id"]
    assert set(await _ids(backend, "u", "notebook")) == {kept, gone}
    other = BuiltinBackend(db_path)
    try:
        added = (await other.add("u", "a green notebook")).value["id"]
        await other.delete("u", gone)
        await other.update("u", kept, content="the blue diary")
        assert await _ids(backend, "u", "notebook") == [added]
        assert await _ids(backend, "u", "diary") == [kept]
        await other.add("u", "another notebook")
        mine = (await backend.add("u", "notebook notebook")).value["id"]  # writes on top of the other's
        assert (await _ids(backend, "u", "notebook"))[0] == mine
        assert await _hits(backend, "u", "notebook") == await _hits(other, "u", "notebook")
    finally:
        await other.close()


async def test_search_folds_accents_and_splits_underscores_like_fts5(
    backend: BuiltinBackend, db_path: Path
) -> None:
    item = (await backend.add("u", "Crème brûlée at Café_Rouge")).value["id"]
    for query in ("creme", "CAFÉ", "rouge", "brulee", "cafe_rouge"):
        assert await _ids(backend, "u", query) == [item], query
    assert await _ids(backend, "u", "café_rouge_xyz") == [item]
    assert await _ids(backend, "u", "caferouge") == []
    with sqlite3.connect(db_path) as conn:
        for query in ("creme", "CAFÉ", "cafe_rouge"):
            match = fts_query(query)
            found = conn.execute(
                "SELECT item_id FROM builtin_memory_fts WHERE builtin_memory_fts MATCH ?", (match,)
            ).fetchall()
            assert found == [(item,)], query
    assert fts_query("Café_Rouge café") == '"cafe" OR "rouge"'


async def test_empty_queries_and_unmatched_words_find_nothing(backend: BuiltinBackend) -> None:
    assert await _ids(backend, "u", "anything") == []
    await backend.add("u", "some words")
    assert await _ids(backend, "u", "") == []
    assert await _ids(backend, "u", "_ - !") == []
    assert await _ids(backend, "u", "other") == []
    assert await _ids(backend, "u", "words", limit=0) == []
    assert (await backend.search("u", "other")).effects == []


async def test_fts5_index_still_holds_exactly_the_current_versions(
    backend: BuiltinBackend, db_path: Path
) -> None:
    a = (await backend.add("u", "apple pie")).value["id"]
    b = (await backend.add("u", "apple tart")).value["id"]
    await backend.update("u", a, content="apple crumble")
    await backend.delete("u", b)
    with sqlite3.connect(db_path) as conn:
        rows = conn.execute(
            "SELECT f.rowid, m.content FROM builtin_memory_fts f JOIN builtin_memory m ON m.version_id = f.rowid"
            " WHERE builtin_memory_fts MATCH 'apple'"
        ).fetchall()
        current = conn.execute(
            "SELECT version_id, content FROM builtin_memory WHERE valid_to IS NULL"
        ).fetchall()
    assert rows == current == [(rows[0][0], "apple crumble")]


async def test_a_file_from_before_the_generation_table_is_migrated_and_searchable(db_path: Path) -> None:
    old = BuiltinBackend(db_path)
    item = (await old.add("u", "kept from before")).value["id"]
    await old.close()
    with sqlite3.connect(db_path) as conn:  # as memtap left the file before m002 existed
        conn.execute("DROP TABLE builtin_generation")
        conn.execute("DELETE FROM _sqlite_migrations WHERE name = 'm002_create_generation'")
    reopened = BuiltinBackend(db_path)
    try:
        assert await _ids(reopened, "u", "before") == [item]
        with sqlite3.connect(db_path) as conn:
            names = [r[0] for r in conn.execute(
                "SELECT name FROM _sqlite_migrations WHERE migration_set = 'memtap.builtin' ORDER BY id"
            )]  # fmt: skip
        assert names == ["m001_create_builtin_memory", "m002_create_generation"]
    finally:
        await reopened.close()


async def test_trace_commits_to_the_same_file_do_not_rebuild_the_index(
    backend: BuiltinBackend, db_path: Path
) -> None:
    item = (await backend.add("u", "the trace shares this file")).value["id"]
    found = await backend.search("u", "trace")
    built = backend._indexes.built("u")
    store = TraceStore(db_path)
    try:
        at = utc_now()
        store.write_events(
            [
                TraceEvent(
                    id=new_id(), started_at=at, ended_at=at, front_door="test", backend="builtin",
                    tool="memory_search", op=Op.RETRIEVE, context=Context(principal="u", namespace="u"),
                    effects=found.effects,
                )
            ]
        )  # fmt: skip
    finally:
        store.close()
    assert await _ids(backend, "u", "trace") == [item]
    assert backend._indexes.built("u") is built
