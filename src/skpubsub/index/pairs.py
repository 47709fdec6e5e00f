"""CkQST's ordered inverted index directory (section 3) as arrays, with Algorithm 1
(adaptive insertion, Theorems 3-4) compiled: a run of subscriptions is assigned to pairs
and blocks in one kernel call, and the whole directory is plain data.

* A pair (ψ[1], ψ[2]) is a key ``a << 32 | b`` of the hash ``pk_keys``/``pk_vals``; its
  two-keyword subscriptions sit in its first block b0 (token ``p_b0``).
* Its blocks of third keywords ψ[3] are ``d_min``/``d_max`` (interval), ``d_tok`` (posting
  token) and ``d_cnt`` (subscriptions in it), sorted by interval and disjoint, at
  ``d_*[p_start : p_start + p_count]``. A pair owns ``p_cap`` places there; a pair that
  outgrows them moves to the end (the old places are garbage until ``compacted``).
* ``meta``: pairs, the directory's fill mark, tokens handed out.

The probe side (``aoiq.probe_tokens``) reads the same arrays through ``layouts.Directory``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
from numba import njit

from ..core import postings as P
from ..core.columns import grown

TOKEN_BASE = 1 << 31  # block tokens live above every keyword id in the cell keys
M_PAIRS, M_TOP, M_TOKENS = 0, 1, 2


class Book(NamedTuple):
    pk_keys: np.ndarray
    pk_vals: np.ndarray
    p_b0: np.ndarray
    p_start: np.ndarray
    p_count: np.ndarray
    p_cap: np.ndarray
    d_min: np.ndarray
    d_max: np.ndarray
    d_tok: np.ndarray
    d_cnt: np.ndarray
    meta: np.ndarray


class Cost(NamedTuple):
    """Equation 2's inputs: keyword frequencies in the objects seen, ``consts`` = (objects
    seen, vocabulary size, θ_U), and ``logq`` = ``log_survival`` of them (a block's pVB
    in O(1), however wide its interval: blocks widen to thousands of ids)."""

    freq: np.ndarray
    consts: np.ndarray
    logq: np.ndarray


@njit(cache=True)
def log_survival(freq, objects, v):
    """Prefix sums of log(1 - pVw) over keyword ids: ``out[w]`` sums ids below w."""
    out = np.zeros(len(freq) + 1)
    den = objects + v
    for w in range(len(freq)):
        out[w + 1] = out[w] + math.log1p(-(freq[w] + 1.0) / den)
    return out


def new_book() -> Book:
    i64 = np.int64
    return Book(np.full(64, P.EMPTY, dtype=i64), np.full(64, -1, dtype=np.int32),
                *(np.zeros(16, dtype=i64) for _ in range(4)), *(np.zeros(64, dtype=i64) for _ in range(4)),
                np.zeros(3, dtype=i64))


# -- Equation 2 and Theorem 3: verification probabilities --------------------------------
@njit(cache=True)
def _pw(w, cost):
    """pVw: P(an object carries keyword w), add-one smoothed."""
    den = cost.consts[0] + cost.consts[1]
    if w < len(cost.freq):
        return (cost.freq[w] + 1.0) / den
    return 1.0 / den


@njit(cache=True)
def _pvb(lo, hi, pab, cost):
    """pVB of Equation 2: the probability that an object carrying the pair carries some
    keyword of the interval [lo, hi], keywords taken as independent. (The equation is
    garbled in our copy of the paper; this is the quantity it estimates.)"""
    n = len(cost.logq) - 1  # ids from n on were never seen: pVw = 1 / den
    s = cost.logq[min(hi + 1, n)] - cost.logq[min(lo, n)]
    if hi >= n:
        s += (hi - max(lo, n) + 1) * math.log1p(-1.0 / (cost.consts[0] + cost.consts[1]))
    return pab * -math.expm1(s)


@njit(cache=True)
def _better(c, i, new, bc, bi, bnew):
    """Python's min over (cost, index, "extend" < "new") tuples."""
    if c != bc:
        return c < bc
    if i != bi:
        return i < bi
    return (not new) and bnew


@njit(cache=True)
def choose_block(book, p, a, b, w, cost):
    """Algorithm 1 with Theorem 4: the directory position of the block of pair ``p`` that
    takes a subscription whose third keyword is ``w``; a new block is inserted when that
    is cheapest (room for one more is the caller's)."""
    d_min, d_max, d_cnt = book.d_min, book.d_max, book.d_cnt
    j0 = book.p_start[p]
    nb = book.p_count[p]
    r = 0
    while r < nb and d_max[j0 + r] < w:  # first block reaching w
        r += 1
    if r < nb and d_min[j0 + r] <= w:
        return j0 + r  # case 1: w lies in its interval
    theta = cost.consts[2]
    pab = _pw(a, cost) * _pw(b, cost)
    best_c, best_i, best_new = 0.0, 0, True
    if nb:
        lg = math.log2(nb)
        first = True
        for i in (r - 1, r):  # case 2: extend the block below; case 3: the block above
            if i < 0 or i >= nb:
                continue
            lo, hi = d_min[j0 + i], d_max[j0 + i]
            nlo, nhi = (lo, w) if i == r - 1 else (w, hi)
            before, after = _pvb(lo, hi, pab, cost), _pvb(nlo, nhi, pab, cost)
            c = (after - before) * (lg + d_cnt[j0 + i]) + after + theta
            if first or _better(c, i, False, best_c, best_i, best_new):
                best_c, best_i, best_new, first = c, i, False, False
        total = 0.0
        for i in range(nb):
            total += _pvb(d_min[j0 + i], d_max[j0 + i], pab, cost)
        c = math.log2((nb + 1) / nb) * total + pab * _pw(w, cost) * (math.log2(nb + 1) + 1)
        c += theta * (1.0 + lg)
        if first or _better(c, r, True, best_c, best_i, best_new):
            best_c, best_i, best_new = c, r, True
    if not best_new:
        j = j0 + best_i
        d_min[j] = min(d_min[j], w)
        d_max[j] = max(d_max[j], w)
        return j
    i = best_i
    for j in range(j0 + nb, j0 + i, -1):  # open a place at i
        d_min[j], d_max[j], book.d_tok[j], d_cnt[j] = d_min[j - 1], d_max[j - 1], book.d_tok[j - 1], d_cnt[j - 1]
    d_min[j0 + i] = w
    d_max[j0 + i] = w
    book.d_tok[j0 + i] = TOKEN_BASE + book.meta[M_TOKENS]
    book.meta[M_TOKENS] += 1
    d_cnt[j0 + i] = 0
    book.p_count[p] = nb + 1
    return j0 + i


@njit(cache=True)
def _move_to_end(book, p):
    """Pair ``p``'s blocks to fresh places at the end, twice as many (room checked)."""
    j0, n = book.p_start[p], book.p_count[p]
    cap = max(2, 2 * book.p_cap[p])
    top = book.meta[M_TOP]
    for i in range(n):
        book.d_min[top + i], book.d_max[top + i] = book.d_min[j0 + i], book.d_max[j0 + i]
        book.d_tok[top + i], book.d_cnt[top + i] = book.d_tok[j0 + i], book.d_cnt[j0 + i]
    book.p_start[p] = top
    book.p_cap[p] = cap
    book.meta[M_TOP] = top + cap


@njit(cache=True)
def _sorted_unique(ids, off, ln, srt):
    m = 0
    for j in range(off, off + ln):
        v = ids[j]
        i = m - 1
        while i >= 0 and srt[i] > v:
            i -= 1
        if i >= 0 and srt[i] == v:
            continue
        for t in range(m, i + 1, -1):
            srt[t] = srt[t - 1]
        srt[i + 1] = v
        m += 1
    return m


@njit(cache=True)
def assign_many(slots, subs, kinds, book, cost, tok, pair_of, srt):
    """Post each slot's ``all`` subscription of two or more keywords (of a kind in the
    bitmask ``kinds``) under its pair's b0 or a block (Algorithm 1); others get token -1.
    Stops before a slot that needs more room than the book has and returns how many it
    did (the caller grows the book and goes on)."""
    rec = subs.rec
    for n in range(len(slots)):
        s = slots[n]
        r = rec[s]
        pairs = r.match_all and r.kw_len > 1 and (kinds >> r.kind) & 1
        m = _sorted_unique(subs.kw_id, r.kw_off, r.kw_len, srt) if pairs else 0
        if m < 2:
            tok[s] = -1
            pair_of[s] = -1
            continue
        a, b = np.int64(srt[0]), np.int64(srt[1])
        code = (a << 32) | b
        p = P.lookup(book.pk_keys, book.pk_vals, code)
        if p < 0:
            q = book.meta[M_PAIRS]
            if q + 1 > len(book.p_b0) or 2 * (q + 1) > len(book.pk_keys):
                return n
            p = q
            i = P.slot_of(book.pk_keys, code)
            book.pk_keys[i] = code
            book.pk_vals[i] = p
            book.p_b0[p] = TOKEN_BASE + book.meta[M_TOKENS]
            book.meta[M_TOKENS] += 1
            book.p_start[p] = book.meta[M_TOP]
            book.p_count[p] = 0
            book.p_cap[p] = 0
            book.meta[M_PAIRS] = q + 1
        pair_of[s] = p
        if m == 2:
            tok[s] = book.p_b0[p]
            continue
        if book.p_count[p] == book.p_cap[p]:
            if book.meta[M_TOP] + max(2, 2 * book.p_cap[p]) > len(book.d_min):
                return n
            _move_to_end(book, p)
        j = choose_block(book, p, a, b, np.int64(srt[2]), cost)
        book.d_cnt[j] += 1
        tok[s] = book.d_tok[j]
    return len(slots)


@njit(cache=True)
def _rewrite(book, fresh):
    """Every pair's blocks into ``fresh`` (d_* arrays of a new book) without garbage."""
    top = 0
    for p in range(book.meta[M_PAIRS]):
        j0, n = book.p_start[p], book.p_count[p]
        for i in range(n):
            fresh.d_min[top + i], fresh.d_max[top + i] = book.d_min[j0 + i], book.d_max[j0 + i]
            fresh.d_tok[top + i], fresh.d_cnt[top + i] = book.d_tok[j0 + i], book.d_cnt[j0 + i]
        book.p_start[p] = top
        top += book.p_cap[p]
    book.meta[M_TOP] = top


def with_room(book: Book) -> Book:
    """The book with room for one more pair and one more move of the largest pair."""
    npairs, top = int(book.meta[M_PAIRS]), int(book.meta[M_TOP])
    pk_keys, pk_vals = book.pk_keys, book.pk_vals
    if 2 * (npairs + 1) > len(pk_keys):
        pk_keys = np.full(2 * len(pk_keys), P.EMPTY, dtype=np.int64)
        pk_vals = np.full(len(pk_keys), -1, dtype=np.int32)
        P.rehash(book.pk_keys, book.pk_vals, pk_keys, pk_vals)
    per_pair = [book.p_b0, book.p_start, book.p_count, book.p_cap]
    if npairs + 1 > len(book.p_b0):
        per_pair = [grown(a, 2 * len(a), 0) for a in per_pair]
    book = book._replace(pk_keys=pk_keys, pk_vals=pk_vals, p_b0=per_pair[0], p_start=per_pair[1],
                         p_count=per_pair[2], p_cap=per_pair[3])
    caps = book.p_cap[:npairs]
    need = 2 * int(caps.max(initial=1)) + 2
    if top + need <= len(book.d_min):
        return book
    live = int(caps.sum())
    size = max(len(book.d_min), 2 * (live + need)) if 2 * live > top else len(book.d_min)
    fresh = book._replace(**{f: np.zeros(max(size, live + need), dtype=np.int64)
                             for f in ("d_min", "d_max", "d_tok", "d_cnt")})
    _rewrite(book, fresh)
    return fresh._replace(meta=book.meta)


def pairs_of(book: Book) -> dict[tuple[int, int], int]:
    """(ψ[1], ψ[2]) -> pair, read from the hash (tests and checks)."""
    used = book.pk_keys != P.EMPTY
    return {(int(k) >> 32, int(k) & 0xFFFFFFFF): int(v) for k, v in zip(book.pk_keys[used], book.pk_vals[used])}


def blocks_of(book: Book) -> list[list[list[int]]]:
    """Per pair: its blocks as [minw, maxw, token, subscriptions], by interval."""
    out = []
    for p in range(int(book.meta[M_PAIRS])):
        j0, n = int(book.p_start[p]), int(book.p_count[p])
        out.append([[int(book.d_min[j]), int(book.d_max[j]), int(book.d_tok[j]), int(book.d_cnt[j])]
                    for j in range(j0, j0 + n)])
    return out
