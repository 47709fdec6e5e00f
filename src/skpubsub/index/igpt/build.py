"""Building a cell's inverted file (Section 5.2): one list per keyword, α-partition groups
(Section 5.2.1) sorted for Theorem 4, with the statistics of Theorem 3 and Lemma 6."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

ALPHA_MAX = 0.999  # α above this: α* = inf, never pruned by text (kScore* = kScore/(1-α) explodes)
ALPHA_MIN = 1e-3  # α below this: never pruned by cell (Eq. 8 divides by α)


@njit(cache=True)
def _star(kscore, alpha):
    """(kScore*, α*) of Section 5.2.1; an α too close to 1 is never pruned by text."""
    if alpha > ALPHA_MAX:
        return -math.inf, math.inf
    return kscore / (1.0 - alpha), alpha / (1.0 - alpha)


@njit(cache=True)
def build_cells(todo, members, subs, group, pk, cells, arenas):
    """Build the inverted file of each cell in ``todo`` (its slots in ``members``, their
    fields in the table ``subs``) at the ``arenas``' tops, ``group`` entries per α-partition
    group; records each cell's lists and bound in ``cells`` and each slot's score snapshot
    in ``pk``. Returns the entries written."""
    head, nxt = members.head, members.nxt
    sr = subs.rec
    kth, sx, sy, alpha, kw_off, kw_len = sr.kth, sr.x, sr.y, sr.alpha, sr.kw_off, sr.kw_len
    kw_id, kw_ws = subs.kw_id, subs.kw_ws
    c_l0, c_l1, c_lam = cells
    tops = arenas.tops
    l_w, l_g0, l_g1 = arenas.lists
    g_e0, g_e1, g_mw, g_ws, g_key, g_a = arenas.groups
    en = arenas.entries
    e_s, e_key, e_smw, e_sws, e_sa, e_x, e_y = en.s, en.key, en.smw, en.sws, en.sa, en.x, en.y
    e_alpha, e_ks, e_w1, e_rmw, e_rws = en.alpha, en.ks, en.w1, en.rmw, en.rws
    written = 0
    for c in todo:
        n = 0
        s = head[c]
        while s >= 0:
            n += kw_len[s]
            s = nxt[s]
        c_l0[c] = tops[0]
        c_l1[c] = tops[0]
        c_lam[c] = -math.inf
        if n == 0:
            continue
        # every (keyword, slot) of the cell, with its keyword's suffix statistics in id order
        tw = np.empty(n, dtype=np.int64)
        ts = np.empty(n, dtype=np.int64)
        tmw = np.empty(n)
        tws = np.empty(n)
        tw1 = np.empty(n)
        trmw = np.empty(n)
        trws = np.empty(n)
        ta = np.empty(n)
        tk = np.empty(n)
        lam = math.inf
        i = 0
        s = head[c]
        while s >= 0:
            off = kw_off[s]
            ln = kw_len[s]
            ids = kw_id[off:off + ln].astype(np.int64)
            order = np.argsort(ids)
            mw = 0.0
            sw = 0.0
            ks = -kth[s]
            pk[s] = kth[s]
            kstar, astar = _star(ks, alpha[s])
            for jj in range(ln - 1, -1, -1):  # suffix max (Eq. 4) and sum (Eq. 3) of the weights
                j = off + order[jj]
                tw1[i] = kw_ws[j]
                trmw[i] = mw  # of the keywords after this one
                trws[i] = sw
                mw = max(mw, kw_ws[j])
                sw += kw_ws[j]
                tw[i] = kw_id[j]
                ts[i] = s
                tmw[i] = mw
                tws[i] = sw
                ta[i] = astar
                tk[i] = kstar
                i += 1
            # Eq. 8: the spatial similarity s needs even with TSim = 1
            need = -math.inf if alpha[s] < ALPHA_MIN else (ks - (1.0 - alpha[s])) / alpha[s]
            lam = min(lam, need)
            s = nxt[s]
        c_lam[c] = lam
        by_w = np.argsort(tw, kind="mergesort")
        a = 0
        while a < n:  # one posting list per keyword
            b = a
            while b < n and tw[by_w[b]] == tw[by_w[a]]:
                b += 1
            li = tops[0]
            tops[0] += 1
            l_w[li] = tw[by_w[a]]
            l_g0[li] = tops[1]
            run = by_w[a:b]
            by_a = run[np.argsort(ta[run], kind="mergesort")]  # α-partition: groups of similar α*
            ng = max(1, (b - a + group - 1) // group)
            for g in range(ng):
                lo = (b - a) * g // ng
                hi = (b - a) * (g + 1) // ng
                mem = by_a[lo:hi]
                mem = mem[np.argsort(tk[mem], kind="mergesort")]  # Theorem 4: kScore* ascending
                gi = tops[1]
                tops[1] += 1
                e0 = tops[2]
                g_e0[gi] = e0
                g_e1[gi] = e0 + len(mem)
                smw = 0.0
                sws = 0.0
                sa = -math.inf
                for r in range(len(mem) - 1, -1, -1):  # suffix maxima (Eqs. 6-7)
                    t = mem[r]
                    e = e0 + r
                    s = ts[t]
                    smw = max(smw, tmw[t])
                    sws = max(sws, tws[t])
                    sa = max(sa, ta[t])
                    e_s[e] = s
                    e_key[e] = tk[t]
                    e_smw[e] = smw
                    e_sws[e] = sws
                    e_sa[e] = sa
                    e_x[e] = sx[s]
                    e_y[e] = sy[s]
                    e_alpha[e] = alpha[s]
                    e_ks[e] = -kth[s]
                    e_w1[e] = tw1[t]
                    e_rmw[e] = trmw[t]
                    e_rws[e] = trws[t]
                g_mw[gi] = smw
                g_ws[gi] = sws
                g_a[gi] = sa
                g_key[gi] = e_key[e0]
                tops[2] += len(mem)
            l_g1[li] = tops[1]
            a = b
        c_l1[c] = tops[0]
        written += n
    return written
