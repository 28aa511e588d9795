"""The one tokenizer recall uses: lower-cased words of two or more characters, English
stopwords dropped.

The pattern and the stopword list are ``bm25s``'s defaults, so the hand-written incremental
index (``keyword``) can be checked against ``bm25s`` on the same tokens. No stemming: a stemmer
would need another compiled dependency, and the eval's paraphrases are the vector side's job.
"""

from __future__ import annotations

import re

from bm25s.stopwords import STOPWORDS_EN

_WORD = re.compile(r"(?u)\b\w\w+\b")
STOPWORDS: frozenset[str] = frozenset(STOPWORDS_EN)


def tokenize(text: str) -> list[str]:
    """The content words of ``text`` in order, repeats kept (BM25 counts them)."""
    return [word for word in _WORD.findall(text.lower()) if word not in STOPWORDS]


__all__ = ["STOPWORDS", "tokenize"]
