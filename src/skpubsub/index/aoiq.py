"""AOIQ-tree (CkQST, section 3): all-keyword subscriptions under ordered keyword pairs.

The compiled grid (:mod:`cgrid`, a quadtree flattened into levels of cells) stays the
spatial part; what changes is the inverted file in each node:

* **Ordered inverted index** (Definition 1). An ``all`` subscription with two or more
  keywords is posted under the pair of its two smallest keyword ids, ψ[1:2], not under
  one keyword; one with a single keyword under that keyword (PL_{w,w}). Ids are the
  vocabulary's, a fixed order (the paper's alphabetical order is one such): a posting
  never moves as frequencies change, unlike GI²'s least frequent keyword.
* **Blocks** (Definition 2). Subscriptions with three or more keywords sit in blocks of
  their pair's list keyed by an interval [minw, maxw] of third keywords ψ[3]; those with
  two in the pair's block b0. Each block is a posting list of its own (a token in the
  keyword dimension of the cell keys), so an object skips every block whose interval
  holds none of its keywords (Theorems 1–2) without reading it.
* **Adaptive insertion** (Algorithm 1, Theorems 3–4): a third keyword inside a block's
  interval joins that block; otherwise the subscription extends the block below or above,
  or opens a new block, whichever adds least verification cost plus θ_U times update cost.
  Verification probabilities (pVw, pVB of Equation 2) come from keyword frequencies in
  the objects seen so far, add-one smoothed, keywords taken as independent.

An object probes, in each of its cells, its own keywords (singles and ``any``
subscriptions), the b0 list of every pair of its keywords that some subscription uses,
and for each such pair the blocks holding its larger keywords (``probe_tokens``). Deletion
stays lazy (the epoch rule of :mod:`postings`), as the paper's delayed deletion.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..core.columns import grown
from ..core.config import Space
from ..core.scoring import carries_all
from ..store.subscriptions import SubTable
from ..core.vocab import Vocabulary
from ..core import postings as P
from ..core.layouts import Directory, Probes
from .cells import cell_of, decode_key, level_key
from .cgrid import CompiledGrid, live_of
from .prefix import NC, probe_classes

TOKEN_BASE = 1 << 31  # block tokens live above every keyword id in the cell keys
THETA_N = 1e-4  # the memory-based cost model's θ (nodecost): update cost against verification


@njit(cache=True)
def probe_tokens(okw, directory, srt, out):
    """The posting tokens an object with keywords ``okw`` probes into ``out``: its keywords,
    then per pair (a < b) of them that is a key in ``directory``, the pair's b0 and each
    block whose interval holds one of its keywords above b (Theorems 1–2: blocks are sorted
    by interval, so one merge pass). ``srt``: scratch for the sorted keywords. Returns how
    many."""
    pk_keys, pk_vals, p_b0, p_start, p_count = (directory.pk_keys, directory.pk_vals, directory.p_b0,
                                                directory.p_start, directory.p_count)
    d_min, d_max, d_tok = directory.d_min, directory.d_max, directory.d_tok
    m = len(okw)
    for i in range(m):
        out[i] = okw[i]
    n = m
    if len(p_b0) == 0:
        return n
    for i in range(m):  # ascending ids (Definition 1's order)
        v = okw[i]
        j = i - 1
        while j >= 0 and srt[j] > v:
            srt[j + 1] = srt[j]
            j -= 1
        srt[j + 1] = v
    for i in range(m):
        a = np.int64(srt[i])
        for j in range(i + 1, m):
            b = np.int64(srt[j])
            p = P.lookup(pk_keys, pk_vals, (a << 32) | b)
            if p < 0:
                continue
            out[n] = p_b0[p]
            n += 1
            r = p_start[p]
            end = r + p_count[p]
            last = -1
            for c in range(j + 1, m):
                w = srt[c]
                while r < end and d_max[r] < w:  # Theorem 2(2): this block holds no larger keyword
                    r += 1
                if r == end:  # Theorem 2(1): no block reaches w
                    break
                if d_min[r] <= w and r != last:
                    out[n] = d_tok[r]
                    n += 1
                    last = r
    return n


@njit(cache=True)
def batch_probe(batch, directory, grid, subs, toks, srt):
    """Algorithm 2 (CkQST section 3.5): the candidates of a batch of objects (``batch``:
    positions, keywords CSR), each posting list of ``grid`` read once for every object of
    the batch that probes it. Returns (CSR offsets, candidates, pairs examined): per object,
    the live slots under its tokens in its cells (as ``cgrid.scan``), an ``all``
    subscription only if the object carries every keyword (the verification's keyword half,
    lines 9-12). Reading a list compacts it, as a scan does. ``toks``, ``srt``: an object's
    tokens and sorted keywords (scratch)."""
    xs, ys, kwoff, kw = batch.x, batch.y, batch.kwoff, batch.kw
    geo, lmax, prefix, store, slots = grid.geo, grid.lmax, grid.prefix, grid.store, grid.slots
    sr = subs.rec
    active, match_all, kw_off, kw_len, kw_id = sr.active, sr.match_all, sr.kw_off, sr.kw_len, subs.kw_id
    test = live_of(active, slots)
    nq = len(xs)
    nl = lmax + 2
    total = 0
    for q in range(nq):  # the objects' (token, cell) probes, as (list key, object)
        okw = kw[kwoff[q]:kwoff[q + 1]]
        if len(okw):
            nt = probe_tokens(okw, directory, srt, toks)
            if prefix:
                nt = probe_classes(okw, toks, nt)
            total += nt * nl
    keys = np.empty(total, dtype=np.int64)
    owner = np.empty(total, dtype=np.int64)
    j = 0
    for q in range(nq):
        okw = kw[kwoff[q]:kwoff[q + 1]]
        if not len(okw):
            continue
        nt = probe_tokens(okw, directory, srt, toks)
        if prefix:
            nt = probe_classes(okw, toks, nt)
        for t in range(nt):
            w = toks[t]
            keys[j] = -(np.int64(w) + 1)
            owner[j] = q
            j += 1
            for level in range(lmax + 1):
                g = 1 << level
                keys[j] = level_key(w, level, cell_of(xs[q], geo[0], geo[2], g), cell_of(ys[q], geo[1], geo[3], g),
                                    lmax)
                owner[j] = q
                j += 1
    order = np.argsort(keys, kind="mergesort")  # a list's objects together, in batch order
    live = np.empty(len(active), dtype=np.int64)  # one list's live slots
    pq = np.empty(max(1024, total), dtype=np.int64)
    ps = np.empty(len(pq), dtype=np.int64)
    npair = 0
    examined = 0
    a = 0
    while a < total:
        key = keys[order[a]]
        b = a + 1
        while b < total and keys[order[b]] == key:
            b += 1
        p = P.lookup(store.h_keys, store.h_vals, key)
        if p >= 0:
            level, cx, cy = decode_key(key, lmax)
            k = P.read(p, test, (level, cx, cy), -1, live, store, live, 0)
            if npair + k * (b - a) > len(pq):
                pq = _grown_to(pq, 2 * (npair + k * (b - a)))
                ps = _grown_to(ps, len(pq))
            for i in range(k):
                s = live[i]
                all_kw = match_all[s] and kw_len[s] > 1
                for r in range(a, b):
                    q = owner[order[r]]
                    examined += 1
                    if all_kw and not carries_all(kw[kwoff[q]:kwoff[q + 1]], kw_id, kw_off[s], kw_len[s]):
                        continue
                    pq[npair] = q
                    ps[npair] = s
                    npair += 1
        a = b
    off = np.zeros(nq + 1, dtype=np.int64)  # per object, each slot once (stamps)
    for i in range(npair):
        off[pq[i] + 1] += 1
    for q in range(nq):
        off[q + 1] += off[q]
    fill = off[:nq].copy()
    by_q = np.empty(npair, dtype=np.int64)
    for i in range(npair):
        by_q[fill[pq[i]]] = ps[i]
        fill[pq[i]] += 1
    n = 0
    for q in range(nq):
        grid.stamp_next[0] += 1
        st = grid.stamp_next[0]
        lo = off[q]
        off[q] = n
        for i in range(lo, off[q + 1]):
            s = by_q[i]
            if slots[s].stamp != st:
                slots[s].stamp = st
                by_q[n] = s
                n += 1
    off[nq] = n
    return off, by_q[:n], examined


@njit(cache=True)
def _grown_to(a, n):
    out = np.empty(n, dtype=a.dtype)
    out[: len(a)] = a
    return out


def probe_room(m: int, directory: Directory) -> int:
    """Bound on ``probe_tokens``' count for an object of ``m`` keywords: its keywords, and per
    pair that is a key its b0 and at most one block per larger keyword."""
    p_b0, p_count = directory.p_b0, directory.p_count
    if len(p_b0) == 0:
        return max(1, m)
    pairs = min(m * (m - 1) // 2, len(p_b0))
    return m + pairs * (1 + min(max(0, m - 2), int(p_count.max())))


@njit(cache=True)
def _pair_put(keys, vals, code, p):
    i = P.slot_of(keys, code)
    keys[i] = code
    vals[i] = p


class AOIQIndex(CompiledGrid):
    """The compiled grid with CkQST's ordered inverted index and blocks; ``theta_u`` weighs
    update cost against verification cost in adaptive insertion (paper default 0.001)."""

    name = "aoiq"

    def __init__(self, subs: SubTable, vocab: Vocabulary, space: Space, grid: int = 16384,
                 max_cells: int = 4, refresh_from: int = 1024, theta_u: float = 0.001, prefix: bool = True,
                 theta_n: float = THETA_N, warm_n: int = 1024, batch: bool = False) -> None:
        super().__init__(subs, vocab, space, grid=grid, max_cells=max_cells, refresh_from=refresh_from,
                         prefix=prefix, theta_n=theta_n, warm_n=warm_n)
        self.theta_u = float(theta_u)
        self.scans = not batch  # else the publish kernel takes every candidate from ``precompute``
        self.precomputes = bool(batch)
        self.rejected = 0  # of the last precompute's pub candidates, failed on keywords
        self.batches = 0  # precompute calls (runs of pubs processed by Algorithm 2)
        self.pairs: dict[tuple[int, int], int] = {}  # (ψ[1], ψ[2]) -> pair index
        self.blocks: list[list[list[int]]] = []  # per pair: [minw, maxw, token, subscriptions] by minw
        self.b0: list[int] = []  # per pair: token of b0
        self.tokens = 0
        self.of_slot: dict[int, tuple[int, int]] = {}  # slot -> (pair, token) it is posted under
        self.objects = 0  # objects seen (the frequencies' denominator)
        self.pk_keys = np.full(64, P.EMPTY, dtype=np.int64)
        self.pk_vals = np.full(64, -1, dtype=np.int32)
        self.p_b0 = np.zeros(0, dtype=np.int64)
        self.p_start = np.zeros(0, dtype=np.int64)
        self.p_count = np.zeros(0, dtype=np.int64)
        self.d_min = np.zeros(0, dtype=np.int64)
        self.d_max = np.zeros(0, dtype=np.int64)
        self.d_tok = np.zeros(0, dtype=np.int64)
        self.d_top = 0  # used length of d_min / d_max / d_tok

    # -- the directory the kernel reads ---------------------------------------------
    @property
    def directory(self) -> Directory:
        return Directory(self.pk_keys, self.pk_vals, self.p_b0, self.p_start, self.p_count, self.d_min, self.d_max,
                         self.d_tok)

    def _new_token(self) -> int:
        self.tokens += 1
        return TOKEN_BASE + self.tokens - 1

    def _pair(self, a: int, b: int) -> int:
        key = (a, b)
        p = self.pairs.get(key)
        if p is not None:
            return p
        p = len(self.b0)
        self.pairs[key] = p
        self.blocks.append([])
        self.b0.append(self._new_token())
        if 2 * (len(self.pairs) + 1) > len(self.pk_keys):
            keys = np.full(2 * len(self.pk_keys), P.EMPTY, dtype=np.int64)
            vals = np.full(len(keys), -1, dtype=np.int32)
            P.rehash(self.pk_keys, self.pk_vals, keys, vals)
            self.pk_keys, self.pk_vals = keys, vals
        _pair_put(self.pk_keys, self.pk_vals, (a << 32) | b, p)
        if p >= len(self.p_b0):
            cap = max(64, 2 * len(self.p_b0))
            self.p_b0 = grown(self.p_b0, cap, 0)
            self.p_start = grown(self.p_start, cap, 0)
            self.p_count = grown(self.p_count, cap, 0)
        self.p_b0[p] = self.b0[p]
        return p

    def _write_blocks(self, p: int) -> None:
        """Copy pair ``p``'s block intervals to the end of the flat directory the kernel reads
        (the old copy is garbage; the whole directory is rewritten once garbage dominates)."""
        bl = self.blocks[p]
        if self.d_top + len(bl) > len(self.d_min):
            live = sum(len(x) for x in self.blocks)
            if 2 * live <= self.d_top:  # compact: rewrite every pair
                self.d_top = 0
                cap = max(64, 2 * live)
                self.d_min, self.d_max, self.d_tok = (np.zeros(cap, dtype=np.int64) for _ in range(3))
                for q in range(len(self.blocks)):
                    if q != p:
                        self._copy_blocks(q)
            if self.d_top + len(bl) > len(self.d_min):
                cap = max(64, 2 * len(self.d_min), self.d_top + len(bl))
                self.d_min = grown(self.d_min, cap, 0)
                self.d_max = grown(self.d_max, cap, 0)
                self.d_tok = grown(self.d_tok, cap, 0)
        self._copy_blocks(p)

    def _copy_blocks(self, p: int) -> None:
        bl = self.blocks[p]
        j = self.d_top
        for i, blk in enumerate(bl):
            self.d_min[j + i], self.d_max[j + i], self.d_tok[j + i] = blk[0], blk[1], blk[2]
        self.p_start[p], self.p_count[p] = j, len(bl)
        self.d_top = j + len(bl)

    # -- Equation 2 and Theorem 3: verification probabilities and cost increases --------
    def _pw(self, lo: int, hi: int) -> np.ndarray:
        """pVw of keyword ids lo..hi: P(an object carries w), add-one smoothed."""
        f = self.vocab.freq
        v = max(1, len(self.vocab))
        seen = f[lo:min(hi + 1, len(f))].astype(np.float64)
        pw = np.full(hi - lo + 1, 1.0 / (self.objects + v))
        pw[: len(seen)] = (seen + 1.0) / (self.objects + v)
        return pw

    def _pvb(self, lo: int, hi: int, pab: float) -> float:
        """pVB of Equation 2: the probability that an object carrying the pair carries some
        keyword of the block's interval [lo, hi], keywords taken as independent. (The
        equation is garbled in our copy of the paper; this is the quantity it estimates.)"""
        return pab * (1.0 - float(np.prod(1.0 - self._pw(lo, hi))))

    def _choose_block(self, p: int, a: int, b: int, w: int) -> int:
        """Algorithm 1 with Theorem 4: the index in the pair's blocks of the block that takes a
        subscription with third keyword ``w`` (a new one is inserted when that is cheapest)."""
        bl = self.blocks[p]
        r = next((i for i, blk in enumerate(bl) if blk[1] >= w), len(bl))  # first block reaching w
        if r < len(bl) and bl[r][0] <= w:
            return r  # case 1: w lies in its interval
        pab = float(np.prod(self._pw(a, a))) * float(np.prod(self._pw(b, b)))
        nb = len(bl)
        opts: list[tuple[float, int, str]] = []
        if nb:
            lg = math.log2(nb)
            for i, lo, hi in ((r - 1, None, w), (r, w, None)):  # case 2: extend below; case 3: above
                if not 0 <= i < nb:
                    continue
                blk = bl[i]
                new = (blk[0] if lo is None else lo, blk[1] if hi is None else hi)
                before, after = self._pvb(blk[0], blk[1], pab), self._pvb(new[0], new[1], pab)
                dcv = (after - before) * (lg + blk[3]) + after
                opts.append((dcv + self.theta_u * 1.0, i, "extend"))
            total = sum(self._pvb(blk[0], blk[1], pab) for blk in bl)
            dcv = math.log2((nb + 1) / nb) * total + pab * float(self._pw(w, w)[0]) * (math.log2(nb + 1) + 1)
            opts.append((dcv + self.theta_u * (1.0 + lg), r, "new"))
        else:
            opts.append((0.0, 0, "new"))
        _, i, how = min(opts)
        if how == "new":
            bl.insert(i, [w, w, self._new_token(), 0])
            self._write_blocks(p)
            return i
        blk = bl[i]
        blk[0], blk[1] = min(blk[0], w), max(blk[1], w)
        j = int(self.p_start[p]) + i
        self.d_min[j], self.d_max[j] = blk[0], blk[1]
        return i

    def _assign(self, s: int) -> None:
        """Choose the posting token of an ``all`` subscription with two or more keywords."""
        self.fit(s)
        kws = sorted(set(self.subs.keywords(s).tolist()))
        if not self.subs.cols.match_all[s] or len(kws) < 2:
            self.tok[s] = -1
            return
        p = self._pair(kws[0], kws[1])
        if len(kws) == 2:
            tok = self.b0[p]
        else:
            blk = self.blocks[p][self._choose_block(p, kws[0], kws[1], kws[2])]
            blk[3] += 1
            tok = blk[2]
        self.tok[s] = tok
        self.of_slot[s] = (p, tok)

    # -- CompiledGrid hooks ---------------------------------------------------------
    def insert(self, s: int) -> None:
        self._assign(s)
        super().insert(s)

    def insert_many(self, slots: np.ndarray) -> None:
        for s in slots.tolist():
            self._assign(s)
        super().insert_many(slots)

    def delete(self, s: int) -> None:
        super().delete(s)
        held = self.of_slot.pop(s, None)
        if held is not None:
            for blk in self.blocks[held[0]]:
                if blk[2] == held[1]:
                    blk[3] -= 1
        self.tok[s] = -1

    def refresh(self, objects: int) -> int:
        """Postings never move (fixed keyword order); only the frequency count is kept."""
        self.objects = objects
        return 0

    def precompute(self, objects: Probes, expiring: Probes) -> tuple:
        """With ``batch`` (the kernel calls it only then): the candidates of a run of pubs
        and of the objects expiring in it, by Algorithm 2 (``batch_probe``), under the index
        as it is now. Within the run a region only shrinks until a refill, and the kernel
        makes a refilled slot a candidate of every later object (engine.kernel.publish_run), so
        these stay a superset."""
        self.batches += 1
        self.fit(self.subs.cols.capacity - 1)
        c = self.subs.cols
        out = [np.zeros(c.capacity, dtype=np.int8)]
        m_kw = int(max(np.diff(objects.kwoff).max(initial=0), np.diff(expiring.kwoff).max(initial=0), 1))
        toks = np.empty(probe_room(m_kw, self.directory) + NC * m_kw, dtype=np.int64)
        srt = np.empty(m_kw, dtype=np.int64)
        grid, subs, directory = self.layout, self.subs.layout, self.directory
        for batch in (objects, expiring):
            o, cands, examined = batch_probe(batch, directory, grid, subs, toks, srt)
            out += [o, cands]
            if batch is objects:  # pairs read and failed on keywords: candidates the kernel never sees
                self.rejected = int(examined) - len(cands)
        return tuple(out)

    def _tokens(self, kw_ids: np.ndarray) -> np.ndarray:
        """An object's keywords, the b0 of its pairs and the blocks it may match
        (probe_tokens), and with the prefix filter its class tokens."""
        out = np.empty(probe_room(len(kw_ids), self.directory) + NC * len(kw_ids), dtype=np.int64)
        n = probe_tokens(kw_ids, self.directory, np.empty(len(kw_ids), dtype=np.int64), out)
        if self.n_topk:
            n = probe_classes(kw_ids, out, n)
        return out[:n]

    @property
    def nbytes(self) -> int:
        return super().nbytes + sum(a.nbytes for a in self.directory)

    def _check(self) -> None:
        """The grid's invariants; the kernel's directory mirrors the blocks, which are sorted
        and disjoint; each `all` subscription of two or more keywords is posted under its
        pair's b0 or the block whose interval holds its third keyword."""
        super()._check()
        for (a, b), p in self.pairs.items():
            assert P.lookup(self.pk_keys, self.pk_vals, (a << 32) | b) == p
            assert self.p_b0[p] == self.b0[p]
            bl = self.blocks[p]
            j, n = int(self.p_start[p]), int(self.p_count[p])
            assert n == len(bl)
            for i, (lo, hi, tok, _) in enumerate(bl):
                assert (self.d_min[j + i], self.d_max[j + i], self.d_tok[j + i]) == (lo, hi, tok)
                assert lo <= hi and (i == 0 or bl[i - 1][1] < lo)
        c = self.subs.cols
        for s in np.flatnonzero(c.active[: c.top]).tolist():
            kws = sorted(set(self.subs.keywords(s).tolist()))
            if not c.match_all[s] or len(kws) < 2:
                assert self.tok[s] < 0
                continue
            p = self.pairs[(kws[0], kws[1])]
            if len(kws) == 2:
                assert self.tok[s] == self.b0[p]
            else:
                assert [blk[2] for blk in self.blocks[p] if blk[0] <= kws[2] <= blk[1]] == [self.tok[s]]
