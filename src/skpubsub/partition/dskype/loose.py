"""Loose prefixes (Skype paper, Definition 12 with lambda_T of Eq. (18)) and ``p(pref(s))`` from
the O_init sample, for the ``prefix`` planner."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from numba import njit

from ...io.events import TOPK, Sub
from .vocab import _Vocab


class _Subs(NamedTuple):
    """Subscriptions for ``_prefix_kernel``: keyword ranks and weights (CSR, in the global
    order), position, alpha, k, mode (``_MODE_*``) and the kScore given (NaN: estimate it)."""

    ptr: np.ndarray
    rank: np.ndarray
    w: np.ndarray
    x: np.ndarray
    y: np.ndarray
    alpha: np.ndarray
    k: np.ndarray
    mode: np.ndarray
    kscore: np.ndarray


class _Prefixes(NamedTuple):
    """What ``_prefix_kernel`` writes per subscription."""

    plen: np.ndarray
    kscore: np.ndarray
    hits: np.ndarray
    pseudo: np.ndarray

_MODE_TOPK, _MODE_ANY, _MODE_ALL = 0, 1, 2


@njit(cache=True)
def _kth_largest(a, n, k):
    """The k-th largest of ``a[:n]`` (reorders it): quickselect with Hoare partitioning."""
    target = n - k
    lo = 0
    hi = n - 1
    while lo < hi:
        pivot = a[(lo + hi) // 2]
        i = lo
        j = hi
        while i <= j:
            while a[i] < pivot:
                i += 1
            while a[j] > pivot:
                j -= 1
            if i <= j:
                t = a[i]
                a[i] = a[j]
                a[j] = t
                i += 1
                j -= 1
        if target <= j:
            hi = j
        elif target >= i:
            lo = i
        else:
            return a[target]
    return a[target]


@njit(cache=True)
def _prefix_kernel(subs, sample, out):
    """Per subscription of ``subs`` (``_Subs``), into ``out`` (``_Prefixes``): the loose prefix length of Definition 12 with lambda_T of Eq. (18),
    kScore (given, or estimated among the sample) and how many sample objects carry a prefix
    keyword (for p(pref(s))).

    Only the postings of ``psi[1..n-1]`` are walked (the last, most frequent keyword's are
    usually the longest): an object sharing nothing but ``psi[n]`` scores at most
    ``alpha + (1-alpha) * wt(psi[n])``, the lowest threshold that can cut the prefix, so the
    k-th best score among the walked objects (``A``) gives the same prefix as the k-th best
    among all; it is the kScore reported (exact whenever it shortens the prefix).  The hits of
    a prefix ``psi[1..p]`` are the objects of ``A`` first reached through ``psi[1..p]`` and, for
    ``p = n``, ``|A| + |postings(psi[n])| - |A with psi[n]|``.
    """
    sub_ptr, sub_rank, sub_w, sub_x, sub_y, sub_alpha, sub_k, sub_mode, sub_kscore = subs
    post_ptr, post_obj, obj_ptr, obj_rank, obj_wo = (sample.post_ptr, sample.post_obj, sample.obj_ptr,
                                                     sample.obj_rank, sample.obj_wo)
    obj_x, obj_y, unseen, maxdist = sample.obj_x, sample.obj_y, sample.unseen, sample.maxdist
    out_plen, out_kscore, out_hits, out_pseudo = out
    S = obj_wo.shape[0]
    acc = np.zeros(S)
    stamp = np.zeros(S, dtype=np.int64)
    first = np.zeros(S, dtype=np.int64)
    touched = np.empty(S, dtype=np.int64)
    buf = np.empty(S)
    for i in range(sub_ptr.shape[0] - 1):
        a, b = sub_ptr[i], sub_ptr[i + 1]
        n = b - a
        alpha = sub_alpha[i]
        last = sub_rank[b - 1]
        n_last = post_ptr[last + 1] - post_ptr[last]
        # A: objects carrying one of psi[1..n-1]; TSim and first keyword index per object
        c = 0
        both = 0
        tag = i + 1
        for j in range(a, b - 1):
            r = sub_rank[j]
            for q in range(post_ptr[r], post_ptr[r + 1]):
                o = post_obj[q]
                if stamp[o] != tag:
                    stamp[o] = tag
                    acc[o] = 0.0
                    first[o] = j - a
                    touched[c] = o
                    c += 1
                acc[o] += sub_w[j] * obj_wo[o]
        for t in range(c):
            o = touched[t]
            for q in range(obj_ptr[o], obj_ptr[o + 1]):
                if obj_rank[q] == last:
                    acc[o] += sub_w[b - 1] * obj_wo[o]
                    both += 1
                    break
        ks = sub_kscore[i]
        p = n
        if sub_mode[i] == 2:
            p = 1
        elif sub_mode[i] == 0 and alpha < 1.0 and n > 1:
            if np.isnan(ks):  # estimate kScore(s) among the sample (A suffices, see above)
                k = sub_k[i]
                if c < k or k < 1:
                    ks = 0.0
                else:
                    for t in range(c):
                        o = touched[t]
                        dx = obj_x[o] - sub_x[i]
                        dy = obj_y[o] - sub_y[i]
                        ssim = 1.0 - math.sqrt(dx * dx + dy * dy) / maxdist
                        if ssim < 0.0:
                            ssim = 0.0
                        buf[t] = alpha * ssim + (1.0 - alpha) * acc[o]
                    ks = _kth_largest(buf, c, k)
            lam = ks / (1.0 - alpha) - alpha / (1.0 - alpha)  # Eq. (18)
            # Definition 12: p = argmin_t {wtsum(psi[t+1]) < lambda_T}; wtsum (Eq. 3) is the
            # weight of psi[t+1:], 0 past the end
            suffix = 0.0
            for j in range(a, b):
                suffix += sub_w[j]
            for t in range(n + 1):
                if t == n:
                    suffix = 0.0
                if suffix < lam:
                    p = t
                    break
                suffix -= sub_w[a + t]
            if p < 1:
                p = 1
        out_kscore[i] = ks
        out_plen[i] = p
        if p == n:
            h = c + n_last - both
        else:
            h = 0
            for t in range(c):
                if first[touched[t]] < p:
                    h += 1
        pseudo = False
        for j in range(a, a + p):
            if unseen[sub_rank[j]]:
                pseudo = True
        out_hits[i] = h
        out_pseudo[i] = pseudo


def _mode(sub: Sub) -> int:
    if sub.kind == TOPK:
        return _MODE_TOPK
    return _MODE_ALL if sub.match_all else _MODE_ANY


def _prefixes(voc: _Vocab, subs: Sequence[Sub], kscore):
    """(CSR of ordered keyword ranks, prefix lengths, kScores used, p(pref)) per subscription."""
    n = len(subs)
    ptr, ranks, wts = voc.sorted_subs(subs)
    if kscore is None:
        ks = np.full(n, np.nan)
    else:
        ks = np.full(n, float(kscore))
    plen = np.zeros(n, dtype=np.int64)
    kout = np.zeros(n)
    hits = np.zeros(n, dtype=np.int64)
    pseudo = np.zeros(n, dtype=np.bool_)
    S = voc.S
    _prefix_kernel(_Subs(ptr, ranks, wts, np.array([s.x for s in subs], dtype=np.float64),
                         np.array([s.y for s in subs], dtype=np.float64),
                         np.array([s.alpha for s in subs], dtype=np.float64),
                         np.array([s.k for s in subs], dtype=np.int64),
                         np.array([_mode(s) for s in subs], dtype=np.int64), ks),
                   voc.sample, _Prefixes(plen, kout, hits, pseudo))
    if voc.indep:
        p = np.array([1.0 - float(np.prod(1.0 - voc.p_word[ranks[ptr[i]:ptr[i] + plen[i]]])) for i in range(n)])
    else:
        p = (hits + pseudo) / (S + 1.0)
    return ptr, ranks, plen, kout, p


def loose_prefix(keywords: Sequence[str], weights: Sequence[float], alpha: float, kscore: float) -> int:
    """Definition 12 on keywords already in the global order with their unit weights: the length
    ``p`` of ``pref(s) = s.psi[1:p]`` for ``lambda_T`` of Eq. (18) (at least 1; all keywords
    when ``alpha >= 1``).  The pure-Python statement of what the planner's kernel computes."""
    n = len(keywords)
    if alpha >= 1.0 or n <= 1:
        return n
    lam = kscore / (1.0 - alpha) - alpha / (1.0 - alpha)
    suffix = [0.0] * (n + 1)
    for i in range(n - 1, -1, -1):
        suffix[i] = suffix[i + 1] + weights[i]
    for i in range(n + 1):
        if suffix[i] < lam:
            return max(i, 1)
    return n
