"""Ranking keys shared by every engine, so all compute bit-identical numbers.

Keys sort ascending; ties go to the later-published object (larger ``seq``).
kNN uses the squared distance (same order as the distance). Top-k uses
``-score`` (SPEC section 1). Vectorised code must keep these exact operation
orders; the text similarity is summed over the subscription's keywords in order.
"""

from __future__ import annotations

import math
from collections.abc import Container, Sequence

from numba import njit


def dist2(sx: float, sy: float, ox: float, oy: float) -> float:
    dx = ox - sx
    dy = oy - sy
    return dx * dx + dy * dy


def unit_weights(weights: Sequence[float] | None, n: int) -> tuple[float, ...]:
    """The subscription's vector ``ws`` scaled to unit length (missing weights are 1)."""
    w = tuple(weights) if weights is not None else (1.0,) * n
    norm = math.sqrt(sum(v * v for v in w))
    return tuple(v / norm for v in w)


def object_weight(n_keywords: int) -> float:
    """Each component of the object's unit vector ``wo`` (all keywords weigh 1)."""
    return 1.0 / math.sqrt(n_keywords)


def text_sim(sub_keywords: Sequence[str], ws: Sequence[float], obj_keywords: Container[str], wo: float) -> float:
    """``TSim``: sum over shared keywords, in the subscription's keyword order."""
    s = 0.0
    for w, v in zip(sub_keywords, ws):
        if w in obj_keywords:
            s += v * wo
    return s


def topk_key(alpha: float, maxdist: float, d2: float, tsim: float) -> float:
    """``-score(s, o)`` with ``score = alpha*SSim + (1-alpha)*TSim``."""
    ssim = max(0.0, 1.0 - math.sqrt(d2) / maxdist)
    return -(alpha * ssim + (1.0 - alpha) * tsim)


# -- compiled twins for the kernels (keyword ids; inlined where called) -----------------------
@njit(inline="always", cache=True)
def carries_all(okw, kw_id, off, ln):
    """Does an object with keyword ids ``okw`` carry every id of ``kw_id[off:off+ln]``?"""
    for j in range(off, off + ln):
        found = False
        for v in okw:
            if v == kw_id[j]:
                found = True
                break
        if not found:
            return False
    return True


@njit(inline="always", cache=True)
def topk_key_ids(okw, kw_id, kw_ws, off, ln, wo, alpha, d2, maxdist):
    """``topk_key`` from the squared distance, ``text_sim`` summed in the subscription's
    keyword order: the same operations in the same order as the functions above."""
    tsim = 0.0
    for j in range(off, off + ln):
        for v in okw:
            if v == kw_id[j]:
                tsim += kw_ws[j] * wo
                break
    return -(alpha * max(0.0, 1.0 - math.sqrt(d2) / maxdist) + (1.0 - alpha) * tsim)
