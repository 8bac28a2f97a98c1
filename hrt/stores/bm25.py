"""In-memory BM25 over one user's documents: the embedded store's lexical leg.

SQLite FTS5 stays the durable copy of the texts, but querying it was slow at 100k documents (it
scores every document matching any word, then joins and sorts; CHANGELOG.md).
This index is built from those texts when a user's vectors load: postings as numpy arrays, each
with its whole score precomputed, summed per phrase with one ``bincount`` into a dense array (no
sort): its cost grows with the postings of the phrase's terms, not with the documents.

Tokens follow FTS5's ``porter unicode61`` tokenizer, the one the table was created with: runs of
letters and digits (underscore separates), lower-cased, diacritics removed, then the Porter stemmer
(``snowballstemmer``'s original Porter algorithm). Scores are FTS5's ``bm25()`` (k1 = 1.2, b = 0.75,
idf = ln((N - n + 0.5) / (n + 0.5)), at least 1e-6), with N, n and the average length counted over
this user's documents only, so one user's data never shifts another's ranking (FTS5 counts over
the whole table, every user together). Ranking is score, then entity id.
"""

from __future__ import annotations

import math
import re
import threading
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from hrt.stores.growing import Room, copied, grown
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


def idf(n_docs: int, df: int) -> float:
    """FTS5's idf of a term in ``df`` of ``n_docs`` documents. Scalar, by :func:`math.log`: a
    vectorised log may round differently from a scalar one, and the index computes it both ways
    (whole at build, per term in a view with changes), which must agree to the bit."""
    return max(math.log((n_docs - df + 0.5) / (df + 0.5)), 1e-6)


def average_length(total: int, n_docs: int) -> float:
    """The average document length the length normalisation divides by (1.0 for no text)."""
    return total / n_docs if n_docs and total else 1.0


def _impact(weight: float, tf: np.ndarray, norm: np.ndarray) -> np.ndarray:
    """Postings' shares of a score: one expression for the precomputed and the on-the-fly path."""
    out: np.ndarray = weight * (tf * (K1 + 1.0) / (tf + norm))
    return out


def _norm(lengths: np.ndarray, avg: float) -> np.ndarray:
    return K1 * (1.0 - B + B * lengths / avg)


def term_counts(text: str) -> dict[str, int]:
    """A document's terms (as the index keeps them) and their frequencies."""
    counts: dict[str, int] = {}
    for word in _TOKEN.findall(text):
        term = normalise(word)
        counts[term] = counts.get(term, 0) + 1
    return counts


class BM25Index:
    """Postings of one user's documents; document ``i`` is row ``i`` of the user's vector matrix.
    Built whole when a user's rows load; a write does not rebuild it but is scored through a
    :class:`BM25View` over it until the next compaction."""

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
        self.vocab = vocab
        self.n = n_docs
        self.lengths = lengths
        self.total = int(lengths.sum())
        # one posting per (term, doc) with its frequency, grouped by term
        keys, tf = np.unique(terms * max(n_docs, 1) + docs, return_counts=True)
        post_terms = keys // max(n_docs, 1)
        self.docs = (keys % max(n_docs, 1)).astype(np.int32)
        self.tf = tf.astype(np.float64)
        self.offsets = np.zeros(len(vocab) + 1, dtype=np.int64)
        np.cumsum(np.bincount(post_terms, minlength=len(vocab)), out=self.offsets[1:])
        norm = _norm(lengths.astype(np.float64), average_length(self.total, n_docs))
        df = np.diff(self.offsets).tolist()
        weights = np.repeat(np.array([idf(n_docs, f) for f in df], dtype=np.float64), df)
        # each posting's whole share of the score: the statistics are fixed until the next rebuild
        self.impact = _impact(weights, self.tf, norm[self.docs])  # type: ignore[arg-type]

    def postings(self, term: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """A term's (documents, frequencies, precomputed shares), or None when no document has it."""
        t = self.vocab.get(term)
        if t is None:
            return None
        s, e = int(self.offsets[t]), int(self.offsets[t + 1])
        return self.docs[s:e], self.tf[s:e], self.impact[s:e]

    def scores(self, phrase: str) -> tuple[np.ndarray, np.ndarray]:
        """(document indices, scores) of every document matching any term of the phrase."""
        parts: list[tuple[np.ndarray, np.ndarray]] = []
        for term in query_terms(phrase):
            found = self.postings(term)
            if found is not None:
                parts.append((found[0], found[2]))
        return _summed(parts, self.n)

    def top(self, phrase: str, allowed: np.ndarray | None, id_rank: np.ndarray, k: int) -> Sequence[int]:
        """The first ``k`` allowed documents by score, then id (``id_rank`` orders rows by id);
        ``allowed`` None allows every document."""
        return _top(self.scores(phrase), allowed, id_rank, k)


def _summed(parts: list[tuple[np.ndarray, np.ndarray]], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Per document, its terms' shares added in term order."""
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    if len(parts) == 1:
        return parts[0][0].astype(np.int64), parts[0][1]
    # summed per document in dense arrays: cheaper than sorting the postings to group them
    d_all = np.concatenate([d for d, _ in parts])
    total = np.bincount(d_all, weights=np.concatenate([s for _, s in parts]), minlength=n)
    hit = np.zeros(n, dtype=bool)
    hit[d_all] = True
    docs = np.flatnonzero(hit)
    return docs, total[docs]


def _top(scored: tuple[np.ndarray, np.ndarray], allowed: np.ndarray | None, id_rank: np.ndarray, k: int) -> list[int]:
    docs, scores = scored
    if allowed is not None:
        keep = allowed[docs]
        docs, scores = docs[keep], scores[keep]
    return top_k(docs, scores, id_rank, k)


@dataclass(frozen=True, slots=True)
class BM25View:
    """A :class:`BM25Index` with the writes since it was built: some of its documents gone or
    rewritten (``base_live`` False), others added, as rows past the index's own or in place of a
    rewritten one (``extra``: term -> {row: frequency}). Scores use the statistics of the live
    documents, computed per query term with the index's own expressions, so a view scores every
    document to the bit as an index built afresh over the same texts would."""

    base: BM25Index
    base_live: np.ndarray | None  # per base document: neither deleted nor rewritten (None: all)
    extra: dict[str, dict[int, int]]
    lengths: np.ndarray  # per row of the view (int64)
    n: int  # rows of the view (live or not)
    live: int  # documents counted: N
    total: int  # their summed length
    rooms: dict[str, Room] = field(default_factory=dict)  # the lengths' storage (hrt.stores.growing)

    @classmethod
    def over(cls, base: BM25Index) -> BM25View:
        return cls(base, None, {}, base.lengths, base.n, base.n, base.total)

    @property
    def clean(self) -> bool:
        return self.base_live is None and not self.extra and self.n == self.base.n

    def changed(self, removed: Sequence[int], added: Sequence[tuple[int, str]], n: int) -> BM25View:
        """This view with the documents at rows ``removed`` gone and ``added`` (row, text) in, over
        ``n`` rows; a rewritten document is removed and added at its row."""
        before = len(self.lengths)
        only_added = not removed and all(row >= before for row, _ in added)  # then in place, no copy
        lengths = (grown if only_added else copied)(self.rooms, "lengths", self.lengths, np.zeros(n - before, np.int64))
        gone = set(removed)
        rows = np.fromiter(gone, dtype=np.int64, count=len(gone))
        base_live = self.base_live
        if (rows < self.base.n).any():
            base_live = np.ones(self.base.n, dtype=bool) if base_live is None else base_live.copy()
            base_live[rows[rows < self.base.n]] = False
        live = self.live - len(gone)
        total = self.total - int(lengths[rows].sum())
        lengths[rows] = 0
        extra = dict(self.extra)
        if gone:  # the removed rows' postings among the changes
            for term, postings in self.extra.items():
                if not gone.isdisjoint(postings):
                    kept = {r: f for r, f in postings.items() if r not in gone}
                    if kept:
                        extra[term] = kept
                    else:
                        del extra[term]
        for (row, _), length in zip(added, _add_postings(extra, added), strict=True):
            lengths[row] = length
            live += 1
            total += length
        return BM25View(self.base, base_live, extra, lengths, n, live, total, self.rooms)

    def scores(self, phrase: str) -> tuple[np.ndarray, np.ndarray]:
        if self.clean:
            return self.base.scores(phrase)
        norm_avg = average_length(self.total, self.live)
        parts: list[tuple[np.ndarray, np.ndarray]] = []
        for term in query_terms(phrase):
            docs, tf = self._term(term)
            if docs.size:
                norm = _norm(self.lengths[docs].astype(np.float64), norm_avg)
                parts.append((docs, _impact(idf(self.live, int(docs.size)), tf, norm)))
        return _summed(parts, self.n)

    def _term(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """A term's live postings: the index's still live ones, then the changes'."""
        docs = np.zeros(0, dtype=np.int64)
        tf = np.zeros(0)
        found = self.base.postings(term)
        if found is not None:
            docs, tf = found[0].astype(np.int64), found[1]
            if self.base_live is not None:
                keep = self.base_live[docs]
                docs, tf = docs[keep], tf[keep]
        added = self.extra.get(term)
        if added:
            docs = np.concatenate([docs, np.fromiter(added.keys(), dtype=np.int64, count=len(added))])
            tf = np.concatenate([tf, np.fromiter(added.values(), dtype=np.float64, count=len(added))])
        return docs, tf

    def top(self, phrase: str, allowed: np.ndarray | None, id_rank: np.ndarray, k: int) -> Sequence[int]:
        return _top(self.scores(phrase), allowed, id_rank, k)


def _add_postings(extra: dict[str, dict[int, int]], added: Sequence[tuple[int, str]]) -> list[int]:
    """Each added document's terms into ``extra`` (a term's postings copied: the previous view
    keeps its own), and each one's length."""
    sizes: list[int] = []
    for row, text in added:
        counts = term_counts(text)
        for term, f in counts.items():
            postings = dict(extra.get(term, {}))
            postings[row] = f
            extra[term] = postings
        sizes.append(sum(counts.values()))
    return sizes


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
