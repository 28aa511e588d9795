"""The tokenizers recall uses, by name (an *analyzer*), so a recorded recall re-runs with its own.

``words``: lower-cased words of two or more characters, English stopwords dropped — the pattern
and stopword list are ``bm25s``'s defaults, so the hand-written incremental index (``keyword``)
can be checked against ``bm25s`` on the same tokens. ``stemmed`` (the default since recall
event version 3): the same words through the Snowball English stemmer (PyStemmer, the stemmer
``bm25s`` itself uses), so "watering" finds "water" and "closed" finds "closes". On the memory
eval it raised keyword recall@5 from 0.519 to 0.633 (docs/evals.md).

The causal-edge walk's mentions (``graph``) keep ``words``: they match names, which a stemmer
would conflate.
"""

from __future__ import annotations

import re
import threading
from typing import Literal, get_args

import Stemmer
from bm25s.stopwords import STOPWORDS_EN

from mirror.cognition.errors import UnknownAnalyzer

Analyzer = Literal["words", "stemmed"]
ANALYZERS: tuple[Analyzer, ...] = get_args(Analyzer)
DEFAULT_ANALYZER: Analyzer = "stemmed"
WORDS_ANALYZER: Analyzer = "words"
"""What every recall made before the analyzer was recorded used (``recall`` event versions 1 and 2)."""

_WORD = re.compile(r"(?u)\b\w\w+\b")
STOPWORDS: frozenset[str] = frozenset(STOPWORDS_EN)
_local = threading.local()  # a PyStemmer Stemmer is not safe to share between threads


def tokenize(text: str) -> list[str]:
    """The content words of ``text`` in order, repeats kept (BM25 counts them)."""
    return [word for word in _WORD.findall(text.lower()) if word not in STOPWORDS]


def _stemmer() -> Stemmer.Stemmer:
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = Stemmer.Stemmer("english")
    return stemmer


def analyze(text: str, analyzer: str) -> list[str]:
    """``text``'s tokens under ``analyzer``; :class:`UnknownAnalyzer` for a name not in :data:`ANALYZERS`."""
    if analyzer == "stemmed":
        return _stemmer().stemWords(tokenize(text))
    if analyzer == "words":
        return tokenize(text)
    raise UnknownAnalyzer(analyzer, ANALYZERS)


def check_analyzer(analyzer: str) -> Analyzer:
    """``analyzer`` if it is one of :data:`ANALYZERS`, else :class:`UnknownAnalyzer`."""
    if analyzer not in ANALYZERS:
        raise UnknownAnalyzer(analyzer, ANALYZERS)
    return analyzer


__all__ = ["ANALYZERS", "DEFAULT_ANALYZER", "STOPWORDS", "WORDS_ANALYZER", "Analyzer", "analyze", "check_analyzer",
           "tokenize"]
