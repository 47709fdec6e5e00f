"""Keyword normalisation (SPEC section 1): NFKC, then casefold, then strip or split."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from functools import partial
from itertools import accumulate, chain, compress
from operator import methodcaller

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


_SEP = "\x00"  # between a block's words or texts (one that holds it: a call each)
_NFKC = partial(unicodedata.normalize, "NFKC")  # (its quick check passes most words as they are)
_NO_EMPTY = methodcaller("pop", "", None)


def normalise_groups(groups: Sequence[Sequence[str]]) -> list[tuple[str, ...]]:
    """``normalise_keywords`` of each group of keywords, by C loops over the block instead of
    a call a word: NFKC word by word (the words already normal pass its quick check), case
    folding (character by character) by one call over the words joined by U+0000 and split
    again, the surrounding white space stripped; then each group's duplicates (first kept)
    and empty words dropped by ``dict.fromkeys`` and a ``pop``."""
    words = list(chain.from_iterable(groups))
    joined = _SEP.join(map(_NFKC, words))
    if words and joined.count(_SEP) != len(words) - 1:  # a word holds U+0000
        return list(map(normalise_keywords, groups))
    made = list(map(str.strip, joined.casefold().split(_SEP))) if words else []
    ends = list(accumulate(map(len, groups)))
    out = list(map(dict.fromkeys, map(made.__getitem__, map(slice, chain((0,), ends), ends))))
    for _ in map(_NO_EMPTY, out):
        pass
    return list(map(tuple, out))


# ASCII's non-word characters (``\W`` there: all but letters, digits and ``_``) as spaces,
# U+0000 kept (it parts the texts of a block)
_ASCII_WORDS = {c: " " for c in range(1, 128) if not (chr(c).isalnum() or c == 95)}


def split_texts(texts: Sequence[str]) -> list[tuple[str, ...]]:
    """``split_text`` of each text; the ASCII ones (where NFKC changes nothing, case folding
    is ``lower`` and ``\\W`` a fixed set) by C loops over the block: lowered, their non-word
    characters made spaces, split on white space; the others a call each."""
    plain = list(map(str.isascii, texts))
    ascii_texts = list(compress(texts, plain))
    joined = _SEP.join(ascii_texts)
    if not ascii_texts or joined.count(_SEP) != len(ascii_texts) - 1:
        return list(map(split_text, texts))
    words = joined.lower().translate(_ASCII_WORDS).split(_SEP)
    made = iter(map(tuple, map(dict.fromkeys, map(str.split, words))))
    return [next(made) if p else split_text(t) for t, p in zip(texts, plain)]
