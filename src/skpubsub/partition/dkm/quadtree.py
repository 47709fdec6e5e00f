"""Quadtree splitting of subscriptions by location, shared by ``sop`` (DkM-SKS Section 3.2) and
``dkm`` (Algorithm 2, SPACE-ONLY-PARTITION)."""

from __future__ import annotations

import numpy as np

from .sample import Regions

_MAX_SPLIT_DEPTH = 200  # halvings of a quadrant before points are treated as inseparable


def _quad_split(reg: Regions, idx: np.ndarray, r: tuple[float, float, float, float]
                ) -> list[tuple[np.ndarray, tuple[float, float, float, float]]] | None:
    """Split space ``r`` into four equal quadrants and ``idx`` by location; repeat on
    the only non-empty quadrant until at least two hold subscriptions.  ``None``
    when the locations coincide (they cannot be separated)."""
    px, py = reg.px[idx], reg.py[idx]
    if len(idx) < 2 or (px.min() == px.max() and py.min() == py.max()):
        return None
    for _ in range(_MAX_SPLIT_DEPTH):
        x1, y1, x2, y2 = r
        mx, my = (x1 + x2) / 2.0, (y1 + y2) / 2.0
        q = (px > mx).astype(np.int8) + 2 * (py > my).astype(np.int8)
        quads = [(x1, y1, mx, my), (mx, y1, x2, my), (x1, my, mx, y2), (mx, my, x2, y2)]
        parts = [(idx[q == j], quads[j], q == j) for j in range(4)]
        parts = [p for p in parts if len(p[0])]
        if len(parts) >= 2:
            return [(p[0], p[1]) for p in parts]
        idx, r, keep = parts[0]
        px, py = px[keep], py[keep]
    return None
