"""Planner ``ps2``: PS2Stream's hybrid space/text partitioning (Section IV, Algorithm 1) under the
cost model of Definition 1; parameter defaults (the paper gives none): NOTES.md."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...io.events import Sub
from ..stats import Statistics
from .data import _Data
from .grid import GridT
from .merge import _factor, _merge, partition_counts
from .plan import PS2Plan
from .tree import _Leaf, _partition, _space_sequence, _space_unit, _text_split, _Unit

DEFAULTS = {"delta": 0.5, "epsilon": 0.05, "sigma": 1.25, "c1": 1.0, "c2": 1.0, "c3": 1.0, "c4": 1.0,
            "min_objects": 64}
_TOP_KEYWORDS = 20  # keywords of a text group listed by describe()


def _check_m(m: Any) -> int:
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"m (workers) must be an integer >= 1, got {m!r}")
    return int(m)


def _num(name: str, v: Any, lo: float, strict: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v) \
            or (v <= lo if strict else v < lo):
        raise ValueError(f"{name} must be a finite number {'>' if strict else '>='} {lo}, got {v!r}")
    return float(v)


def plan_ps2(subs: Sequence[Sub], stats: Statistics, m: int, *, delta: float = DEFAULTS["delta"],
             epsilon: float = DEFAULTS["epsilon"], sigma: float = DEFAULTS["sigma"], theta: int | None = None,
             c1: float = 1.0, c2: float = 1.0, c3: float = 1.0, c4: float = 1.0,
             min_objects: int = DEFAULTS["min_objects"], **_ignored: Any) -> PS2Plan:
    """PS2Stream hybrid partitioning (Algorithm 1) -> a :class:`PS2Plan` (see NOTES.md)."""
    m = _check_m(m)
    delta = _num("delta", delta, 0.0)
    epsilon = _num("epsilon", epsilon, 0.0)
    sigma = _num("sigma", sigma, 1.0)
    if theta is None:
        theta = max(64, 16 * m)
    if isinstance(theta, bool) or not isinstance(theta, (int, np.integer)) or theta < 1:
        raise ValueError(f"theta must be an integer >= 1, got {theta!r}")
    theta = int(theta)
    if isinstance(min_objects, bool) or not isinstance(min_objects, (int, np.integer)) or min_objects < 2:
        raise ValueError(f"min_objects must be an integer >= 2, got {min_objects!r}")
    c1, c2, c3, c4 = (_num(n, v, 0.0) for n, v in (("c1", c1), ("c2", c2), ("c3", c3), ("c4", c4)))
    if len({s.id for s in subs}) != len(subs):
        raise ValueError("duplicate subscription ids")
    d = _Data(subs, stats, c1, c2, c3 + c4)
    ids = [s.id for s in subs]

    # ---- phase 1 (Algorithm 1 lines 1-12) -------------------------------------------------
    root = _Leaf.root(d)
    Nu = [root]
    Ns: list[_Leaf] = []
    Nt: list[_Leaf] = []
    cap = max(1, theta // 2)
    while Nu:
        n = Nu.pop(0)  # line 4 (FIFO: breadth first)
        if len(Nu) + len(Ns) + len(Nt) + 1 >= cap or d.N == 0:
            (Ns if n.sim() >= delta else Nt).append(n)
            continue
        s = n.sim()
        if s >= delta:  # lines 5-6
            n.cls = "s"
            Ns.append(n)
            continue
        best = None
        if len(n.oidx) >= min_objects:
            for axis in (0, 1):  # line 8: the median cut on the axis of smaller alpha
                cut = n.cuts(axis, (0.5,))[:1]
                if not cut:
                    continue
                ol, orr, ql, qr = n.sides(axis, cut[0])
                alpha = min(n.sim(ol, ql), n.sim(orr, qr))
                if best is None or alpha < best[0]:
                    best = (alpha, axis, cut[0], ol, orr, ql, qr)
        if best is None or abs(best[0] - s) <= epsilon:  # lines 9-10
            n.cls = "t"
            Nt.append(n)
            continue
        _, axis, cut, ol, orr, ql, qr = best  # line 12
        Nu.append(n.child(axis, cut, True, ol, ql))
        Nu.append(n.child(axis, cut, False, orr, qr))
    for n in Ns:
        n.cls = "s"
    for n in Nt:
        n.cls = "t"
    nodes = sorted(Ns + Nt, key=lambda lf: lf.id)
    n_s, n_t = len(Ns), len(Nt)

    # ---- ComputeNumberPartitions + PartitionNode (lines 13-16) -----------------------------
    units: list[_Unit] = [_space_unit(n) for n in nodes]
    dp_counts: list[int] | None = None
    dp_costs: list[list[float | None]] | None = None
    if len(nodes) < m and d.N:
        kmax = m - len(nodes) + 1
        options: list[list[tuple[float, list[_Unit]] | None]] = []
        for u in units:
            homes = u.leaf.keyword_weights()[0]
            text = [(u.load, [u])] + [_text_split(u.leaf, homes, k) for k in range(2, kmax + 1)]
            if u.leaf.cls == "t":
                opts = text
            else:
                space = _space_sequence(u, kmax)
                opts = []
                for s_, t_ in zip(space, text):
                    if s_ is None or (t_ is not None and t_[0] < s_[0]):
                        opts.append(t_)
                    else:
                        opts.append(s_)
            options.append(opts)
        C = [[o[0] if o is not None else math.inf for o in opts] for opts in options]
        dp_counts, _ = partition_counts(C, m)
        dp_costs = [[c if math.isfinite(c) else None for c in row] for row in C]
        units = [v for opts, k in zip(options, dp_counts) for v in opts[k - 1][1]]  # type: ignore[index]

    # ---- lines 17-27: merge, check sigma, split the heaviest unit -------------------------------
    iterations = 0
    dead: set[int] = set()
    history: list[tuple] = []
    while True:
        where, loads, no, nq = _merge(d, units, m)  # line 18
        f = _factor(loads)
        history.append((float(loads.max()), len(units), list(units), where, loads, no, nq, f))
        if f <= sigma:  # lines 21-22
            break
        if len(units) >= theta:  # lines 26-27
            break
        split = None
        for u in sorted(units, key=lambda v: (-v.load, v.seq)):  # line 24 (splittable units only)
            if u.seq in dead or u.load <= 0.0:
                continue
            split = _partition(u, 2)  # line 25
            if split is not None:
                units = [v for v in units if v is not u] + split[1]
                break
            dead.add(u.seq)
        if split is None:
            break
        iterations += 1
    chosen = history[-1]
    if chosen[7] > sigma:  # sigma never met: keep the state of smallest L_max (fewest units on ties)
        chosen = min(history, key=lambda h: (h[0], h[1]))
    _, _, units, where, loads, no, nq, factor = chosen

    # ---- the kd^t leaves, the grid^t, the placement ------------------------------------------------
    by_leaf: dict[int, list[int]] = {}
    for i, u in enumerate(units):
        by_leaf.setdefault(u.leaf.id, []).append(i)
    leaves_out: list[dict] = []
    info_leaves: list[dict] = []
    for lid in sorted(by_leaf):
        us = by_leaf[lid]
        leaf = units[us[0]].leaf
        rect = list(leaf.rect)
        if units[us[0]].mode == "space":
            u = units[us[0]]
            leaves_out.append({"rect": rect, "mode": "space", "worker": where[us[0]]})
            info_leaves.append({"rect": rect, "mode": "space", "class": "N_" + leaf.cls, "worker": where[us[0]],
                                "load": u.load, "subscriptions": int(len(u.Q)),
                                "objects": float(len(u.O) * d.scale)})
            continue
        us = sorted(us, key=lambda i: units[i].seq)
        groups: dict[str, int] = {}
        allh, w = leaf.keyword_weights()
        ginfo = []
        for g, i in enumerate(us):
            u = units[i]
            for h in u.homes.tolist():  # type: ignore[union-attr]
                groups[d.words[h]] = g
            hw = w[np.searchsorted(allh, u.homes)]
            top = u.homes[np.argsort(-hw, kind="stable")[:_TOP_KEYWORDS]]  # type: ignore[index]
            ginfo.append({"worker": where[i], "n_keywords": int(len(u.homes)),  # type: ignore[arg-type]
                          "keywords": [d.words[h] for h in top.tolist()], "load": u.load,
                          "subscriptions": int(len(u.Q)), "objects": float(len(u.O) * d.scale)})
        leaves_out.append({"rect": rect, "mode": "text", "workers": [where[i] for i in us], "groups": groups})
        info_leaves.append({"rect": rect, "mode": "text", "class": "N_" + leaf.cls, "groups": ginfo})
    grid = GridT(d.space, leaves_out, d.freq)

    pair_q = np.concatenate([u.Q for u in units] + [np.zeros(0, dtype=np.int64)])
    pair_w = np.concatenate([np.full(len(u.Q), where[i], dtype=np.int64) for i, u in enumerate(units)]
                            + [np.zeros(0, dtype=np.int64)])
    key = np.unique(pair_q * m + pair_w)
    qs, ws = key // m, key % m
    bounds = np.searchsorted(qs, np.arange(d.N + 1))
    share = [float(loads[w]) / nq[w] if nq[w] else 0.0 for w in range(m)]
    ws_l, b_l = ws.tolist(), bounds.tolist()
    combos: dict[tuple[int, ...], tuple[float, ...]] = {}
    assignment: dict = {}
    wcosts: dict = {}
    for j in range(d.N):
        wj = tuple(ws_l[b_l[j]:b_l[j + 1]])
        if not wj:  # pragma: no cover - every subscription meets a leaf
            wj = grid.workers(subs[j])
        c = combos.get(wj)
        if c is None:
            c = combos[wj] = tuple(share[w] for w in wj)
        assignment[ids[j]] = wj
        wcosts[ids[j]] = c
    replicas = sum(len(v) for v in assignment.values())
    info = {
        "cost_model": "PS2Stream Definition 1 (c1|O||Q| + c2|O| + (c3+c4)|Q|), Algorithm 1",
        "params": {"delta": delta, "epsilon": epsilon, "sigma": sigma, "theta": theta, "c1": c1, "c2": c2,
                   "c3": c3, "c4": c4, "min_objects": min_objects},
        "phase1": {"N_s": n_s, "N_t": n_t},
        "dp_partitions": dp_counts,  # A[n] per node of N_t u N_s (creation order); None without the DP
        "dp_costs": dp_costs,  # C[i][k-1]: node i's sum of loads in k parts (None: impossible)
        "nodes": [{"rect": list(n.rect), "class": "N_" + n.cls} for n in nodes],
        "iterations": iterations,
        "units": len(units),
        "leaves": info_leaves,
        "grid_cells": [int(grid.cell.shape[0]), int(grid.cell.shape[1])],
        "replication_ratio": replicas / d.N if d.N else 1.0,
        "estimated_loads": [float(v) for v in loads],
        "objects_per_worker": [float(v * d.scale) for v in no],
        "subscriptions_per_worker": [int(v) for v in nq],
        "balance_factor": factor if math.isfinite(factor) else None,
        "total_cost": float(math.fsum(loads.tolist())),
    }
    return PS2Plan(m, assignment, wcosts, grid, [float(v * d.scale) for v in no], c1, c3 + c4, info,
                   dict(zip(ids, subs)))
