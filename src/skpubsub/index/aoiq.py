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

import numpy as np
from numba import njit

from ..core.columns import grown
from ..core.config import Space
from ..core.scoring import carries_all
from ..store.subscriptions import K_KNN, K_RANGE, K_TOPK, SubTable
from ..core.vocab import Vocabulary
from ..core import postings as P
from ..core.layouts import Directory, Probes
from .cells import cell_of, decode_key, level_key
from .cgrid import _NO_COST, CompiledGrid
from .placing import NEED_BOOK, NEED_COST, Keywords, unplace_slot
from .probe import live_of
from .pairs import M_PAIRS, M_TOP, Cost, assign_many, blocks_of, log_survival, new_book, pairs_of, with_room
from .prefix import NC, probe_classes

_KINDS = {"range": K_RANGE, "knn": K_KNN, "topk": K_TOPK}
_ALL_KINDS = (1 << K_RANGE) | (1 << K_KNN) | (1 << K_TOPK)


def _kind_mask(kinds: str) -> int:
    """``"range,knn"`` -> the bitmask ``pairs.assign_many`` takes."""
    names = [k.strip() for k in str(kinds).replace(";", ",").split(",") if k.strip()]
    wrong = [k for k in names if k not in _KINDS]
    if wrong:
        raise ValueError(f"aoiq: unknown kind {wrong[0]!r} in kinds; known: range, knn, topk")
    return sum(1 << _KINDS[k] for k in set(names))


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
    the live slots under its tokens in its cells (as ``probe.scan``), an ``all``
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
    for i in range(len(a)):
        out[i] = a[i]
    return out


def probe_room(m: int, directory: Directory) -> int:
    """Bound on ``probe_tokens``' count for an object of ``m`` keywords: its keywords, and per
    pair that is a key its b0 and at most one block per larger keyword."""
    p_b0, p_count = directory.p_b0, directory.p_count
    if len(p_b0) == 0:
        return max(1, m)
    pairs = min(m * (m - 1) // 2, len(p_b0))
    return m + pairs * (1 + min(max(0, m - 2), int(p_count.max())))


class AOIQIndex(CompiledGrid):
    """The compiled grid with CkQST's ordered inverted index and blocks; ``theta_u`` weighs
    update cost against verification cost in adaptive insertion (paper default 0.001);
    ``kinds``: the subscription kinds posted under pairs (others as in the grid)."""

    name = "aoiq"

    def __init__(self, subs: SubTable, vocab: Vocabulary, space: Space, grid: int = 16384,
                 max_cells: int = 4, refresh_from: int = 1024, theta_u: float = 0.001, prefix: bool = True,
                 theta_n: float = THETA_N, warm_n: int = 1024, batch: bool = False,
                 kinds: str = "range,knn,topk") -> None:
        super().__init__(subs, vocab, space, grid=grid, max_cells=max_cells, refresh_from=refresh_from,
                         prefix=prefix, theta_n=theta_n, warm_n=warm_n)
        self.theta_u = float(theta_u)
        self.kinds = _kind_mask(kinds)
        self.scans = not batch  # else the publish kernel takes every candidate from ``precompute``
        self.precomputes = bool(batch)
        self.rejected = 0  # of the last precompute's pub candidates, failed on keywords
        self.batches = 0  # precompute calls (runs of pubs processed by Algorithm 2)
        self.book = new_book()
        self.pair_of = np.full(len(self._slots), -1, dtype=np.int64)  # slot -> its pair (-1: none)
        self.objects = 0  # objects seen (the frequencies' denominator)
        self._cost_at = -1  # objects seen when ``_cost_now`` was made (-1: not made)
        self._cost_now: Cost | None = None
        self._cost_ok = np.zeros(1, dtype=np.bool_)  # the ``One`` bundle's cost is current

    # -- the directory the kernel reads ---------------------------------------------
    @property
    def directory(self) -> Directory:
        b = self.book
        n = int(b.meta[M_PAIRS])  # empty without pairs: an object then probes its keywords only
        return Directory(b.pk_keys, b.pk_vals, b.p_b0[:n], b.p_start[:n], b.p_count[:n], b.d_min, b.d_max, b.d_tok)

    @property
    def pairs(self) -> dict[tuple[int, int], int]:
        return pairs_of(self.book)

    @property
    def blocks(self) -> list[list[list[int]]]:
        return blocks_of(self.book)

    @property
    def b0(self) -> list[int]:
        return self.book.p_b0[: int(self.book.meta[M_PAIRS])].tolist()

    def fit(self, s: int) -> None:
        super().fit(s)
        if len(self.pair_of) < len(self._slots):
            self.pair_of = grown(self.pair_of, len(self._slots), -1)
            self._one = None

    def _assign(self, slots: np.ndarray) -> None:
        """Choose the posting tokens of the slots' ``all`` subscriptions with two or more
        keywords (Algorithm 1, ``pairs.assign_many``), growing the book as it needs."""
        self.fit(int(slots.max()))
        c = self.subs.cols
        if len(slots) == 1:
            paired = c.match_all[slots[0]] and c.kw_len[slots[0]] > 1 and (self.kinds >> int(c.kind[slots[0]])) & 1
        else:
            paired = (c.match_all[slots] & (c.kw_len[slots] > 1) & ((self.kinds >> c.kind[slots]) & 1 > 0)).any()
        if not paired:  # no pair: skip the cost model and the kernel's dispatch
            self.tok[slots] = self.pair_of[slots] = -1
            return
        cost = self._cost()
        srt = np.empty(max(1, self.subs.max_kw), dtype=np.int64)
        done = 0
        kws = Keywords(self.subs.layout.rec, self.subs.layout.kw_id)  # as place_slot's: one signature
        while done < len(slots):
            done += assign_many(slots[done:], kws, self.kinds, self.book, cost, self.tok, self.pair_of, srt)
            if done < len(slots):
                self.book = with_room(self.book)
                self._one = None

    # -- CompiledGrid hooks ---------------------------------------------------------
    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_cost_at"], state["_cost_now"] = -1, None  # made again from the restored vocabulary
        return state

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        self._cost_ok = np.zeros(1, dtype=np.bool_)

    def _cost(self) -> Cost:
        """Equation 2's inputs, made again once the objects seen have grown by an eighth
        since they were last made (``_cost_stale``): the estimates move with the objects,
        not with each new keyword of a subscription (ids past the snapshot count as never
        seen), so one-by-one registration does not rebuild them, nor does each subscription
        of a stream that interleaves them with objects (``log_survival`` is O(vocabulary):
        remade per subscription it was 37% of such a run, index/NOTES.md). They choose
        postings, never results."""
        if self._cost_stale():
            v, freq = max(1, len(self.vocab)), self.vocab.freq.copy()
            self._cost_at = self.objects
            self._cost_now = Cost(freq, np.array([float(self.objects), float(v), self.theta_u]),
                                  log_survival(freq, float(self.objects), float(v)))
            self._one = None
        return self._cost_now

    def _cost_stale(self) -> bool:
        at = self._cost_at
        return at < 0 or self.objects - at >= max(1, at // 8)  # (at < 0: none made)

    # A lone subscription: the grid's insert (``placing.place_slot``) assigns its pair first
    # (Algorithm 1, ``pairs.assign_many``) in the same compiled call; its delete leaves the
    # pair's block (``placing.unplace_slot``).
    def _pairs(self) -> tuple:
        ok = self._cost_ok
        ok[0] = not self._cost_stale()  # else the kernel asks (``_need_pairs``)
        return True, self.kinds, self.book, self._cost_now or _NO_COST, self.pair_of, ok

    def _need_pairs(self, need: int) -> None:
        if need == NEED_COST:
            self._cost()
        elif need == NEED_BOOK:
            self.book = with_room(self.book)
        else:
            super()._need_pairs(need)

    def insert_many(self, slots: np.ndarray) -> None:
        self._assign(slots)
        super().insert_many(slots)

    def delete(self, s: int) -> None:
        """The grid's delete and one member fewer in the slot's block, in one call
        (``placing.unplace_slot``)."""
        if self.prefix:
            self.n_topk -= self._prefixed(s)
        n = unplace_slot(s, self._current())
        if n < 0:
            self.fit(s)
            n = unplace_slot(s, self._current())
        self.live_entries -= n

    def refresh(self, objects: int) -> int:
        """Pair postings never move (fixed keyword order); the frequency count is kept, and
        `all` subscriptions of kinds not under pairs are reviewed as the grid's (GI²)."""
        self.objects = objects
        if self._cost_ok[0] and self._cost_stale():
            self._cost_ok[0] = False  # Equation 2's inputs move with the objects (``_cost``)
        return super().refresh(objects) if self.kinds != _ALL_KINDS else 0

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

    def _check(self, owned: np.ndarray | None = None) -> None:
        """The grid's invariants; the kernel's directory mirrors the blocks, which are sorted
        and disjoint; each `all` subscription of two or more keywords is posted under its
        pair's b0 or the block whose interval holds its third keyword."""
        super()._check(owned)
        b, pairs, blocks = self.book, self.pairs, self.blocks
        assert len(pairs) == int(b.meta[M_PAIRS]) and sorted(pairs.values()) == list(range(len(pairs)))
        counts = [[0] * len(bl) for bl in blocks]
        for p, bl in enumerate(blocks):
            assert 0 <= b.p_count[p] <= b.p_cap[p] and b.p_start[p] + b.p_cap[p] <= b.meta[M_TOP] <= len(b.d_min)
            for i, (lo, hi, _, _) in enumerate(bl):
                assert lo <= hi and (i == 0 or bl[i - 1][1] < lo)
        c = self.subs.cols
        for s in np.flatnonzero(c.active[: c.top]).tolist():
            if owned is not None and not owned[s]:
                continue  # another index's (auto: igpt's top-k)
            kws = sorted(set(self.subs.keywords(s).tolist()))
            if not c.match_all[s] or len(kws) < 2 or not (self.kinds >> int(c.kind[s])) & 1:
                assert self.tok[s] < 0 and self.pair_of[s] < 0
                continue
            p = pairs[(kws[0], kws[1])]
            assert self.pair_of[s] == p
            if len(kws) == 2:
                assert self.tok[s] == b.p_b0[p]
            else:
                hit = [i for i, blk in enumerate(blocks[p]) if blk[0] <= kws[2] <= blk[1]]
                assert len(hit) == 1 and blocks[p][hit[0]][2] == self.tok[s]
                counts[p][hit[0]] += 1
        assert counts == [[blk[3] for blk in bl] for bl in blocks], "block member counts"
