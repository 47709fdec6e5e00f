"""Skype's prefix filter for top-k subscriptions, applied when posting, not when probing.

Skype (Section 5.1) skips a subscription ``s`` for a message ``m`` when ``m`` cannot reach
the k-th score ``kScore(s)`` by text: Eq. 2 turns the score into a text threshold, the
prefix filter (Eqs. 3-4, Definitions 4-5, Lemma 3, Theorem 1) bounds TSim by the
keywords of ``s`` from the first one ``m`` shares on, and the max-weight refinement by the
heaviest weight of ``m``. Our objects' weights are ``1/sqrt(|o|)``, so the refinement is
a bound on the object's keyword count: knowing it in advance is worth most of the
filter (on GeoNames top-k, 57% of the candidates an index without it examines cannot
reach the score by text alone, against about 1% without it).

So objects fall in size classes (``SIZES``: 1, 2, 3-4, 5-7, 8+ keywords) and a top-k
subscription's keyword ``j`` is posted under one token ``(w_j, c)``: ``c`` the largest
class whose objects, sharing ``j`` as their first keyword in the prefix order, may still
reach the k-th score even at distance 0 (``top_class``); a keyword no class can use is
not posted at all (the prefix ends). An object of class ``c`` probes ``(w, c')`` for
each of its keywords and every ``c' >= c``. The spatial region stays the subscription's
ball (:mod:`cgrid`); the classes are re-chosen whenever the ball is posted afresh, and a
change of any keyword's class re-posts it (a grown class must, a shrunk one is worth it).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

SIZES = np.array([1, 2, 3, 5, 8])  # the smallest keyword count of each object size class
NC = len(SIZES)
CLASS_BASE = np.int64(1) << 32  # class tokens live above aoiq's block tokens (cell keys fit int64 to lmax 14)
SLACK = 1e-6  # bounds are widened so rounding (float32 storage included) never loses a match


@njit(inline="always", cache=True)
def size_class(n):
    """The class of an object with ``n`` keywords."""
    c = 0
    for i in range(1, NC):
        if n >= SIZES[i]:
            c = i
    return c


@njit(inline="always", cache=True)
def class_token(w, c):
    return CLASS_BASE + np.int64(w) * NC + c


@njit(cache=True)
def probe_classes(okw, out, n):
    """Append to ``out[n:]`` what an object with keywords ``okw`` probes for top-k
    subscriptions: ``(w, c')`` for each keyword and each class from its own up."""
    for w in okw:
        for c in range(size_class(len(okw)), NC):
            out[n] = class_token(w, c)
            n += 1
    return n


EXACT_SPAN = 64  # prefix_bounds: object sizes t tried one by one; longer shares take a bound


@njit(cache=True)
def prefix_order(off, ln, kw_id, kw_ws, freq):
    """The prefix order of keywords ``off:off+ln`` (pool offsets): heaviest weight first, ties
    least frequent first, then by position. Two stable sorts: O(ln log ln)."""
    ids = kw_id[off:off + ln]
    f = np.empty(ln, dtype=np.int64)
    for a in range(ln):
        f[a] = freq[ids[a]]
    by_freq = np.argsort(f, kind="mergesort")
    w = np.empty(ln, dtype=np.float64)
    for a in range(ln):
        w[a] = -kw_ws[off + by_freq[a]]
    by_weight = np.argsort(w, kind="mergesort")
    order = np.empty(ln, dtype=np.int64)
    for a in range(ln):
        order[a] = off + by_freq[by_weight[a]]
    return order


@njit(cache=True)
def prefix_bounds(off, ln, kw_id, kw_ws, freq, rb):
    """The prefix order of a top-k subscription's keywords ``off:off+ln`` and the bound of
    each (keyword, class), into ``rb[(off + j)*NC + c]``.

    Order (``prefix_order``): heaviest weight first, ties least frequent first (as prefix
    filtering in similarity joins: a frequent keyword, last, gets the smallest bound).
    ``rb`` for (j, c) bounds TSim for an object of class ``c`` whose first shared keyword in
    that order is ``j``: it shares only keywords from ``j`` on, ``t`` of them, and weighs
    ``1/sqrt(|o|)`` with ``|o| >= max(t, SIZES[c])``, so TSim <= max over t of (the t
    heaviest weights from ``j`` on) / sqrt(max(t, SIZES[c])): Skype's ``wtsum * maxwt``
    made exact for unit object vectors. It never grows with the class.

    Cost O(ln log ln + ln * EXACT_SPAN * NC) (it was quadratic: 7 s for a 20,000-keyword
    subscription, issue 18): t is tried one by one up to EXACT_SPAN; beyond, Cauchy-Schwarz
    bounds every longer share at once: (sum of t weights) / sqrt(t) <= sqrt(sum of the squares
    from j on), which is exact when the weights are equal. Subscriptions of up to
    EXACT_SPAN keywords get exactly the bounds they always had."""
    order = prefix_order(off, ln, kw_id, kw_ws, freq)
    tail = 0.0  # sum of squared weights from p on, in the prefix order
    tails = np.empty(ln, dtype=np.float64)
    for p in range(ln - 1, -1, -1):
        v = kw_ws[order[p]]
        tail += v * v
        tails[p] = tail
    for p in range(ln):
        span = min(ln - p, EXACT_SPAN)
        for c in range(NC):
            best = 0.0
            acc = 0.0
            for t in range(1, span + 1):
                acc += kw_ws[order[p + t - 1]]
                best = max(best, acc / math.sqrt(max(t, SIZES[c])))
            if ln - p > span:
                best = max(best, math.sqrt(tails[p]))
            rb[order[p] * NC + c] = best * (1.0 + SLACK) + SLACK


@njit(inline="always", cache=True)
def top_class(kth, alpha, rb, r):
    """The largest class whose bound ``rb[r + c]`` may still reach the k-th score ``-kth``
    at distance 0 (Eq. 2: ``alpha + (1 - alpha)*TSim >= kScore``); -1 when none may."""
    top = -1
    for c in range(NC):
        if alpha + kth + (1.0 - alpha) * rb[r + c] + SLACK < 0.0:
            break
        top = c
    return top


@njit(cache=True)
def post_tokens(off, ln, kw_id, kth, alpha, rb, out):
    """The tokens a top-k subscription is posted under at entry rule ``kth``, into ``out``;
    returns how many (keywords past the prefix have none)."""
    n = 0
    for j in range(ln):
        c = top_class(kth, alpha, rb, (off + j) * NC)
        if c >= 0:
            out[n] = class_token(kw_id[off + j], c)
            n += 1
    return n


@njit(cache=True)
def same_classes(off, ln, kth, pk, alpha, rb):
    """Are the classes at rule ``kth`` those posted at rule ``pk``?"""
    for j in range(ln):
        if top_class(kth, alpha, rb, (off + j) * NC) != top_class(pk, alpha, rb, (off + j) * NC):
            return False
    return True
