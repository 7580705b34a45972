"""The lexical tokenizer shared by BM25 and lexical plug-ins.

lowercase -> split on anything that is not a letter or digit (Unicode-aware) ->
optional English stopword removal -> optional Snowball stemming (PyStemmer).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

import Stemmer  # PyStemmer

_TOKEN_RE = re.compile(r"[^\W_]+", re.UNICODE)

# A compact English stopword list (the classic Lucene/Elasticsearch English set).
ENGLISH_STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there "
    "these they this to was will with".split()
)


@dataclass(frozen=True)
class Tokenizer:
    lowercase: bool = True
    stopwords: bool = False
    stemmer: str | None = None  # e.g. "english" (Snowball via PyStemmer)

    @cached_property
    def _stem(self):
        if self.stemmer is None:
            return None
        return Stemmer.Stemmer(self.stemmer)

    def __call__(self, text: str) -> list[str]:
        if self.lowercase:
            text = text.lower()
        tokens = _TOKEN_RE.findall(text)
        if self.stopwords:
            tokens = [t for t in tokens if t not in ENGLISH_STOPWORDS]
        if self._stem is not None:
            tokens = self._stem.stemWords(tokens)
        return tokens
