"""Re-evaluation of one k-best buffer from the alive objects, compiled.

Both the engine's plain path and the publish kernel (:mod:`skpubsub.fastpath`) call
``refill``: when expiries leave a buffer short of k (and it may have missed objects),
and when a kNN/top-k subscription registers under a retaining window. It reads the
alive-object postings (:class:`skpubsub.store.objects.AliveStore`) of the
subscription's keywords — for an all-keywords kNN only the rarest one, verifying the
rest — and keeps the best ``kb`` by key, newest first on ties (SubTable's rule).
Keys use :mod:`skpubsub.scoring`'s arithmetic in its order, as the kernel's do.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..index import postings as P
from ..scoring import carries_all, topk_key_ids
from ..store.objects import alive_entry
from ..subscriptions import K_KNN


@njit(cache=True)
def refill(s, kind, match_all, sx, sy, alpha, kw_off, kw_len, kw_id, kw_ws, freq,
           res_off, res_n, kth, res_obj, res_key, kb, complete,
           o_refs, o_alive, o_seq, o_kwoff, o_kwlen, o_kw, o_x, o_y, o_wo, o_stamp, st, maxdist,
           h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free, meta):
    """Make the buffer of ``s`` the best ``kb`` alive qualifying objects; ``complete`` iff
    fewer than ``kb`` qualify. ``st``: a stamp not yet in ``o_stamp``. Returns P, the alive
    entries read: O(P) plus O(kb) per object that enters the running best ``kb``."""
    ro = res_off[s]
    cap = kb[s]
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
        p = P.lookup(h_keys, h_vals, np.int64(kw_id[jw]))
        if p < 0:
            continue
        rb = p_head[p]
        wb = rb
        wi = 0
        dropped = 0
        while rb >= 0:  # scan and compact, as store.objects.scan_posting
            cnt = P.B if rb != p_tail[p] else p_fill[p]
            for ri in range(cnt):
                e = blk_data[rb * P.B + ri]
                if not alive_entry(e, o_alive, o_seq):
                    dropped += 1
                    continue
                blk_data[wb * P.B + wi] = e
                wi += 1
                if wi == P.B:
                    wb = blk_next[wb]
                    wi = 0
                read += 1
                o = e >> 32
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
                if n == cap and not (key < res_key[ro + n - 1]
                                     or (key == res_key[ro + n - 1] and q > o_seq[res_obj[ro + n - 1]])):
                    continue
                pos = n if n < cap else cap - 1
                while pos > 0 and (res_key[ro + pos - 1] > key
                                   or (res_key[ro + pos - 1] == key and o_seq[res_obj[ro + pos - 1]] < q)):
                    res_key[ro + pos] = res_key[ro + pos - 1]
                    res_obj[ro + pos] = res_obj[ro + pos - 1]
                    pos -= 1
                res_key[ro + pos] = key
                res_obj[ro + pos] = o
                if n < cap:
                    n += 1
            rb = blk_next[rb]
        if dropped:
            P.truncate(p, wb, wi, h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_free,
                       meta, dropped)
    res_n[s] = n
    for j in range(n):
        o_refs[res_obj[ro + j]] += 1
    complete[s] = total < cap
    kth[s] = res_key[ro + n - 1] if (n > 0 and (n == cap or not complete[s])) else np.inf  # kbest.threshold
    return read
