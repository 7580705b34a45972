"""The lexical tokenizer shared by BM25 and lexical plug-ins.

lowercase -> split on anything that is not a letter or digit (Unicode-aware) ->
optional English stopword removal -> optional Snowball stemming (PyStemmer).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

import Stemmer  # PyStemmer

#: how text is cut into tokens: runs of letters and digits (the default), Python's ``\w+`` (the
#: underscore joins words, as ``re.findall(r"\w+", ...)`` tokenizers do), or whitespace (``str.split``,
#: punctuation stays on the tokens, as the usual ``text.lower().split()`` for rank-bm25)
SPLITS = {"letters_digits": re.compile(r"[^\W_]+", re.UNICODE), "word": re.compile(r"\w+", re.UNICODE), "whitespace": None}
_TOKEN_RE = SPLITS["letters_digits"]

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
    split: str = "letters_digits"  # a key of SPLITS

    @cached_property
    def _stem(self):
        if self.stemmer is None:
            return None
        return Stemmer.Stemmer(self.stemmer)

    def __call__(self, text: str) -> list[str]:
        if self.lowercase:
            text = text.lower()
        pattern = SPLITS[self.split]
        tokens = text.split() if pattern is None else pattern.findall(text)
        if self.stopwords:
            tokens = [t for t in tokens if t not in ENGLISH_STOPWORDS]
        if self._stem is not None:
            tokens = self._stem.stemWords(tokens)
        return tokens
