"""The plan shared by DSkype's planners (Skype paper, Section 7.3): an explicit assignment plus the
keyword -> workers table that routes a message to every worker holding a subscription sharing one
of its keywords."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ...io.events import Sub
from ..common import AssignedPlan


def _check(subs: Sequence[Sub], m: int) -> None:
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"m (workers) must be an integer >= 1, got {m!r}")
    if len({s.id for s in subs}) != len(subs):
        raise ValueError("duplicate subscription ids")


def _inc(table: dict, key: Any, w: int, d: int) -> None:
    c = table.get(key)
    if c is None:
        c = table[key] = {}
    v = c.get(w, 0) + d
    if v:
        c[w] = v
    else:
        del c[w]
        if not c:
            del table[key]


def _table_of(where: dict, items: Iterable[tuple[Any, Iterable[str]]]) -> dict[str, dict[int, int]]:
    """keyword -> {worker: subscriptions} over ``(sub id, keywords)`` items held at ``where[sub id]``."""
    table: dict[str, dict[int, int]] = {}
    for sid, kws in items:
        for w in where[sid]:
            for k in kws:
                _inc(table, k, w, 1)
    return table


def _route_table(table: dict, keywords: Iterable[str], ws: tuple[int, ...], d: int) -> None:
    """Count ``keywords`` on workers ``ws`` up (``d = +1``) or down (``-1``)."""
    for k in keywords:
        for w in ws:
            _inc(table, k, w, d)


def _workers_in(table: dict, keywords: Iterable[str]) -> set[int]:
    """Workers the table lists under any of ``keywords``."""
    out: set[int] = set()
    for k in keywords:
        c = table.get(k)
        if c:
            out.update(c)
    return out


class DSkypePlan(AssignedPlan):
    """An :class:`AssignedPlan` that also knows which keywords each worker holds.

    ``workers_for(keywords)`` is the set of workers holding a subscription that
    shares a keyword with an object (where the object must be sent; its size is
    the object's message count) and ``keywords_of(w)`` the routing keywords of
    worker ``w``.  The keyword -> workers table is built on first use and then
    kept up to date by ``assign``/``remove``.
    """

    def __init__(self, m: int, name: str, subs: Sequence[Sub], assignment: dict, costs: dict,
                 info: dict | None = None) -> None:
        # a subclass with a bulk part of its rule defines _prepare_new / _place_prepared
        super().__init__(m, name, assignment, costs, new_rule=self._place_new, info=info,
                         new_bulk=getattr(self, "_prepare_new", None), new_placed=getattr(self, "_place_prepared", None))
        self._subs: dict[Any, Sub] = {s.id: s for s in subs}
        self._kw_workers: dict[str, dict[int, int]] | None = None

    def _place_new(self, sub: Sub, plan: AssignedPlan) -> tuple[tuple[int, ...], float]:  # pragma: no cover
        raise NotImplementedError

    def _table(self) -> dict[str, dict[int, int]]:
        if self._kw_workers is None:
            self._kw_workers = _table_of(self._where, ((sid, sub.keywords) for sid, sub in self._subs.items()))
        return self._kw_workers

    def _route(self, sid: Any, ws: tuple[int, ...], d: int) -> None:
        if self._kw_workers is not None:
            _route_table(self._kw_workers, self._subs[sid].keywords, ws, d)

    def assign(self, sub: Sub) -> tuple[int, ...]:
        if sub.id in self._where:
            return self._where[sub.id]
        ws = super().assign(sub)
        self._subs[sub.id] = sub
        self._route(sub.id, ws, +1)
        return ws

    def remove(self, sub_id: Any) -> None:
        ws = self._where.get(sub_id)
        if ws is None:
            return
        self._route(sub_id, ws, -1)
        super().remove(sub_id)
        del self._subs[sub_id]

    def _move(self, sid: Any, new: tuple[int, ...], cost: float) -> None:
        """Re-place a held subscription (lazy reallocation); keeps loads and routing consistent."""
        sub = self._subs[sid]
        DSkypePlan.remove(self, sid)
        self._subs[sid] = sub
        self._where[sid] = new
        self._cost[sid] = cost
        for w in new:
            self._loads[w] += cost / len(new)
        self._route(sid, new, +1)

    def move(self, sub_id: Any, workers: tuple[int, ...]) -> None:
        if sub_id in self._where:
            self._move(sub_id, workers, self._cost.get(sub_id, 1.0))

    def where(self, sub_id: Any) -> tuple[int, ...] | None:
        return self._where.get(sub_id)

    def cost(self, sub_id: Any) -> float | None:
        """The cost model's estimate for one subscription (its share of ``loads()``)."""
        return self._cost.get(sub_id)

    def workers_for(self, keywords: Iterable[str]) -> set[int]:
        """Workers holding a subscription with one of ``keywords``."""
        return _workers_in(self._table(), keywords)

    def keywords_of(self, worker: int) -> list[str]:
        """Routing keywords of ``worker``: the keywords of the subscriptions it holds (sorted)."""
        return sorted(k for k, c in self._table().items() if worker in c)

    def describe(self) -> dict:
        per = [0] * self.m
        for c in self._table().values():
            for w in c:
                per[w] += 1
        subs = [0] * self.m
        for ws in self._where.values():
            for w in ws:
                subs[w] += 1
        loads = self.loads()
        mean = sum(loads) / self.m
        return {**super().describe(), "subscriptions_per_worker": subs, "routing_keywords_per_worker": per,
                "load_max_over_mean": (max(loads) / mean) if mean > 0 else 1.0,
                "load_variance": sum((x - mean) ** 2 for x in loads) / self.m}  # Eq. (17) on loads
