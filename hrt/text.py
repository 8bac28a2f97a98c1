"""Word-level text helpers shared by lexical search, selection and snippets."""

from __future__ import annotations

import re

WORD = re.compile(r"\w+", re.UNICODE)

STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "but",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "she",
        "so",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "about",
        "after",
        "all",
        "also",
        "any",
        "can",
        "could",
        "just",
        "more",
        "most",
        "not",
        "only",
        "other",
        "over",
        "some",
        "such",
        "than",
        "too",
        "very",
    ]
)


def words(text: str) -> list[str]:
    return [w.lower() for w in WORD.findall(text)]


def content_words(text: str) -> list[str]:
    """Lower-cased words that are not stopwords (all words when every one is a stopword)."""
    all_words = words(text)
    content = [w for w in all_words if w not in STOPWORDS]
    return content or all_words
