"""Planner ``hash``: DSkype Eq. (14), each subscription on the worker its id hashes to."""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

from ...io.events import Sub
from ..common import AssignedPlan
from ..stats import Statistics
from .params import _check_m


def hash_worker(sub_id: Any, m: int) -> int:
    """DSkype Eq. (14), ``h(s) = s.id mod N_sb``, with a stable hash of the id
    (CRC-32 of its ``repr``: the same in every process, unlike Python's ``hash``)."""
    return zlib.crc32(repr(sub_id).encode("utf-8")) % m


def plan_hash(subs: Sequence[Sub], stats: Statistics, m: int) -> AssignedPlan:
    """DSkype Eq. (14): worker = stable hash of the subscription id mod m; cost 1."""
    m = _check_m(m)
    assignment = {s.id: (hash_worker(s.id, m),) for s in subs}
    costs = {s.id: 1.0 for s in subs}

    def new_rule(sub: Sub, plan: AssignedPlan) -> tuple[tuple[int, ...], float]:
        return (hash_worker(sub.id, plan.m),), 1.0

    return AssignedPlan(m, "hash", assignment, costs, new_rule,
                        info={"cost_model": "1 per subscription (DSkype Eq. 14)",
                              "total_cost": float(len(costs))})
