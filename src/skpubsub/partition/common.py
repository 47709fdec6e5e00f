"""Pieces every planner shares: greedy least-loaded assignment and a plan over it."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from operator import itemgetter
from typing import Any

import numpy as np
from numba import njit

from ..io.events import Sub


def lpt(costs: Iterable[tuple[Any, float]], m: int, loads: list[float] | None = None) -> tuple[dict, list[float]]:
    """Greedy LPT (longest processing time first; DkM-SKS Algorithm 1, a 3/2-approximation):
    items sorted by cost descending, each to the currently least-loaded worker.

    Returns ({item: worker}, loads). O(n log n + n log m).
    """
    loads = list(loads) if loads is not None else [0.0] * m
    heap = [(load, w) for w, load in enumerate(loads)]
    heapq.heapify(heap)
    out = {}
    for item, cost in sorted(costs, key=lambda ic: -ic[1]):
        load, w = heapq.heappop(heap)
        out[item] = w
        loads[w] = load + cost
        heapq.heappush(heap, (loads[w], w))
    return out, loads


def lpt_runs(costs: np.ndarray, ptr: np.ndarray, m: int, loads: list[float] | None = None
             ) -> tuple[np.ndarray, list[float]]:
    """:func:`lpt` over each run ``costs[ptr[r]:ptr[r+1]]`` in turn, the loads carried from run
    to run (DkM-SKS Algorithm 3: a subset's subscriptions heaviest first, then the next
    subset's), compiled: the worker of each cost. The same workers and load floats as
    ``lpt(enumerate(run), m, loads)`` run after run (a stable sort by descending cost; the
    least-loaded worker, the lowest on ties, as the heap of (load, worker) pops it)."""
    costs = np.asarray(costs, dtype=np.float64)
    ptr = np.asarray(ptr, dtype=np.int64)
    run = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))
    order = np.lexsort((-costs, run))  # by run, then descending cost, stable
    lo = np.array(loads if loads is not None else [0.0] * m, dtype=np.float64)
    return _lpt_kernel(costs, order, lo), lo.tolist()


@njit(cache=True)
def _lpt_kernel(costs, order, loads):  # pragma: no cover (compiled)
    """Each item of ``order`` in turn to the least-loaded worker (the lowest on ties)."""
    where = np.empty(len(costs), dtype=np.int64)
    m = len(loads)
    for i in order:
        w = 0
        for v in range(1, m):
            if loads[v] < loads[w]:
                w = v
        where[i] = w
        loads[w] = loads[w] + costs[i]
    return where


class AssignedPlan:
    """A plan holding an explicit assignment plus a rule for new subscriptions.

    ``new_rule(sub, plan) -> (workers, cost)`` places a subscription that was not
    in the initial set; by default, the least-loaded worker with cost 1.

    Bulk (``prepare``): a rule whose costly part does not depend on the plan's state
    (DkM-SKS's Eq. (5) cost, a loose prefix) splits into ``new_bulk(subs) -> [pre]``,
    computed for a run of subscriptions at once, and ``new_placed(sub, plan, pre) ->
    (workers, cost)``, the sequential rest (the least-loaded worker *now*), which
    ``assign`` applies in turn; ``new_placed(sub, plan, pre)`` must equal
    ``new_rule(sub, plan)`` (tests/test_partition_bulk.py). A ``pre`` of None: not
    prepared, ``new_rule`` places it.
    """

    def __init__(self, m: int, name: str, assignment: dict[Any, tuple[int, ...]], costs: dict[Any, float],
                 new_rule: Callable[[Sub, "AssignedPlan"], tuple[tuple[int, ...], float]] | None = None,
                 info: dict | None = None,
                 new_bulk: Callable[[list[Sub]], list] | None = None,
                 new_placed: Callable[[Sub, "AssignedPlan", Any], tuple[tuple[int, ...], float]] | None = None,
                 ) -> None:
        self.m = m
        self.name = name
        self._where = dict(assignment)
        self._cost = dict(costs)
        self._loads = [0.0] * m
        if all(map((1).__eq__, map(len, self._where.values()))):  # one worker each: by arrays
            n = len(self._where)
            loads = np.zeros(m)
            np.add.at(loads, np.fromiter(map(itemgetter(0), self._where.values()), np.int64, n),  # in order, as
                      np.fromiter(map(self._cost.get, self._where, repeat(1.0)), np.float64, n))  # the loop adds
            self._loads = loads.tolist()
        else:
            for sid, ws in self._where.items():
                for w in ws:
                    self._loads[w] += self._cost.get(sid, 1.0) / len(ws)
        self._new_rule = new_rule
        self._new_bulk, self._new_placed = new_bulk, new_placed
        self._ready: dict[int, tuple[Sub, Any]] = {}  # id(sub) -> (sub, pre) from prepare
        self.info = info or {}

    def prepare(self, subs: Sequence[Sub]) -> None:
        """Compute in bulk the state-free part of the new-subscription rule for ``subs`` (a run
        about to be assigned, in order, possibly between removals); ``assign`` uses it for
        these very objects. Replaces what an earlier ``prepare`` left; ``prepare(())`` clears."""
        self._ready = {}
        if self._new_bulk is None or not subs:
            return
        fresh = [s for s in subs if s.id not in self._where]  # others: assign returns their workers
        if fresh:
            self._ready = {id(s): (s, pre) for s, pre in zip(fresh, self._new_bulk(fresh))}

    def least_loaded(self) -> int:
        return min(range(self.m), key=lambda w: (self._loads[w], w))

    def assign_many(self, subs: Sequence[Sub]) -> list[tuple[int, ...]]:
        """``[assign(s) for s in subs]``, the state-free part prepared in bulk first."""
        self.prepare(subs)
        try:
            return [self.assign(s) for s in subs]
        finally:
            self._ready = {}

    def known(self, ids: Sequence[Any]) -> list[tuple[int, ...] | None]:
        """``assign``'s answer for each of ``ids`` that the plan holds already (None for the
        others): what ``assign`` returns for them without a ``Sub``. One C pass."""
        return list(map(self._where.get, ids))

    def assign(self, sub: Sub) -> tuple[int, ...]:
        ws = self._where.get(sub.id)
        if ws is not None:
            return ws
        ready = self._ready.pop(id(sub), None) if self._ready else None
        if ready is not None and ready[0] is sub and ready[1] is not None:
            ws, cost = self._new_placed(sub, self, ready[1])  # type: ignore[misc]
        elif self._new_rule is None:
            ws, cost = (self.least_loaded(),), 1.0
        else:
            ws, cost = self._new_rule(sub, self)
        self._where[sub.id] = ws
        self._cost[sub.id] = cost
        for w in ws:
            self._loads[w] += cost / len(ws)
        return ws

    def remove(self, sub_id: Any) -> None:
        ws = self._where.pop(sub_id, None)
        if ws is None:
            return
        cost = self._cost.pop(sub_id, 1.0)
        for w in ws:
            self._loads[w] -= cost / len(ws)

    def move(self, sub_id: Any, workers: tuple[int, ...]) -> None:
        """``sub_id`` now lives on ``workers`` (a migration); its cost goes along."""
        cost = self._cost.get(sub_id, 1.0)
        for w in self._where.get(sub_id, ()):
            self._loads[w] -= cost / len(self._where[sub_id])
        self._where[sub_id] = workers
        self._cost[sub_id] = cost
        for w in workers:
            self._loads[w] += cost / len(workers)

    def loads(self) -> list[float]:
        return list(self._loads)

    def describe(self) -> dict:
        return {"partitioner": self.name, "workers": self.m, "loads": self.loads(), **self.info}
