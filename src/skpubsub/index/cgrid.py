"""The compiled grid inverted file: DkM-SKS's worker index and PS2Stream's GI².

One structure serves both papers (DkM-SKS section 4.3; PS2Stream section IV-D):
a uniform grid whose cells each hold an inverted file (keyword -> subscriptions).

* ``range``: posted in the cells its rectangle overlaps; an ``all`` subscription
  under its least frequent keyword only, an ``any`` one under each keyword (GI²).
* ``knn`` (and ``topk``): posted in the cells its ball B(s) overlaps — radius
  ``sqrt(kth)``, or for top-k the distance at which an object could still reach
  the k-th score — while the result is full; before that, and whenever the ball
  covers more than ``max_cells`` cells, in a per-keyword global list (DkM-SKS's
  unfilled subscriptions).

Deletion and shrinking are lazy (:mod:`postings`): a slot's ``epoch`` and
current cell ``box`` decide whether an entry is live, so a shrinking ball costs
nothing at the time and stale entries vanish when a scan passes them. A ball
that grows (results refilled after expiry) or leaves the global list is
re-posted under a new epoch. The publish kernel in :mod:`skpubsub.fastpath`
scans these postings directly.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..config import Space
from ..subscriptions import K_KNN, K_RANGE, SubTable
from ..vocab import Vocabulary
from . import postings as P

SLACK = 1e-9  # regions are widened a hair so float rounding never loses a match


@njit(cache=True)
def cell_x(x, x1, cw, g):
    c = int(math.floor((x - x1) / cw))
    return min(g - 1, max(0, c))


@njit(cache=True)
def region_box(kind, sx, sy, rx1, ry1, rx2, ry2, kth, alpha, geo, g, max_cells, out):
    """Cell box of a slot's region into ``out[0:4]``; returns False for the global list.

    ``geo`` = (x1, y1, cw, ch, maxdist).
    """
    if kind == K_RANGE:
        ax1, ay1, ax2, ay2 = rx1, ry1, rx2, ry2
    else:
        if not math.isfinite(kth):
            return False
        if kind == K_KNN:
            r = math.sqrt(kth)
        else:  # top-k: alpha*(1 - d/MaxDist) + (1 - alpha)*1 >= score  =>  d <= MaxDist*(1-score)/alpha
            room = (1.0 + kth) + SLACK
            if room >= alpha:
                return False
            r = geo[4] * room / alpha
        r = r * (1.0 + SLACK) + SLACK
        ax1, ay1, ax2, ay2 = sx - r, sy - r, sx + r, sy + r
    out[0] = cell_x(ax1, geo[0], geo[2], g)
    out[1] = cell_x(ay1, geo[1], geo[3], g)
    out[2] = cell_x(ax2, geo[0], geo[2], g)
    out[3] = cell_x(ay2, geo[1], geo[3], g)
    return (out[2] - out[0] + 1) * (out[3] - out[1] + 1) <= max_cells


@njit(cache=True)
def _post(h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free, meta,
          s, epoch, is_global, box, kws, g):
    entry = (np.int64(s) << 32) | epoch
    if is_global:
        for w in kws:
            P.append(h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free, meta,
                     -(np.int64(w) + 1), entry)
        return len(kws)
    gg = np.int64(g) * g
    n = 0
    for w in kws:
        for cx in range(box[0], box[2] + 1):
            for cy in range(box[1], box[3] + 1):
                P.append(h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free, meta,
                         np.int64(w) * gg + cx * g + cy, entry)
                n += 1
    return n


@njit(cache=True)
def _compact_all(h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_data, blk_free, meta,
                 epoch, gflag, box, active, g):
    """Drop every stale entry of every list: O(entries)."""
    for p in range(meta[P.M_POSTINGS]):
        if p_head[p] < 0:
            continue
        key = p_key[p]
        glob = key < 0
        cell = key % (np.int64(g) * g) if not glob else 0
        cx = cell // g
        cy = cell % g
        rb = p_head[p]
        wb = rb
        wi = 0
        dropped = 0
        while rb >= 0:
            cnt = P.B if rb != p_tail[p] else p_fill[p]
            for ri in range(cnt):
                e = blk_data[rb * P.B + ri]
                s = e >> 32
                if not live(e, s, glob, cx, cy, epoch, gflag, box, active):
                    dropped += 1
                    continue
                blk_data[wb * P.B + wi] = e
                wi += 1
                if wi == P.B:
                    wb = blk_next[wb]
                    wi = 0
            rb = blk_next[rb]
        if dropped:
            P.truncate(p, wb, wi, h_keys, h_vals, p_head, p_tail, p_fill, p_key, p_free, blk_next, blk_free,
                       meta, dropped)


@njit(cache=True)
def live(e, s, glob, cx, cy, epoch, gflag, box, active):
    """Is entry ``e`` (slot ``s``) in a global list / cell (cx, cy) still valid?"""
    if not active[s] or epoch[s] != (e & 0xFFFFFFFF):
        return False
    if glob:
        return gflag[s]
    return (not gflag[s]) and box[s, 0] <= cx <= box[s, 2] and box[s, 1] <= cy <= box[s, 3]


class CompiledGrid:
    """Grid of inverted files in compiled posting lists; see the module docstring."""

    name = "dkm"
    compiled = True

    def __init__(self, subs: SubTable, vocab: Vocabulary, space: Space, grid: int = 128,
                 max_cells: int = 16) -> None:
        self.subs, self.vocab, self.space = subs, vocab, space
        self.g = int(grid)
        self.max_cells = int(max_cells)
        cw = (space.x2 - space.x1) / self.g
        ch = (space.y2 - space.y1) / self.g
        self.geo = np.array([space.x1, space.y1, cw, ch, space.maxdist], dtype=np.float64)
        self.store = P.PostingStore()
        cap = 1024
        self.epoch = np.zeros(cap, dtype=np.int64)
        self.gflag = np.zeros(cap, dtype=np.bool_)
        self.pending = np.zeros(cap, dtype=np.bool_)
        self.box = np.full((cap, 4), -1, dtype=np.int32)
        self.nkw = np.zeros(cap, dtype=np.int32)  # keywords posted under
        self.live_entries = 0
        self._tmp = np.zeros(4, dtype=np.int32)

    # -- per-slot arrays follow the subscription table's capacity --------------------
    def _fit(self, s: int) -> None:
        if s < len(self.epoch):
            return
        cap = max(s + 1, 2 * len(self.epoch))
        self.epoch = P._grown(self.epoch, cap, 0)
        self.gflag = P._grown(self.gflag, cap, False)
        self.pending = P._grown(self.pending, cap, False)
        box = np.full((cap, 4), -1, dtype=np.int32)
        box[: len(self.box)] = self.box
        self.box = box
        self.nkw = P._grown(self.nkw, cap, 0)

    def _region(self, s: int) -> tuple[bool, np.ndarray]:
        c = self.subs.cols
        ok = region_box(int(c.kind[s]), c.x[s], c.y[s], c.rx1[s], c.ry1[s], c.rx2[s], c.ry2[s],
                        c.kth[s], c.alpha[s], self.geo, self.g, self.max_cells, self._tmp)
        return (not ok), self._tmp.copy()

    def _keywords(self, s: int) -> np.ndarray:
        kws = self.subs.keywords(s)
        if self.subs.cols.match_all[s] and len(kws) > 1:
            return kws[[int(np.argmin(self.vocab.freq[kws]))]]  # least frequent so far (GI²)
        return kws.copy()

    def _cells(self, s: int) -> int:
        if self.gflag[s]:
            return 1
        b = self.box[s]
        return int((b[2] - b[0] + 1) * (b[3] - b[1] + 1))

    def _place(self, s: int) -> None:
        """Post slot ``s`` afresh under a new epoch: O(cells x keywords)."""
        self._fit(s)
        is_global, box = self._region(s)
        kws = self._keywords(s)
        if self.nkw[s]:
            self.live_entries -= self._cells(s) * int(self.nkw[s])
        self.epoch[s] = (int(self.epoch[s]) + 1) & 0xFFFFFFFF
        self.gflag[s] = is_global
        self.pending[s] = False
        self.box[s] = box
        self.nkw[s] = len(kws)
        n = len(kws) if is_global else len(kws) * self._cells(s)
        self.store.reserve(n, n)
        _post(*self.store.arrays, s, self.epoch[s], is_global, box, kws, self.g)
        self.live_entries += n
        self._maybe_compact()

    def _maybe_compact(self) -> None:
        if self.store.entries > 2 * self.live_entries + 65536:
            st = self.store
            _compact_all(*self.store.arrays, self.epoch, self.gflag, self.box, self.subs.cols.active, self.g)

    # -- the SubscriptionIndex protocol --------------------------------------------
    def insert(self, s: int) -> None:
        self._place(s)

    def delete(self, s: int) -> None:
        """O(1): the slot's entries die with its epoch."""
        self._fit(s)
        self.live_entries -= self._cells(s) * int(self.nkw[s])
        self.epoch[s] = (int(self.epoch[s]) + 1) & 0xFFFFFFFF
        self.nkw[s] = 0
        self.pending[s] = False

    def update(self, s: int) -> None:
        """Tighten the box in place when the region shrank; re-post when it grew or left the global list."""
        is_global, box = self._region(s)
        old = self.box[s]
        if self.gflag[s]:
            if not is_global:
                self._place(s)
            return
        if is_global or box[0] < old[0] or box[1] < old[1] or box[2] > old[2] or box[3] > old[3]:
            self._place(s)
            return
        before = self._cells(s)
        self.box[s] = box
        self.live_entries -= (before - self._cells(s)) * int(self.nkw[s])

    def candidates(self, x: float, y: float, kw_ids) -> np.ndarray:
        st = self.store
        c = self.subs.cols
        self._fit(c.capacity - 1)
        return _candidates(st.h_keys, st.h_vals, st.p_head, st.p_tail, st.p_fill, st.blk_next, st.blk_data,
                           np.asarray(kw_ids, dtype=np.int32), x, y, self.geo, self.g,
                           self.epoch, self.gflag, self.box, c.active)

    @property
    def nbytes(self) -> int:
        return (self.store.nbytes + self.epoch.nbytes + self.gflag.nbytes + self.pending.nbytes
                + self.box.nbytes + self.nkw.nbytes)

    def _check(self) -> None:
        """Every active slot's region is covered by its live entries; counts are sane."""
        c = self.subs.cols
        st = self.store
        assert st.entries >= 0
        for s in np.flatnonzero(c.active[: c.top]).tolist():
            is_global, box = self._region(s)
            if not self.gflag[s]:  # (a global slot's posting covers any region)
                assert not is_global, ("posted in cells but the region is global", s)
                b = self.box[s]
                assert b[0] <= box[0] and b[1] <= box[1] and box[2] <= b[2] and box[3] <= b[3], (s, b, box)
            # Every posted key of the slot holds a live entry for it.
            kws = self.subs.keywords(s)
            if c.match_all[s] and len(kws) > 1:
                assert self.nkw[s] == 1
            else:
                assert self.nkw[s] == len(kws)
            for w in (kws.tolist() if self.nkw[s] == len(kws) else []):
                keys = ([-(w + 1)] if self.gflag[s] else
                        [w * self.g * self.g + cx * self.g + cy for cx in range(self.box[s, 0], self.box[s, 2] + 1)
                         for cy in range(self.box[s, 1], self.box[s, 3] + 1)])
                for key in keys:
                    assert _has_entry(st.h_keys, st.h_vals, st.p_head, st.p_tail, st.p_fill, st.blk_next,
                                      st.blk_data, key, (s << 32) | int(self.epoch[s])), ("missing entry", s, key)


@njit(cache=True)
def _has_entry(h_keys, h_vals, p_head, p_tail, p_fill, blk_next, blk_data, key, entry):
    p = P.lookup(h_keys, h_vals, key)
    if p < 0:
        return False
    b = p_head[p]
    while b >= 0:
        cnt = P.B if b != p_tail[p] else p_fill[p]
        for i in range(cnt):
            if blk_data[b * P.B + i] == entry:
                return True
        b = blk_next[b]
    return False


@njit(cache=True)
def _candidates(h_keys, h_vals, p_head, p_tail, p_fill, blk_next, blk_data, kws, x, y, geo, g,
                epoch, gflag, box, active):
    """Live slots posted under the object's keywords in its cell or globally (read only)."""
    cx = cell_x(x, geo[0], geo[2], g)
    cy = cell_x(y, geo[1], geo[3], g)
    gg = np.int64(g) * g
    out = []
    for w in kws:
        for glob in (False, True):
            key = -(np.int64(w) + 1) if glob else np.int64(w) * gg + cx * g + cy
            p = P.lookup(h_keys, h_vals, key)
            if p < 0:
                continue
            b = p_head[p]
            while b >= 0:
                cnt = P.B if b != p_tail[p] else p_fill[p]
                for i in range(cnt):
                    e = blk_data[b * P.B + i]
                    s = e >> 32
                    if live(e, s, glob, cx, cy, epoch, gflag, box, active):
                        out.append(s)
                b = blk_next[b]
    arr = np.array(out, dtype=np.int64) if len(out) else np.empty(0, dtype=np.int64)
    return np.unique(arr)
