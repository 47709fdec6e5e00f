"""The common case at line rate: a well-formed event line, decoded by msgspec into a typed
record and checked without building a dict. msgspec (a C decoder that validates types as
it parses: strict numbers, no bools for numbers, no NaN) was chosen over orjson because it
types the fields in the same pass; both are well kept and fast.

The fast path never rejects: a line it does not accept outright (bad JSON, a mistyped,
missing or null field, anything out of range) goes to :func:`validate.validate_record`,
which gives the SPEC 5 reason. So the fast path only has to accept exactly the lines the
slow path accepts, as the same events (tests/test_fastline.py holds it to that).
"""

from __future__ import annotations

from operator import attrgetter
from typing import Annotated, Literal, Union

import msgspec
from msgspec import UNSET, UnsetType

from ..core.config import Space, Window
from .events import KNN, MAX_K, RANGE, TOPK, Event, Pub, Sub, Unsub
from .keywords import normalise, normalise_groups, normalise_keywords, split_text, split_texts



class Line(msgspec.Struct, gc=False):
    """The fields an event may carry, typed; absent ones UNSET (null is not absent: it fails
    the type and the line goes the slow way, which names it). ``gc=False``: strings,
    numbers, tuples and a dict of floats, never a cycle; not tracked, not collected."""

    op: str
    id: Union[int, str]
    t: Union[int, float]
    kind: Union[str, UnsetType] = UNSET
    x: Union[float, UnsetType] = UNSET
    y: Union[float, UnsetType] = UNSET
    rect: Union[tuple[float, ...], UnsetType] = UNSET  # tuples: kept as decoded, no copy
    k: Union[int, UnsetType] = UNSET
    alpha: Union[float, UnsetType] = UNSET
    keywords: Union[tuple[str, ...], UnsetType] = UNSET
    text: Union[str, UnsetType] = UNSET
    match: Union[str, UnsetType] = UNSET
    weights: Union[dict[str, float], UnsetType] = UNSET
    expires: Union[int, float, UnsetType] = UNSET


decode = msgspec.json.Decoder(Line).decode


class Strict(msgspec.Struct, gc=False):
    """:class:`Line` with the constraints msgspec checks in C while it decodes (the op and
    kind among those SPEC names, ``rect`` four numbers, ``k`` in 1..MAX_K, ``alpha`` in
    [0, 1], ``match`` all/any): what the Gate's block path (``Gate.admit_block``) decodes a
    block of lines into. Every line it decodes :class:`Line` decodes to the same values, so
    :func:`event` reads either; a line it refuses takes the line-by-line path. ``gc=False``:
    it holds only strings, numbers, tuples and a dict of floats, never a cycle, and a block
    holds thousands of them."""

    op: Literal["sub", "pub", "unsub"]
    id: Union[int, str]
    t: Union[int, float]
    kind: Union[Literal["range", "knn", "topk"], UnsetType] = UNSET
    x: Union[float, UnsetType] = UNSET
    y: Union[float, UnsetType] = UNSET
    rect: Union[tuple[float, float, float, float], UnsetType] = UNSET
    k: Union[Annotated[int, msgspec.Meta(ge=1, le=MAX_K)], UnsetType] = UNSET
    alpha: Union[Annotated[float, msgspec.Meta(ge=0.0, le=1.0)], UnsetType] = UNSET
    keywords: Union[tuple[str, ...], UnsetType] = UNSET
    text: Union[str, UnsetType] = UNSET
    match: Union[Literal["all", "any"], UnsetType] = UNSET
    weights: Union[dict[str, float], UnsetType] = UNSET
    expires: Union[int, float, UnsetType] = UNSET


class StrictRaw(Strict, gc=False):
    """:class:`Strict` with ``keywords`` kept as its JSON (msgspec has checked its syntax, not
    its type): the Gate's coded blocks read a subscription block's words from these bytes
    (``io/rawwords.py``) instead of from a tuple of new strings."""

    keywords: Union[msgspec.Raw, UnsetType] = UNSET


_STRICT = msgspec.json.Decoder(Strict)
_KEYWORDS, _TEXT = attrgetter("keywords"), attrgetter("text")
decode_strict, decode_strict_lines = _STRICT.decode, _STRICT.decode_lines
decode_raw_lines = msgspec.json.Decoder(StrictRaw).decode_lines


def keywords_of(r: Line) -> tuple[str, ...] | None:
    """A record's keywords as its event has them (normalised, or split from ``text``), or
    None when it has none (the validator rejects it)."""
    if r.keywords is not UNSET:
        out = normalise_keywords(r.keywords)
    elif r.text is not UNSET:
        out = split_text(r.text)
    else:
        return None
    return out or None


def keywords_column(recs: list) -> list[tuple[str, ...]] | None:
    """``keywords_of`` each record (all given keywords, or all a text, by block-wide string
    operations: ``normalise_groups``, ``split_texts``), or None when one has none."""
    kws = list(map(_KEYWORDS, recs))
    if UNSET not in kws:
        out = normalise_groups(kws)
    else:
        texts = list(map(_TEXT, recs))
        if kws.count(UNSET) == len(kws) and UNSET not in texts:
            out = split_texts(texts)
        else:  # some of each, or neither: a call a record
            out = list(map(keywords_of, recs))
    return None if () in out or None in out else out


def event(r: Line, seq: int, window: Window, space: Space) -> Event | None:
    """The event ``validate_record`` makes of this record, or None when it may reject it."""
    op, t = r.op, r.t
    float(t)  # OverflowError past float range: the caller leaves the line to the validator
    if op == "unsub":
        return Unsub(seq, r.id, t)
    expires = r.expires
    if expires is UNSET:
        expires = None
    else:  # kept as given and compared exactly, like t (SPEC section 6, "Times")
        float(expires)
        if not expires > t:
            return None
    if op == "pub":
        x, y = r.x, r.y
        if x is UNSET or y is UNSET or not space.contains(x, y):
            return None
        if expires is not None and window.kind != "time":
            return None
        kws = keywords_of(r)
        return None if kws is None else Pub(seq, r.id, t, x, y, kws, expires)
    if op != "sub":
        return None
    kind = r.kind
    kws = keywords_of(r)
    if kws is None:
        return None
    if kind == RANGE:
        rect, match = r.rect, r.match
        if rect is UNSET or len(rect) != 4 or rect[0] > rect[2] or rect[1] > rect[3]:
            return None
        if match is not UNSET and match != "all" and match != "any":
            return None
        return Sub(seq, r.id, t, RANGE, kws, match_all=match is UNSET or match == "all", rect=rect,
                   expires=expires)
    if kind != KNN and kind != TOPK:
        return None
    x, y, k = r.x, r.y, r.k
    if x is UNSET or y is UNSET or not space.contains(x, y) or k is UNSET or not 1 <= k <= MAX_K:
        return None
    if kind == KNN:
        match = r.match
        if match is not UNSET and match != "all" and match != "any":
            return None
        return Sub(seq, r.id, t, KNN, kws, match_all=match == "all", x=x, y=y, k=k, expires=expires)
    alpha = r.alpha
    if alpha is UNSET or not 0.0 <= alpha <= 1.0:
        return None
    weights = None
    if r.weights is not UNSET:
        weights = weights_of(r.weights, kws)
        if weights is None:
            return None
    return Sub(seq, r.id, t, TOPK, kws, x=x, y=y, k=k, alpha=alpha, weights=weights, expires=expires)


def weights_of(given: dict[str, float], kws: tuple[str, ...]) -> tuple[float, ...] | None:
    """A top-k record's weights (``given``, by keyword as written) aligned with its keywords
    ``kws``, 1 where none is given; None when one is not positive (the validator says why)."""
    by_word: dict[str, float] = {}
    for key, w in given.items():
        if not w > 0:  # msgspec has already refused non-numbers and non-finite ones
            return None
        by_word[normalise(key)] = w
    return tuple(by_word.get(w, 1.0) for w in kws)
