"""The index itself: top-k slots linked into the leaf cell of their location, cells
rebuilt before the next probe when their snapshots went stale, and the publish kernel's
side (``precompute``, ``touched``). See the package docstring."""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ...core.columns import Columns, grown
from ...core.config import Space
from ...core.layouts import Probes
from ...core.vocab import Vocabulary
from ...store.subscriptions import K_TOPK, SubTable
from ..base import SubscriptionIndex
from ..cells import cell_of
from ..cgrid import CompiledGrid
from . import probe
from .build import build_cells
from .layout import (
    ENTRY_COLS,
    GROUP_COLS,
    LIST_COLS,
    N_BUILT,
    Arenas,
    Built,
    CellDirectory,
    Cells,
    Entries,
    Groups,
    Lists,
    Members,
    Taat,
    view,
)


def _arena(cols: dict) -> Columns:
    """Append-only columns (``top`` the fill mark; built cells are appended, never freed)."""
    return Columns({name: (dtype, 0) for name, dtype in cols.items()})


def _room(arena: Columns, n: int) -> None:
    if arena.top + n > arena.capacity:
        arena.reserve(max(arena.top + n, 2 * arena.capacity))


# _link and _unlink take the arrays, not ``Members``: called once per insert or delete, where
# Numba's dispatch on a named tuple (typed in Python) would cost more than the call itself.
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


class IGPTIndex(SubscriptionIndex):
    """Skype's subscription index for ``topk``; see the package docstring. ``grid`` leaf
    cells per side, ``group`` subscriptions per α-partition group, ``tighten`` the share of
    a cell's subscriptions whose raised scores trigger its rebuild."""

    name = "igpt"
    compiled = True  # the publish kernel runs it: range and knn in its grid, top-k from ``precompute``
    precomputes = True
    tracks_scores = True

    def __init__(self, subs: SubTable, vocab: Vocabulary, space: Space, grid: int = 32, group: int = 32,
                 tighten: float = 0.25) -> None:
        super().__init__(subs, vocab, space)
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
        self.directory = self._directory(np.zeros(0, dtype=np.int64))
        self.cell = np.full(1024, -1, dtype=np.int64)  # slot -> its cell (-1: not here)
        self.nxt = np.full(1024, -1, dtype=np.int64)
        self.prv = np.full(1024, -1, dtype=np.int64)
        self.pk = np.full(1024, math.inf)  # kth when its cell was built
        self.stamp = np.full(1024, -1, dtype=np.int64)
        self.stamp_next = np.zeros(1, dtype=np.int64)
        # per slot, while an object is probed: its summed share, the list it was first met
        # in, the text part its score needs, its 1 - α (probe.probe)
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
            setattr(self, name, grown(getattr(self, name), cap, fill))

    # -- what the kernels take (rebuilt at each call: growth replaces arrays) --------------
    @property
    def _taat(self) -> Taat:
        """What a probe marks per slot (``probe.probe``)."""
        return Taat(self.stamp, self.stamp_next, self.acc, self.first, self.need, self.oma)

    @property
    def _members(self) -> Members:
        return Members(self.head, self.nxt, self.prv)

    @property
    def _cells(self) -> Cells:
        return Cells(self.c_l0, self.c_l1, self.c_lam)

    def _built(self) -> Built:
        """What ``probe.probe`` reads of the built cells."""
        return Built(self.g, self.geo, self._cells, self.directory, view(Lists, self._lists), view(Groups, self._groups),
                     view(Entries, self._entries))

    def _directory(self, l_w: np.ndarray) -> CellDirectory:
        """Every cell's lists by keyword, then cell (``l_w``: the lists' keywords)."""
        return CellDirectory(*probe.directory(self.nonempty, self._cells, l_w))

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
        n = probe.probe(x, y, okw, wo, self.stamp_next[0], self._built(), self.subs.cols.kth, self._taat, cands,
                        self.counters)
        if not len(other):
            return np.sort(cands[:n])
        return np.sort(np.concatenate([other, cands[:n]]))

    # -- the publish kernel's side (engine.kernel) -------------------------------------
    @property
    def kernel_grid(self) -> CompiledGrid:
        return self.grid_index

    def precompute(self, objects: Probes, expiring: Probes) -> tuple:
        """For a run of pubs (``objects``: positions, keywords CSR) and the objects expiring in it: the
        top-k slots (``foreign``, int8 1), and the candidates of each under the scores as
        they are now. Within the run a score only rises (pruning stays sound) until a
        refill, which the kernel handles (kernel.publish_run)."""
        self._flush()
        self._fit(self.subs.cols.capacity - 1)
        foreign = (self.cell[: self.subs.cols.capacity] >= 0).astype(np.int8)
        return (foreign, *self._probe_all(objects), *self._probe_all(expiring))

    def _probe_all(self, objects: Probes) -> tuple[np.ndarray, np.ndarray]:
        n = len(objects.x)
        off = np.zeros(n + 1, dtype=np.int64)
        out = np.empty(max(1024, 64 * n), dtype=np.int64)
        if not len(self.nonempty):
            return off, out[:0]
        tmp = np.empty(int(self.size.sum()) + 1, dtype=np.int64)
        i = 0
        while i < n:
            i = probe.probe_many(i, objects, off, out, tmp, self._built(), self.subs.cols.kth, self._taat,
                                 self.counters)
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
        arenas = Arenas(view(Lists, self._lists), view(Groups, self._groups), view(Entries, self._entries), self._tops)
        written = build_cells(cells, self._members, self.subs.layout, self.group, self.pk, self._cells, arenas)
        self._lists.top, self._groups.top, self._entries.top = (int(t) for t in self._tops)
        assert written == need
        self.raised[cells] = 0
        self.counters[N_BUILT] += len(cells)
        self.nonempty = np.flatnonzero(self.size).astype(np.int64)
        self.directory = self._directory(self._lists.w)

    @property
    def nbytes(self) -> int:
        per_cell = sum(a.nbytes for a in (self.head, self.size, self.n_kw, self.raised, self.c_l0, self.c_l1,
                                          self.c_lam))
        per_slot = sum(a.nbytes for a in (self.cell, self.nxt, self.prv, self.pk, self.stamp, self.acc, self.first,
                                                          self.need, self.oma))
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
