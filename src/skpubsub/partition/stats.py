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
