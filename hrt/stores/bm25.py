"""In-memory BM25 over one user's documents: the embedded store's lexical leg.

SQLite FTS5 stays the durable copy of the texts, but querying it cost 27 to 70 ms per phrase at
100k documents (it scores every document matching any word, then joins and sorts; docs/bench.md).
This index is built from those texts when a user's vectors load: postings as numpy arrays, each
with its whole score precomputed, summed per phrase with one ``bincount`` into a dense array (no
sort): well under a millisecond per phrase at 100k documents, 2.6 ms at 1M (~50k postings a term).

Tokens follow FTS5's ``porter unicode61`` tokenizer, the one the table was created with: runs of
letters and digits (underscore separates), lower-cased, diacritics removed, then the Porter stemmer
(``snowballstemmer``'s original Porter algorithm). Scores are FTS5's ``bm25()`` (k1 = 1.2, b = 0.75,
idf = ln((N - n + 0.5) / (n + 0.5)), at least 1e-6), with N, n and the average length counted over
this user's documents only, so one user's data never shifts another's ranking (FTS5 counts over
the whole table, every user together). Ranking is score, then entity id.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np

from hrt.text import content_words

K1 = 1.2
B = 0.75
_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)
_stem_lock = threading.Lock()


@lru_cache(maxsize=1)
def _stemmer() -> object:
    import snowballstemmer

    return snowballstemmer.stemmer("porter")


@lru_cache(maxsize=200_000)
def normalise(word: str) -> str:
    """One token as FTS5 indexes it: lower case, no diacritics, Porter-stemmed."""
    folded = word.lower()
    if not folded.isascii():
        folded = "".join(c for c in unicodedata.normalize("NFKD", folded) if not unicodedata.combining(c))
    with _stem_lock:  # the snowball stemmer object keeps state between calls
        return str(_stemmer().stemWord(folded))  # type: ignore[attr-defined]


def tokens(text: str) -> list[str]:
    return [normalise(w) for w in _TOKEN.findall(text)]


def query_terms(phrase: str) -> list[str]:
    """The terms a phrase searches for: its content words (see :func:`hrt.text.content_words`),
    each once, tokenized like the documents."""
    out: list[str] = []
    for word in sorted(set(content_words(phrase))):
        out.extend(tokens(word))
    return out


class BM25Index:
    """Postings of one user's documents; document ``i`` is row ``i`` of the user's vector matrix."""

    def __init__(self, texts: Iterable[str], n_docs: int) -> None:
        # Per document only a findall; per token only C-level maps: 32M tokens at 1M documents
        # would otherwise cost tens of seconds of Python loop at load.
        raw: list[str] = []
        lengths = np.zeros(n_docs, dtype=np.int64)
        for d, text in enumerate(texts):
            words = _TOKEN.findall(text)
            lengths[d] = len(words)
            raw.extend(words)
        vocab: dict[str, int] = {}
        term_of: dict[str, int] = {}  # raw word -> term id (several words share a stem)
        for word in sorted(set(raw)):
            term_of[word] = vocab.setdefault(normalise(word), len(vocab))
        terms = np.fromiter(map(term_of.__getitem__, raw), dtype=np.int64, count=len(raw))
        docs = np.repeat(np.arange(n_docs, dtype=np.int64), lengths)
        del raw
        lengths = lengths.astype(np.float64)
        self.vocab = vocab
        self.n = n_docs
        # one posting per (term, doc) with its frequency, grouped by term
        pair = np.unique(terms * max(n_docs, 1) + docs, return_counts=True)
        keys, tf = pair
        post_terms = keys // max(n_docs, 1)
        self.docs = (keys % max(n_docs, 1)).astype(np.int32)
        self.offsets = np.zeros(len(vocab) + 1, dtype=np.int64)
        np.cumsum(np.bincount(post_terms, minlength=len(vocab)), out=self.offsets[1:])
        avg = float(lengths.mean()) if n_docs and lengths.sum() else 1.0
        norm = K1 * (1.0 - B + B * lengths / avg)  # per-document length normalisation
        tf = tf.astype(np.float64)
        df = np.diff(self.offsets)
        idf = np.maximum(np.log((n_docs - df + 0.5) / (df + 0.5)), 1e-6)
        # each posting's whole share of the score: the statistics are fixed until the next rebuild
        self.impact = np.repeat(idf, df) * (tf * (K1 + 1.0) / (tf + norm[self.docs]))

    def scores(self, phrase: str) -> tuple[np.ndarray, np.ndarray]:
        """(document indices, scores) of every document matching any term of the phrase."""
        parts_d: list[np.ndarray] = []
        parts_s: list[np.ndarray] = []
        for term in query_terms(phrase):
            t = self.vocab.get(term)
            if t is None:
                continue
            s, e = int(self.offsets[t]), int(self.offsets[t + 1])
            parts_d.append(self.docs[s:e])
            parts_s.append(self.impact[s:e])
        if not parts_d:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        if len(parts_d) == 1:
            return parts_d[0].astype(np.int64), parts_s[0]
        # summed per document in dense arrays: cheaper than sorting the postings to group them
        d_all = np.concatenate(parts_d)
        total = np.bincount(d_all, weights=np.concatenate(parts_s), minlength=self.n)
        hit = np.zeros(self.n, dtype=bool)
        hit[d_all] = True
        docs = np.flatnonzero(hit)
        return docs, total[docs]

    def top(self, phrase: str, allowed: np.ndarray | None, id_rank: np.ndarray, k: int) -> Sequence[int]:
        """The first ``k`` allowed documents by score, then id (``id_rank`` orders rows by id);
        ``allowed`` None allows every document."""
        docs, scores = self.scores(phrase)
        if allowed is not None:
            keep = allowed[docs]
            docs, scores = docs[keep], scores[keep]
        return top_k(docs, scores, id_rank, k)


def top_k(rows: np.ndarray, scores: np.ndarray, id_rank: np.ndarray, k: int) -> list[int]:
    """The first ``k`` of ``rows`` by their ``scores`` (aligned with ``rows``, descending), then id
    (``id_rank`` orders rows by id). Every row tied with the k-th score competes, so ties never
    depend on row order; the lexical and the vector leg both rank with it."""
    if rows.size > k:
        # partitioning the scores themselves (not their negation) spares two passes over up to
        # ~500k of them at 1M
        kth = np.partition(scores, rows.size - k)[rows.size - k]
        close = scores >= kth
        rows, scores = rows[close], scores[close]
    order = np.lexsort((id_rank[rows], -scores))[:k]
    return [int(i) for i in rows[order]]
