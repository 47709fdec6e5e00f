"""Grid with an inverted file per cell: the first indexed engine (issue 2).

Every subscription is posted, under its keywords, in the cells its region
overlaps: a range subscription's rectangle; a kNN subscription's ball of radius
``sqrt(kth)``; a top-k subscription's disk where an object could still reach the
k-th score. A subscription with fewer than k results (or a region covering more
than ``max_cells`` cells) sits in a per-keyword global list instead.
``all``-keyword subscriptions are posted only under their least frequent keyword
(any matching object must carry it; PS2Stream's GI² rule); ``any`` and top-k
under each keyword. Regions follow the results: ``update`` re-posts a slot at
once when its region grows, and lazily when it shrinks (only once the posted
box has over ``shrink`` times the cells needed): a posted region that is too
big only adds candidates, which verification rejects.
"""

from __future__ import annotations

import math
from itertools import chain

import numpy as np

from ..core.config import Space
from ..core.columns import Columns
from ..store.subscriptions import K_KNN, K_RANGE, SubTable
from ..core.vocab import Vocabulary
from .base import SubscriptionIndex

_GLOBAL = (-1, -1, -1, -1)
_SLACK = 1e-9  # regions are widened a hair so float rounding never loses a match


class GridIndex(SubscriptionIndex):
    name = "grid"

    def __init__(self, subs: SubTable, vocab: Vocabulary, space: Space, grid: int = 64,
                 max_cells: int = 64, shrink: int = 4) -> None:
        super().__init__(subs, vocab, space)
        self.g = int(grid)
        self.cw = (space.x2 - space.x1) / self.g
        self.ch = (space.y2 - space.y1) / self.g
        self.max_cells = max(1, int(max_cells))
        self.shrink = shrink
        self.maxdist = space.maxdist
        self.cells: dict[int, set[int]] = {}  # kw * g*g + cell -> slots
        self.glob: dict[int, set[int]] = {}  # kw -> slots
        # Where each slot is posted: its cell box (or _GLOBAL) and keyword (-1: all of them).
        self.where = Columns({"cx1": (np.int32, -1), "cy1": (np.int32, -1), "cx2": (np.int32, -1),
                              "cy2": (np.int32, -1), "kw": (np.int32, -1)})

    # -- geometry ----------------------------------------------------------------
    def _cx(self, x: float) -> int:
        return min(self.g - 1, max(0, int(math.floor((x - self.space.x1) / self.cw))))

    def _cy(self, y: float) -> int:
        return min(self.g - 1, max(0, int(math.floor((y - self.space.y1) / self.ch))))

    def _box(self, s: int) -> tuple[int, int, int, int]:
        """Cell box of the slot's current region, or _GLOBAL."""
        c = self.subs.cols
        kind = c.kind[s]
        if kind == K_RANGE:
            x1, y1, x2, y2 = c.rx1[s], c.ry1[s], c.rx2[s], c.ry2[s]
        else:
            kth = c.kth[s]
            if not math.isfinite(kth):
                return _GLOBAL
            if kind == K_KNN:
                r = math.sqrt(kth)
            else:  # top-k: alpha*(1 - d/MaxDist) + (1 - alpha)*1 >= score  =>  d <= MaxDist*(1-score)/alpha
                alpha, room = c.alpha[s], (1.0 + kth) + _SLACK  # room = 1 - score, widened
                if room >= alpha:  # r >= MaxDist (also alpha == 0): anywhere may qualify
                    return _GLOBAL
                r = self.maxdist * room / alpha
            r = r * (1.0 + _SLACK) + _SLACK
            x1, y1, x2, y2 = c.x[s] - r, c.y[s] - r, c.x[s] + r, c.y[s] + r
        box = (self._cx(x1), self._cy(y1), self._cx(x2), self._cy(y2))
        if (box[2] - box[0] + 1) * (box[3] - box[1] + 1) > self.max_cells:
            return _GLOBAL
        return box

    def _keywords(self, s: int) -> list[int]:
        kws = self.subs.keywords(s)
        if self.subs.cols.match_all[s] and len(kws) > 1:
            return [int(kws[np.argmin(self.vocab.freq[kws])])]  # least frequent so far
        return kws.tolist()

    # -- posting -------------------------------------------------------------------
    def _post(self, s: int, box: tuple[int, int, int, int], kws: list[int], add: bool) -> None:
        if box == _GLOBAL:
            keys, table = kws, self.glob
        else:
            cx1, cy1, cx2, cy2 = box
            gg = self.g * self.g
            cells = [cx * self.g + cy for cx in range(cx1, cx2 + 1) for cy in range(cy1, cy2 + 1)]
            keys, table = [w * gg + cell for w in kws for cell in cells], self.cells
        for key in keys:
            if add:
                p = table.get(key)
                if p is None:
                    table[key] = {s}
                else:
                    p.add(s)
            else:
                p = table[key]
                p.discard(s)
                if not p:
                    del table[key]

    def _posted(self, s: int) -> tuple[tuple[int, int, int, int], list[int]]:
        w = self.where
        box = (int(w.cx1[s]), int(w.cy1[s]), int(w.cx2[s]), int(w.cy2[s]))
        kw = int(w.kw[s])
        return box, ([kw] if kw >= 0 else self.subs.keywords(s).tolist())

    def _place(self, s: int, box: tuple[int, int, int, int], kws: list[int]) -> None:
        while s >= self.where.capacity:
            self.where._grow()
        w = self.where
        w.top = max(w.top, s + 1)  # slots in use, addressed by the subscription's slot
        w.cx1[s], w.cy1[s], w.cx2[s], w.cy2[s] = box
        w.kw[s] = kws[0] if len(kws) == 1 and self.subs.cols.match_all[s] else -1
        self._post(s, box, kws, True)

    def insert(self, s: int) -> None:
        """O(cells of the region x posted keywords)."""
        self._place(s, self._box(s), self._keywords(s))

    def delete(self, s: int) -> None:
        box, kws = self._posted(s)
        self._post(s, box, kws, False)
        w = self.where
        w.cx1[s] = w.cy1[s] = w.cx2[s] = w.cy2[s] = w.kw[s] = -1

    def update(self, s: int) -> None:
        """Re-post when the region outgrew its posted box, or shrank well inside it."""
        box = self._box(s)
        old, kws = self._posted(s)
        if box == old or (_covers(old, box) and _cells(old, self.g) <= self.shrink * _cells(box, self.g)):
            return
        self._post(s, old, kws, False)
        self._place(s, box, kws)

    def candidates(self, x: float, y: float, kw_ids) -> np.ndarray:
        """O(sum of the posting sizes read)."""
        cell = self._cx(x) * self.g + self._cy(y)
        gg = self.g * self.g
        found = []
        for w in kw_ids.tolist():
            p = self.cells.get(w * gg + cell)
            if p:
                found.append(p)
            p = self.glob.get(w)
            if p:
                found.append(p)
        if not found:
            return np.empty(0, dtype=np.int64)
        if len(found) == 1:
            return np.fromiter(found[0], dtype=np.int64, count=len(found[0]))
        return np.unique(np.fromiter(chain.from_iterable(found), dtype=np.int64))

    @property
    def nbytes(self) -> int:
        # Python sets: ~ 60 bytes per entry on average plus the dict slots.
        entries = sum(len(p) for p in self.cells.values()) + sum(len(p) for p in self.glob.values())
        return self.where.nbytes + 60 * entries + 100 * (len(self.cells) + len(self.glob))

    def _check(self) -> None:
        """Every active slot is posted exactly where its region says, nowhere else."""
        c = self.subs.cols
        expect: dict[tuple[str, int], set[int]] = {}
        gg = self.g * self.g
        for s in np.flatnonzero(c.active[: c.top]).tolist():
            box, kws = self._posted(s)
            assert _covers(box, self._box(s)), ("posted box misses part of the region", s, box, self._box(s))
            if box == _GLOBAL:
                keys = [("g", w) for w in kws]
            else:
                keys = [("c", w * gg + cx * self.g + cy) for w in kws
                        for cx in range(box[0], box[2] + 1) for cy in range(box[1], box[3] + 1)]
            for key in keys:
                expect.setdefault(key, set()).add(s)
        actual = {("c", k): v for k, v in self.cells.items()} | {("g", k): v for k, v in self.glob.items()}
        assert actual == expect, "postings differ from the slots' regions"


def _covers(outer: tuple[int, int, int, int], inner: tuple[int, int, int, int]) -> bool:
    if outer == _GLOBAL:
        return True
    if inner == _GLOBAL:
        return False
    return outer[0] <= inner[0] and outer[1] <= inner[1] and inner[2] <= outer[2] and inner[3] <= outer[3]


def _cells(box: tuple[int, int, int, int], g: int) -> int:
    if box == _GLOBAL:
        return g * g
    return (box[2] - box[0] + 1) * (box[3] - box[1] + 1)
