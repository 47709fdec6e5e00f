"""The row netting of the compiled publish path: the kernel's rows (``core.layouts.Rows``, one
row per result change) put in order by (pub, subscription seq) without moving them
(``group_rows``), and a pub's rows for one subscription netted out to one notification
(``net_changes``, SPEC section 6) into ``core.layouts.NoteCols``, which
``io.notifications.Notes`` then holds. ``engine.driver.Publisher`` calls both after each
kernel call (engine/NOTES.md, "Rows grouped per pub").
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _rank_sort(objs, keys, oseq, lo, hi):
    """Sort ``objs[lo:hi]`` (with ``keys``) in rank order: key, then newest first."""
    for a in range(lo + 1, hi):
        o, k = objs[a], keys[a]
        b = a - 1
        while b >= lo and (keys[b] > k or (keys[b] == k and oseq[objs[b]] < oseq[o])):
            objs[b + 1] = objs[b]
            keys[b + 1] = keys[b]
            b -= 1
        objs[b + 1] = o
        keys[b + 1] = k


@njit(inline="always", cache=True)
def _cancel(objs, keys, koff, lo, hi, o):
    """Drop ``o`` from ``objs[lo:hi]`` (keys at ``keys[koff + i]``) if there; did it?"""
    for q in range(lo, hi):
        if objs[q] == o:
            for r in range(q, hi - 1):
                objs[r] = objs[r + 1]
                keys[koff + r] = keys[koff + r + 1]
            return True
    return False


SMALL = 32  # a pub's rows up to this many are sorted in place (insertion), more by merging runs (``_merge_runs``)
RUNS = 16  # more ascending runs than this in a pub's rows: a plain sort
_LOW = 24  # packed keys: seq << _LOW | the row's place among its pub's rows (unique: stable)


@njit(inline="always", cache=True)
def _merge_runs(a, lo, hi, tmp, starts):
    """Sort ``a[lo:hi]`` by merging its ascending runs pairwise (``tmp``, ``starts``: scratch
    over the same range). A pub's rows come from a few posting lists, each read in slot
    order, so they are a few sorted runs (range_1m: 133 rows in ~5 runs a pub): 2-3 merge
    passes, against a quicksort's ~7 (``group_rows`` 81 -> 48 ms on range_1m's 2.4M rows).
    More than ``RUNS`` runs: a plain sort."""
    m = 1
    starts[0] = lo
    for i in range(lo + 1, hi):
        if a[i] < a[i - 1]:
            starts[m] = i
            m += 1
    if m == 1:
        return
    if m > RUNS:
        a[lo:hi].sort()  # in place
        return
    starts[m] = hi
    src, dst = a, tmp
    in_tmp = False
    while m > 1:
        k = 0
        for r in range(0, m, 2):
            s0, s1 = starts[r], starts[r + 1]
            s2 = starts[r + 2] if r + 1 < m else s1
            p, q = s0, s1
            for o in range(s0, s2):  # (a lone last run is copied: q == s2)
                if q >= s2 or (p < s1 and src[p] <= src[q]):
                    dst[o] = src[p]
                    p += 1
                else:
                    dst[o] = src[q]
                    q += 1
            starts[k] = s0
            k += 1
        starts[k] = hi
        m = k
        src, dst = dst, src
        in_tmp = not in_tmp
    if in_tmp:
        for o in range(lo, hi):
            a[o] = tmp[o]


@njit(cache=True, nogil=True)  # (the GIL is free for ``run``'s writer thread)
def group_rows(rows, n, sseq, by_slot, perm):
    """The order of ``rows[:n]`` (the publish kernel's, pubs in order) by (pub, subscription
    seq ``sseq[slot]``), stable (each pair's rows stay in the order they happened), into
    ``perm[:n]``: what ``net_changes`` reads them by (the rows are not moved: the gather of
    their seven columns was ~3% of range_1m's object phase). The kernel emits a pub's rows
    together and the pubs in order, so only each pub's rows are sorted, by one int64 key
    each: the seq and the row's place packed (distinct keys, so any sort is stable), sorted
    in ``perm`` without reading ``sseq`` again. Returns False if the pubs are out of order.
    ``by_slot``: the live slots ascend with their seqs (``SubTable.in_order``), so the slot
    is the key, and ``sseq``, a random read a row, is not read."""
    I, S = rows.i, rows.s
    for j in range(1, n):
        if I[j] < I[j - 1]:
            return False
    tmp, starts = np.empty(n, dtype=np.int64), np.empty(n + 1, dtype=np.int64)  # (``_merge_runs``' scratch)
    j = 0
    while j < n:
        e = j + 1
        while e < n and I[e] == I[j]:
            e += 1
        packed = e - j < (1 << _LOW)
        for a in range(j, e):
            q = S[a] if by_slot else sseq[S[a]]
            packed = packed and 0 <= q < (1 << (62 - _LOW))
            perm[a] = (q << _LOW) | (a - j)
        if not packed:  # seqs too large to pack (never in practice): a stable sort of the seqs
            keys = np.empty(e - j, dtype=np.int64)
            for a in range(j, e):
                keys[a - j] = S[a] if by_slot else sseq[S[a]]
            order = np.argsort(keys, kind="mergesort")
            for a in range(j, e):
                perm[a] = order[a - j] + j
        else:
            if e - j <= SMALL:
                for a in range(j + 1, e):
                    k = perm[a]
                    b = a - 1
                    while b >= j and perm[b] > k:
                        perm[b + 1] = perm[b]
                        b -= 1
                    perm[b + 1] = k
            else:
                _merge_runs(perm, j, e, tmp, starts)
            for a in range(j, e):
                perm[a] = j + (perm[a] & ((1 << _LOW) - 1))
        j = e
    return True


@njit(cache=True, nogil=True)
def net_changes(rows, order, oseq, out, tmp_key):
    """``rows`` (the publish kernel's, :class:`skpubsub.core.layouts.Rows`) read in ``order``
    (``group_rows``': by pub and subscription, each pair's rows in the order they happened)
    into ``out`` (``NoteCols``): one notification per pair with a net change; returns how
    many. A leaving object ``d`` of -2 marks a range match of ``a``. Added objects come in
    new rank order (``oseq``: object seqs, the newest first on ties), removed in old;
    ``tmp_key``: scratch of twice the rows."""
    I, S, A, D, KA, KD = rows.i, rows.s, rows.a, rows.d, rows.ka, rows.kd
    n_i, n_s, n_match, add_off, add_obj, rem_off, rem_obj = out
    m = len(order)
    n = 0
    na = 0
    nr = 0
    add_off[0] = 0
    rem_off[0] = 0
    j = 0
    while j < m:
        pj = order[j]
        e = j + 1
        while e < m and I[order[e]] == I[pj] and S[order[e]] == S[pj]:
            e += 1
        a0, r0 = na, nr
        match = False
        if e == j + 1:
            if D[pj] == -2:
                match = True
                add_obj[na] = A[pj]
                na += 1
            else:
                if A[pj] >= 0:
                    add_obj[na] = A[pj]
                    na += 1
                if D[pj] >= 0:
                    rem_obj[nr] = D[pj]
                    nr += 1
        else:  # several changes of one pub to one result: their net (an object in and out cancels)
            for x in range(j, e):
                h = order[x]
                if D[h] >= 0:
                    if _cancel(add_obj, tmp_key, 0, a0, na, D[h]):
                        na -= 1
                    else:
                        rem_obj[nr] = D[h]
                        tmp_key[m + nr] = KD[h]
                        nr += 1
                if A[h] >= 0:
                    if _cancel(rem_obj, tmp_key, m, r0, nr, A[h]):
                        nr -= 1
                    else:
                        add_obj[na] = A[h]
                        tmp_key[na] = KA[h]
                        na += 1
            _rank_sort(add_obj, tmp_key, oseq, a0, na)
            _rank_sort(rem_obj[:m], tmp_key[m:], oseq, r0, nr)
        if na > a0 or nr > r0:
            n_i[n] = I[pj]
            n_s[n] = S[pj]
            n_match[n] = match
            n += 1
            add_off[n] = na
            rem_off[n] = nr
        j = e
    return n
