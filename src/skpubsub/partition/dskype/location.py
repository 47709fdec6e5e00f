"""Planner ``location`` (Skype paper, Section 7.3): the cost kd-tree of Algorithm 3, leaves costed
by Eq. (15), one leaf per worker."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...core.config import Space
from ...io.events import RANGE, Sub
from ..stats import Statistics
from .plan import DSkypePlan, _check


def sub_point(sub: Sub, space: Space) -> tuple[float, float]:
    """The location a subscription is placed by: its point (knn, topk) or, for a range
    subscription, the centre of its rectangle; clamped into the space."""
    if sub.kind == RANGE and sub.rect is not None:
        x1, y1, x2, y2 = sub.rect
        x, y = (x1 + x2) / 2.0, (y1 + y2) / 2.0
    else:
        x, y = sub.x, sub.y
    return min(max(x, space.x1), space.x2), min(max(y, space.y1), space.y2)


class LocationPlan(DSkypePlan):
    """Leaves of the cost kd-tree are the workers (in depth-first order, left/bottom first)."""

    def __init__(self, m, subs, assignment, costs, space, nodes, leaves, info):
        self.space = space
        self._nodes = nodes  # [axis, line, left, right, worker]; a leaf has worker >= 0
        self._leaves = leaves  # worker -> {"rect", "subs", "p", "cost"} as planned
        super().__init__(m, "location", subs, assignment, costs, info=info)

    def leaf_of(self, x: float, y: float) -> int:
        """Worker whose leaf contains ``(x, y)`` (clamped into the space); O(log m)."""
        s = self.space
        p = (min(max(x, s.x1), s.x2), min(max(y, s.y1), s.y2))
        i = 0
        while True:
            axis, line, left, right, worker = self._nodes[i]
            if worker >= 0:
                return worker
            i = left if p[axis] <= line else right

    def leaf_rects(self) -> list[tuple[float, float, float, float]]:
        """Worker -> its leaf ``(x1, y1, x2, y2)`` (closed; shared edges go to the lower leaf)."""
        return [tuple(leaf["rect"]) for leaf in self._leaves]

    def _place_new(self, sub, plan):
        w = self.leaf_of(*sub_point(sub, self.space))
        return (w,), self._leaves[w]["p"]

    def describe(self) -> dict:
        d = super().describe()
        d["leaves"] = [{"worker": w, **leaf} for w, leaf in enumerate(self._leaves)]
        return d


class _Points:
    """Weighted message positions for p(nd): the O_init sample (weight 1 each) or, without
    one, the histogram cells' centres weighted by their counts; plus one pseudo-object spread
    uniformly over the space."""

    def __init__(self, stats: Statistics) -> None:
        sp = stats.space
        if len(stats.sample_x):
            x = np.asarray(stats.sample_x, dtype=np.float64)
            y = np.asarray(stats.sample_y, dtype=np.float64)
            w = np.ones(len(x))
            self.source = "sample"
        else:
            g = stats.grid
            cells = np.nonzero(stats.cell_count)[0]
            cx, cy = cells // g, cells % g
            x = sp.x1 + (cx + 0.5) * (sp.x2 - sp.x1) / g
            y = sp.y1 + (cy + 0.5) * (sp.y2 - sp.y1) / g
            w = stats.cell_count[cells].astype(np.float64)
            self.source = "histogram" if len(cells) else "uniform"
        self.x = np.clip(x, sp.x1, sp.x2)
        self.y = np.clip(y, sp.y1, sp.y2)
        self.w = w
        self.total = float(w.sum()) + 1.0  # + the pseudo-object
        self.area = (sp.x2 - sp.x1) * (sp.y2 - sp.y1)


def _area(r) -> float:
    return (r[2] - r[0]) * (r[3] - r[1])


def plan_location(subs: Sequence[Sub], stats: Statistics, m: int, **params: Any) -> LocationPlan:
    """Cost kd-tree (Eq. 15, Algorithm 3): split alternately on x and y at the line minimising
    the difference of the children's costs ``C(nd) = N(nd) * p(nd)`` until there are ``m``
    leaves; a subscription goes to the leaf holding its point (range: the rectangle's centre).

    O(|S| log |S| + |O| log |O|) per tree level, ``ceil(log2 m)`` levels.
    """
    _check(subs, m)
    space = stats.space
    pts = _Points(stats)
    n = len(subs)
    sxy = np.empty((2, n))
    for i, s in enumerate(subs):
        sxy[0, i], sxy[1, i] = sub_point(s, space)
    oxy = np.vstack([pts.x, pts.y])
    nodes: list[list] = []
    leaves: list[dict] = []
    leaf_of_sub = np.zeros(n, dtype=np.int64)

    def build(rect, si, oi, parts, depth) -> int:
        me = len(nodes)
        nodes.append([0, 0.0, -1, -1, -1])
        if parts == 1:  # Algorithm 3, lines 1-2: the depth limit -> a leaf, one worker
            w = len(leaves)
            p = (float(pts.w[oi].sum()) + _area(rect) / pts.area) / pts.total  # p(nd)
            leaves.append({"rect": [float(v) for v in rect], "subs": int(len(si)), "p": p,
                           "cost": len(si) * p})  # Eq. (15)
            leaf_of_sub[si] = w
            nodes[me][4] = w
            return me
        q1 = parts // 2
        q2 = parts - q1
        axis, line = _best_split(rect, sxy[:, si], oxy[:, oi], pts.w[oi], depth, q1, q2, pts)
        go_left = sxy[axis, si] <= line  # Algorithm 3, line 7
        o_left = oxy[axis, oi] <= line
        lo = list(rect)
        hi = list(rect)
        lo[axis + 2] = line
        hi[axis] = line
        nodes[me][0], nodes[me][1] = axis, line
        nodes[me][2] = build(tuple(lo), si[go_left], oi[o_left], q1, depth + 1)  # line 8
        nodes[me][3] = build(tuple(hi), si[~go_left], oi[~o_left], q2, depth + 1)  # line 9
        return me

    build((space.x1, space.y1, space.x2, space.y2), np.arange(n), np.arange(len(pts.w)), m, 0)
    assignment = {}
    costs = {}
    for i, s in enumerate(subs):
        w = int(leaf_of_sub[i])
        assignment[s.id] = (w,)
        costs[s.id] = leaves[w]["p"]  # so that loads()[w] = N(leaf) * p(leaf), Eq. (15)
    info = {"cost_model": "Eq. 15: C(leaf) = N(leaf) * p(leaf)", "algorithm": "Algorithm 3 (cost kd-tree)",
            "point_rule": "knn/topk: (x, y); range: centre of rect; clamped into the space",
            "boundary_rule": "a point on a split line belongs to the lower (left/bottom) leaf",
            "probability_source": pts.source}
    return LocationPlan(m, subs, assignment, costs, space, nodes, leaves, info)


def _best_split(rect, sxy, oxy, ow, depth, q1, q2, pts: _Points) -> tuple[int, float]:
    """Algorithm 3, lines 3-6: the split line (on x at even depth, y at odd) between two
    consecutive subscription coordinates minimising ``|C(nd1)/q1 - C(nd2)/q2|``."""
    first = depth % 2
    for axis in (first, 1 - first):  # the other axis if this one cannot separate anything
        u, cnt = np.unique(sxy[axis], return_counts=True)
        if len(u) >= 2:
            break
    else:  # fewer than two distinct subscription points: halve the node
        return first, (rect[first] + rect[first + 2]) / 2.0
    lo, hi = rect[axis], rect[axis + 2]
    lines = (u[:-1] + u[1:]) / 2.0
    n_left = np.cumsum(cnt)[:-1].astype(np.float64)
    n_all = float(cnt.sum())
    order = np.argsort(oxy[axis], kind="stable")
    cw = np.concatenate([[0.0], np.cumsum(ow[order])])
    w_left = cw[np.searchsorted(oxy[axis][order], lines, side="right")]
    a_all = _area(rect) / pts.area
    a_left = a_all * (lines - lo) / (hi - lo) if hi > lo else np.zeros_like(lines)
    c1 = n_left * (w_left + a_left) / pts.total  # Eq. (15) for both children
    c2 = (n_all - n_left) * (cw[-1] - w_left + a_all - a_left) / pts.total
    j = int(np.argmin(np.abs(c1 / q1 ** 2 - c2 / q2 ** 2)))
    return axis, float(lines[j])
