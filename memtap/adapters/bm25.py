"""In-memory BM25 indexes, one per namespace, kept current one document at a time.

Scores are rank_bm25's ``BM25Okapi`` exactly (the reference the tests and
``benchmarks/search_scaling.py`` compare against)::

    score(D, Q) = sum over q in Q of
                  idf(q) * tf(q, D) * (k1 + 1) / (tf(q, D) + k1 * (1 - b + b * |D| / avgdl))

    idf(q) = log(N - n(q) + 0.5) - log(n(q) + 0.5)    when that is >= 0,
             epsilon * average_idf                     when it is negative

where N is the number of documents, n(q) the number holding q, tf(q, D) how often q occurs
in D, |D| the number of tokens of D (a document with none still counts in N), avgdl the
mean |D|, and ``average_idf`` the mean of the *unfloored* idf over every term in the index
(rank_bm25's ``average_idf``). A term in more than half of the documents would have a
negative idf, so it gets a small positive weight instead while the vocabulary is mostly
rare words; on a tiny index (one or two documents) ``average_idf`` itself is negative, and
so can a score be, as with BM25Okapi. Defaults are BM25Okapi's: k1 = 1.5, b = 0.75,
epsilon = 0.25. A query token given twice counts twice; a token the index has not seen
adds nothing.

Readable scores. BM25Okapi's score is negative when a query word's idf is (a tiny namespace),
which tells a reader nothing. :meth:`BM25Index.score_floor` is the lowest score any document
can get for a query: each query word whose idf is negative contributes at least
``idf * (k1 + 1)`` (the term-frequency part is below ``k1 + 1``), the others at least 0. The
builtin backend reports ``score - score_floor(query)``: one constant per query, so the ranking
is BM25Okapi's exactly, every score is >= 0 and higher is better, and whenever no query word
has a negative idf (any namespace where the word is in at most half of the memories) the
floor is 0 and the score *is* BM25Okapi's.

The results of a search are the documents holding at least one query token (an any-of
match, as an ``OR`` query), best score first, ties in the order the documents were
added, at most ``k`` of them.

Structures, for D documents, a document of L distinct terms and a query whose terms are
in P postings together:

- per term, its postings: two ``array.array`` columns (document slot, term count), appended
  to on add and shrunk on remove by moving the last entry into the freed place; each
  document keeps its terms' postings and its position in each, so an add is O(L) and a
  remove O(L) plus, for each entry moved, a C-level scan of the moved document's terms;
- per document slot: length and insertion number in numpy arrays (grown by doubling); a
  removed document's slot is reused by a later add;
- running totals: N, the total length, and how many terms have each document frequency.
  ``average_idf`` depends on N, so it is recomputed after a change, lazily (only when a
  query term's idf is negative) and vectorised over the distinct document frequencies
  (far fewer than the terms of a Zipf vocabulary);
- a search copies each query term's postings into numpy (a memcpy), scores them in one
  vectorised expression, sums per document and selects the top k with ``argpartition``:
  O(P) plus O(D) for the match mask when the query has more than one term.
"""

from __future__ import annotations

import math
import re
import unicodedata
from array import array
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar, cast

import numpy as np
import numpy.typing as npt

__all__ = ["BM25Index", "NamespaceIndexes", "tokenize"]

K = TypeVar("K", bound=Hashable)
_Slots = npt.NDArray[np.signedinteger[Any]]

_TOKEN = re.compile(r"[^\W_]+")
_LATIN_MARKS = re.compile(r"(?<=[a-z])[\u0300-\u036f]+")  # accents, once NFKD has split them off


def tokenize(text: str) -> list[str]:
    """The words of ``text`` as the index sees them, for documents and queries alike.

    Case-folded runs of letters and digits, ``_`` and punctuation separating words (as in
    FTS5's ``unicode61`` tokenizer). Compatibility forms are folded (NFKD: ``ﬁ`` is ``fi``,
    full-width letters are ASCII) and so are the accents of Latin letters, as ``unicode61``
    does: ``Café_Crème`` gives ``["cafe", "creme"]``. Other scripts keep their marks
    (recomposed with NFC), so ``й`` stays distinct from ``и`` and ``デ`` from ``テ``.
    """
    text = text.casefold()
    if not text.isascii():
        text = unicodedata.normalize("NFC", _LATIN_MARKS.sub("", unicodedata.normalize("NFKD", text)))
    return _TOKEN.findall(text)


class _Postings:
    """The documents holding one term: parallel columns of slot and term count."""

    __slots__ = ("counts", "slots", "term")

    def __init__(self, term: str) -> None:
        self.term = term
        self.slots = array("i")
        self.counts = array("i")

    def pop(self, position: int) -> int | None:
        """Remove the entry at ``position`` by moving the last one there; the moved slot, if any."""
        last_slot, last_count = self.slots.pop(), self.counts.pop()
        if position == len(self.slots):
            return None
        self.slots[position] = last_slot
        self.counts[position] = last_count
        return last_slot


_NO_POSITIONS: array[int] = array("i")


class BM25Index(Generic[K]):
    """BM25Okapi over a changing set of documents, each named by a hashable key."""

    def __init__(self, *, k1: float = 1.5, b: float = 0.75, epsilon: float = 0.25) -> None:
        self.k1 = k1
        self.b = b
        self.epsilon = epsilon
        self._postings: dict[str, _Postings] = {}
        self._slot_of: dict[K, int] = {}
        self._keys: list[K | None] = []
        # Per slot: the postings of the document's terms, and its position in each.
        self._terms_of: list[tuple[_Postings, ...]] = []
        self._positions_of: list[array[int]] = []
        self._free: list[int] = []
        self._length = np.zeros(16, dtype=np.float64)
        self._order = np.zeros(16, dtype=np.int64)
        self._added = 0
        self._total_length = 0
        self._df_terms: dict[int, int] = {}  # document frequency -> how many terms have it
        self._average_idf: float | None = None

    def __len__(self) -> int:
        return len(self._slot_of)

    def __contains__(self, key: object) -> bool:
        return key in self._slot_of

    @property
    def vocabulary_size(self) -> int:
        return len(self._postings)

    def add(self, key: K, tokens: Iterable[str]) -> None:
        """Index a document; ``key`` must not be in the index already."""
        if key in self._slot_of:
            raise ValueError(f"document {key!r} is already in the index")
        counts: dict[str, int] = {}
        length = 0
        for token in tokens:
            counts[token] = counts.get(token, 0) + 1
            length += 1
        slot = self._take_slot()
        terms: list[_Postings] = []
        positions: list[int] = []
        vocabulary, df_terms = self._postings, self._df_terms
        for term, count in counts.items():  # the hot loop of a build: kept inline
            postings = vocabulary.get(term)
            if postings is None:
                postings = vocabulary[term] = _Postings(term)
            slots = postings.slots
            df = len(slots)
            terms.append(postings)
            positions.append(df)
            slots.append(slot)
            postings.counts.append(count)
            if df:  # one term fewer has document frequency df, one more has df + 1
                left = df_terms[df] - 1
                if left:
                    df_terms[df] = left
                else:
                    del df_terms[df]
            df_terms[df + 1] = df_terms.get(df + 1, 0) + 1
        self._slot_of[key] = slot
        self._keys[slot] = key
        self._terms_of[slot] = tuple(terms)
        self._positions_of[slot] = array("i", positions)
        self._length[slot] = length
        self._order[slot] = self._added
        self._added += 1
        self._total_length += length
        self._average_idf = None

    def remove(self, key: K) -> None:
        """Forget a document; ``KeyError`` if it is not in the index."""
        slot = self._slot_of.pop(key)
        for postings, position in zip(self._terms_of[slot], self._positions_of[slot], strict=True):
            moved = postings.pop(position)
            if moved is not None:  # ``moved``'s entry now sits at ``position``
                self._positions_of[moved][self._terms_of[moved].index(postings)] = position
            df = len(postings.slots)
            self._df_down(df + 1)
            if df:
                self._df_terms[df] = self._df_terms.get(df, 0) + 1
            else:
                del self._postings[postings.term]
        self._total_length -= int(self._length[slot])
        self._keys[slot] = None
        self._terms_of[slot] = ()
        self._positions_of[slot] = _NO_POSITIONS
        self._length[slot] = 0
        self._free.append(slot)
        self._average_idf = None

    def idf(self, term: str) -> float:
        """The term's weight as BM25Okapi computes it (0 for a term no document holds)."""
        postings = self._postings.get(term)
        return 0.0 if postings is None else self._idf(len(postings.slots))

    @property
    def average_idf(self) -> float:
        """The mean unfloored idf over the vocabulary, cached until the index changes."""
        if self._average_idf is None:
            if not self._df_terms:
                return 0.0
            n = len(self._slot_of)
            dfs = np.fromiter(self._df_terms, dtype=np.float64, count=len(self._df_terms))
            terms = np.fromiter(self._df_terms.values(), dtype=np.float64, count=len(self._df_terms))
            idfs = np.log(n - dfs + 0.5) - np.log(dfs + 0.5)
            self._average_idf = float(np.dot(terms, idfs) / len(self._postings))
        return self._average_idf

    def score_floor(self, tokens: Iterable[str]) -> float:
        """The lowest score any document can get for ``tokens`` (<= 0; 0 unless an idf is negative)."""
        floor = 0.0
        for token in tokens:
            postings = self._postings.get(token)
            if postings is not None:
                floor += min(0.0, self._idf(len(postings.slots))) * (self.k1 + 1)
        return floor

    def search(self, tokens: Iterable[str], k: int) -> list[tuple[K, float]]:
        """The ``k`` best documents holding any of ``tokens``, as ``(key, score)``, best first."""
        if k <= 0 or not self._slot_of:
            return []
        matched = [postings for token in tokens if (postings := self._postings.get(token)) is not None]
        if not matched:
            return []
        slots: _Slots
        if len(matched) == 1:
            slots, scores = self._term_scores(matched[0])
        else:
            total = np.zeros(len(self._length), dtype=np.float64)
            hit = np.zeros(len(self._length), dtype=np.bool_)
            for postings in matched:
                term_slots, term_scores = self._term_scores(postings)
                total[term_slots] += term_scores  # a term lists each document once
                hit[term_slots] = True
            slots = np.flatnonzero(hit)
            scores = total[slots]
        if len(slots) > k:  # keep the top k and everything tied with the k-th
            cut = scores[np.argpartition(scores, len(scores) - k)[len(scores) - k :]].min()
            keep = np.flatnonzero(scores >= cut)
            slots, scores = slots[keep], scores[keep]
        best = np.lexsort((self._order[slots], -scores))[:k]
        return [
            (self._key(slot), score)
            for slot, score in zip(slots[best].tolist(), scores[best].tolist(), strict=True)
        ]

    # -- internals -----------------------------------------------------------------------

    def _idf(self, df: int) -> float:
        n = len(self._slot_of)
        idf = math.log(n - df + 0.5) - math.log(df + 0.5)
        return self.epsilon * self.average_idf if idf < 0 else idf

    def _term_scores(self, postings: _Postings) -> tuple[_Slots, npt.NDArray[np.float64]]:
        """The slots holding the term and the term's part of their scores (BM25Okapi's expression)."""
        k1, b = self.k1, self.b
        avgdl = self._total_length / len(self._slot_of)
        slots = np.array(postings.slots, dtype=np.intc)
        tf = np.array(postings.counts, dtype=np.intc)
        length = self._length[slots]
        weight = self._idf(len(postings.slots))
        return slots, weight * (tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / avgdl)))

    def _take_slot(self) -> int:
        if self._free:
            return self._free.pop()
        slot = len(self._keys)
        if slot == len(self._length):
            self._length = np.concatenate([self._length, np.zeros_like(self._length)])
            self._order = np.concatenate([self._order, np.zeros_like(self._order)])
        self._keys.append(None)
        self._terms_of.append(())
        self._positions_of.append(_NO_POSITIONS)
        return slot

    def _key(self, slot: int) -> K:
        return cast(K, self._keys[slot])  # a slot that scores is a live document's

    def _df_down(self, df: int) -> None:
        """One term fewer has document frequency ``df``."""
        left = self._df_terms[df] - 1
        if left:
            self._df_terms[df] = left
        else:
            del self._df_terms[df]


class NamespaceIndexes(Generic[K]):
    """Built indexes by namespace, each stamped with the generation of the data it reflects.

    A store counts the writes to each namespace (its generation). :meth:`get` rebuilds an
    index whose stamp differs from the store's count, so writes by anyone else are never
    missed; :meth:`committed` applies the store's own write to a built index when that
    write is the only one since the stamp, and drops the index otherwise.
    """

    def __init__(self) -> None:
        self._built: dict[str, tuple[int, BM25Index[K]]] = {}

    def get(
        self, namespace: str, generation: int, documents: Callable[[], Iterable[tuple[K, str]]]
    ) -> BM25Index[K]:
        """The namespace's index at ``generation``, built from ``documents()`` unless it is."""
        built = self._built.get(namespace)
        if built is not None and built[0] == generation:
            return built[1]
        index: BM25Index[K] = BM25Index()
        for key, text in documents():
            index.add(key, tokenize(text))
        self._built[namespace] = (generation, index)
        return index

    def built(self, namespace: str) -> BM25Index[K] | None:
        """The namespace's index if one is built, whatever its generation."""
        built = self._built.get(namespace)
        return None if built is None else built[1]

    def committed(
        self,
        namespace: str,
        generation: int,
        *,
        removed: K | None = None,
        added: tuple[K, str] | None = None,
    ) -> None:
        """Apply the write that took ``namespace`` to ``generation`` to its built index, if any."""
        built = self._built.pop(namespace, None)
        if built is None or built[0] != generation - 1:
            return  # another writer came between: the next get() rebuilds
        index = built[1]
        if removed is not None:
            index.remove(removed)
        if added is not None:
            index.add(added[0], tokenize(added[1]))
        self._built[namespace] = (generation, index)

    def clear(self) -> None:
        self._built.clear()
