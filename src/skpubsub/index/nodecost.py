"""CkQST's memory-based cost model (section 3.4, Eqs. 4-12): the quadtree level a search
range is posted on.

The compiled grid posts a region on one level, in the box of cells it overlaps there (a
slot's liveness is its level and box). The plain rule takes the finest level where that
box has at most ``max_cells`` cells. The cost model starts instead at the minimum bounding
node (Definition 3: the finest level where the box is one cell) and goes a level finer only
while the verification saved pays for the update cost added:

* verification cost (Eqs. 4-5, 8): objects falling in the box's cells per arriving object
  (the spatial distribution seen so far) times the probability that an object carries the
  slot's posting keywords (``text_rate``); ΔCV (Eq. 9) is what one level finer saves;
* update cost (Eqs. 10-11): one entry per posted keyword and cell (our postings append,
  so finding the insertion point costs nothing); ΔCU (Eq. 12) is what one level finer adds;
* go finer while ΔCV >= θ·ΔCU, never past the plain rule's level (the cell budget the
  kernel reserves room for).

The paper lets each node of the range choose independently (a set of nodes on several
levels); one level per slot keeps lazy deletion's liveness test to a level and a box.
Object counts are exact on levels 0..``LC`` and shared evenly by the finer cells of a
level-``LC`` cell (349,525 counts, 2.8 MB, instead of one per finest cell). Any level
covers the region, so the choice changes cost, never results.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..store.subscriptions import K_RANGE, K_TOPK
from .cells import best_level, box_at, cell_of

LC = 9  # finest level with its own object counts


def new_counts(lmax: int) -> np.ndarray:
    """Zeroed object counts for every cell of levels 0..min(lmax, LC)."""
    lc = min(lmax, LC)
    return np.zeros((4 ** (lc + 1) - 1) // 3, dtype=np.int64)


@njit(cache=True)
def _levels(counts):
    """Levels counted in ``counts`` (its length is (4^(levels) - 1) / 3)."""
    n = 0
    size = 0
    while size < len(counts):
        size += 4 ** n
        n += 1
    return n


@njit(cache=True)
def count_objects(counts, xs, ys, geo):
    """Count each object at ``xs, ys`` in its cell of every counted level. The finest
    level's cell is computed once and the coarser ones are its ancestors (a shift): the
    same cells as ``cell_of`` on each level, since scaling by a power of two commutes with
    rounding (one quotient, floored at each scale; its clamp shifts to theirs)."""
    nl = _levels(counts)
    top = nl - 1
    gt = 1 << top
    for i in range(len(xs)):
        cx = cell_of(xs[i], geo[0], geo[2], gt)
        cy = cell_of(ys[i], geo[1], geo[3], gt)
        base = 0
        for level in range(nl):
            sh = top - level
            counts[base + (cx >> sh << level) + (cy >> sh)] += 1
            base += 1 << (2 * level)


@njit(inline="always", cache=True)
def objects_in(level, box, counts):
    """Objects seen in the ``box`` of cells on ``level`` (cells finer than the counted levels
    share their counted ancestor's count evenly)."""
    nl = _levels(counts)
    lc = min(level, nl - 1)
    shift = level - lc
    g = 1 << lc
    base = (4 ** lc - 1) // 3
    total = 0.0
    for cx in range(box[0], box[2] + 1):
        for cy in range(box[1], box[3] + 1):
            total += counts[base + (cx >> shift) * g + (cy >> shift)]
    return total / 4.0 ** shift


@njit(inline="always", cache=True)
def text_rate(kind, every, tok, off, ln, kw_id, freq, total):
    """(probability that an arriving object is a text candidate of a slot, keywords it is
    posted under): pVq of Eqs. 4-7 with keywords taken as independent, add-one smoothed.
    The slot's keywords are ``kw_id[off:off + ln]``; ``every``: match all; ``tok``: its
    aoiq pair token or -1. A pair token needs both of ψ[1:2] (the two smallest ids); an
    ``all`` list its least frequent keyword; ``any`` and top-k lists any keyword."""
    d = total + 1.0
    if tok >= 0:
        a = -1
        b = -1
        for j in range(off, off + ln):
            w = kw_id[j]
            if a < 0 or w < a:
                b = a
                a = w
            elif w != a and (b < 0 or w < b):
                b = w
        return (freq[a] + 1.0) / d * (freq[b] + 1.0) / d, 1
    if every and kind != K_TOPK:
        p = 1.0
        for j in range(off, off + ln):
            p = min(p, (freq[kw_id[j]] + 1.0) / d)
        return p, 1
    p = 0.0
    for j in range(off, off + ln):
        p += (freq[kw_id[j]] + 1.0) / d
    return min(1.0, p), ln


@njit(inline="always", cache=True)
def _shifted(level, lmax, a0, b0, a1, b1, out):
    """The box on ``level`` from the finest level's (``_finest``) into ``out``; its cells."""
    d = lmax - level
    out[0] = a0 >> d
    out[1] = b0 >> d
    out[2] = a1 >> d
    out[3] = b1 >> d
    return (out[2] - out[0] + 1) * (out[3] - out[1] + 1)


@njit(inline="always", cache=True)
def finest_cells(ext, geo, lmax):
    """(ok, a0, b0, a1, b1): the cell box of rectangle ``ext`` on the finest level ``lmax``.
    Every coarser level's box is this one shifted (``_shifted``; ``placing.finest_level``'s
    argument: ``cell_of`` halves exactly from one level to the next). ``ok`` is False when an
    index is too large for that (|x| >= 2**62) or NaN: then take ``box_at`` level by level."""
    g = 1 << lmax
    x0 = (ext[0] - geo[0]) * g / geo[2]
    y0 = (ext[1] - geo[1]) * g / geo[3]
    x1 = (ext[2] - geo[0]) * g / geo[2]
    y1 = (ext[3] - geo[1]) * g / geo[3]
    lim = 4.611686018427388e18  # 2**62
    if not (abs(x0) < lim and abs(y0) < lim and abs(x1) < lim and abs(y1) < lim):
        return False, 0, 0, 0, 0
    a0 = min(g - 1, max(0, int(math.floor(x0))))
    b0 = min(g - 1, max(0, int(math.floor(y0))))
    a1 = min(g - 1, max(0, int(math.floor(x1))))
    b1 = min(g - 1, max(0, int(math.floor(y1))))
    return True, a0, b0, a1, b1


@njit(cache=True)  # called, not inlined: compile time (index/NOTES.md, "inline")
def plain_cells(a0, b0, a1, b1, lmax, max_cells, out):
    """``cells.best_level`` from the finest level's box (``finest_cells``): the finest level
    with at most ``max_cells`` cells, its box into ``out``."""
    best = lmax
    while best > 0:
        d = lmax - best
        if ((a1 >> d) - (a0 >> d) + 1) * ((b1 >> d) - (b0 >> d) + 1) <= max_cells:
            break
        best -= 1
    _shifted(best, lmax, a0, b0, a1, b1, out)
    return best


@njit(inline="always", cache=True)
def not_finer(level, a0, b0, a1, b1, lmax, max_cells):
    """Is neither rule (``plain_cells``, ``cost_cells``) going to post the region with
    finest-level box ``a0, b0, a1, b1`` finer than ``level``? True when ``level`` is the finest
    or the box has more than ``max_cells`` cells one level finer (the cell count never falls
    going finer, and the cost model stops at the plain rule's level)."""
    if level >= lmax:
        return True
    d = lmax - level - 1
    return ((a1 >> d) - (a0 >> d) + 1) * ((b1 >> d) - (b0 >> d) + 1) > max_cells


@njit(cache=True)  # called, not inlined: compile time (index/NOTES.md, "inline")
def cost_cells(a0, b0, a1, b1, lmax, max_cells, counts, theta, warm, ptext, ln, out):
    """``cost_level`` from the finest level's box (``finest_cells``)."""
    best = lmax  # cells.best_level: the finest level with at most max_cells cells
    while best > 0:
        d = lmax - best
        if ((a1 >> d) - (a0 >> d) + 1) * ((b1 >> d) - (b0 >> d) + 1) <= max_cells:
            break
        best -= 1
    if theta <= 0.0 or len(counts) == 0 or counts[0] < max(warm, 1):
        _shifted(best, lmax, a0, b0, a1, b1, out)
        return best
    total = float(counts[0])
    level = 0
    while level < best:  # Definition 3
        d = lmax - level - 1
        if (a1 >> d) != (a0 >> d) or (b1 >> d) != (b0 >> d):
            break
        level += 1
    cells = _shifted(level, lmax, a0, b0, a1, b1, out)
    seen = objects_in(level, out, counts)
    while level < best:
        finer = _shifted(level + 1, lmax, a0, b0, a1, b1, out)
        seen_f = objects_in(level + 1, out, counts)
        if ptext * (seen - seen_f) / total < theta * ln * (finer - cells):  # ΔCV < θ·ΔCU
            break
        level += 1
        cells = finer
        seen = seen_f
    _shifted(level, lmax, a0, b0, a1, b1, out)
    return level


@njit(cache=True)  # called, not inlined: compile time (index/NOTES.md, "inline")
def cost_level(ext, geo, lmax, max_cells, counts, theta, warm, ptext, ln, out):
    """The level the cost model posts region ``ext`` on, its box into ``out``; the plain
    rule (cells.best_level) when the model is off (``theta`` <= 0 or no counts) or fewer
    than ``warm`` objects have been counted. Never finer than the plain rule's level.

    Every level's box comes from the finest level's by shifts (``finest_cells``), not from
    four divisions and floors a level; the levels, boxes and sums are those of the plain
    computation (``_cost_level_plain``, which indices past 2**62 or NaN still take)."""
    ok, a0, b0, a1, b1 = finest_cells(ext, geo, lmax)
    if not ok:
        return _cost_level_plain(ext, geo, lmax, max_cells, counts, theta, warm, ptext, ln, out)
    return cost_cells(a0, b0, a1, b1, lmax, max_cells, counts, theta, warm, ptext, ln, out)


@njit(cache=True)  # called, not inlined: compile time (index/NOTES.md, "inline")
def _cost_level_plain(ext, geo, lmax, max_cells, counts, theta, warm, ptext, ln, out):
    """``cost_level`` computed level by level (``box_at``, ``best_level``)."""
    best = best_level(ext, geo, lmax, max_cells, out)
    if theta <= 0.0 or len(counts) == 0 or counts[0] < max(warm, 1):
        return best
    total = float(counts[0])
    level = 0
    while level < best and box_at(level + 1, ext, geo, out) == 1:  # Definition 3
        level += 1
    cells = box_at(level, ext, geo, out)
    seen = objects_in(level, out, counts)
    while level < best:
        finer = box_at(level + 1, ext, geo, out)
        seen_f = objects_in(level + 1, out, counts)
        if ptext * (seen - seen_f) / total < theta * ln * (finer - cells):  # ΔCV < θ·ΔCU
            break
        level += 1
        cells = finer
        seen = seen_f
    box_at(level, ext, geo, out)
    return level


@njit(inline="always", cache=True)
def slot_level(s, subs, grid, ext, out):
    """The level (and its box into ``out``) of ``grid`` that slot ``s``'s region ``ext`` is
    posted on: a range subscription by the plain rule (PS2Stream's, not CkQST's), kNN and
    top-k by the cost model."""
    r = subs.rec[s]
    counts = grid.counts
    if r.kind == K_RANGE or grid.theta_n <= 0.0 or len(counts) == 0:
        return best_level(ext, grid.geo, grid.lmax, grid.max_cells, out)
    ptext, n = text_rate(r.kind, r.match_all, grid.slots[s].tok, r.kw_off, r.kw_len, subs.kw_id, grid.freq,
                         float(counts[0]))
    return cost_level(ext, grid.geo, grid.lmax, grid.max_cells, counts, grid.theta_n, grid.warm_n, ptext, n, out)


@njit(inline="always", cache=True)
def slot_level_cells(s, subs, grid, a0, b0, a1, b1, out):
    """``slot_level`` from the region's finest-level box (``finest_cells``, ok)."""
    r = subs.rec[s]
    counts = grid.counts
    if r.kind == K_RANGE or grid.theta_n <= 0.0 or len(counts) == 0:
        return plain_cells(a0, b0, a1, b1, grid.lmax, grid.max_cells, out)
    ptext, n = text_rate(r.kind, r.match_all, grid.slots[s].tok, r.kw_off, r.kw_len, subs.kw_id, grid.freq,
                         float(counts[0]))
    return cost_cells(a0, b0, a1, b1, grid.lmax, grid.max_cells, counts, grid.theta_n, grid.warm_n, ptext, n, out)
