"""k-best buffer operations on :class:`skpubsub.store.subscriptions.SubTable` (O(kb) each).

See ``SubTable`` for the buffer invariant. ``put`` is the one insertion, compiled,
shared by the plain path (``insert_newest``) and the publish kernel; under a
k-skyband policy it also counts dominators and evicts (Skype Section 6.1).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..core.layouts import Subs
from ..store.subscriptions import B_KMAX, B_SKYBAND, K_KNN, SubTable


@njit(inline="always", cache=True)
def later(o_life, o_lo, a, b):
    """Does object ``a`` leave no earlier than ``b``? Lives are exact pairs (SPEC 6 "Times":
    integer expiries of any 64-bit size): ``o_life`` float(expiry), ``o_lo`` the integer
    remainder past it (0 for a float expiry), compared lexicographically (Engine._lives)."""
    ha = o_life[a]
    hb = o_life[b]
    return ha > hb or (ha == hb and o_lo[a] >= o_lo[b])


@njit(inline="always", cache=True)
def put(subs, o_refs, o_life, o_lo, ro, nn, cap, kk, key, o):
    """Insert the newest object ``o`` (key ``<= kth``) into the ``nn``-entry buffer at
    ``ro`` (of ``cap`` entries, result size ``kk``); it goes before equal keys (the newest
    wins ties). ``o_refs``, ``o_life`` and ``o_lo``: the objects' references (counted here) and
    departure orders (exact pairs, ``later``). Returns (new length,
    object pushed out past ``cap`` or -1, its position or -1 when not placed).

    Under a k-skyband policy: ``o`` dominates each entry it ranks before and
    outlives (``o_life``: when an object leaves; CkQST Definition 6, Skype Definition 10
    where objects leave in arrival order), and is dominated by each entry before it that
    outlives it. An entry with ``kk`` dominators can never rank in the first ``kk`` again
    (they leave no earlier than it does), so it leaves — or ``o`` is not placed at all."""
    res_key, res_obj, res_dom = subs.res_key, subs.res_obj, subs.res_dom
    prune = subs.policy != B_KMAX
    pos = nn
    while pos > 0 and res_key[ro + pos - 1] >= key:
        pos -= 1
    mine = 0
    if prune:
        for j in range(pos):
            if later(o_life, o_lo, res_obj[ro + j], o):
                mine += 1
        if mine >= kk:
            return nn, -1, -1
    w = nn
    if prune:
        w = pos
        for j in range(pos, nn):
            d = res_dom[ro + j]
            if later(o_life, o_lo, o, res_obj[ro + j]):
                d += 1
                if d >= kk:
                    o_refs[res_obj[ro + j]] -= 1
                    continue
            res_key[ro + w] = res_key[ro + j]
            res_obj[ro + w] = res_obj[ro + j]
            res_dom[ro + w] = d
            w += 1
    dropped = -1
    if w == cap:
        w -= 1
        dropped = res_obj[ro + w]
        o_refs[dropped] -= 1
    for j in range(w, pos, -1):
        res_key[ro + j] = res_key[ro + j - 1]
        res_obj[ro + j] = res_obj[ro + j - 1]
        res_dom[ro + j] = res_dom[ro + j - 1]
    res_key[ro + pos] = key
    res_obj[ro + pos] = o
    res_dom[ro + pos] = mine
    o_refs[o] += 1
    return w + 1, dropped, pos


SKYBAND_RATIO = 0.95  # Skype's tuned Skyband baseline: theta = 0.95 * kScore (Section 7)


@njit(inline="always", cache=True)
def skyband_theta(kkey, ks):
    """The Skyband baseline's threshold from the k-th key: a score of at least 0.95 of the
    k-th score (top-k keys are -score), or a distance at most the k-th's / 0.95 (kNN keys
    are squared distances)."""
    if ks == K_KNN:
        return kkey / (SKYBAND_RATIO * SKYBAND_RATIO)
    return SKYBAND_RATIO * kkey


@njit(inline="always", cache=True)
def after_put(subs, s):
    """The entry rule of slot ``s`` after an insertion (its ``res_n`` set). A full buffer admits only what beats its last
    entry from now on (objects may pass it by unseen, so it is no longer complete). A
    k-skyband buffer holding all qualifying objects takes a threshold once it has k of
    them, as after a re-evaluation: the k-th key (``cskyband``, ``ckskyband``: the cost
    model weighs only what it has seen, these k) or the Skyband rule; else it would keep every
    undominated object of the whole window."""
    r = subs.rec[s]
    n, cap, kk, ro, policy = r.res_n, r.kb, r.k, r.res_off, subs.policy
    res_key = subs.res_key
    if n == cap:
        r.complete = False
        r.kth = res_key[ro + n - 1]
    elif policy != B_KMAX and r.complete and n >= kk:
        r.complete = False
        kk_key = res_key[ro + kk - 1]
        r.kth = skyband_theta(kk_key, r.kind) if policy == B_SKYBAND else kk_key


def insert_newest(t: SubTable, orec: np.ndarray, s: int, obj: int, key: float) -> int:
    """Plain-path insertion (the caller checked ``key <= kth``); updates the objects' ``refs``
    in ``orec``. Returns the object pushed out past the buffer's capacity, or -1."""
    return int(_insert(t.plain, orec, s, obj, key))


@njit(cache=True)
def _insert(subs, orec, s, obj, key):
    subs = Subs(*subs)  # a plain tuple from Python (layouts.plain)
    r = subs.rec[s]
    n, dropped, _ = put(subs, orec.refs, orec.expiry, orec.expiry_lo, r.res_off, r.res_n, r.kb, r.k, key, obj)
    r.res_n = n
    after_put(subs, s)
    return dropped


def remove(t: SubTable, s: int, obj: int) -> None:
    """Take ``obj`` (a member, leaving the window) out of the buffer. The rest stays
    exact; the entry rule ``kth`` stands (nothing newly alive ranks below it), and no
    dominator count changes (whatever ``obj`` dominates leaves no later than it)."""
    c = t.cols
    off, n = int(c.res_off[s]), int(c.res_n[s])
    objs, keys, dom = t.res.obj, t.res.key, t.res.dom
    i = off + int(np.flatnonzero(objs[off:off + n] == obj)[0])
    objs[i:off + n - 1] = objs[i + 1:off + n]
    keys[i:off + n - 1] = keys[i + 1:off + n]
    dom[i:off + n - 1] = dom[i + 1:off + n]
    c.res_n[s] = n - 1
