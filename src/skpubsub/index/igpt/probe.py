"""Probing the built cells (Algorithm 1's filtering step, Section 5.3): the directory of
every cell's lists by keyword, and the probe that prunes by cells (Lemma 6), groups
(Theorem 3), early termination (Theorem 4) and individually (Lemma 1 with Theorem 2)."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .layout import N_CELL, N_ET, N_GROUP, N_INDIV, N_READ

EPS = 1e-9  # bounds must beat the score by this much to prune: float rounding never loses a match


@njit(cache=True)
def directory(nonempty, cells, l_w):
    """Every cell's lists by keyword, then cell (the fields of a ``CellDirectory``) of the
    ``nonempty`` cells (ascending); ``l_w``: each list's keyword."""
    c_l0, c_l1 = cells.l0, cells.l1
    n = 0
    for c in nonempty:
        n += c_l1[c] - c_l0[c]
    ws = np.empty(n, dtype=np.int64)
    cs = np.empty(n, dtype=np.int64)
    lis = np.empty(n, dtype=np.int64)
    i = 0
    for c in nonempty:  # ascending cells: a stable sort by keyword keeps them so
        for li in range(c_l0[c], c_l1[c]):
            ws[i] = l_w[li]
            cs[i] = c
            lis[i] = li
            i += 1
    order = np.argsort(ws, kind="mergesort")
    d_w = np.empty(n, dtype=np.int64)
    d_off = np.zeros(n + 1, dtype=np.int64)
    k = 0
    for i in range(n):
        if i == 0 or ws[order[i]] != ws[order[i - 1]]:
            d_w[k] = ws[order[i]]
            d_off[k] = i
            k += 1
    d_off[k] = n
    return d_w[:k].copy(), d_off[: k + 1].copy(), cs[order], lis[order]


@njit(cache=True)
def probe(x, y, okw, wo, st, built, kth, taat, cands, counters):
    """Algorithm 1's filtering step: slots that may take an object at (x, y) with keywords
    ``okw`` (ids, ascending; weight ``wo`` each) into ``cands``; returns how many. ``st``:
    this probe's stamp; ``kth``: the slots' current entry rules (kScore = -kth).

    Beyond the paper, a subscription that passes the test where it is first met keeps
    collecting its exact share from the cell's later lists (term at a time: all its
    lists are in this cell), and is kept only if the sum reaches its score (NOTES.md)."""
    g, geo, c_lam = built.g, built.geo, built.cells.lam
    d_w, d_off, d_c, d_li = built.directory
    l_g0, l_g1 = built.lists.g0, built.lists.g1
    g_e0, g_e1, g_mw, g_ws, g_key, g_a = built.groups
    en = built.entries
    e_s, e_key, e_smw, e_sws, e_sa, e_x, e_y = en.s, en.key, en.smw, en.sws, en.sa, en.x, en.y
    e_alpha, e_ks, e_w1, e_rmw, e_rws = en.alpha, en.ks, en.w1, en.rmw, en.rws
    stamp, acc, first, need, oma = taat.stamp, taat.acc, taat.first, taat.need, taat.oma
    nc = 0
    nm = len(okw)
    maxdist = geo[4]
    cw = geo[2] / g
    ch = geo[3] / g
    ptr = np.zeros(nm, dtype=np.int64)  # per keyword: its next cell in the directory, and its end
    end = np.zeros(nm, dtype=np.int64)
    for j in range(nm):
        a = np.searchsorted(d_w, okw[j])
        if a < len(d_w) and d_w[a] == okw[j]:
            ptr[j] = d_off[a]
            end[j] = d_off[a + 1]
    while True:  # the cells that hold a list of one of the keywords, in cell order
        c = -1
        for j in range(nm):
            if ptr[j] < end[j] and (c < 0 or d_c[ptr[j]] < c):
                c = d_c[ptr[j]]
        if c < 0:
            break
        cx = c // g
        cy = c % g
        # Definition 7 (a border cell reaches past the space: subscriptions may lie outside it)
        dx = 0.0
        if cx > 0 and x < geo[0] + cx * cw:
            dx = geo[0] + cx * cw - x
        elif cx < g - 1 and x > geo[0] + (cx + 1) * cw:
            dx = x - (geo[0] + (cx + 1) * cw)
        dy = 0.0
        if cy > 0 and y < geo[1] + cy * ch:
            dy = geo[1] + cy * ch - y
        elif cy < g - 1 and y > geo[1] + (cy + 1) * ch:
            dy = y - (geo[1] + (cy + 1) * ch)
        so = max(0.0, 1.0 - math.sqrt(dx * dx + dy * dy) / maxdist)
        so = min(1.0, so * (1.0 + EPS) + EPS)
        if c_lam[c] > so + EPS:  # Lemma 6
            counters[N_CELL] += 1
            for j in range(nm):
                if ptr[j] < end[j] and d_c[ptr[j]] == c:
                    ptr[j] += 1
            continue
        n0 = nc  # the cell's subscriptions met and kept so far: cands[n0:nc], decided after its lists
        for j in range(nm):  # the cell's lists of the keywords, in keyword order
            if ptr[j] >= end[j] or d_c[ptr[j]] != c:
                continue
            li = d_li[ptr[j]]
            ptr[j] += 1
            wt = wo * (nm - j)  # wtsum(m.w); maxwt(m.w) = wo
            # Theorems 3-4 bound the keywords from w on: a subscription kept from an earlier
            # list may sit in what they skip, so while one is pending every entry is read
            pending = nc > n0
            for gi in range(l_g0[li], l_g1[li]):
                rhs = g_key[gi] - g_a[gi] * so
                if not pending and min(g_ws[gi] * wo, g_mw[gi] * wt) + EPS < rhs:  # Theorem 3 (NaN: never)
                    counters[N_GROUP] += 1
                    continue
                e0 = g_e0[gi]
                e1 = g_e1[gi]
                p = e0
                q = e0 if pending else e1
                while p < q:  # Theorem 4: the first entry from which the inequality holds
                    mid = (p + q) // 2
                    if min(e_sws[mid] * wo, e_smw[mid] * wt) + EPS < e_key[mid] - e_sa[mid] * so:
                        q = mid
                    else:
                        p = mid + 1
                if pending:
                    p = e1
                counters[N_ET] += e1 - p
                counters[N_READ] += p - e0
                for e in range(e0, p):
                    s = e_s[e]
                    if stamp[s] == st:
                        if first[s] >= 0:  # met before and kept: Theorem 2's exact share, summed
                            acc[s] += e_w1[e] * wo
                        continue
                    stamp[s] = st  # met under its first shared keyword: the bound below is complete
                    ddx = x - e_x[e]
                    ddy = y - e_y[e]
                    ssim = max(0.0, 1.0 - math.sqrt(ddx * ddx + ddy * ddy) / maxdist)
                    al = e_alpha[e]
                    # Theorem 2: this keyword's share is exact; Eq. 5 bounds the ones after it
                    t = e_w1[e] * wo + min(e_rws[e] * wo, (wt - wo) * e_rmw[e])
                    # Lemma 1, against the current score (reading it beats verifying a stale candidate)
                    ks = max(e_ks[e], -kth[s])
                    if al * ssim + (1.0 - al) * t + EPS < ks:
                        counters[N_INDIV] += 1
                        first[s] = -1
                        continue
                    first[s] = j
                    acc[s] = e_w1[e] * wo
                    need[s] = ks - al * ssim
                    oma[s] = 1.0 - al
                    cands[nc] = s
                    nc += 1
        m = n0
        for i in range(n0, nc):  # Lemma 1 again, with the exact text similarity
            s = cands[i]
            if oma[s] * acc[s] + EPS < need[s]:
                counters[N_INDIV] += 1
                continue
            cands[m] = s
            m += 1
        nc = m
    return nc


@njit(cache=True)
def probe_many(start, objects, off, out, tmp, built, kth, taat, counters):
    """``probe`` for ``objects`` ``start..`` into ``out`` (CSR by ``off``; ``tmp`` room for one
    object's candidates); returns the first object whose candidates did not fit."""
    xs, ys, kwoff, kw = objects
    stamp_next = taat.next
    for i in range(start, len(xs)):
        okw = np.unique(kw[kwoff[i]:kwoff[i + 1]].astype(np.int64))
        if not len(okw):  # nothing asked (an expiring object no buffer can hold)
            off[i + 1] = off[i]
            continue
        stamp_next[0] += 1
        n = probe(xs[i], ys[i], okw, 1.0 / math.sqrt(len(okw)), stamp_next[0], built, kth, taat, tmp, counters)
        if off[i] + n > len(out):
            return i
        for j in range(n):
            out[off[i] + j] = tmp[j]
        off[i + 1] = off[i] + n
    return len(xs)
