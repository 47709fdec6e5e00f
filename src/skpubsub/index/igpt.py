"""Skype's IGPT (Section 5): top-k subscriptions in the leaf cell of their location,
an inverted file per cell, α-partition groups, and pruning by groups and by cells.

Unlike the region indexes (:mod:`cgrid`), a subscription is stored once per keyword in
the cell that holds its *location* (Section 5.3), whatever its k-th score; an object
visits the cells that hold one of its keywords (see below) and prunes:

* **cell pruning** (Lemma 6, Eq. 8): skip cell ``c`` when every subscription in it
  needs more spatial similarity than ``SSimUB_out(m, c)`` (Definition 7) even with a
  perfect text match;
* **group pruning** (Theorem 3): in the list of keyword ``w``, subscriptions are
  grouped by ``α* = α/(1-α)`` (α-partition, Section 5.2.1); a group is skipped when
  ``maxwt · wtsum(m.w) < kScore*(G) - G.α* · SSimUB_out``;
* **early termination** (Theorem 4, Eqs. 6-7): a group is sorted by
  ``kScore* = kScore/(1-α)``; with suffix maxima of ``maxwt`` and ``α*`` the first
  position from which Theorem 4's inequality holds is found by binary search and the
  rest of the group is not read;
* **individual pruning** (Lemma 1 with Theorem 2): met under keyword ``w``, a
  subscription's text similarity is ``w``'s share (exact: the entry carries its weight)
  plus at most Eq. 5's ``min(wtsum·maxwt(m), wtsum(m)·maxwt)`` over the keywords after
  ``w``; with the exact spatial similarity (the entry carries the location, tighter than
  Definition 8's inner bound) a subscription that cannot reach ``kScore`` is skipped.
* **summed shares** (ours, term at a time): one that passes keeps adding its exact share
  from the cell's later lists, where all its lists are, and after the cell it must reach
  ``kScore`` with the exact text similarity. Theorems 3-4 bound the keywords from ``w``
  on only, so while such a subscription is pending in a cell, the cell's later lists are
  read in full. (Eq. 5 alone let 87% of candidates through on GeoNames top-k; with the
  sum, candidates are 1.01 per affected subscription.)

Keywords are in one global order (ids), so the list an object meets a subscription in
first is its first shared keyword, where these bounds cover the whole text similarity:
a subscription rejected there is marked seen for the rest of the object (Algorithm 1's
``R[s] = -inf``). Our object vectors weigh each keyword ``wo = 1/sqrt(|o|)``, so
``maxwt(m.w) = wo`` and ``wtsum(m.w) = wo`` times the keywords from ``w`` on.

An object visits only the cells that hold a list of one of its keywords: a directory
of every cell's lists by keyword, then cell, is rebuilt after cells are, and the
object's keywords' runs of it are merged in cell order.

Statistics are snapshots of ``kScore = -kth`` taken when a cell is built. Arrivals only
raise a score (the snapshot stays a lower bound: pruning stays sound, only looser); a
cell is rebuilt before the next object when one of its subscriptions' score dropped
(a refill after expiry), a subscription joined or left it, or once ``tighten`` of its
subscriptions have raised their scores. Cells are built into append-only arenas;
when garbage outgrows the live part, every cell is rebuilt into fresh ones.

Only ``topk`` subscriptions live here; ``range`` and ``knn`` ones go to a compiled grid
(:mod:`cgrid`), and candidates are the union. The publish kernel (:mod:`..fastpath`)
runs it: before a run of pubs, ``precompute`` probes every pub and every object expiring
in the run under the scores as they are then (a score only rises within the run, so the
candidates stay a superset); a slot refilled in the run is a candidate of each later
object, and ``touched`` brings the snapshots up to date afterwards.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..core.config import Space
from ..core.columns import Columns
from ..store.subscriptions import K_TOPK, SubTable
from ..core.vocab import Vocabulary
from .cells import cell_of
from ..core import postings as P
from .cgrid import CompiledGrid

EPS = 1e-9  # bounds must beat the score by this much to prune: float rounding never loses a match
ALPHA_MAX = 0.999  # α above this: α* = inf, never pruned by text (kScore* = kScore/(1-α) explodes)
ALPHA_MIN = 1e-3  # α below this: never pruned by cell (Eq. 8 divides by α)

# arena columns: lists (keyword, its groups), groups (entries, Theorem 3's statistics),
# entries (slot, kScore*, Theorem 4's suffix maxima, what the individual test reads)
LIST_COLS = {"w": np.int64, "g0": np.int64, "g1": np.int64}
GROUP_COLS = {"e0": np.int64, "e1": np.int64, "mw": np.float64, "ws": np.float64, "key": np.float64,
              "astar": np.float64}
ENTRY_COLS = {"s": np.int64, "key": np.float64, "smw": np.float64, "sws": np.float64, "sa": np.float64,
              "x": np.float64, "y": np.float64, "alpha": np.float64, "ks": np.float64, "w1": np.float64,
              "rmw": np.float64, "rws": np.float64}
# counters (tests and the bench read them): cells skipped (Lemma 6), groups skipped
# (Theorem 3), entries cut by early termination (Theorem 4), entries read, entries
# rejected individually, cells built
N_CELL, N_GROUP, N_ET, N_READ, N_INDIV, N_BUILT = range(6)


def _arena(cols: dict) -> Columns:
    """Append-only columns (``top`` the fill mark; built cells are appended, never freed)."""
    return Columns({name: (dtype, 0) for name, dtype in cols.items()})


def _room(arena: Columns, n: int) -> None:
    if arena.top + n > arena.capacity:
        arena.reserve(max(arena.top + n, 2 * arena.capacity))


@njit(cache=True)
def _star(kscore, alpha):
    """(kScore*, α*) of Section 5.2.1; an α too close to 1 is never pruned by text."""
    if alpha > ALPHA_MAX:
        return -math.inf, math.inf
    return kscore / (1.0 - alpha), alpha / (1.0 - alpha)


@njit(cache=True)
def _build(cells, head, nxt, kth, sx, sy, alpha, kw_off, kw_len, kw_id, kw_ws, group,
           c_l0, c_l1, c_lam, pk, tops,
           l_w, l_g0, l_g1, g_e0, g_e1, g_mw, g_ws, g_key, g_a,
           e_s, e_key, e_smw, e_sws, e_sa, e_x, e_y, e_alpha, e_ks, e_w1, e_rmw, e_rws):
    """Build the inverted file of each cell in ``cells`` at the arenas' tops (room
    reserved by the caller); returns the entries written."""
    written = 0
    for c in cells:
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


@njit(cache=True)
def _directory(nonempty, c_l0, c_l1, l_w):
    """Every cell's lists by keyword, then cell: (keywords, CSR offsets, cells, list ids)."""
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
def _probe(x, y, okw, wo, d_w, d_off, d_c, d_li, g, geo, c_lam,
           l_g0, l_g1, g_e0, g_e1, g_mw, g_ws, g_key, g_a,
           e_s, e_key, e_smw, e_sws, e_sa, e_x, e_y, e_alpha, e_ks, e_w1, e_rmw, e_rws,
           kth, stamp, st, acc, first, need, oma, cands, counters):
    """Algorithm 1's filtering step: slots that may take an object at (x, y) with keywords
    ``okw`` (ids, ascending) into ``cands``; returns how many.

    Beyond the paper, a subscription that passes the test where it is first met keeps
    collecting its exact share from the cell's later lists (term at a time: all its
    lists are in this cell), and is kept only if the sum reaches its score."""
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
def _probe_many(start, xs, ys, kwoff, kw, off, out, tmp, d_w, d_off, d_c, d_li, g, geo, c_lam,
                l_g0, l_g1, g_e0, g_e1, g_mw, g_ws, g_key, g_a,
                e_s, e_key, e_smw, e_sws, e_sa, e_x, e_y, e_alpha, e_ks, e_w1, e_rmw, e_rws, kth, stamp, stamp_next,
                acc, first, need, oma, counters):
    """``_probe`` for objects ``start..`` into ``out`` (CSR by ``off``); returns the first
    object whose candidates did not fit."""
    for i in range(start, len(xs)):
        okw = np.unique(kw[kwoff[i]:kwoff[i + 1]].astype(np.int64))
        if not len(okw):  # nothing asked (an expiring object no buffer can hold)
            off[i + 1] = off[i]
            continue
        stamp_next[0] += 1
        n = _probe(xs[i], ys[i], okw, 1.0 / math.sqrt(len(okw)), d_w, d_off, d_c, d_li, g, geo, c_lam,
                   l_g0, l_g1, g_e0, g_e1, g_mw, g_ws, g_key, g_a,
                   e_s, e_key, e_smw, e_sws, e_sa, e_x, e_y, e_alpha, e_ks, e_w1, e_rmw, e_rws, kth, stamp, stamp_next[0],
                   acc, first, need, oma, tmp, counters)
        if off[i] + n > len(out):
            return i
        out[off[i]:off[i] + n] = tmp[:n]
        off[i + 1] = off[i] + n
    return len(xs)


@njit(cache=True)
def _link(s, c, head, nxt, prv):
    nxt[s] = head[c]
    prv[s] = -1
    if head[c] >= 0:
        prv[head[c]] = s
    head[c] = s


@njit(cache=True)
def _unlink(s, c, head, nxt, prv):
    if prv[s] >= 0:
        nxt[prv[s]] = nxt[s]
    else:
        head[c] = nxt[s]
    if nxt[s] >= 0:
        prv[nxt[s]] = prv[s]
    nxt[s] = -1
    prv[s] = -1


class IGPTIndex:
    """Skype's subscription index for ``topk``; see the module docstring. ``grid`` leaf
    cells per side, ``group`` subscriptions per α-partition group, ``tighten`` the share of
    a cell's subscriptions whose raised scores trigger its rebuild."""

    name = "igpt"
    compiled = True  # the publish kernel (fastpath) runs it, with candidates from ``precompute``

    def __init__(self, subs: SubTable, vocab: Vocabulary, space: Space, grid: int = 32, group: int = 32,
                 tighten: float = 0.25) -> None:
        self.subs, self.vocab, self.space = subs, vocab, space
        self.grid_index = CompiledGrid(subs, vocab, space, prefix=False)  # range and knn
        self.g = max(1, int(grid))
        self.group = max(1, int(group))
        self.tighten = float(tighten)
        self.geo = np.array([space.x1, space.y1, space.x2 - space.x1, space.y2 - space.y1, space.maxdist])
        n = self.g * self.g
        self.head = np.full(n, -1, dtype=np.int64)
        self.size = np.zeros(n, dtype=np.int64)  # slots in the cell
        self.n_kw = np.zeros(n, dtype=np.int64)  # their keywords (the cell's entries)
        self.raised = np.zeros(n, dtype=np.int64)  # slots whose score rose since the build
        self.c_l0 = np.zeros(n, dtype=np.int64)
        self.c_l1 = np.zeros(n, dtype=np.int64)
        self.c_lam = np.full(n, -math.inf)
        self.nonempty = np.zeros(0, dtype=np.int64)
        self.directory = _directory(self.nonempty, self.c_l0, self.c_l1, np.zeros(0, dtype=np.int64))
        self.cell = np.full(1024, -1, dtype=np.int64)  # slot -> its cell (-1: not here)
        self.nxt = np.full(1024, -1, dtype=np.int64)
        self.prv = np.full(1024, -1, dtype=np.int64)
        self.pk = np.full(1024, math.inf)  # kth when its cell was built
        self.stamp = np.full(1024, -1, dtype=np.int64)
        self.stamp_next = np.zeros(1, dtype=np.int64)
        # per slot, while an object is probed: its summed share, the list it was first met
        # in, the text part its score needs, its 1 - α (_probe)
        self.acc, self.first, self.need, self.oma = (np.zeros(1024), np.full(1024, -1, dtype=np.int64),
                                                     np.zeros(1024), np.zeros(1024))
        self.todo: set[int] = set()  # cells to build before the next probe
        self._lists, self._groups, self._entries = _arena(LIST_COLS), _arena(GROUP_COLS), _arena(ENTRY_COLS)
        self._tops = np.zeros(3, dtype=np.int64)
        self.counters = np.zeros(6, dtype=np.int64)

    def _fit(self, s: int) -> None:
        if s < len(self.cell):
            return
        cap = max(s + 1, 2 * len(self.cell))
        for name, fill in (("cell", -1), ("nxt", -1), ("prv", -1), ("pk", math.inf), ("stamp", -1), ("acc", 0.0),
                           ("first", -1), ("need", 0.0), ("oma", 0.0)):
            setattr(self, name, P._grown(getattr(self, name), cap, fill))

    def _taat(self) -> tuple:
        return self.acc, self.first, self.need, self.oma

    def _cell_of(self, s: int) -> int:
        c, geo = self.subs.cols, self.geo
        return cell_of(c.x[s], geo[0], geo[2], self.g) * self.g + cell_of(c.y[s], geo[1], geo[3], self.g)

    # -- the SubscriptionIndex protocol --------------------------------------------
    def insert(self, s: int) -> None:
        if self.subs.cols.kind[s] != K_TOPK:
            self.grid_index.insert(s)
            return
        self._fit(s)
        c = self._cell_of(s)
        self.cell[s] = c
        _link(s, c, self.head, self.nxt, self.prv)
        self.size[c] += 1
        self.n_kw[c] += int(self.subs.cols.kw_len[s])
        self.pk[s] = self.subs.cols.kth[s]
        self.todo.add(c)

    def delete(self, s: int) -> None:
        if s >= len(self.cell) or self.cell[s] < 0:
            self.grid_index.delete(s)
            return
        c = int(self.cell[s])
        _unlink(s, c, self.head, self.nxt, self.prv)
        self.cell[s] = -1
        self.size[c] -= 1
        self.n_kw[c] -= int(self.subs.cols.kw_len[s])
        self.todo.add(c)

    def update(self, s: int) -> None:
        """kth changed (``touched``'s rule)."""
        if s >= len(self.cell) or self.cell[s] < 0:
            self.grid_index.update(s)
            return
        self.touched(np.array([s]))

    def refresh(self, objects: int) -> int:
        return self.grid_index.refresh(objects)

    def candidates(self, x: float, y: float, kw_ids) -> np.ndarray:
        other = self.grid_index.candidates(x, y, kw_ids)
        self._flush()
        if not len(self.nonempty):
            return other
        self._fit(self.subs.cols.capacity - 1)
        okw = np.unique(np.asarray(kw_ids, dtype=np.int64))
        wo = 1.0 / math.sqrt(len(okw))  # the object's weight per keyword (ObjectTable.wo)
        cands = np.empty(min(len(self.cell), int(self.size.sum()) + 1), dtype=np.int64)
        self.stamp_next[0] += 1
        n = _probe(x, y, okw, wo, *self._probed(), self.subs.cols.kth, self.stamp, self.stamp_next[0],
                   *self._taat(), cands, self.counters)
        if not len(other):
            return np.sort(cands[:n])
        return np.sort(np.concatenate([other, cands[:n]]))

    def _arrays(self) -> tuple:
        return tuple(getattr(t, name) for t, cols in ((self._lists, LIST_COLS), (self._groups, GROUP_COLS),
                                                      (self._entries, ENTRY_COLS)) for name in cols)

    def _probed(self) -> tuple:
        """What ``_probe`` reads of the built cells: the directory, then the arenas."""
        return (*self.directory, self.g, self.geo, self.c_lam, *self._arrays()[1:])

    # -- the publish kernel's side (fastpath) ------------------------------------------
    def precompute(self, xs, ys, kwoff, kw, exs, eys, ekwoff, ekw) -> tuple:
        """For a run of pubs (``xs, ys``, keywords CSR) and the objects expiring in it: the
        top-k slots (``foreign``, int8 1), and the candidates of each under the scores as
        they are now. Within the run a score only rises (pruning stays sound) until a
        refill, which the kernel handles (fastpath.publish_run)."""
        self._flush()
        self._fit(self.subs.cols.capacity - 1)
        foreign = (self.cell[: self.subs.cols.capacity] >= 0).astype(np.int8)
        return (foreign, *self._probe_all(xs, ys, kwoff, kw), *self._probe_all(exs, eys, ekwoff, ekw))

    def _probe_all(self, xs, ys, kwoff, kw) -> tuple[np.ndarray, np.ndarray]:
        n = len(xs)
        off = np.zeros(n + 1, dtype=np.int64)
        out = np.empty(max(1024, 64 * n), dtype=np.int64)
        if not len(self.nonempty):
            return off, out[:0]
        tmp = np.empty(int(self.size.sum()) + 1, dtype=np.int64)
        i = 0
        while i < n:
            i = _probe_many(i, xs, ys, kwoff, kw, off, out, tmp, *self._probed(), self.subs.cols.kth, self.stamp,
                            self.stamp_next, *self._taat(), self.counters)
            if i < n:
                out = np.concatenate([out, np.empty(len(out) + len(tmp), dtype=np.int64)])
        return off, out[: off[n]]

    def touched(self, slots: np.ndarray) -> None:
        """``slots`` whose kth may have changed (after a kernel run: results changed or refilled).
        A lower score (kth up) makes the cell's snapshot unsafe: rebuild it before the next
        object; a higher one only loosens it: rebuild once ``tighten`` of the cell rose."""
        slots = np.unique(slots)
        slots = slots[slots < len(self.cell)]
        slots = slots[self.cell[slots] >= 0]
        if not len(slots):
            return
        kth, pk, cells = self.subs.cols.kth[slots], self.pk[slots], self.cell[slots]
        self.todo.update(cells[kth > pk].tolist())
        up = cells[kth < pk]
        np.add.at(self.raised, up, 1)
        up = np.unique(up)
        self.todo.update(up[self.raised[up] > self.tighten * self.size[up]].tolist())

    # -- building cells --------------------------------------------------------------
    def _flush(self) -> None:
        if not self.todo:
            return
        cells = np.array(sorted(self.todo), dtype=np.int64)
        self.todo.clear()
        need = int(self.n_kw[cells].sum())
        if self._entries.top + need > 2 * self.n_kw.sum() + 65536:  # garbage outgrew the live part
            cells = np.flatnonzero(self.size).astype(np.int64)
            self.c_l0[:] = self.c_l1[:] = 0
            self._tops[:] = 0
            need = int(self.n_kw.sum())
        for arena, top in zip((self._lists, self._groups, self._entries), self._tops):
            arena.top = int(top)
            _room(arena, need)
        c = self.subs.cols
        kw = self.subs.kw
        written = _build(cells, self.head, self.nxt, c.kth, c.x, c.y, c.alpha, c.kw_off, c.kw_len, kw.id, kw.ws,
                         self.group, self.c_l0, self.c_l1, self.c_lam, self.pk, self._tops,
                         *self._arrays())
        self._lists.top, self._groups.top, self._entries.top = (int(t) for t in self._tops)
        assert written == need
        self.raised[cells] = 0
        self.counters[N_BUILT] += len(cells)
        self.nonempty = np.flatnonzero(self.size).astype(np.int64)
        self.directory = _directory(self.nonempty, self.c_l0, self.c_l1, self._lists.w)

    @property
    def nbytes(self) -> int:
        per_cell = sum(a.nbytes for a in (self.head, self.size, self.n_kw, self.raised, self.c_l0, self.c_l1,
                                          self.c_lam))
        per_slot = sum(a.nbytes for a in (self.cell, self.nxt, self.prv, self.pk, self.stamp, *self._taat()))
        return (self.grid_index.nbytes + per_cell + per_slot + self._lists.nbytes + self._groups.nbytes
                + self._entries.nbytes + sum(a.nbytes for a in self.directory))

    def _check(self) -> None:
        """Each top-k slot is in the cell of its location; after a flush every cell's
        lists hold each of its slots once per keyword, sorted, with statistics that bound
        the current scores (snapshots never above them)."""
        c = self.subs.cols
        self._fit(c.capacity - 1)
        self.grid_index._check(self.cell[: c.capacity] < 0)
        self._flush()
        members: dict[int, set[int]] = {}
        for s in np.flatnonzero(c.active[: c.top]).tolist():
            if c.kind[s] != K_TOPK:
                continue
            assert self.cell[s] == self._cell_of(s), ("slot in the wrong cell", s)
            members.setdefault(int(self.cell[s]), set()).add(s)
        assert set(np.flatnonzero(self.size).tolist()) == set(members), "cell sizes"
        L, G, E = self._lists, self._groups, self._entries
        for cell, slots in members.items():
            assert self.size[cell] == len(slots)
            seen: dict[tuple[int, int], int] = {}
            ws = L.w[self.c_l0[cell]:self.c_l1[cell]]
            assert np.all(np.diff(ws) > 0), ("lists out of order", cell)
            for li in range(int(self.c_l0[cell]), int(self.c_l1[cell])):
                for gi in range(int(L.g0[li]), int(L.g1[li])):
                    e0, e1 = int(G.e0[gi]), int(G.e1[gi])
                    assert e1 > e0
                    assert np.all(E.key[e0 + 1:e1] >= E.key[e0:e1 - 1]), ("group out of order", gi)
                    assert G.key[gi] == E.key[e0] and G.mw[gi] == E.smw[e0] and G.ws[gi] == E.sws[e0]
                    assert G.astar[gi] == E.sa[e0]
                    assert np.all(E.smw[e0:e1] >= np.maximum(E.w1[e0:e1], E.rmw[e0:e1]))
                    for e in range(e0, e1):
                        s = int(E.s[e])
                        assert s in slots, ("entry of a slot not in the cell", cell, s)
                        assert int(L.w[li]) in set(self.subs.keywords(s).tolist())
                        assert E.ks[e] <= -c.kth[s], ("snapshot above the current score", s)
                        seen[(s, int(L.w[li]))] = seen.get((s, int(L.w[li])), 0) + 1
            want = {(s, int(w)) for s in slots for w in self.subs.keywords(s).tolist()}
            assert set(seen) == want and all(v == 1 for v in seen.values()), ("entries", cell)
        d_w, d_off, d_c, d_li = self.directory  # each list of each cell once, under its keyword, cells ascending
        assert np.all(np.diff(d_w) > 0) and d_off[-1] == len(d_li)
        lists = [li for c in members for li in range(int(self.c_l0[c]), int(self.c_l1[c]))]
        assert sorted(d_li.tolist()) == sorted(lists)
        for k in range(len(d_w)):
            cs, lis = d_c[d_off[k]:d_off[k + 1]], d_li[d_off[k]:d_off[k + 1]]
            assert np.all(np.diff(cs) > 0) and np.all(L.w[lis] == d_w[k])
            assert np.all((self.c_l0[cs] <= lis) & (lis < self.c_l1[cs]))
