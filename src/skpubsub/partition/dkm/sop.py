"""Planner ``sop``: DkM-SKS's space-oriented partition (Section 3.2): quadtree subsets costed by
Eq. (3) with Eq. (2), assigned by the greedy of Algorithm 1."""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

import numpy as np

from ...io.events import Sub
from ..common import AssignedPlan, lpt
from ..stats import Statistics
from .params import PAPER_THETA, _check_m, _floor
from .quadtree import _quad_split
from .sample import SampleIndex


def plan_sop(subs: Sequence[Sub], stats: Statistics, m: int, *, theta: float = PAPER_THETA,
             min_cost: float | None = None) -> AssignedPlan:
    """Space-oriented partition (DkM-SKS 3.2): quadtree subspaces split largest
    ``C(S_r)`` first until at least ``theta*m`` non-empty subsets (Eq. (3) with
    Eq. (2)), then the greedy of Algorithm 1 over the subsets."""
    m = _check_m(m)
    if not (isinstance(theta, (int, float)) and theta > 0 and math.isfinite(theta)):
        raise ValueError(f"theta must be a finite number > 0, got {theta!r}")
    floor = _floor(stats, min_cost)
    index = SampleIndex(stats)
    reg = index.regions(subs)
    ids = [s.id for s in subs]
    sp = stats.space

    def make(idx: np.ndarray, r: tuple) -> dict:
        R = reg.bbox(idx)
        return {"idx": idx, "r": r, "R": R}

    def cost_of(nodes: list[dict]) -> None:
        # Eq. (3): C(S_r) = P(R) * |S_r|, P(R) by Eq. (2); per subscription P(R) (>= floor)
        p = index.probability_in(np.array([nd["R"] for nd in nodes]))
        for nd, pr in zip(nodes, p):
            nd["p"] = max(float(pr), floor)
            nd["cost"] = nd["p"] * len(nd["idx"])

    target = theta * m
    heap: list = []
    final: list[dict] = []
    counter = 0
    if len(subs):
        root = make(np.arange(len(subs)), (sp.x1, sp.y1, sp.x2, sp.y2))
        cost_of([root])
        heap.append((-root["cost"], counter, root))
    while heap and len(heap) + len(final) < target:
        _, _, nd = heapq.heappop(heap)  # the subspace with the largest C(S_r)
        parts = _quad_split(reg, nd["idx"], nd["r"])
        if parts is None:
            final.append(nd)
            continue
        kids = [make(ci, cr) for ci, cr in parts]
        cost_of(kids)
        for ch in kids:
            counter += 1
            heapq.heappush(heap, (-ch["cost"], counter, ch))
    nodes = final + [nd for _, _, nd in heap]
    # Algorithm 1 over the subsets S_r ("the input of the greedy algorithm is a collection of subsets")
    where, _ = lpt(((j, nd["cost"]) for j, nd in enumerate(nodes)), m)
    assignment: dict = {}
    costs: dict = {}
    for j, nd in enumerate(nodes):
        w = where[j]
        nd["worker"] = w
        for i in nd["idx"].tolist():
            assignment[ids[i]] = (w,)
            costs[ids[i]] = nd["p"]

    def new_rule(sub: Sub, plan: AssignedPlan) -> tuple[tuple[int, ...], float]:
        # its kNN among O_init gives B(s) and its rectangle R; Eq. (3) with S_r = {s} is Eq. (2)
        R = index.regions([sub]).rect
        p = max(float(index.probability_in(R)[0]), floor)
        return (plan.least_loaded(),), p

    def new_bulk(subs: list[Sub]) -> list[float]:
        # new_rule's cost for a run at once: each row of regions and of Eq. (2) reads only the
        # sample, so rows computed together are the rows computed alone
        return np.maximum(index.probability_in(index.regions(subs).rect), floor).tolist()

    def new_placed(sub: Sub, plan: AssignedPlan, p: float) -> tuple[tuple[int, ...], float]:
        return (plan.least_loaded(),), p

    info = {"cost_model": "DkM-SKS Eqs. (2)-(3)", "theta": theta, "min_cost": floor,
            "subsets": [{"r": list(map(float, nd["r"])), "R": nd["R"].tolist(), "size": int(len(nd["idx"])),
                         "cost": nd["cost"], "worker": nd["worker"]} for nd in nodes],
            "total_cost": math.fsum(nd["cost"] for nd in nodes)}
    plan = AssignedPlan(m, "sop", assignment, costs, new_rule, info=info, new_bulk=new_bulk, new_placed=new_placed)
    plan.groups = [tuple(ids[i] for i in nd["idx"].tolist()) for nd in nodes]  # type: ignore[attr-defined]
    return plan
