from __future__ import annotations

import random

import pytest
from rank_bm25 import BM25Okapi

from memtap.adapters.bm25 import BM25Index, NamespaceIndexes, tokenize

DOCS = [
    "The user goes to the FitLife gym every Tuesday.",
    "The user likes green tea; the user dislikes coffee.",
    "FitLife has a cafe. FitLife, FitLife!",
    "",
    "Tuesday is the day the user sees Dr Lee.",
    "the the the",
    "Green tea and green apples, the user says.",
    "Dr Lee works at the FitLife clinic on Tuesday and Thursday.",
]
QUERIES = [
    ["fitlife"],
    ["the"],  # in more than half of the documents: BM25Okapi's epsilon floor
    ["fitlife", "gym"],
    ["green", "tea", "user"],
    ["tuesday", "tuesday", "lee"],  # a repeated token counts twice, as in BM25Okapi
    ["nowhere", "cafe"],
    ["nowhere"],
]


def okapi_ranking(docs: list[list[str]], query: list[str], **params: float) -> list[tuple[int, float]]:
    """BM25Okapi's scores of the documents holding a query token, best first, ties by position."""
    scores = BM25Okapi(docs, **params).get_scores(query)
    matching = [i for i, doc in enumerate(docs) if set(query) & set(doc)]
    return sorted(((i, float(scores[i])) for i in matching), key=lambda hit: (-hit[1], hit[0]))


def build(docs: list[list[str]], **params: float) -> BM25Index[int]:
    index: BM25Index[int] = BM25Index(**params)
    for i, tokens in enumerate(docs):
        index.add(i, tokens)
    return index


def assert_same_ranking(got: list[tuple[int, float]], expected: list[tuple[int, float]]) -> None:
    assert [key for key, _ in got] == [key for key, _ in expected]
    for (_, score), (_, want) in zip(got, expected, strict=True):
        assert score == pytest.approx(want, abs=1e-9)


def zipf_corpus(rng: random.Random, n_docs: int) -> list[list[str]]:
    words = [f"w{i}" for i in range(60)]
    weights = [1 / (rank + 1) for rank in range(len(words))]
    return [rng.choices(words, weights, k=rng.randint(0, 14)) for _ in range(n_docs)]


@pytest.mark.parametrize("params", [{}, {"k1": 1.2, "b": 0.75}, {"k1": 2.0, "b": 0.3, "epsilon": 0.5}])
def test_scores_and_order_equal_bm25okapi(params: dict[str, float]) -> None:
    docs = [tokenize(d) for d in DOCS]
    index = build(docs, **params)
    for query in QUERIES:
        assert_same_ranking(index.search(query, 100), okapi_ranking(docs, query, **params))


def test_idf_and_average_idf_equal_bm25okapi_including_the_epsilon_floor() -> None:
    docs = zipf_corpus(random.Random(7), 300)
    index, okapi = build(docs), BM25Okapi(docs)
    assert index.average_idf == pytest.approx(okapi.average_idf, abs=1e-12)
    assert all(index.idf(term) >= 0 for term in okapi.idf)
    for term, idf in okapi.idf.items():
        assert index.idf(term) == pytest.approx(idf, abs=1e-12), term
    assert okapi.idf["w0"] == pytest.approx(0.25 * okapi.average_idf)  # w0 is in most documents
    assert index.idf("unseen") == 0.0
    assert index.vocabulary_size == len(okapi.idf)


def test_top_k_of_a_larger_corpus_equals_bm25okapi() -> None:
    rng = random.Random(3)
    docs = zipf_corpus(rng, 2_000)
    index = build(docs)
    for _ in range(30):
        query = rng.sample([f"w{i}" for i in range(70)], rng.randint(1, 4))
        assert_same_ranking(index.search(query, 10), okapi_ranking(docs, query)[:10])


def test_adds_and_removes_leave_the_index_equal_to_one_built_from_scratch() -> None:
    rng = random.Random(11)
    words = [f"w{i}" for i in range(40)]
    index: BM25Index[str] = BM25Index()
    live: dict[str, list[str]] = {}  # insertion order of the documents now in the index
    for step in range(600):
        if live and rng.random() < 0.45:
            key = rng.choice(list(live))
            index.remove(key)
            del live[key]
            if rng.random() < 0.5:  # an update: the same key comes back with new text
                live[key] = rng.choices(words, k=rng.randint(0, 10))
                index.add(key, live[key])
        else:
            key = f"d{step}"
            live[key] = rng.choices(words[: rng.randint(1, 40)], k=rng.randint(0, 10))
            index.add(key, live[key])
        if step % 50 == 49:
            fresh: BM25Index[str] = BM25Index()
            for key, tokens in live.items():
                fresh.add(key, tokens)
            assert len(index) == len(fresh) == len(live)
            assert index.vocabulary_size == fresh.vocabulary_size
            assert index.average_idf == pytest.approx(fresh.average_idf, abs=1e-12)
            keys = list(live)
            for query in (["w0"], ["w1", "w7"], ["w3", "w20", "w39"], words):
                assert_same_ranking(index.search(query, 15), fresh.search(query, 15))
                expected = okapi_ranking(list(live.values()), query)[:15]
                assert_same_ranking(index.search(query, 15), [(keys[i], s) for i, s in expected])


def test_ties_go_to_the_document_added_first_and_a_readded_one_goes_last() -> None:
    index: BM25Index[str] = BM25Index()
    for key in ("a", "b", "c"):
        index.add(key, ["same", "words"])
    index.add("other", ["unrelated"])
    assert [key for key, _ in index.search(["same"], 10)] == ["a", "b", "c"]
    index.remove("a")
    index.add("a", ["same", "words"])
    assert [key for key, _ in index.search(["same"], 10)] == ["b", "c", "a"]
    assert [key for key, _ in index.search(["same"], 2)] == ["b", "c"]


def test_empty_query_no_match_and_empty_index_find_nothing() -> None:
    index: BM25Index[int] = BM25Index()
    assert index.search(["anything"], 10) == []
    index.add(1, ["alpha", "beta"])
    index.add(2, [])
    assert index.search([], 10) == []
    assert index.search(["gamma"], 10) == []
    assert index.search(["alpha"], 0) == []
    assert [key for key, _ in index.search(["alpha", "gamma"], 10)] == [1]


def test_adding_a_key_twice_or_removing_an_unknown_one_is_an_error() -> None:
    index: BM25Index[int] = BM25Index()
    index.add(1, ["x"])
    with pytest.raises(ValueError, match="already in the index"):
        index.add(1, ["y"])
    with pytest.raises(KeyError):
        index.remove(2)
    index.remove(1)
    assert 1 not in index and len(index) == 0 and index.vocabulary_size == 0
    assert index.search(["x"], 10) == []


def test_tokenize_folds_case_and_accents_and_splits_on_underscores_and_punctuation() -> None:
    assert tokenize("Café_Crème, NAÏVE résumé!") == ["cafe", "creme", "naive", "resume"]
    fullwidth = "\uff26\uff35\uff2c\uff2c"
    assert tokenize(f"Straße {fullwidth} ﬁne route66 x²") == ["strasse", "full", "fine", "route66", "x2"]
    assert tokenize("snake_case-and.dots") == ["snake", "case", "and", "dots"]
    assert tokenize("İstanbul Ångström") == ["istanbul", "angstrom"]
    assert tokenize("Việt e\u0301te\u0301") == ["viet", "ete"]  # precomposed or not, stacked accents


def test_tokenize_keeps_the_marks_of_other_scripts_as_fts5_does() -> None:
    assert tokenize("Йод йод ид") == ["йод", "йод", "ид"]
    assert tokenize("デパート テキスト 日本語") == ["デパート", "テキスト", "日本語"]
    assert tokenize("한국어 ἄλφα") == ["한국어", "ἄλφα"]
    assert tokenize("  ?!  __ ") == []


def test_namespace_indexes_apply_a_store_s_own_write_and_rebuild_after_anyone_else_s() -> None:
    store = {"a": [(1, "red apple"), (2, "green apple")]}
    loads: list[str] = []

    def documents(ns: str) -> list[tuple[int, str]]:
        loads.append(ns)
        return store[ns]

    indexes: NamespaceIndexes[int] = NamespaceIndexes()
    first = indexes.get("a", 5, lambda: documents("a"))
    assert indexes.get("a", 5, lambda: documents("a")) is first and loads == ["a"]
    store["a"].append((3, "apple pie"))
    indexes.committed("a", 6, added=(3, "apple pie"))  # our own write, the only one since 5
    assert indexes.get("a", 6, lambda: documents("a")) is first and loads == ["a"]
    assert [key for key, _ in first.search(["pie"], 10)] == [3]
    indexes.committed("a", 8, removed=1)  # generation 7 was someone else's: dropped
    assert indexes.built("a") is None
    store["a"].pop(0)
    rebuilt = indexes.get("a", 8, lambda: documents("a"))
    assert rebuilt is not first and loads == ["a", "a"] and 1 not in rebuilt and len(rebuilt) == 2
    indexes.committed("b", 1, added=(9, "never searched"))  # nothing built: nothing to do
    assert indexes.built("b") is None


@pytest.mark.parametrize("docs", [DOCS, DOCS[:1], DOCS[:2], ["tea", "tea", "tea cake"]])
def test_score_floor_lifts_every_score_to_non_negative_keeping_the_order(docs: list[str]) -> None:
    corpus = [tokenize(d) for d in docs]
    index = build(corpus)
    okapi = BM25Okapi(corpus)
    for query in [*QUERIES, ["tea"], ["tea", "cake"]]:
        floor = index.score_floor(query)
        expected = sum(min(0.0, okapi.idf[t]) * (okapi.k1 + 1) for t in query if t in okapi.idf)
        assert floor == pytest.approx(expected, abs=1e-12)
        assert floor <= 0
        hits = index.search(query, 100)
        assert [key for key, _ in hits] == [key for key, _ in okapi_ranking(corpus, query)]
        assert all(score - floor >= -1e-12 for _, score in hits), (docs, query)


def test_score_floor_is_zero_when_every_query_word_is_rare() -> None:
    index = build([tokenize(d) for d in ["green tea", "the gym", "a walk", "lemon cake"]])
    assert index.score_floor(["tea", "gym", "unseen"]) == 0.0
