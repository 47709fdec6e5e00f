"""Dynamic load adjustment: PS2Stream section V, over the local runtime's workers.

Paper: Chen et al., "Distributed Publish/Subscribe Query Processing on the
Spatio-Textual Data Stream" (PS2Stream), section V.

Units of migration are *cells*, as in the paper's grid^t index: a subscription
belongs to the cell of its anchor (a kNN/top-k query point, a range rectangle's
centre) on a ``grid`` x ``grid`` grid over the space, and, once that cell has
been text-partitioned, to the keyword group holding its first posting keyword.
Only subscriptions held by one worker move (replicated range subscriptions stay).

Cost model (Definition 3): the load of a cell over the last period is

    L_g = n_o * n_q                                                       (Def. 3)

``n_o`` the objects of the period inside the cell's region that carry one of the
cell's keywords (estimated from a bounded per-region sample of the objects'
keyword sets, scaled to the region's count), ``n_q`` its subscriptions. The size
of a cell (migration cost) is ``S_g``: the subscriptions' keywords plus their
``k`` plus a constant per subscription -- what a migration ships.

Every ``period`` micro-batches the worker loads are measured (``measure="cpu"``:
each worker's CPU seconds in the period; ``"model"``: the sum of its cells'
``L_g``). When ``L_max / L_min > sigma`` (the paper's load balancing constraint,
section IV-A) the most loaded worker ``w_o`` hands work to the least loaded
``w_l``:

* Phase I: of the ``p`` most loaded cells of ``w_o``, a cell that is not
  text-partitioned is split by keywords into two (LPT on per-keyword load) when
  ``L_g1 + L_g2 < L_g``, and the smaller part moves to ``w_l``; a text-partitioned
  cell whose region ``w_l`` also holds a group of moves there when merging the
  two lowers the load.
* Phase II (Definition 4, Minimum Cost Migration): cells ``G_s`` of ``w_o`` with
  ``sum L_g >= tau`` and least ``sum S_g``, ``tau`` being half the gap (in cell-load
  units, scaled by the measured gap); by the greedy GR (Figure 5) or the dynamic
  program DP (``A(i, j)``), selectable.

Global adjustment (section V-B): every ``global_period`` batches a new plan is
computed by the planner from the period's statistics and the active
subscriptions; when its estimated ``max/mean`` load beats the current measured one
by ``global_gain``, new subscriptions follow the new plan while the old ones stay
where they are; once fewer than ``drain`` of them remain, the rest migrate to
their places under the new plan and the old plan is dropped.

A migration is exact: the source worker drops the subscription silently, the
destination adopts it with its results (recomputed from backfilled alive objects
under a retaining window, shipped with it under ``none``), and routing follows.
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..core.config import Space
from ..io.events import Pub, Sub
from ..partition.common import lpt

SAMPLE = 64  # keyword sets kept per region and period (reservoir)


@dataclass
class Cell:
    key: tuple  # (gx, gy, group index or -1)
    subs: list[Any] = field(default_factory=list)
    keywords: set[str] = field(default_factory=set)
    size: int = 0
    load: float = 0.0


class Rebalancer:
    """Decides migrations from what the dispatcher saw; see the module docstring."""

    def __init__(self, space: Space, sigma: float = 1.5, period: int = 4, p: int = 4, grid: int = 16,
                 algorithm: str = "gr", measure: str = "cpu", global_period: int | None = None,
                 global_gain: float = 0.8, drain: float = 0.1, planner: Callable | None = None,
                 seed: int = 0) -> None:
        if algorithm not in ("gr", "dp"):
            raise ValueError(f"unknown migration algorithm {algorithm!r}; known: gr, dp")
        if measure not in ("cpu", "model"):
            raise ValueError(f"unknown load measure {measure!r}; known: cpu, model")
        self.space, self.sigma, self.period, self.p, self.grid = space, sigma, period, p, grid
        self.algorithm, self.measure = algorithm, measure
        self.global_period, self.global_gain, self.drain, self.planner = global_period, global_gain, drain, planner
        self.rng = random.Random(seed)
        self.groups: dict[tuple[int, int], list[frozenset[str]]] = {}  # text partitions of a region
        self._reset()
        self.batches = 0
        self.cpu: list[float] = []
        self.log: list[dict] = []  # one record per adjustment
        self.checks: list[tuple[int, list[float]]] = []  # (batch, worker loads) at each local check

    def _reset(self) -> None:
        self.region_count: Counter = Counter()
        self.region_sample: dict[tuple[int, int], list[frozenset[str]]] = defaultdict(list)
        self.recent: list[Pub] = []  # objects of the period (global repartitioning statistics)

    # -- observation -----------------------------------------------------------------
    def region(self, x: float, y: float) -> tuple[int, int]:
        sp, g = self.space, self.grid
        gx = int((x - sp.x1) / (sp.x2 - sp.x1) * g) if sp.x2 > sp.x1 else 0
        gy = int((y - sp.y1) / (sp.y2 - sp.y1) * g) if sp.y2 > sp.y1 else 0
        return min(max(gx, 0), g - 1), min(max(gy, 0), g - 1)

    def anchor(self, sub: Sub) -> tuple[int, int]:
        if sub.rect is not None:
            x1, y1, x2, y2 = sub.rect
            return self.region((x1 + x2) / 2, (y1 + y2) / 2)
        return self.region(sub.x, sub.y)

    def observe(self, pub: Pub) -> None:
        """One routed object: O(keywords)."""
        r = self.region(pub.x, pub.y)
        self.region_count[r] += 1
        n = self.region_count[r]
        sample = self.region_sample[r]
        kw = frozenset(pub.keywords)
        if len(sample) < SAMPLE:
            sample.append(kw)
        elif (j := self.rng.randrange(n)) < SAMPLE:  # reservoir: a uniform sample of the period
            sample[j] = kw
        if self.global_period:
            self.recent.append(pub)

    def n_objects(self, region: tuple[int, int], keywords: set[str]) -> float:
        """Objects of the period in ``region`` carrying one of ``keywords`` (estimate)."""
        sample = self.region_sample.get(region)
        if not sample:
            return 0.0
        hit = sum(1 for kw in sample if not kw.isdisjoint(keywords))
        return self.region_count[region] * hit / len(sample)

    # -- cells -----------------------------------------------------------------------
    def group_of(self, region: tuple[int, int], sub: Sub, keys: tuple[str, ...]) -> int:
        groups = self.groups.get(region)
        if not groups:
            return -1
        first = min(keys)
        return next((i for i, g in enumerate(groups) if first in g), 0)

    def cells(self, dispatcher: Any, worker: int) -> dict[tuple, Cell]:
        """The cells of ``worker``'s single-owner subscriptions, with Def. 3 loads."""
        out: dict[tuple, Cell] = {}
        for sid, ws in dispatcher.where.items():
            if ws != (worker,):
                continue
            sub = dispatcher.subs[sid]
            region = self.anchor(sub)
            keys = dispatcher._keys[sid]
            key = (*region, self.group_of(region, sub, keys))
            c = out.get(key)
            if c is None:
                c = out[key] = Cell(key)
            c.subs.append(sid)
            c.keywords.update(keys)
            c.size += _size(sub)
        for c in out.values():
            c.load = self.n_objects(c.key[:2], c.keywords) * len(c.subs)  # Def. 3
        return out

    # -- the adjustment ----------------------------------------------------------------
    def after_batch(self, cpu: list[float], cluster: Any) -> list[dict]:
        """Called by the runtime after each micro-batch; migrates when due. Returns the
        adjustments made (also kept in ``log``)."""
        m = len(cpu)
        if not self.cpu:
            self.cpu = [0.0] * m
        self.cpu = [a + b for a, b in zip(self.cpu, cpu)]
        self.batches += 1
        done: list[dict] = []
        if self.global_period and self.batches % self.global_period == 0:
            done += self._global(cluster)
        if self.batches % self.period == 0:
            done += self._local(cluster)
            self.cpu = [0.0] * m
            self._reset()
        self.log += done
        return done

    def worker_loads(self, dispatcher: Any, m: int) -> list[float]:
        if self.measure == "cpu":
            return list(self.cpu)
        return [sum(c.load for c in self.cells(dispatcher, w).values()) for w in range(m)]

    def _local(self, cluster: Any) -> list[dict]:
        d = cluster.dispatcher
        loads = self.worker_loads(d, cluster.m)
        self.checks.append((self.batches, loads))
        if cluster.m < 2 or not _violated(loads, self.sigma):
            return []
        wo = max(range(cluster.m), key=lambda w: (loads[w], -w))
        wl = min(range(cluster.m), key=lambda w: (loads[w], w))
        cells_o = self.cells(d, wo)
        total_o = sum(c.load for c in cells_o.values())
        if total_o <= 0:
            return []
        # The gap between w_o and w_l in Def. 3 units (measured CPU seconds are scaled by
        # w_o's cells). Moving load X helps the pair only while X < gap; tau = gap / 2.
        gap = (loads[wo] - loads[wl]) * (total_o / loads[wo] if self.measure == "cpu" else 1.0)
        record: dict = {"batch": self.batches, "from": wo, "to": wl, "loads_before": [round(x, 6) for x in loads],
                        "phase1": [], "phase2": []}
        moved: list[Any] = []
        # Phase I: split or merge among the p most loaded cells of w_o.
        cells_l = self.cells(d, wl)
        for c in sorted(cells_o.values(), key=lambda c: -c.load)[:self.p]:
            region = c.key[:2]
            if len(c.keywords) > 1:  # text-partition the cell (or its keyword group) in two
                g1, g2 = self._split(region, c)
                s1 = [sid for sid in c.subs if min(d._keys[sid]) in g1]
                s2 = [sid for sid in c.subs if min(d._keys[sid]) not in g1]
                if s1 and s2:
                    l1 = self.n_objects(region, _kw(d, s1)) * len(s1)
                    l2 = self.n_objects(region, _kw(d, s2)) * len(s2)
                    small = min((s1, s2), key=lambda s: sum(_size(d.subs[i]) for i in s))
                    if l1 + l2 < c.load and (l1 if small is s1 else l2) < gap:
                        groups = self.groups.setdefault(region, [])
                        if c.key[2] == -1:
                            groups[:] = [g1, g2]
                        else:
                            groups[c.key[2]] = g1
                            groups.append(g2)
                        moved += small
                        record["phase1"].append({"split": list(region), "moved": len(small)})
                        continue
            if c.key[2] >= 0:  # merge a keyword group into w_l's group of the same region
                for o in (o for o in cells_l.values() if o.key[:2] == region):
                    merged = self.n_objects(region, c.keywords | o.keywords) * (len(c.subs) + len(o.subs))
                    if merged < c.load + o.load:
                        moved += c.subs
                        record["phase1"].append({"merge": list(region), "moved": len(c.subs)})
                        break
        if moved:
            cluster.migrate(moved, wl)
            cells_o = self.cells(d, wo)
        # Phase II: the Minimum Cost Migration (Definition 4). Measured CPU loads judge
        # Phase I's moves only in the next period; the model judges them at once.
        if moved and self.measure == "model":
            loads = self.worker_loads(d, cluster.m)
            gap = loads[wo] - loads[wl]
        if _violated(loads, self.sigma) and not (moved and self.measure == "cpu"):
            tau = gap / 2
            # a cell carrying the whole gap or more only swaps the roles: it never helps
            cand = [c for c in cells_o.values() if 0 < c.load < gap]
            chosen = greedy_migration(cand, tau) if self.algorithm == "gr" else dp_migration(cand, tau)
            ids = [sid for c in chosen for sid in c.subs]
            if ids:
                cluster.migrate(ids, wl)
                record["phase2"] = [{"cells": len(chosen), "moved": len(ids), "tau": round(tau, 6),
                                     "load": round(sum(c.load for c in chosen), 6),
                                     "size": sum(c.size for c in chosen)}]
        if record["phase1"] or record["phase2"]:
            if self.measure == "model":
                record["loads_after"] = [round(x, 6) for x in self.worker_loads(d, cluster.m)]
            return [record]
        return []

    def _split(self, region: tuple[int, int], c: Cell) -> tuple[frozenset[str], frozenset[str]]:
        """Text-partition a cell's keywords in two by per-keyword Def. 3 load (LPT)."""
        costs = [(w, self.n_objects(region, {w}) + 1e-9) for w in sorted(c.keywords)]
        where, _ = lpt(costs, 2)
        g1 = frozenset(w for w, i in where.items() if i == 0)
        return g1, frozenset(c.keywords) - g1

    # -- global adjustment (V-B) ---------------------------------------------------------
    def _global(self, cluster: Any) -> list[dict]:
        d = cluster.dispatcher
        out: list[dict] = []
        if d.old_plan is not None:  # draining: move the last old subscriptions
            old = [sid for sid in d.old_ids if sid in d.where]
            if len(old) <= self.drain * max(len(d.where), 1):
                by_dst: dict[int, list] = defaultdict(list)
                for sid in old:
                    dst = d.plan.assign(d.subs[sid])[0]
                    if d.where[sid] != (dst,):
                        by_dst[dst].append(sid)
                for dst, ids in sorted(by_dst.items()):
                    cluster.migrate(ids, dst)
                d.finish_replan()
                out.append({"batch": self.batches, "global": "drained", "moved": sum(map(len, by_dst.values()))})
            return out
        if self.planner is None or not self.recent:
            return out
        from ..partition.stats import Statistics

        stats = Statistics.from_objects(self.recent, self.space)
        subs = sorted((d.subs[sid] for sid in d.where), key=lambda s: s.seq)
        plan = self.planner(subs, stats, cluster.m)
        now = self.worker_loads(d, cluster.m)
        new = plan.loads()
        if _spread(new) < self.global_gain * _spread(now):
            d.replan(plan)
            out.append({"batch": self.batches, "global": "replanned", "spread_before": round(_spread(now), 4),
                        "spread_planned": round(_spread(new), 4)})
        self.recent = []
        return out


def _size(sub: Sub) -> int:
    """S_g's share of one subscription: what a migration ships (keywords, k, a header)."""
    return 4 + len(sub.keywords) + sub.k


def _kw(d: Any, ids: list) -> set[str]:
    return {w for sid in ids for w in d._keys[sid]}


def _violated(loads: list[float], sigma: float) -> bool:
    """The load balancing constraint L_max / L_min <= sigma (L_min = 0 with work left
    counts as violated)."""
    hi, lo = max(loads), min(loads)
    if hi <= 0:
        return False
    return lo <= 0 or hi / lo > sigma


def _spread(loads: list[float]) -> float:
    mean = sum(loads) / len(loads) if loads else 0.0
    return max(loads) / mean if mean > 0 else 1.0


def greedy_migration(cells: list[Cell], tau: float) -> list[Cell]:
    """GR (PS2Stream Figure 5): cells by S_g / L_g ascending; those keeping the sum
    under tau join GS, the others are candidates g' completing GS_1..GS_t; the
    cheapest complete candidate wins. O(n log n)."""
    if tau <= 0:
        return []
    order = sorted(cells, key=lambda c: (c.size / c.load if c.load > 0 else math.inf, c.key))
    gs: list[Cell] = []
    acc_load, acc_size = 0.0, 0
    best: tuple[float, list[Cell]] | None = None
    for c in order:
        if acc_load + c.load < tau:
            gs.append(c)
            acc_load += c.load
            acc_size += c.size
        elif best is None or acc_size + c.size < best[0]:
            best = (acc_size + c.size, gs + [c])
    return best[1] if best is not None else gs


def dp_migration(cells: list[Cell], tau: float, max_budget: int = 200_000) -> list[Cell]:
    """DP (PS2Stream V-A.1): A(i, j) the largest load of cells among the first i with
    total size <= j; the answer is the least j with A(n, j) >= tau. O(n P) time and
    memory, P bounded by GR's cost (an upper bound of the minimum)."""
    if tau <= 0 or not cells:
        return []
    upper = sum(c.size for c in greedy_migration(cells, tau))
    budget = min(upper, max_budget)
    n = len(cells)
    a = np.zeros((n + 1, budget + 1))
    for i, c in enumerate(cells, 1):
        a[i] = a[i - 1]
        if c.size <= budget:
            a[i, c.size:] = np.maximum(a[i - 1, c.size:], a[i - 1, :budget + 1 - c.size] + c.load)
    ok = np.nonzero(a[n] >= tau - 1e-12)[0]
    if not len(ok):
        return greedy_migration(cells, tau)
    j = int(ok[0])
    chosen: list[Cell] = []
    for i in range(n, 0, -1):  # read H(n, j) back
        if a[i, j] != a[i - 1, j]:
            chosen.append(cells[i - 1])
            j -= cells[i - 1].size
    return chosen[::-1]
