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
    """The subscription's vector ``ws`` scaled to unit length (missing weights are 1).

    Positive finite weights of any magnitude (SPEC section 6): they are first scaled by
    the power of two of the largest one (``frexp``), so the squares neither underflow
    (1e-200) nor overflow (1e200). Scaling by a power of two is exact, so for weights
    whose squares stay normal the result is bit for bit ``v / sqrt(sum v*v)``, and
    weights times any power of two give the same vector; a component that underflows to 0
    next to a weight 1e600 times larger is kept at the smallest positive float. O(n)."""
    w = tuple(float(v) for v in weights) if weights is not None else (1.0,) * n
    if not w:
        return ()
    top = max(abs(v) for v in w)
    # zero, infinite or NaN weights (SPEC 5 rejects them first) are left unscaled
    e = -math.frexp(top)[1] if 0.0 < top < math.inf else 0  # top * 2**e is in [0.5, 1)
    s = tuple(math.ldexp(v, e) for v in w)
    norm = math.sqrt(sum(v * v for v in s))
    # a positive weight stays positive (indexes rely on it): one that underflows next to a
    # weight 1e600 times larger becomes the smallest positive float instead of 0
    return tuple((v / norm) or (_TINY if u > 0 else 0.0) for u, v in zip(w, s))


_TINY = math.ulp(0.0)  # 5e-324


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
