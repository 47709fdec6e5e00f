"""Initial results of a run of kNN/top-k subscriptions registered against a full window.

A new kNN/top-k subscription under a retaining window starts with its best ``kb`` alive
objects (``refill``'s buffer). ``refill`` reads every alive entry of its keywords (the
rarest one for a kNN `all`): at 200,000 alive objects ~1,160 entries a kNN subscription,
~4,900-8,300 a top-k one (engine/NOTES.md, "Registration against a full window"). Here the
alive objects are indexed once for a run of subscriptions (``Tree``, kept while they do
not change: ``AliveStore.tree``) by keyword and place, and each subscription's candidates
are read best-first, stopping as soon as its ``kb``-th is certain:

* ``_pairs``: every (keyword, alive object) pair under one int64 key, ``keyword << 37 |
  class << 32 | z``, sorted: ``z`` the object's cell on a 2^16 x 2^16 grid over the objects'
  bounding box (Morton order), ``class`` its number of keywords (capped at 31; top-k only,
  0 for kNN), beside each the object and its keywords' 64-bit signature (``_bit``).
* ``_nodes``: the quadtree of each (keyword, class) list: a node is a range of its pairs
  (a quarter of its parent's cell; a quarter holding all of them replaces its parent, so
  there are no chains), a leaf holds at most ``LEAF``; each node keeps the OR of its
  objects' signatures.
* ``initial``: per subscription a min-heap of nodes, pairs and objects by key (kNN: the
  squared distance; top-k: minus the score, Skype's Eq. 2), nodes and pairs by a lower
  bound of their objects' keys (the cell's nearest point; top-k: that point's spatial
  score plus the class's largest object weight ``1/sqrt(class)`` times the weights of the
  keywords the signature allows, ``_tb``), popped before objects of an equal key. An
  object popped is the next in rank order (key ascending, newest first on ties, as
  ``refill`` ranks): every unread one is under a node or pair of no larger bound. The
  buffer is the first ``kb`` popped. A kNN `all` reads its shortest keyword's list and
  skips nodes and pairs whose signature lacks a keyword.

The buffer, ``kth`` and ``complete`` are ``refill``'s under the ``kmax`` policy (the best
``kb``; the k-skyband policies weigh every candidate and keep ``refill``). Bounds are
loosened by ``SLACK`` (rounding: the keys are computed as ``refill`` computes them).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..core.layouts import Objects, Subs
from ..core.scoring import carries_all, topk_key_ids
from ..store.subscriptions import K_KNN

L = 16  # quadtree levels: cells of 2^-16 of the bounding box's side
LEAF = 8  # a node of at most this many objects is read, not split
Z_BITS = 32
C_SHIFT = 32
K_SHIFT = 37
MAX_CLASS = 31
NODE_TIE = np.int64(2**62)  # a node pops before an object of an equal key (it may hold a newer one)
SLACK = 1e-9  # bounds are loosened by this (rounding): only more nodes are read
N_LO, N_HI, N_FIRST, N_NCH, N_LV, N_Z, N_KW = range(7)  # a node's row: pairs, children, level, cell, keyword << 5 | class


@njit(inline="always", cache=True)
def _spread(v):
    """The 16 bits of ``v`` at the even bit positions (Morton order)."""
    v &= 0xFFFF
    v = (v | (v << 8)) & 0x00FF00FF
    v = (v | (v << 4)) & 0x0F0F0F0F
    v = (v | (v << 2)) & 0x33333333
    v = (v | (v << 1)) & 0x55555555
    return v


@njit(inline="always", cache=True)
def _squeeze(v):
    """The inverse of ``_spread``: the even bits of ``v``."""
    v &= 0x55555555
    v = (v | (v >> 1)) & 0x33333333
    v = (v | (v >> 2)) & 0x0F0F0F0F
    v = (v | (v >> 4)) & 0x00FF00FF
    v = (v | (v >> 8)) & 0x0000FFFF
    return v


@njit(inline="always", cache=True)
def _bit(w):
    """The bit of keyword id ``w`` in a 64-bit keyword signature."""
    return np.uint64(1) << np.uint64((np.uint64(w) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(58))


@njit(cache=True)
def _pairs(alive, orec, okw, by_class, geo):
    """The sort keys, objects and keyword signatures of every (keyword, alive object) pair;
    ``geo``: the bounding box's x0, y0, width, height (written here)."""
    x0, y0, x1, y1 = np.inf, np.inf, -np.inf, -np.inf
    n = 0
    for o in alive:
        r = orec[o]
        x0, y0, x1, y1 = min(x0, r.x), min(y0, r.y), max(x1, r.x), max(y1, r.y)
        n += r.kw_len
    w = max(x1 - x0, 1e-9)
    h = max(y1 - y0, 1e-9)
    geo[0], geo[1], geo[2], geo[3] = x0, y0, w, h
    side = float(1 << L)
    keys = np.empty(n, dtype=np.int64)
    objs = np.empty(n, dtype=np.int64)
    sigs = np.empty(n, dtype=np.uint64)
    i = 0
    for o in alive:
        r = orec[o]
        cx = min(max(np.int64((r.x - x0) / w * side), 0), (1 << L) - 1)
        cy = min(max(np.int64((r.y - y0) / h * side), 0), (1 << L) - 1)
        z = _spread(cx) | (_spread(cy) << 1)
        c = min(np.int64(r.kw_len), MAX_CLASS) if by_class else 0
        sig = np.uint64(0)
        for j in range(r.kw_off, r.kw_off + r.kw_len):
            sig |= _bit(okw[j])
        for j in range(r.kw_off, r.kw_off + r.kw_len):
            keys[i] = (np.int64(okw[j]) << K_SHIFT) | (c << C_SHIFT) | z
            objs[i] = o
            sigs[i] = sig
            i += 1
    return keys, objs, sigs


@njit(inline="always", cache=True)
def _search(keys, lo, hi, key):
    """The first position in ``keys[lo:hi]`` whose key is ``>= key``."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[mid] < key:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def _nodes(keys, sigs):
    """The quadtree of every (keyword, class) list of the sorted ``keys``: its nodes (pair
    range ``lo:hi``, level and cell ``z`` at that level, children ``first:first + nch``, the
    OR of their objects' signatures) and the roots of keyword ``w``'s lists,
    ``roots[rat[w]:rat[w + 1]]`` (a root is its list's smallest cell holding all of it)."""
    n = len(keys)
    cap = 16 + n // 2
    lo = np.empty(cap, dtype=np.int64)
    hi = np.empty(cap, dtype=np.int64)
    lv = np.empty(cap, dtype=np.int64)
    nn = 0
    i = 0
    while i < n:  # a root a list
        j = _search(keys, i, n, ((keys[i] >> C_SHIFT) + 1) << C_SHIFT)
        if nn == cap:
            cap *= 2
            lo, hi, lv = _grow(lo, cap), _grow(hi, cap), _grow(lv, cap)
        lo[nn], hi[nn], lv[nn] = i, j, 0
        nn += 1
        i = j
    nroots = nn
    top = (keys[n - 1] >> K_SHIFT) if n else 0
    rat = np.zeros(top + 2, dtype=np.int64)
    r = 0
    for w in range(top + 2):
        while r < nroots and (keys[lo[r]] >> K_SHIFT) < w:
            r += 1
        rat[w] = r
    first = np.full(cap, -1, dtype=np.int64)
    nch = np.zeros(cap, dtype=np.int64)
    zmask = np.int64((1 << Z_BITS) - 1)
    i = 0
    while i < nn:  # breadth first: children after their parent
        a, b = lo[i], hi[i]
        while b - a > LEAF and lv[i] < L:
            lvl = lv[i]
            base = keys[a] & ~zmask
            z0 = (keys[a] & zmask) >> (2 * (L - lvl))
            span = np.int64(1) << (2 * (L - lvl - 1))
            ends = np.empty(4, dtype=np.int64)
            parts = 0
            e0 = a
            for q in range(4):
                e = b if q == 3 else _search(keys, e0, b, base | ((((z0 << 2) | q) + 1) * span))
                ends[q] = e
                parts += e > e0
                e0 = e
            if parts == 1:  # one quarter holds them all: the node is that quarter (no chains)
                lv[i] = lvl + 1
                continue
            if nn + 4 > cap:
                cap *= 2
                lo, hi, lv, first, nch = _grow(lo, cap), _grow(hi, cap), _grow(lv, cap), _grow(first, cap), _grow(nch, cap)
            first[i] = nn
            e0 = a
            for q in range(4):
                if ends[q] > e0:
                    lo[nn], hi[nn], lv[nn], first[nn], nch[nn] = e0, ends[q], lvl + 1, -1, 0
                    nn += 1
                    nch[i] += 1
                e0 = ends[q]
            break
        i += 1
    sig = np.zeros(nn, dtype=np.uint64)
    node = np.empty((nn, 8), dtype=np.int64)  # a node's fields in one 64-byte row (N_*)
    for i in range(nn - 1, -1, -1):
        if nch[i] == 0:
            for j in range(lo[i], hi[i]):
                sig[i] |= sigs[j]
        else:
            for c in range(first[i], first[i] + nch[i]):
                sig[i] |= sig[c]
        k = keys[lo[i]]
        node[i, N_LO], node[i, N_HI], node[i, N_FIRST], node[i, N_NCH] = lo[i], hi[i], first[i], nch[i]
        node[i, N_LV], node[i, N_Z], node[i, N_KW] = lv[i], (k & zmask) >> (2 * (L - lv[i])), k >> C_SHIFT
        node[i, 7] = 0
    return node, sig, rat


class Tree:
    """The alive objects' (keyword, class, cell) pairs, sorted, with their objects and
    keyword signatures, and the quadtree nodes over them (``build``, ``_nodes``)."""

    def __init__(self, keys, objs, sigs, geo, nodes) -> None:
        self.keys, self.objs, self.sigs, self.geo, self.nodes = keys, objs, sigs, geo, nodes

    @classmethod
    def build(cls, alive: np.ndarray, objs: Objects, by_class: bool) -> "Tree":
        geo = np.zeros(4)
        keys, ob, sigs = _pairs(alive, objs.rec, objs.kw, by_class, geo)
        order = np.argsort(keys)
        keys, ob, sigs = keys[order], ob[order], sigs[order]
        return cls(keys, ob, sigs, geo, _nodes(keys, sigs))

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.keys, self.objs, self.sigs, *self.nodes))



@njit(inline="always", cache=True)
def _before(hk, ht, a, b):
    return hk[a] < hk[b] or (hk[a] == hk[b] and ht[a] > ht[b])


@njit(inline="always", cache=True)
def _swap(hk, ht, hr, a, b):
    hk[a], hk[b] = hk[b], hk[a]
    ht[a], ht[b] = ht[b], ht[a]
    hr[a], hr[b] = hr[b], hr[a]


@njit(inline="always", cache=True)
def _up(hk, ht, hr, i):
    while i > 0:
        p = (i - 1) // 2
        if not _before(hk, ht, i, p):
            return
        _swap(hk, ht, hr, i, p)
        i = p


@njit(inline="always", cache=True)
def _down(hk, ht, hr, n):
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            return
        if c + 1 < n and _before(hk, ht, c + 1, c):
            c += 1
        if not _before(hk, ht, c, i):
            return
        _swap(hk, ht, hr, i, c)
        i = c


@njit(cache=True)
def initial(slots, subs, objs, keys, tobjs, tsigs, geo, nodes, maxdist):
    """The buffers of the new kNN/top-k ``slots`` (buffer policy ``kmax``) from the alive
    objects of a ``Tree`` (its arrays; built with classes if a slot is top-k). Returns the
    tree entries read."""
    node, n_sig, rat = nodes
    nnodes = len(node)
    sr = subs.rec
    kind, match_all, sx_, sy_, alpha_ = sr.kind, sr.match_all, sr.x, sr.y, sr.alpha
    kw_off, kw_len, res_off, res_n, kth, kb, complete = (sr.kw_off, sr.kw_len, sr.res_off, sr.res_n, sr.kth,
                                                         sr.kb, sr.complete)
    kw_id, kw_ws, res_obj, res_key, res_dom = subs.kw_id, subs.kw_ws, subs.res_obj, subs.res_key, subs.res_dom
    orec = objs.rec
    o_refs, o_seq, o_kwoff, o_kwlen, o_x, o_y, o_wo = (orec.refs, orec.seq, orec.kw_off, orec.kw_len, orec.x,
                                                        orec.y, orec.wo)
    okw_all, stamp, nxt = objs.kw, objs.stamp, objs.next
    x0, y0, gw, gh = geo[0], geo[1], geo[2], geo[3]
    ex, ey = SLACK * gw, SLACK * gh
    top = len(rat) - 2
    hk = np.empty(1024)
    ht = np.empty(1024, dtype=np.int64)
    hr = np.empty(1024, dtype=np.int64)  # a node; nnodes + i: a top-k pair i by its bound; < 0: object -1 - o
    qbit = np.empty(64, dtype=np.uint64)
    size = np.empty(64, dtype=np.int64)
    read = 0
    for s in slots:
        knn = kind[s] == K_KNN
        off, ln = kw_off[s], kw_len[s]
        sx, sy, alpha = sx_[s], sy_[s], alpha_[s]
        every = knn and match_all[s] and ln > 1
        qsig = np.uint64(0)
        if ln > len(qbit):
            qbit, size = np.empty(ln, dtype=np.uint64), np.empty(ln, dtype=np.int64)
        for j in range(ln):
            qbit[j] = _bit(kw_id[off + j])
            qsig |= qbit[j]
            w = np.int64(kw_id[off + j])
            size[j] = 0
            if w <= top:
                for rt in range(rat[w], rat[w + 1]):
                    size[j] += node[rt, N_HI] - node[rt, N_LO]
        nxt[0] += 1
        st = nxt[0]
        n = 0  # heap entries
        # The roots: a (keyword, class) list each; for a kNN `all`, the shortest keyword's only.
        first = -1
        if every:
            best = np.int64(1) << 62
            for j in range(ln):
                if size[j] < best:
                    best = size[j]
                    first = off + j
        for j in range(off, off + ln):
            w = np.int64(kw_id[j])
            if every and j != first or w > top:
                continue
            for rt in range(rat[w], rat[w + 1]):
                n, hk, ht, hr = _push(n, hk, ht, hr, -np.inf, NODE_TIE, rt)
        ro = res_off[s]
        cap = kb[s]
        got = 0
        while n > 0 and got < cap:
            key = hk[0]
            ref = hr[0]
            n -= 1
            if n > 0:
                hk[0], ht[0], hr[0] = hk[n], ht[n], hr[n]
                _down(hk, ht, hr, n)
            if ref < 0:  # the next object in rank order
                o = -1 - ref
                if stamp[o] == st:
                    continue  # found under another keyword first
                stamp[o] = st
                res_key[ro + got] = key
                res_obj[ro + got] = o
                res_dom[ro + got] = 0
                got += 1
                continue
            if ref >= nnodes:  # a top-k entry by its bound: now by its exact key
                o = tobjs[ref - nnodes]
                if stamp[o] == st:
                    continue
                read += 1
                okw = okw_all[o_kwoff[o]:o_kwoff[o] + o_kwlen[o]]
                dx = o_x[o] - sx
                dy = o_y[o] - sy
                k2 = topk_key_ids(okw, kw_id, kw_ws, off, ln, o_wo[o], alpha, dx * dx + dy * dy, maxdist)
                n, hk, ht, hr = _push(n, hk, ht, hr, k2, o_seq[o], -1 - o)
                continue
            lo, hi, kwc = node[ref, N_LO], node[ref, N_HI], node[ref, N_KW]
            c = kwc & MAX_CLASS
            wo = 1.0 / math.sqrt(c) if c > 0 else 1.0  # the class's largest object weight
            if node[ref, N_NCH] == 0:  # a leaf: its objects
                if not knn:  # each by the bound of its signature and the leaf's cell first
                    d2 = _mind2(node[ref, N_Z], node[ref, N_LV], sx, sy, x0, y0, gw, gh, ex, ey)
                    ssim = alpha * max(0.0, 1.0 - math.sqrt(d2) / maxdist)
                    home = _home(kwc >> (K_SHIFT - C_SHIFT), kw_id, off, ln)
                    for i in range(lo, hi):
                        tb = _tb(tsigs[i], home, qbit, size, kw_ws, off, ln)
                        n, hk, ht, hr = _push(n, hk, ht, hr, -(ssim + (1.0 - alpha) * wo * tb) - SLACK, NODE_TIE,
                                              nnodes + i)
                    continue
                for i in range(lo, hi):
                    if every and (tsigs[i] & qsig) != qsig:
                        continue  # lacks one of the keywords
                    o = tobjs[i]
                    read += 1
                    if every and not carries_all(okw_all[o_kwoff[o]:o_kwoff[o] + o_kwlen[o]], kw_id, off, ln):
                        continue
                    dx = o_x[o] - sx
                    dy = o_y[o] - sy
                    n, hk, ht, hr = _push(n, hk, ht, hr, dx * dx + dy * dy, o_seq[o], -1 - o)  # scoring.dist2
                continue
            home = -1 if knn else _home(kwc >> (K_SHIFT - C_SHIFT), kw_id, off, ln)
            for ch in range(node[ref, N_FIRST], node[ref, N_FIRST] + node[ref, N_NCH]):
                sig = n_sig[ch]
                if every and (sig & qsig) != qsig:
                    continue  # none of its objects carries every keyword
                d2 = _mind2(node[ch, N_Z], node[ch, N_LV], sx, sy, x0, y0, gw, gh, ex, ey)
                if knn:
                    lb = d2
                else:
                    tb = _tb(sig, home, qbit, size, kw_ws, off, ln)
                    lb = -(alpha * max(0.0, 1.0 - math.sqrt(d2) / maxdist) + (1.0 - alpha) * wo * tb) - SLACK
                n, hk, ht, hr = _push(n, hk, ht, hr, lb, NODE_TIE, ch)
        res_n[s] = got
        for i in range(got):
            o_refs[res_obj[ro + i]] += 1
        complete[s] = got < cap  # every qualifying object read (``refill``'s rule under kmax)
        kth[s] = np.inf if got < cap else res_key[ro + got - 1]
    return read


@njit(inline="always", cache=True)
def _home(w, kw_id, off, ln):
    """The index of keyword id ``w`` among the subscription's."""
    for j in range(ln):
        if kw_id[off + j] == w:
            return j
    return -1


@njit(inline="always", cache=True)
def _after(i, j, size):
    """Is the subscription's keyword ``i`` after ``j`` (longer list; the same: later)?"""
    return size[i] > size[j] or (size[i] == size[j] and i > j)


@njit(inline="always", cache=True)
def _tb(sig, home, qbit, size, kw_ws, off, ln):
    """A bound of the shared weights of the objects of keyword ``home``'s list whose keyword
    signatures OR to ``sig``, counting only those of them that carry no keyword of the
    subscription's before ``home`` (``_after``, by list length): an object that carries one
    is in that keyword's list too, where its bound holds. Each object so has a list whose
    bounds hold for it, and is found there in rank order."""
    tb = kw_ws[off + home]
    for i in range(ln):
        if i != home and _after(i, home, size) and (sig & qbit[i]):
            tb += kw_ws[off + i]
    return tb


@njit(inline="always", cache=True)
def _mind2(z, lv, sx, sy, x0, y0, gw, gh, ex, ey):
    """The squared distance from (sx, sy) to cell ``z`` of level ``lv``, widened by (ex, ey)."""
    cw = gw / (1 << lv)
    ch = gh / (1 << lv)
    cx = _squeeze(z)
    cy = _squeeze(z >> 1)
    dx = max(x0 + cx * cw - ex - sx, 0.0, sx - (x0 + (cx + 1) * cw + ex))
    dy = max(y0 + cy * ch - ey - sy, 0.0, sy - (y0 + (cy + 1) * ch + ey))
    return dx * dx + dy * dy


@njit(inline="always", cache=True)
def _push(n, hk, ht, hr, key, tie, ref):
    """Push (key, tie, ref) on the heap of ``n`` entries, grown if full."""
    if n == len(hk):
        m = 2 * n
        hk, ht, hr = _grow(hk, m), _grow(ht, m), _grow(hr, m)
    hk[n] = key
    ht[n] = tie
    hr[n] = ref
    _up(hk, ht, hr, n)
    return n + 1, hk, ht, hr


@njit(cache=True)
def _grow(a, m):
    b = np.empty(m, dtype=a.dtype)
    for i in range(len(a)):
        b[i] = a[i]
    return b
