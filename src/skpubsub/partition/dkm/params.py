"""DkM-SKS's system parameters (Section 5.1), and the checks and cost floor its planners share."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..stats import Statistics

#: System parameters from DkM-SKS section 5.1 ("theta = 20, gamma1 = 100,000, gamma2 = 20").
PAPER_THETA = 20
PAPER_GAMMA1 = 100_000
PAPER_GAMMA2 = 20


def _check_m(m: Any) -> int:
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"m must be an integer >= 1, got {m!r}")
    return int(m)


def _floor(stats: Statistics, min_cost: float | None) -> float:
    # a 0 estimate would let LPT pile such subscriptions on one worker (NOTES.md, "cost floor")
    if min_cost is None:
        return 1.0 / (stats.n + 1)
    if not (isinstance(min_cost, (int, float)) and math.isfinite(min_cost) and min_cost >= 0):
        raise ValueError(f"min_cost must be a finite number >= 0, got {min_cost!r}")
    return float(min_cost)
