"""A block's columns judged at once: the tests :func:`fastline.event` and the Gate make of
one record, made over a whole column of a block with C loops (``map``, ``min``, set
operations) instead of a Python step a record. Each says True (or gives the column) exactly
when every record would pass its own test; otherwise the Gate takes the block event by event,
where the record that fails is named (``Gate._columns``; io/NOTES.md)."""

from __future__ import annotations

from itertools import chain, filterfalse, repeat
from operator import gt, itemgetter, le

import numpy as np
from msgspec import UNSET

from ..core.config import Space
from . import fastline
from .keywords import normalise

MATCH_ALL_RANGE = {UNSET: True, "all": True, "any": False}  # a range sub matches all by default
MATCH_ALL_KNN = {UNSET: False, "all": True, "any": False}  # a kNN one any


def ends_past(exps: list, ts: list, whole: bool) -> list | None:
    """A block's ``expires`` column (None where unset) when every one set is after its own
    time (``fastline.event``'s test) or, ``whole``, after the block's last (so that no
    subscription ends within the block), else None (the block goes event by event)."""
    out = [None if e is UNSET else e for e in exps]
    given = [e for e in out if e is not None]
    after = repeat(ts[-1]) if whole else [t for t, e in zip(ts, out) if e is not None]
    try:
        if not all(map(gt, given, after)):
            return None
        float(max(given))  # past float range: fastline.event's OverflowError (the others lie below)
    except (OverflowError, TypeError):
        return None
    return out


_X1, _Y1, _X2, _Y2 = itemgetter(0), itemgetter(1), itemgetter(2), itemgetter(3)  # of a rect


def rects_ordered(rects: list) -> bool:
    """Every rectangle's ``x1 <= x2`` and ``y1 <= y2``."""
    return all(map(le, map(_X1, rects), map(_X2, rects))) and all(map(le, map(_Y1, rects), map(_Y2, rects)))


def inside(space: Space, xs: list[float], ys: list[float]) -> bool:
    """``space.contains`` every point (the space is closed)."""
    return space.x1 <= min(xs) and max(xs) <= space.x2 and space.y1 <= min(ys) and max(ys) <= space.y2


def one_object_a_line(buf: bytes, n: int) -> bool:
    """Each of the ``n`` lines of ``buf`` starts with ``{`` and ends with ``}``. Then no JSON
    value can span two lines (``}`` then ``{`` is never inside one), so when msgspec's
    ``decode_lines`` (which reads values separated by any white space, and skips blank
    lines) finds ``n`` values, each is its line's alone, as ``decode`` a line would give.
    By numpy over the bytes around each newline: 0.04 us a line, where
    ``buf.count(b"}\\n{")`` took 0.16."""
    if buf[:1] != b"{" or buf[-1:] != b"}":
        return False
    a = np.frombuffer(buf, np.uint8)
    nl = np.flatnonzero(a == 10)  # within [1, len - 2]: the first and last bytes are braces
    return len(nl) == n - 1 and bool((a[nl - 1] == 125).all()) and bool((a[nl + 1] == 123).all())


_NORMAL: set[str] = set()  # keywords seen to be normal already (normalise(w) == w, not empty)
_ODD: set[str] = set()  # and seen not to be (both bounded, like the keyword memo)


def _plain(s: str) -> bool:
    """An ASCII string of normal keywords: no upper case, no white space (ASCII's only
    changes under NFKC + casefold + strip); ``islower`` also wants one letter, or False."""
    return s.isprintable() and " " not in s and s.islower()


def normal_words(kws: list[tuple[str, ...]]) -> bool:
    """Every keyword tuple of a block is its own ``normalise_keywords``: each word normal
    already, none empty, none twice in a tuple. The ASCII words are tested all at once, as
    one joined string (a few C passes over the block's letters); the others, and all of
    them when that fails, against ``_NORMAL``, the words seen to be normal."""
    words = list(chain.from_iterable(kws))
    if not all(words):
        return False
    rest = list(filterfalse(str.isascii, words))
    plain = "".join(filter(str.isascii, words) if rest else words)
    if plain and not _plain(plain):
        if " " in plain or plain.lower() != plain:  # a capital or a space: the caller normalises
            return False
        rest = words  # (no letter at all, or a control character: word by word)
    if rest and not _NORMAL.issuperset(rest):
        if not _ODD.isdisjoint(rest):  # a word seen not to be normal: the caller normalises
            return False
        for seen in (_NORMAL, _ODD):
            if len(seen) >= 1 << 18:
                seen.clear()
        for w in set(rest).difference(_NORMAL):
            (_NORMAL if normalise(w) == w else _ODD).add(w)
        if not _NORMAL.issuperset(rest):
            return False
    return sum(map(len, map(set, kws))) == len(words)


def weights_column(given: list, kws: list[tuple[str, ...]]) -> list | None | bool:
    """A top-k block's weights column: None when no record gives any, else each record's
    (``fastline.weights_of``, a call a record that gives them; None for the others); False
    when one is not positive (the line path says why)."""
    if given.count(UNSET) == len(given):
        return None
    out = [None if w is UNSET else fastline.weights_of(w, kw) for w, kw in zip(given, kws)]
    return False if any(m is None and w is not UNSET for m, w in zip(out, given)) else out
