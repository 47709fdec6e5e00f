"""Mergeable statistics of the first objects of a stream (O_init), read by the cost models.

Computed per chunk and combined with ``+=`` (river's ``stats.Mean`` convention):
``Statistics.from_objects(a) += Statistics.from_objects(b)`` equals the
statistics of ``a + b`` (tested). The sample of objects is kept for kNN-ball
estimates (DkM-SKS computes B(s) among O_init) and capped.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from ..core.config import Space


@dataclass
class Statistics:
    space: Space = field(default_factory=Space)
    grid: int = 64  # histogram cells per side
    sample_cap: int = 20_000
    n: int = 0
    keyword_freq: Counter = field(default_factory=Counter)  # keyword -> objects carrying it
    cell_count: np.ndarray = None  # type: ignore[assignment]  # (grid*grid,) objects per cell
    keyword_cells: dict = field(default_factory=dict)  # keyword -> Counter(cell -> objects)
    sample_x: list = field(default_factory=list)
    sample_y: list = field(default_factory=list)
    sample_kw: list = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.cell_count is None:
            self.cell_count = np.zeros(self.grid * self.grid, dtype=np.int64)

    def cell_of(self, x: float, y: float) -> int:
        """Histogram cell of a point: O(1)."""
        s = self.space
        cx = min(self.grid - 1, max(0, int((x - s.x1) / (s.x2 - s.x1) * self.grid)))
        cy = min(self.grid - 1, max(0, int((y - s.y1) / (s.y2 - s.y1) * self.grid)))
        return cx * self.grid + cy

    def add(self, x: float, y: float, keywords: Iterable[str]) -> None:
        """Count one object: O(keywords)."""
        kws = tuple(keywords)
        cell = self.cell_of(x, y)
        self.n += 1
        self.cell_count[cell] += 1
        self.keyword_freq.update(kws)
        for w in kws:
            self.keyword_cells.setdefault(w, Counter())[cell] += 1
        if len(self.sample_x) < self.sample_cap:
            self.sample_x.append(x)
            self.sample_y.append(y)
            self.sample_kw.append(kws)

    @classmethod
    def from_objects(cls, objects: Iterable, space: Space | None = None, grid: int = 64,
                     sample_cap: int = 20_000) -> "Statistics":
        """From ``Pub`` events (or anything with x, y, keywords)."""
        st = cls(space=space or Space(), grid=grid, sample_cap=sample_cap)
        for o in objects:
            st.add(o.x, o.y, o.keywords)
        return st

    @classmethod
    def from_items(cls, items: Iterable, space: Space | None = None, grid: int = 64,
                   sample_cap: int = 20_000) -> "Statistics":
        """``from_objects`` of the objects among ``items`` (events and the reader's blocks, in
        order), by array passes over them joined as one ``PubBlock`` (``_block``)."""
        from ..io.events import Pub, PubBlock
        st = cls(space=space or Space(), grid=grid, sample_cap=sample_cap)
        parts = [it for it in items if type(it) is PubBlock or type(it) is Pub]
        return st._block(PubBlock.join(parts)) if parts else st

    def _block(self, b) -> "Statistics":
        """The statistics of block ``b`` alone: cells, counts and first-seen orders as ``add``
        record by record would make them, its keywords as codes (the reader's, else numbered
        here in the order first seen)."""
        from ..io.lexicon import Words
        st = type(self)(space=self.space, grid=self.grid, sample_cap=self.sample_cap)
        s, g = self.space, self.grid
        x = np.asarray(b.x, dtype=np.float64)
        y = np.asarray(b.y, dtype=np.float64)
        # cell_of's int() truncates toward zero, then clamps: the same as clipping first
        cx = np.clip((x - s.x1) / (s.x2 - s.x1) * g, 0, g - 1).astype(np.int64)
        cy = np.clip((y - s.y1) / (s.y2 - s.y1) * g, 0, g - 1).astype(np.int64)
        cell = cx * g + cy
        n = len(x)
        st.n = n
        st.cell_count += np.bincount(cell, minlength=g * g)
        kws = b.keywords
        if type(kws) is Words:
            codes, lens, words = kws.flat().astype(np.int64), kws.lens(), kws.lex.words
        else:
            flat = list(chain.from_iterable(kws))
            words = list(dict.fromkeys(flat))
            codes = np.fromiter(map({w: i for i, w in enumerate(words)}.__getitem__, flat), np.int64, len(flat))
            lens = np.fromiter(map(len, kws), np.int64, n)
        if len(codes):
            owner = np.repeat(np.arange(n), lens)
            u, first, count = np.unique(codes, return_index=True, return_counts=True)
            o = np.argsort(first, kind="stable")  # the words in the order first seen
            st.keyword_freq.update(dict(zip(map(words.__getitem__, u[o].tolist()), count[o].tolist())))
            pair = codes * (g * g) + cell[owner]
            u, first, count = np.unique(pair, return_index=True, return_counts=True)
            o = np.argsort(first, kind="stable")  # (word, cell) pairs in the order first seen
            cells = st.keyword_cells
            for p, c in zip(u[o].tolist(), count[o].tolist()):
                w = words[p // (g * g)]
                got = cells.get(w)
                if got is None:
                    got = cells[w] = Counter()
                got[p % (g * g)] = c
        k = min(n, self.sample_cap)
        st.sample_x = list(b.x[:k])  # the values as given, as ``add`` keeps them
        st.sample_y = list(b.y[:k])
        st.sample_kw = list(kws[:k])
        return st

    def __iadd__(self, other: "Statistics") -> "Statistics":
        if (other.space, other.grid) != (self.space, self.grid):
            raise ValueError("statistics over different spaces or grids do not merge")
        self.n += other.n
        self.cell_count += other.cell_count
        self.keyword_freq.update(other.keyword_freq)
        for w, cells in other.keyword_cells.items():
            self.keyword_cells.setdefault(w, Counter()).update(cells)
        room = self.sample_cap - len(self.sample_x)
        self.sample_x.extend(other.sample_x[:room])
        self.sample_y.extend(other.sample_y[:room])
        self.sample_kw.extend(other.sample_kw[:room])
        return self

    def probability(self, keyword: str) -> float:
        """Fraction of objects carrying ``keyword`` (DkM-SKS's keyword probability)."""
        return self.keyword_freq.get(keyword, 0) / self.n if self.n else 0.0
