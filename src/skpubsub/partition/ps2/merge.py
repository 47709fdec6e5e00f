"""Dividing PS2Stream's kd^t units among the workers: ComputeNumberPartitions (Algorithm 1 lines
13-14, the DP) and MergeNodesIntoPartitions (line 18) under the loads of Definition 1."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .data import _Data
from .tree import _Unit


def partition_counts(C: Sequence[Sequence[float]], m: int) -> tuple[list[int], float]:
    """ComputeNumberPartitions (Algorithm 1 lines 13-14): the DP

        L[i, j] = min_{1 <= k <= j-i+1} L[i-1, j-k] + C[i, k]

    over ``C[i][k-1]`` = the sum of loads of node ``i`` cut into ``k`` parts
    (``inf`` when impossible).  Returns (parts per node, L[n, m]).  When ``m``
    parts cannot be made, the largest feasible total is used.
    """
    n = len(C)
    if n == 0:
        return [], 0.0
    inf = math.inf
    L = [[inf] * (m + 1) for _ in range(n + 1)]
    choice = [[0] * (m + 1) for _ in range(n + 1)]
    L[0][0] = 0.0
    for i in range(1, n + 1):
        row = C[i - 1]
        for j in range(i, m + 1):
            best, arg = inf, 0
            for k in range(1, min(j - i + 1, len(row)) + 1):
                prev = L[i - 1][j - k]
                if prev == inf or row[k - 1] == inf:
                    continue
                v = prev + row[k - 1]
                if v < best:
                    best, arg = v, k
            L[i][j], choice[i][j] = best, arg
    j = max((jj for jj in range(n, m + 1) if L[n][jj] < inf), default=None)
    if j is None:
        return [1] * n, math.fsum(row[0] for row in C)
    total = L[n][j]
    out = [0] * n
    for i in range(n, 0, -1):
        k = choice[i][j]
        out[i - 1] = k
        j -= k
    return out, total


def _factor(loads: np.ndarray) -> float:
    hi, lo = float(loads.max()), float(loads.min())
    if hi <= 0.0:
        return 1.0
    return math.inf if lo <= 0.0 else hi / lo


def _merge(d: _Data, units: list[_Unit], m: int) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """Units by load descending; each to the worker of least Def. 1 increase unless that raises
    L_max/L_min, then to the least-loaded worker.  Returns (worker per unit, loads, |O_i|, |Q_i|)."""
    omask = np.zeros((m, d.S), dtype=bool)
    qmask = np.zeros((m, d.N), dtype=bool)
    no = np.zeros(m, dtype=np.int64)
    nq = np.zeros(m, dtype=np.int64)
    loads = np.zeros(m)
    where = [0] * len(units)
    order = sorted(range(len(units)), key=lambda i: (-units[i].load, units[i].seq))
    s = d.scale
    for i in order:
        u = units[i]
        new_o = (~omask[:, u.O]).sum(axis=1) if len(u.O) else np.zeros(m, dtype=np.int64)
        new_q = (~qmask[:, u.Q]).sum(axis=1) if len(u.Q) else np.zeros(m, dtype=np.int64)
        after = d.c1 * s * (no + new_o) * (nq + new_q) + d.c2 * s * (no + new_o) + d.cq * (nq + new_q)
        inc = after - loads
        best = int(np.lexsort((np.arange(m), loads, inc))[0])
        trial = loads.copy()
        trial[best] = after[best]
        if _factor(trial) > _factor(loads):
            best = int(np.lexsort((np.arange(m), loads))[0])
        where[i] = best
        if len(u.O):
            omask[best, u.O] = True
        if len(u.Q):
            qmask[best, u.Q] = True
        no[best] += new_o[best]
        nq[best] += new_q[best]
        loads[best] = after[best]
    return where, loads, no, nq
