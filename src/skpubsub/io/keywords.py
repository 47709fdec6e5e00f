"""Keyword normalisation (SPEC section 1): NFKC, then casefold, then strip or split."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

_NON_WORD = re.compile(r"\W+")


_NORMALISED: dict[str, str] = {}  # raw keyword -> normalised: words repeat across a stream
_CACHE_WORDS = 1 << 18
_memo = _NORMALISED.__getitem__


def normalise(word: str) -> str:
    """One keyword: NFKC, casefold, surrounding white space stripped (remembered, bounded)."""
    n = _NORMALISED.get(word)
    if n is None:
        if len(_NORMALISED) >= _CACHE_WORDS:
            _NORMALISED.clear()
        n = _NORMALISED[word] = unicodedata.normalize("NFKC", word).casefold().strip()
    return n


def normalise_keywords(words: Sequence[str]) -> tuple[str, ...]:
    """Normalise each keyword, drop empty ones and duplicates (first kept)."""
    joined = "".join(words)
    if joined.isascii() and joined.isprintable() and " " not in joined and joined.islower():
        # already normal (in ASCII only upper case and white space change); a tuple without
        # duplicates is returned as it is
        if type(words) is tuple and (len(words) < 2 or len(set(words)) == len(words)):
            out = words
        else:
            out = tuple(dict.fromkeys(words))
    else:
        try:  # each word seen before: straight from the memo, no call a word
            out = tuple(map(_memo, words))
        except KeyError:
            out = tuple(map(normalise, words))
        if len(out) > 1 and len(set(out)) < len(out):
            out = tuple(dict.fromkeys(out))
    return tuple(w for w in out if w) if "" in out else out


def split_text(text: str) -> tuple[str, ...]:
    """Keywords of a free text: NFKC, casefold, split on runs of non-word characters."""
    pieces = _NON_WORD.split(unicodedata.normalize("NFKC", text).casefold())
    return tuple(dict.fromkeys(p for p in pieces if p))
