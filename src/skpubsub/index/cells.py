"""Grid geometry shared by the compiled indexes: cells of a level, the hash key of a
keyword's list in a cell, a slot's region as a rectangle, and the plain rule for the
level a region is posted on.

The small helpers here and in :mod:`.nodecost` are inlined where they are called: a
compiled call that passes arrays pays Numba's reference counts (an atomic NRT incref and
decref per array), and a shrinking kNN region calls them several times per level it weighs.
Inlined, the kNN object phase went 13.5k -> 15.7k objects per CPU second (knn_100k, auto).
The level rules (``best_level`` here, ``cost_level`` and its parts in nodecost, placing's
``finest_level``) are called instead: inlined into every inlined copy of their callers they
cost a third of the cold compile, for no measured speed (index/NOTES.md, "Compile time").
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..store.subscriptions import K_KNN, K_RANGE

SLACK = 1e-9  # regions are widened a hair so float rounding never loses a match


@njit(inline="always", cache=True)
def cell_of(v, lo, width, g):
    """Cell index of coordinate ``v`` on a level with ``g`` cells over ``width``."""
    c = int(math.floor((v - lo) * g / width))
    return min(g - 1, max(0, c))


@njit(inline="always", cache=True)
def level_key(w, level, cx, cy, lmax):
    """Hash key of keyword ``w``'s list in cell (cx, cy) of ``level``; globals are negative."""
    stride = (4 ** (lmax + 1) - 1) // 3  # cells on all levels
    return np.int64(w) * stride + (4 ** level - 1) // 3 + cx * (1 << level) + cy


@njit(cache=True)
def decode_key(key, lmax):
    """(level, cx, cy) of a cell key (level -1 for a global list)."""
    if key < 0:
        return -1, 0, 0
    stride = (4 ** (lmax + 1) - 1) // 3
    r = key % stride
    level = 0
    while (4 ** (level + 1) - 1) // 3 <= r:
        level += 1
    r -= (4 ** level - 1) // 3
    g = 1 << level
    return level, r // g, r % g


@njit(inline="always", cache=True)
def extent(r, maxdist, out):
    """The region of subscription record ``r`` as a rectangle into ``out[0:4]``; False when
    unbounded (global list)."""
    kind, kth, alpha = r.kind, r.kth, r.alpha
    if kind == K_RANGE:
        out[0] = r.rx1
        out[1] = r.ry1
        out[2] = r.rx2
        out[3] = r.ry2
        return True
    if not math.isfinite(kth):
        return False
    if kind == K_KNN:
        d = math.sqrt(kth)
    else:  # top-k: alpha*(1 - d/MaxDist) + (1 - alpha)*1 >= score  =>  d <= MaxDist*(1-score)/alpha
        room = (1.0 + kth) + SLACK
        if room >= alpha:
            return False
        d = maxdist * room / alpha
    d = d * (1.0 + SLACK) + SLACK
    out[0] = r.x - d
    out[1] = r.y - d
    out[2] = r.x + d
    out[3] = r.y + d
    return True


@njit(inline="always", cache=True)
def filter_box(r):
    """The float32 box posted beside each entry of subscription record ``r`` (``postings``'
    boxes; ``probe._read_list`` tests it first): a range subscription's rectangle rounded
    outward, so it holds every point the rectangle does; else the whole plane (a kNN or top-k
    region may be tightened in place, so a box taken at posting could come to exclude it)."""
    if r.kind != K_RANGE:
        return np.float32(-np.inf), np.float32(-np.inf), np.float32(np.inf), np.float32(np.inf)
    return _down(r.rx1), _down(r.ry1), _up(r.rx2), _up(r.ry2)


@njit(inline="always", cache=True)
def _down(v):
    f = np.float32(v)
    return np.nextafter(f, np.float32(-np.inf)) if np.float64(f) > v else f


@njit(inline="always", cache=True)
def _up(v):
    f = np.float32(v)
    return np.nextafter(f, np.float32(np.inf)) if np.float64(f) < v else f


@njit(inline="always", cache=True)
def box_at(level, ext, geo, out):
    """Cell box of rectangle ``ext`` on ``level`` into ``out[0:4]``; returns its cell count."""
    g = 1 << level
    out[0] = cell_of(ext[0], geo[0], geo[2], g)
    out[1] = cell_of(ext[1], geo[1], geo[3], g)
    out[2] = cell_of(ext[2], geo[0], geo[2], g)
    out[3] = cell_of(ext[3], geo[1], geo[3], g)
    return (out[2] - out[0] + 1) * (out[3] - out[1] + 1)


@njit(cache=True)  # called, not inlined: compile time (index/NOTES.md, "inline")
def best_level(ext, geo, lmax, max_cells, out):
    """Finest level where ``ext`` covers at most ``max_cells`` cells (level 0 has one)."""
    for level in range(lmax, 0, -1):
        if box_at(level, ext, geo, out) <= max_cells:
            return level
    box_at(0, ext, geo, out)
    return 0
