"""Planner ``dkm``: DkM-SKS (Section 4): costs Eqs. (4)-(6), Algorithm 2 (space-only vs hybrid
partition), Algorithm 3 (assignment); new subscriptions costed with R* of Eq. (7)."""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

import numpy as np

from ...io.events import Sub, SubBlock
from ..common import AssignedPlan, lpt, lpt_runs
from ..stats import Statistics
from .params import PAPER_GAMMA1, PAPER_GAMMA2, _check_m, _floor
from .quadtree import _quad_split
from .sample import SampleIndex, _eq5


def plan_dkm(subs: Sequence[Sub], stats: Statistics, m: int, *, gamma1: float = PAPER_GAMMA1,
             gamma2: int = PAPER_GAMMA2, min_cost: float | None = None) -> AssignedPlan:
    """DkM-SKS (section 4): Algorithm 2 partitions S into at least ``gamma1*m``
    subsets (space-only partition when ``|S'| > gamma2``, else the cheaper of
    space-only and hybrid by Eq. (6)); Algorithm 3 assigns the subsets, heaviest
    first, each subscription (heaviest first) to the least-loaded worker."""
    m = _check_m(m)
    if not (isinstance(gamma1, (int, float)) and gamma1 > 0 and math.isfinite(gamma1)):
        raise ValueError(f"gamma1 must be a finite number > 0, got {gamma1!r}")
    if isinstance(gamma2, bool) or not isinstance(gamma2, (int, np.integer)) or gamma2 < 0:
        raise ValueError(f"gamma2 must be an integer >= 0, got {gamma2!r}")
    floor = _floor(stats, min_cost)
    index = SampleIndex(stats)
    reg = index.regions(subs)
    ids = list(subs.id) if type(subs) is SubBlock else [s.id for s in subs]
    N = len(subs)
    sp = stats.space
    target = gamma1 * m
    n_space = n_hybrid = 0

    if N and target >= N:
        # Algorithm 2 ends only when every subset is one subscription: each is its own
        # subset with its own rectangle; Eq. (5) = Eq. (6) per subset.
        sub_cost = _eq5(index, reg, np.arange(N), reg.rect, floor)
        subset_rect = reg.rect
        subset_cost = sub_cost
        # Algorithm 3 over singletons, heaviest first = LPT over the costs
        worker_of, _ = lpt_runs(sub_cost, np.array([0, N]), m)
        subsets_info = None
        n_subsets = N
        singletons = True
        groups = list(zip(ids))
    else:
        singletons = False
        counter = 0

        def node(idx: np.ndarray, r: tuple, cost: np.ndarray, R: np.ndarray) -> dict:
            nonlocal counter
            counter += 1
            return {"idx": idx, "r": r, "R": R, "c": cost, "cost": float(cost.sum()), "seq": counter}

        def with_costs(parts: list[tuple[np.ndarray, tuple]]) -> list[dict]:
            # Eq. (6) for each group: C(S_r) = sum Eq. (5) against the group's rectangle R
            Rs = [reg.bbox(g) for g, _ in parts]
            allidx = np.concatenate([g for g, _ in parts])
            rects = np.concatenate([np.broadcast_to(R, (len(g), 4)) for R, (g, _) in zip(Rs, parts)])
            c = _eq5(index, reg, allidx, rects, floor)
            out, at = [], 0
            for R, (g, r) in zip(Rs, parts):
                out.append(node(g, r, c[at:at + len(g)], R))
                at += len(g)
            return out

        def hybrid(nd: dict) -> list[tuple[np.ndarray, tuple]]:
            # HYBRID-PARTITION: greedy over Eq. (5) (w.r.t. the parent's R) into four subsets
            g, _ = lpt(enumerate(nd["c"].tolist()), 4)
            parts = [[] for _ in range(4)]
            for pos in range(len(nd["idx"])):
                parts[g[pos]].append(pos)
            return [(nd["idx"][np.asarray(p, dtype=np.int64)], nd["r"]) for p in parts if p]

        heap: list = []
        final: list[dict] = []
        if N:
            idx0 = np.arange(N)
            R0 = reg.bbox(idx0)
            root = node(idx0, (sp.x1, sp.y1, sp.x2, sp.y2), _eq5(index, reg, idx0, np.broadcast_to(R0, (N, 4)), floor), R0)
            heap.append((-0.0, root["seq"], root))  # Algorithm 2 line 1: S <- <S, 0>
        while heap and len(heap) + len(final) < target:  # line 2
            _, _, nd = heapq.heappop(heap)  # lines 3-4: the front (largest C(S'))
            if len(nd["idx"]) < 2:
                final.append(nd)  # a single subscription cannot be split
                continue
            sparts = _quad_split(reg, nd["idx"], nd["r"])
            if sparts is not None and len(nd["idx"]) > gamma2:  # lines 5-8
                kids = with_costs(sparts)
                n_space += 1
            else:  # lines 9-17: test both; SPACE-ONLY if C_s < C_h, else HYBRID
                hparts = hybrid(nd)
                both = with_costs((sparts or []) + hparts)
                skids, hkids = both[:len(sparts or [])], both[len(sparts or []):]
                c_s = sum(k["cost"] for k in skids) if sparts is not None else math.inf
                c_h = sum(k["cost"] for k in hkids)
                if c_s < c_h:
                    kids = skids
                    n_space += 1
                else:
                    kids = hkids
                    n_hybrid += 1
            for ch in kids:
                heapq.heappush(heap, (-ch["cost"], ch["seq"], ch))
        # line 18: sort S in descending order of C(S') (ties: order of creation)
        nodes = sorted(final + [nd for _, _, nd in heap], key=lambda nd: (-nd["cost"], nd["seq"]))
        # Algorithm 3: for each subset (heaviest first), its subscriptions heaviest first, to argmin C(w)
        worker_of = np.zeros(N, dtype=np.int64)
        sub_cost = np.zeros(N)
        if nodes:
            at = np.concatenate([nd["idx"] for nd in nodes])
            c = np.concatenate([nd["c"] for nd in nodes])
            ptr = np.concatenate([[0], np.cumsum([len(nd["idx"]) for nd in nodes])])
            worker_of[at] = lpt_runs(c, ptr, m)[0]
            sub_cost[at] = c
        subset_rect = np.array([nd["R"] for nd in nodes]).reshape(-1, 4)
        subset_cost = np.array([nd["cost"] for nd in nodes])
        n_subsets = len(nodes)
        groups = [tuple(ids[i] for i in nd["idx"].tolist()) for nd in nodes]
        subsets_info = [{"r": list(map(float, nd["r"])), "R": nd["R"].tolist(), "size": int(len(nd["idx"])),
                         "cost": nd["cost"]} for nd in nodes]

    one = [(w,) for w in range(m)]
    assignment = dict(zip(ids, map(one.__getitem__, worker_of.tolist())))
    costs = dict(zip(ids, sub_cost.tolist()))

    cols = np.ascontiguousarray(subset_rect.T)

    def new_rule(sub: Sub, plan: AssignedPlan) -> tuple[tuple[int, ...], float]:
        # B(s_n) among O_init gives R_n; Eq. (7) picks R*, the subset rectangle overlapping R_n most
        one = index.regions([sub])
        Rn = one.rect[0]
        j = _most_overlap_cols(cols, Rn, (float(one.px[0]), float(one.py[0])))
        Rstar = subset_rect[j] if j is not None else Rn
        c = float(_eq5(index, one, np.array([0]), Rstar.reshape(1, 4), floor)[0])  # Eq. (5) with R*
        return (plan.least_loaded(),), c

    def new_bulk(subs: list[Sub]) -> list[float | None]:
        # new_rule's cost for a run at once: regions, Eq. (7) and Eq. (5) are per subscription
        # and read only the sample and the subsets, so rows computed together are the rows
        # computed alone (None: no keyword, left to new_rule)
        reg = index.regions(subs)
        j = _most_overlap_many(cols, reg.rect, reg.px, reg.py)
        rstar = np.where((j >= 0)[:, None], subset_rect[np.maximum(j, 0)] if len(subset_rect) else reg.rect, reg.rect)
        has = np.flatnonzero(np.diff(reg.kw_ptr) > 0)
        out: list[float | None] = [None] * len(subs)
        for i, c in zip(has.tolist(), _eq5(index, reg, has, rstar[has], floor).tolist()):
            out[i] = c
        return out

    def new_placed(sub: Sub, plan: AssignedPlan, c: float) -> tuple[tuple[int, ...], float]:
        return (plan.least_loaded(),), c

    info: dict = {"cost_model": "DkM-SKS Eqs. (4)-(6)", "gamma1": gamma1, "gamma2": gamma2, "min_cost": floor,
                  "n_subsets": n_subsets, "singleton_subsets": singletons,
                  "space_only_splits": n_space, "hybrid_splits": n_hybrid,
                  "total_cost": float(math.fsum(subset_cost.tolist()))}
    if subsets_info is not None and len(subsets_info) <= 10_000:
        info["subsets"] = subsets_info
    plan = AssignedPlan(m, "dkm", assignment, costs, new_rule, info=info, new_bulk=new_bulk, new_placed=new_placed)
    # the subsets of Algorithm 2 (subscription ids), in the order Algorithm 3 visits them
    plan.groups = groups  # type: ignore[attr-defined]
    return plan


plan_dkm.columns = True  # type: ignore[attr-defined]  # takes a ``SubBlock`` as it is (``runner.head_subs``)


def most_overlap(rects: np.ndarray, Rn: np.ndarray, point: tuple[float, float]) -> int | None:
    """Eq. (7): index of the rectangle with the largest overlap area with ``Rn``
    (first on ties); if none overlaps with positive area, the rectangle nearest to
    ``point`` (containing it, if any).  ``None`` when there are no rectangles."""
    rects = np.asarray(rects, dtype=np.float64).reshape(-1, 4)
    return _most_overlap_cols(np.ascontiguousarray(rects.T), Rn, point)


def _most_overlap_many(cols: np.ndarray, rn: np.ndarray, px: np.ndarray, py: np.ndarray) -> np.ndarray:
    """:func:`_most_overlap_cols` for each row of ``rn`` (point ``(px[i], py[i])``): the same
    elementwise arithmetic and first-on-ties argmax/argmin, on (rows, rectangles) blocks;
    -1 when there are no rectangles."""
    S, n = len(rn), cols.shape[1]
    out = np.full(S, -1, dtype=np.int64)
    if n == 0:
        return out
    x1, y1, x2, y2 = cols
    step = max(1, (1 << 18) // n)
    for a in range(0, S, step):
        R = rn[a:a + step]
        w = np.minimum(x2, R[:, 2:3]) - np.maximum(x1, R[:, 0:1])
        h = np.minimum(y2, R[:, 3:4]) - np.maximum(y1, R[:, 1:2])
        area = np.maximum(w, 0.0) * np.maximum(h, 0.0)
        j = np.argmax(area, axis=1)
        far = np.flatnonzero(~(area[np.arange(len(R)), j] > 0.0))
        if len(far):
            x = px[a:a + step][far][:, None]
            y = py[a:a + step][far][:, None]
            dx = np.maximum(np.maximum(x1 - x, x - x2), 0.0)
            dy = np.maximum(np.maximum(y1 - y, y - y2), 0.0)
            j[far] = np.argmin(dx * dx + dy * dy, axis=1)
        out[a:a + step] = j
    return out


def _most_overlap_cols(cols: np.ndarray, Rn: np.ndarray, point: tuple[float, float]) -> int | None:
    """:func:`most_overlap` over the rectangles as four contiguous columns (4, n)."""
    if cols.shape[1] == 0:
        return None
    x1, y1, x2, y2 = cols
    w = np.minimum(x2, Rn[2]) - np.maximum(x1, Rn[0])
    h = np.minimum(y2, Rn[3]) - np.maximum(y1, Rn[1])
    area = np.maximum(w, 0.0) * np.maximum(h, 0.0)
    j = int(np.argmax(area))
    if area[j] > 0.0:
        return j
    x, y = point
    dx = np.maximum(np.maximum(x1 - x, x - x2), 0.0)
    dy = np.maximum(np.maximum(y1 - y, y - y2), 0.0)
    return int(np.argmin(dx * dx + dy * dy))
