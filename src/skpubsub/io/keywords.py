"""Keyword normalisation (SPEC section 1): NFKC, then casefold, then strip or split."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

_NON_WORD = re.compile(r"\W+")


def normalise(word: str) -> str:
    """One keyword: NFKC, casefold, surrounding white space stripped."""
    return unicodedata.normalize("NFKC", word).casefold().strip()


def normalise_keywords(words: Iterable[str]) -> tuple[str, ...]:
    """Normalise each keyword, drop empty ones and duplicates (first kept)."""
    return tuple(dict.fromkeys(w for w in map(normalise, words) if w))


def split_text(text: str) -> tuple[str, ...]:
    """Keywords of a free text: NFKC, casefold, split on runs of non-word characters."""
    pieces = _NON_WORD.split(unicodedata.normalize("NFKC", text).casefold())
    return tuple(dict.fromkeys(p for p in pieces if p))
