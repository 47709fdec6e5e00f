"""grid^t (PS2Stream Section IV-C): the dispatcher's index over the kd^t leaves, placing new
subscriptions by H1 (space leaves) and H2 (text leaves)."""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from ...core.config import Space
from ...io.events import RANGE, Sub
from .data import clamp_point, clip_rect, posting


class GridT:
    """The dispatcher's grid^t (IV-C): cells bounded by the kd^t leaves' edges, each in one leaf.

    ``leaves[i]`` is a dict: ``rect``, ``mode`` ("space" or "text"), ``worker`` (space) or
    ``workers`` per group and ``groups`` (keyword -> group) for text.
    """

    def __init__(self, space: Space, leaves: list[dict], freq: Any) -> None:
        self.space = space
        self.leaves = leaves
        self.freq = freq
        xs = sorted({v for lf in leaves for v in (lf["rect"][0], lf["rect"][2])} - {space.x1, space.x2})
        ys = sorted({v for lf in leaves for v in (lf["rect"][1], lf["rect"][3])} - {space.y1, space.y2})
        self.xs = np.asarray(xs, dtype=np.float64)
        self.ys = np.asarray(ys, dtype=np.float64)
        cell = np.full((len(xs) + 1, len(ys) + 1), -1, dtype=np.int32)
        for i, lf in enumerate(leaves):
            x1, y1, x2, y2 = lf["rect"]
            a = int(np.searchsorted(self.xs, x1, side="right"))
            b = int(np.searchsorted(self.xs, x2, side="left"))
            c = int(np.searchsorted(self.ys, y1, side="right"))
            e = int(np.searchsorted(self.ys, y2, side="left"))
            cell[a:b + 1, c:e + 1] = i
        if (cell < 0).any():  # pragma: no cover - the leaves tile the space by construction
            raise AssertionError("grid^t: a cell outside every leaf")
        self.cell = cell

    def leaf_at(self, x: float, y: float) -> int:
        """The leaf containing a point (cells are half-open, closed on the space's upper edges)."""
        x, y = clamp_point(x, y, self.space)
        return int(self.cell[int(np.searchsorted(self.xs, x, side="right")),
                             int(np.searchsorted(self.ys, y, side="right"))])

    def leaves_in(self, rect: tuple[float, float, float, float]) -> list[int]:
        """The leaves a closed rectangle (clipped to the space) meets, in leaf order."""
        x1, y1, x2, y2 = clip_rect(rect, self.space)
        a = int(np.searchsorted(self.xs, x1, side="right"))
        b = int(np.searchsorted(self.xs, x2, side="right"))
        c = int(np.searchsorted(self.ys, y1, side="right"))
        e = int(np.searchsorted(self.ys, y2, side="right"))
        return np.unique(self.cell[a:b + 1, c:e + 1]).tolist()

    def _group(self, lf: dict, w: str) -> int:
        g = lf["groups"].get(w)
        if g is None:
            g = zlib.crc32(w.encode("utf-8")) % len(lf["workers"])
        return g

    def workers(self, sub: Sub) -> tuple[int, ...]:
        """Workers of a subscription: H1 (space leaves) / H2 (text leaves) of the cells it meets."""
        if sub.kind == RANGE:
            leaves = self.leaves_in(sub.rect)  # type: ignore[arg-type]
        else:
            leaves = [self.leaf_at(sub.x, sub.y)]
        _, homes = posting(sub, self.freq)
        out: set[int] = set()
        for i in leaves:
            lf = self.leaves[i]
            if lf["mode"] == "space":
                out.add(lf["worker"])
            else:
                for h in dict.fromkeys(homes):
                    out.add(lf["workers"][self._group(lf, h)])
        return tuple(sorted(out))
