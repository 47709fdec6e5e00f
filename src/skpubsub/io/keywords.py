"""Keyword normalisation (SPEC section 1): NFKC, then casefold, then strip or split."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from itertools import accumulate, chain
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


_SEP = "\x00"  # between the words or texts of a block: a stable code point (below)
_NO_EMPTY = methodcaller("pop", "", None)


def _by_block(texts: list[str]) -> list[str] | None:
    """``NFKC(t).casefold()`` of each text, made by one call of each over the texts joined by
    ``_SEP``, then split again; None when a text holds ``_SEP`` itself. Exact: U+0000 has
    combining class 0, decomposes to itself and composes with nothing, so NFKC of the
    joined texts is the texts' NFKC joined (normalisation is closed under concatenation at
    such a code point), and case folding maps character by character."""
    joined = _SEP.join(texts)
    if joined.count(_SEP) != len(texts) - 1:
        return None
    return unicodedata.normalize("NFKC", joined).casefold().split(_SEP) if texts else []


def _groups(words: list[str], lens: list[int]) -> list[tuple[str, ...]]:
    """``words`` cut into groups of ``lens``, each without duplicates (first kept) or empty
    words: C loops over the groups, no Python step a group."""
    ends = list(accumulate(lens))
    groups = list(map(dict.fromkeys, map(words.__getitem__, map(slice, chain((0,), ends), ends))))
    for _ in map(_NO_EMPTY, groups):
        pass
    return list(map(tuple, groups))


def normalise_groups(groups: Sequence[Sequence[str]]) -> list[tuple[str, ...]]:
    """``normalise_keywords`` of each group of keywords, by block-wide string operations
    (``_by_block``) instead of a call a word: a block of words a user wrote (capitals, NFKC
    forms, white space) costs a few C passes over its letters."""
    words = list(chain.from_iterable(groups))
    made = _by_block(words)
    if made is None:
        return list(map(normalise_keywords, groups))
    return _groups(list(map(str.strip, made)), list(map(len, groups)))


def split_texts(texts: Sequence[str]) -> list[tuple[str, ...]]:
    """``split_text`` of each text, by block-wide string operations (``_by_block``), the
    splitting and the duplicates by C loops."""
    made = _by_block(list(texts))
    if made is None:
        return list(map(split_text, texts))
    pieces = list(map(_NON_WORD.split, made))
    return _groups(list(chain.from_iterable(pieces)), list(map(len, pieces)))
