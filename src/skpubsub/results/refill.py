"""Re-evaluation of one k-best buffer from the alive objects, compiled.

Both the engine's plain path and the publish kernel (:mod:`skpubsub.engine.kernel`) call
``refill``: when expiries leave a buffer short of k (and it may have missed objects),
and when a kNN/top-k subscription registers under a retaining window. It reads the
alive-object postings (:class:`skpubsub.store.objects.AliveStore`) of the
subscription's keywords — for an all-keywords kNN only the rarest one, verifying the
rest — keeps the best candidates by key, newest first on ties (SubTable's rule), and
makes the buffer by the engine's policy (see ``SubTable``): the best ``kb`` (``kmax``),
or the k-skyband of the candidates up to a threshold (``skyband``: 0.95 of the k-th
score; ``cskyband``: Skype's cost model, ``cost``; ``ckskyband``: CkQST's,
``cost_ckqst``). Keys use :mod:`skpubsub.core.scoring`'s arithmetic in its order, as the
kernel's do.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..core import postings as P
from ..core.layouts import Heap, ObjectLive, Objects, Postings, Subs
from ..core.scoring import carries_all, topk_key_ids
from ..store import objects as _objects  # noqa: F401  (overloads postings.entry_id for ObjectLive)
from ..store.subscriptions import B_CKSKYBAND, B_CSKYBAND, B_KMAX, B_SKYBAND, K_KNN
from .kbest import later, skyband_theta

POOL = 16  # a k-skyband policy weighs up to POOL*kb best candidates for its threshold


@njit(cache=True)
def cost(j, k, topk):
    """Skype Eq. 13 for a threshold admitting the best ``j`` objects, up to the factor
    1/|W| shared by every ``j`` (so the window size drops out of the minimisation):
    C = prob*k*ln(|W|*prob/k) + C_topk / Z', Eq. 9 and Eq. 10 with Z' of Eq. 12, where
    |A'_init| = |W|*prob = j. ``topk``: C_topk, the entries this re-evaluation read."""
    a = float(j)
    z = 2.0 * (a - k + 1.0) * a + (a - k + 1.0) * (a - k + 2.0)  # Eq. 12 times prob
    return a * k * math.log(a / k) + topk * a / z


@njit(cache=True)
def cost_ckqst(j, k, topk):
    """CkQST Eq. 15 for an extended range holding the best ``j`` (q.θk) objects, per object
    update and times |W| (shared by every ``j``): with pMq = j/|W| (Eq. 14's loose-match
    probability), an arriving object is verified with probability pMq/2 (CVR, Eq. 13) and
    then updates the extended list of |q(O)| entries (CUL, Eq. 14, |q(O)| taken as
    min(j, max(k, k ln(j/k))): the paper's max(k ln(j/k), j) is always j); a re-evaluation
    costs C_topk (``topk``, the entries it read: CIe) once per θt updates, the lazy random
    walk's time to fall from j to k-1 (Eqs. 16-17)."""
    a = float(j)
    skyband = min(a, max(float(k), k * math.log(a / k)))
    walk = 2.0 * (a - k + 1.0) * a + (a - k + 1.0) * (a - k + 2.0)  # Eq. 17 times pMq
    return 0.5 * a * (1.0 + skyband) + topk * a / walk


@njit(inline="always", cache=True)
def _worse(k1, q1, k2, q2):
    """Does (key k1, seq q1) rank after (k2, q2)? Keys ascending, newest first on ties."""
    return k1 > k2 or (k1 == k2 and q1 < q2)


@njit(inline="always", cache=True)
def _sift(hk, hq, ho, i, n):
    """Restore the max-heap (worst candidate at the root) below position ``i``."""
    while True:
        c = 2 * i + 1
        if c >= n:
            return
        if c + 1 < n and _worse(hk[c + 1], hq[c + 1], hk[c], hq[c]):
            c += 1
        if not _worse(hk[c], hq[c], hk[i], hq[i]):
            return
        hk[i], hk[c] = hk[c], hk[i]
        hq[i], hq[c] = hq[c], hq[i]
        ho[i], ho[c] = ho[c], ho[i]
        i = c


@njit(cache=True)
def refill_of(s, subs, objs, alive, freq, maxdist, heap):
    """``refill`` called from Python, the layouts as plain tuples (``layouts.plain``)."""
    return refill(s, Subs(*subs), Objects(*objs), Postings(*alive), freq, maxdist, Heap(*heap))


@njit(cache=True)
def refill(s, subs, objs, alive, freq, maxdist, heap):
    """Rebuild the buffer of slot ``s`` from the alive objects (``alive``, their postings) by
    the table's policy (SubTable); ``complete`` iff it holds every qualifying object. Each
    object is read once (``objs.stamp`` against ``objs.next[0]``, a stamp the caller has just
    taken); ``heap``: scratch for ``POOL*kb`` candidates (key, seq, slot; ``heap.seq``
    float64, later the slots of the k latest-leaving candidates, compared by their exact lives). Returns the alive entries
    read, P: O(P log(candidates kept) + kb*k)."""
    sr = subs.rec
    kind, match_all, sx, sy, alpha = sr.kind, sr.match_all, sr.x, sr.y, sr.alpha
    kw_off, kw_len, res_off, res_n, kth, kb, k, complete = (sr.kw_off, sr.kw_len, sr.res_off, sr.res_n, sr.kth,
                                                            sr.kb, sr.k, sr.complete)
    kw_id, kw_ws, res_obj, res_key, res_dom, policy = (subs.kw_id, subs.kw_ws, subs.res_obj, subs.res_key,
                                                       subs.res_dom, subs.policy)
    orec = objs.rec
    o_refs, o_seq, o_life, o_kwoff, o_kwlen, o_x, o_y, o_wo = (orec.refs, orec.seq, orec.expiry, orec.kw_off,
                                                                orec.kw_len, orec.x, orec.y, orec.wo)
    o_lo = orec.expiry_lo  # lives are exact pairs (kbest.later; SPEC 6 "Times")
    o_kw, o_stamp, st = objs.kw, objs.stamp, objs.next[0]
    hk, hq, ho, ids = heap.key, heap.seq, heap.obj, heap.ids
    ro = res_off[s]
    cap = kb[s]
    kk = k[s]
    prune = policy != B_KMAX
    room = cap * POOL if prune else cap
    for j in range(res_n[s]):
        o_refs[res_obj[ro + j]] -= 1
    off = kw_off[s]
    ln = kw_len[s]
    ks = kind[s]
    every = ks == K_KNN and match_all[s] and ln > 1
    first = off
    if every:  # read the rarest keyword's list only (objects seen so far: a cheap proxy)
        for j in range(off + 1, off + ln):
            if freq[kw_id[j]] < freq[kw_id[first]]:
                first = j
    n = 0
    total = 0
    read = 0
    for jw in range(off, off + ln):
        if every and jw != first:
            continue
        p = P.lookup(alive.h_keys, alive.h_vals, np.int64(kw_id[jw]))
        if p < 0:
            continue
        got = P.read(p, ObjectLive(orec), 0, -1, ids, alive, ids, 0)  # every live entry, repeats too
        read += got
        for g in range(got):
            o = ids[g]
            if o_stamp[o] == st:
                continue  # seen under another keyword
            o_stamp[o] = st
            okw = o_kw[o_kwoff[o]:o_kwoff[o] + o_kwlen[o]]
            if every and not carries_all(okw, kw_id, off, ln):
                continue
            total += 1
            dx = o_x[o] - sx[s]
            dy = o_y[o] - sy[s]
            d2 = dx * dx + dy * dy  # scoring.dist2
            if ks == K_KNN:
                key = d2
            else:
                key = topk_key_ids(okw, kw_id, kw_ws, off, ln, o_wo[o], alpha[s], d2, maxdist)
            q = o_seq[o]
            if n < room:  # the best `room` candidates, worst at the heap's root
                i = n
                n += 1
                hk[i] = key
                hq[i] = q
                ho[i] = o
                while i > 0 and _worse(hk[i], hq[i], hk[(i - 1) // 2], hq[(i - 1) // 2]):
                    par = (i - 1) // 2
                    hk[i], hk[par] = hk[par], hk[i]
                    hq[i], hq[par] = hq[par], hq[i]
                    ho[i], ho[par] = ho[par], ho[i]
                    i = par
            elif _worse(hk[0], hq[0], key, q):
                hk[0] = key
                hq[0] = q
                ho[0] = o
                _sift(hk, hq, ho, 0, n)
    for m in range(n - 1, 0, -1):  # heap sort: rank order
        hk[0], hk[m] = hk[m], hk[0]
        hq[0], hq[m] = hq[m], hq[0]
        ho[0], ho[m] = ho[m], ho[0]
        _sift(hk, hq, ho, 0, m)
    # How many of the best candidates the buffer is built over: its threshold.
    j = n
    theta = np.inf
    if policy == B_SKYBAND and n >= kk:
        theta = skyband_theta(hk[kk - 1], ks)
        j = kk
        while j < n and hk[j] <= theta:
            j += 1
    elif (policy == B_CSKYBAND or policy == B_CKSKYBAND) and n > kk:
        ck = policy == B_CKSKYBAND
        j = kk
        best = cost_ckqst(kk, kk, read) if ck else cost(kk, kk, read)
        for jj in range(kk + 1, n + 1):
            c = cost_ckqst(jj, kk, read) if ck else cost(jj, kk, read)
            if c < best:
                best = c
                j = jj
    # The buffer: the first `cap` of those with fewer than k dominators (objects ranked
    # before that leave no earlier), counted against the k latest-leaving seen so far
    # (their slots in hq[:seen], latest first; slots are below 2**53, exact as float64).
    got = 0
    cut = False
    seen = 0
    for i in range(j):
        o = ho[i]
        d = 0
        if prune:
            for m in range(seen):
                if later(o_life, o_lo, np.int64(hq[m]), o):  # hq[:seen]: slots now, latest first
                    d += 1
            if seen < kk or not later(o_life, o_lo, np.int64(hq[seen - 1]), o):
                m = seen if seen < kk else kk - 1
                while m > 0 and not later(o_life, o_lo, np.int64(hq[m - 1]), o):
                    hq[m] = hq[m - 1]
                    m -= 1
                hq[m] = o
                if seen < kk:
                    seen += 1
            if d >= kk:
                continue
        if got == cap:
            cut = True
            break
        res_key[ro + got] = hk[i]
        res_obj[ro + got] = o
        res_dom[ro + got] = d
        got += 1
    res_n[s] = got
    for i in range(got):
        o_refs[res_obj[ro + i]] += 1
    complete[s] = j == total and not cut and got < cap
    if complete[s] and prune and got >= kk:  # as after_put: a k-skyband of k or more has a threshold
        complete[s] = False
        kth[s] = theta if policy == B_SKYBAND else hk[j - 1]
    elif complete[s]:
        kth[s] = np.inf
    elif got == cap:
        kth[s] = res_key[ro + got - 1]
    else:
        kth[s] = hk[j - 1]  # the threshold: nothing alive ranked up to it is missing
    return read
