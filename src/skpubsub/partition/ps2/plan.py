"""PS2Plan: PS2Stream's plan, one Definition 1 cost share per (subscription, worker); new
subscriptions placed by the grid^t (Section IV-C) at their Definition 1 increment."""

from __future__ import annotations

from typing import Any

from ...io.events import Sub
from ..common import AssignedPlan
from .grid import GridT


class PS2Plan(AssignedPlan):
    """An :class:`AssignedPlan` whose subscriptions carry one cost per worker (Def. 1 shares) and
    whose new subscriptions are placed by the grid^t lookup."""

    def __init__(self, m: int, assignment: dict, wcosts: dict, grid: GridT, obj_per_worker: list[float],
                 c1: float, cq: float, info: dict, subs: dict) -> None:
        super().__init__(m, "ps2", assignment, {}, None, info=info)
        self._planned: dict[Any, Sub] = dict(subs)  # id -> the subscription the plan placed under it
        self.grid = grid
        self._wcost: dict[Any, tuple[float, ...]] = dict(wcosts)
        self._obj = list(obj_per_worker)  # |O_w| (objects of the period) at planning time
        self._c1, self._cq = c1, cq
        loads = [0.0] * m
        for sid, ws in self._where.items():
            for w, c in zip(ws, self._wcost[sid]):
                loads[w] += c
        self._loads = loads

    def lookup(self, sub: Sub) -> tuple[int, ...]:
        """Workers the grid^t gives ``sub`` (without registering it)."""
        return self.grid.workers(sub)

    def known(self, ids) -> list[None]:
        """None for each: a planned id may be reused by another subscription (``assign``)."""
        return [None] * len(ids)

    def assign(self, sub: Sub) -> tuple[int, ...]:
        ws = self._where.get(sub.id)
        if ws is not None:
            if self._planned.get(sub.id, sub) == sub:
                return ws
            # the id is reused: an earlier subscription under the id of a planned one (the plan was
            # made from a later point of the stream); the planned entry is stale for this one
            self.remove(sub.id)
        self._planned.pop(sub.id, None)
        ws = self.grid.workers(sub)
        costs = tuple(self._c1 * self._obj[w] + self._cq for w in ws)  # Def. 1 increment on each worker
        self._where[sub.id] = ws
        self._wcost[sub.id] = costs
        for w, c in zip(ws, costs):
            self._loads[w] += c
        return ws

    def remove(self, sub_id: Any) -> None:
        ws = self._where.pop(sub_id, None)
        if ws is None:
            return
        for w, c in zip(ws, self._wcost.pop(sub_id, ())):
            self._loads[w] -= c

    def move(self, sub_id: Any, workers: tuple[int, ...]) -> None:
        """A migration: the subscription's Def. 1 cost goes along to ``workers``."""
        old = self._where.get(sub_id)
        if old is None:
            return
        costs = self._wcost.get(sub_id, ())
        for w, c in zip(old, costs):
            self._loads[w] -= c
        total = sum(costs)
        self._where[sub_id] = workers
        self._wcost[sub_id] = tuple(total / len(workers) for _ in workers)
        for w, c in zip(workers, self._wcost[sub_id]):
            self._loads[w] += c

    def describe(self) -> dict:
        return {"partitioner": self.name, "workers": self.m, "loads": self.loads(), **self.info}
