"""Planner ``kop``: DkM-SKS's keyword-oriented partition (Section 3.1): cost Eq. (1), Algorithm 1."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ...io.events import TOPK, Sub
from ..common import AssignedPlan, lpt
from ..stats import Statistics
from .params import _check_m, _floor


def eq1_cost(sub: Sub, stats: Statistics, min_cost: float = 0.0) -> float:
    """DkM-SKS Eq. (1): ``C(s) = sum_{lambda in s.psi} P(lambda)``, ``P(lambda) =
    |O_lambda| / |O_init|``; for ``match all`` (kNN/range) the minimum instead of
    the sum (see NOTES.md); at least ``min_cost``."""
    ps = [stats.probability(w) for w in sub.keywords]
    if not ps:
        return float(min_cost)
    # AND: only objects with the rarest keyword touch it (NOTES.md, match all); OR: Eq. (1)'s sum
    c = min(ps) if (sub.match_all and sub.kind != TOPK) else math.fsum(ps)
    return max(c, float(min_cost))


def plan_kop(subs: Sequence[Sub], stats: Statistics, m: int, *, min_cost: float | None = None) -> AssignedPlan:
    """Keyword-oriented partition (DkM-SKS 3.1): Eq. (1) costs, Algorithm 1 (LPT)."""
    m = _check_m(m)
    floor = _floor(stats, min_cost)
    costs = {s.id: eq1_cost(s, stats, floor) for s in subs}
    where, _ = lpt(costs.items(), m)  # Algorithm 1: sort by C(s) desc, each to argmin C(w)

    def new_rule(sub: Sub, plan: AssignedPlan) -> tuple[tuple[int, ...], float]:
        # "the main server computes C(s) from Equation (1) ... assigns s' to the worker with the minimum C(w)"
        return (plan.least_loaded(),), eq1_cost(sub, stats, floor)

    return AssignedPlan(m, "kop", {sid: (w,) for sid, w in where.items()}, costs, new_rule,
                        info={"cost_model": "DkM-SKS Eq. (1)", "min_cost": floor,
                              "total_cost": math.fsum(costs.values())})
