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
# A kNN/top-k slot's entry filters reach this much beyond its region's reach when it was posted:
# a region that grows by less (a refill under a window) keeps its entries (``filter_holds``).
MARGIN = 0.25
SHRINK = 2.0  # ... and are posted again once its reach is under 1/SHRINK of that reach


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
def reach(kind, kth, alpha, maxdist):
    """The half-side of a kNN or top-k region whose k-th key is ``kth`` (``extent``'s square
    around the subscription's point), or -1 when the region is unbounded (global list)."""
    if not math.isfinite(kth):
        return -1.0
    if kind == K_KNN:
        d = math.sqrt(kth)
    else:  # top-k: alpha*(1 - d/MaxDist) + (1 - alpha)*1 >= score  =>  d <= MaxDist*(1-score)/alpha
        room = (1.0 + kth) + SLACK
        if room >= alpha:
            return -1.0
        d = maxdist * room / alpha
    return d * (1.0 + SLACK) + SLACK


@njit(inline="always", cache=True)
def extent(r, maxdist, out):
    """The region of subscription record ``r`` as a rectangle into ``out[0:4]``; False when
    unbounded (global list)."""
    if r.kind == K_RANGE:
        out[0] = r.rx1
        out[1] = r.ry1
        out[2] = r.rx2
        out[3] = r.ry2
        return True
    d = reach(r.kind, r.kth, r.alpha, maxdist)
    if d < 0.0:
        return False
    out[0] = r.x - d
    out[1] = r.y - d
    out[2] = r.x + d
    out[3] = r.y + d
    return True


@njit(inline="always", cache=True)
def filter_box(r, pkth, maxdist):
    """The float32 box posted beside each entry of subscription record ``r`` (``postings``'
    boxes; ``probe._read_list`` tests it first), rounded outward so that it holds every point
    of the region: a range subscription's rectangle; a kNN or top-k one's square of reach
    ``MARGIN`` beyond the region's when its k-th key was ``pkth`` (the slot's, taken when it
    was posted), or the whole plane when that was unbounded. While these entries live the
    region may shrink, and grow up to that square (``filter_holds``: else the slot is posted
    again; kernel ``_follow``, ``CompiledGrid.update``; index/NOTES.md, "kNN filter boxes")."""
    if r.kind == K_RANGE:
        return _down(r.rx1), _down(r.ry1), _up(r.rx2), _up(r.ry2)
    d = reach(r.kind, pkth, r.alpha, maxdist)
    if d < 0.0:
        return np.float32(-np.inf), np.float32(-np.inf), np.float32(np.inf), np.float32(np.inf)
    d = (1.0 + MARGIN) * d  # ``filter_holds``' bound, the same float64 expression
    return _down(r.x - d), _down(r.y - d), _up(r.x + d), _up(r.y + d)


@njit(inline="always", cache=True)
def filter_holds(kind, kth, pkth, alpha, maxdist):
    """May a kNN/top-k slot posted at k-th key ``pkth`` stay posted now that it is ``kth``?
    Not once its region's reach grew past its entries' filters (``filter_box``: ``MARGIN``
    beyond the reach at ``pkth``), which would miss objects; nor once it shrank to under half
    the reach at ``pkth``, where the filters pass candidates from several times its area: it
    is posted again, tighter (index/NOTES.md, "kNN filter boxes")."""
    then = reach(kind, pkth, alpha, maxdist)
    if then < 0.0:  # posted unbounded: whole-plane filters (a bounded region is re-posted by level)
        return True
    now = reach(kind, kth, alpha, maxdist)
    return 0.0 <= now and now <= (1.0 + MARGIN) * then and SHRINK * now >= then


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
