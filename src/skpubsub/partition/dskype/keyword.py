"""Planner ``keyword`` (Skype paper, Section 7.3): consecutive ranges of the global keyword order
costed by Eq. (16), cut by Algorithm 4 or by exact min-max, the one of smaller Eq. (17) variance kept."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numba import njit

from ...io.events import Sub
from ..stats import Statistics
from .plan import DSkypePlan, _check
from .vocab import _range_p, _Vocab


class KeywordPlan(DSkypePlan):
    """Worker ``w`` owns the consecutive range ``W_w = order[a:b]`` of the global keyword order;
    a subscription lives with the owner of its least frequent keyword."""

    def __init__(self, m, subs, assignment, costs, voc, ranges, p_range, n_home, info):
        self._voc = voc
        self.ranges = ranges  # worker -> (a, b) positions in the global order
        self.p_range = p_range  # worker -> p(W_w)
        self._n_home = n_home  # worker -> N(W_w) when planned
        self._ends = np.array([b for _, b in ranges])
        self._last_nonempty = max((w for w, (a, b) in enumerate(ranges) if b > a), default=0)
        super().__init__(m, "keyword", subs, assignment, costs, info=info)

    def home(self, sub: Sub) -> str:
        """The keyword a subscription is placed by: its least frequent (first in the global order)."""
        return min(sub.keywords, key=self._voc.key)

    def worker_of_keyword(self, word: str) -> int:
        """The worker whose range ``W_w`` holds ``word`` (an unknown word: by its place in the order)."""
        w = int(np.searchsorted(self._ends, self._voc.pos(word), side="right"))
        return w if w < self.m else self._last_nonempty

    def range_keywords(self, worker: int) -> list[str]:
        a, b = self.ranges[worker]
        return self._voc.order[a:b]

    def _place_new(self, sub, plan):
        w = self.worker_of_keyword(self.home(sub))
        p = self.p_range[w]
        # a range with no message mass yet (empty, or no statistics): the seen-once smoothing
        return (w,), p if p > 0 else 1.0 / (self._voc.S + 1.0)

    def describe(self) -> dict:
        d = super().describe()
        order = self._voc.order
        d["keyword_table_size"] = self._voc.V
        d["ranges"] = [{"worker": w, "keywords": b - a, "first": order[a] if b > a else None,
                        "last": order[b - 1] if b > a else None, "N": int(self._n_home[w]),
                        "p": self.p_range[w], "cost": self._n_home[w] * self.p_range[w]}
                       for w, (a, b) in enumerate(self.ranges)]
        return d


@njit(cache=True)
def _sweep(T, lo, hi, n_home, sample, stamp, tag0, starts):
    """Greedy left-to-right cut of ``[lo, hi)`` into consecutive ranges each of Eq. (16) cost
    ``<= T`` (a single keyword may exceed it); returns how many, writing the starts (up to
    ``len(starts)``).  Range costs only grow with the range, so the greedy count is minimal."""
    post_ptr, post_obj, unseen, p_word = sample.post_ptr, sample.post_obj, sample.unseen, sample.p_word
    S, indep = sample.S, sample.indep
    l = lo
    cnt = 0
    tag = tag0
    while l < hi:
        if cnt >= starts.shape[0]:
            return cnt + 1  # more ranges than wanted: stop early
        starts[cnt] = l
        cnt += 1
        tag += 1
        N = 0.0
        hits = 0
        pseudo = 0
        logq = 0.0
        s = l
        while s < hi:
            add = 0
            if not indep:
                for q in range(post_ptr[s], post_ptr[s + 1]):
                    if stamp[post_obj[q]] != tag:
                        add += 1
                ps = pseudo | (1 if unseen[s] else 0)
                c = (N + n_home[s]) * (hits + add + ps) / (S + 1.0)
            else:
                ps = pseudo
                c = (N + n_home[s]) * (1.0 - math.exp(logq + math.log1p(-min(p_word[s], 1.0 - 1e-15))))
            if c > T and s > l:
                break
            if not indep:
                for q in range(post_ptr[s], post_ptr[s + 1]):
                    stamp[post_obj[q]] = tag
            else:
                logq += math.log1p(-min(p_word[s], 1.0 - 1e-15))
            hits += add
            pseudo = ps
            N += n_home[s]
            s += 1
        l = s
    return cnt


def _minmax_ranges(voc: _Vocab, n_home: np.ndarray, m: int) -> list[tuple[int, int]]:
    """Consecutive ranges minimising the largest Eq. (16) cost: bisection on the bound."""
    V = voc.V
    stamp = np.zeros(max(voc.S, 1), dtype=np.int64)
    starts = np.zeros(m + 1, dtype=np.int64)
    nh = n_home.astype(np.float64)
    tag = [0]

    def sweep(T: float) -> int:
        c = _sweep(T, 0, V, nh, voc.sample, stamp, tag[0], starts)
        tag[0] += V + 1
        return c

    lo, hi = 0.0, float(nh.sum()) * float(_range_p(voc, 0, V)[0][-1]) if V else 0.0
    for _ in range(60):
        if hi - lo <= 1e-12 * max(hi, 1e-300):
            break
        mid = (lo + hi) / 2.0
        if sweep(mid) <= m:
            hi = mid
        else:
            lo = mid
    k = sweep(hi) if V else 0
    cuts = [int(x) for x in starts[:k]] + [V]
    ranges = [(cuts[i], cuts[i + 1]) for i in range(k)]
    n_cum = np.concatenate([[0.0], np.cumsum(nh)])
    while len(ranges) < m:  # fewer ranges than workers: split the costliest splittable one
        best = None
        for i, (a, b) in enumerate(ranges):
            if b - a >= 2:
                c = (n_cum[b] - n_cum[a]) * _range_p(voc, a, b)[0][-1]
                if best is None or c > best[0]:
                    best = (c, i)
        if best is None:
            ranges.append((V, V))
            continue
        a, b = ranges[best[1]]
        p1, p2 = _range_p(voc, a, b)
        sp = np.arange(a + 1, b)
        c = np.maximum((n_cum[sp] - n_cum[a]) * p1[sp - a], (n_cum[b] - n_cum[sp]) * p2[sp - a])
        s = int(sp[int(np.argmin(c))])
        ranges[best[1]:best[1] + 1] = [(a, s), (s, b)]
    return ranges


def plan_keyword(subs: Sequence[Sub], stats: Statistics, m: int, *, method: str = "best",
                 **params: Any) -> KeywordPlan:
    """Keyword partition (Eqs. 16-17, Algorithm 4): the global order (increasing frequency) is cut
    into ``m`` consecutive ranges ``W_i``; ``C(W) = N(W) * p(W)`` with ``N(W)`` the subscriptions
    whose least frequent keyword is in ``W`` (they are placed there) and ``p(W)`` the probability
    that a message carries a keyword of ``W``.

    ``method``: ``"alg4"`` - Algorithm 4, recursive bisection at the keyword minimising
    ``|C(W1) - C(W2)|``; ``"minmax"`` - the consecutive ranges minimising ``max C(W_i)``;
    ``"best"`` - both, keeping the one with the smaller Var of Eq. (17).
    O(|S| |s.psi| + (|V| + sample keywords) * (log m + 60 for minmax)).
    """
    _check(subs, m)
    if method not in ("alg4", "minmax", "best"):
        raise ValueError(f"unknown method {method!r}; use alg4, minmax or best")
    voc = _Vocab(subs, stats)
    V = voc.V
    rank = voc.rank
    home = np.fromiter((min(rank[k] for k in s.keywords) for s in subs), dtype=np.int64, count=len(subs))
    n_home = np.bincount(home, minlength=V)
    n_cum = np.concatenate([[0], np.cumsum(n_home)]).astype(np.float64)

    def alg4() -> list[tuple[int, int]]:
        ranges: list[tuple[int, int]] = []

        def split(l: int, r: int, parts: int) -> None:  # Algorithm 4, KeywordPartition(W, depth)
            if parts == 1:  # lines 1-2
                ranges.append((l, r))
                return
            q1 = parts // 2
            q2 = parts - q1
            n = r - l
            if n >= parts:  # every part keeps at least one keyword
                lo, hi = l + q1, r - q2
            elif n >= 2:
                lo, hi = l + 1, r - 1
            else:
                lo = hi = r
            p1, p2 = _range_p(voc, l, r)
            sp = np.arange(lo, hi + 1)
            c1 = (n_cum[sp] - n_cum[l]) * p1[sp - l]  # Eq. (16) for both halves
            c2 = (n_cum[r] - n_cum[sp]) * p2[sp - l]
            s = lo + int(np.argmin(np.abs(c1 / q1 - c2 / q2)))  # line 3
            split(l, s, q1)  # line 4
            split(s, r, q2)  # line 5

        split(0, V, m)
        return ranges

    def score(ranges):
        p = [float(_range_p(voc, a, b)[0][-1]) for a, b in ranges]
        C = [(n_cum[b] - n_cum[a]) * pi for (a, b), pi in zip(ranges, p)]
        mu = sum(C) / m
        return sum((c - mu) ** 2 for c in C) / m, p  # Eq. (17)

    candidates = {}
    if method in ("alg4", "best"):
        candidates["alg4"] = alg4()
    if method in ("minmax", "best"):
        candidates["minmax"] = _minmax_ranges(voc, n_home, m)
    scored = {name: score(r) for name, r in candidates.items()}
    chosen = min(scored, key=lambda name: (scored[name][0], name != "alg4"))
    ranges = candidates[chosen]
    var, p_range = scored[chosen]
    n_range = [float(n_cum[b] - n_cum[a]) for a, b in ranges]
    worker_of_rank = np.repeat(np.arange(m), [b - a for a, b in ranges])
    assignment = {}
    costs = {}
    for i, s in enumerate(subs):
        w = int(worker_of_rank[home[i]])
        assignment[s.id] = (w,)
        costs[s.id] = p_range[w]  # so that loads()[w] = N(W_w) * p(W_w), Eq. (16)
    top = np.argsort(-n_home * voc.p_single[:V], kind="stable")[:10] if V else []
    info = {"cost_model": "Eq. 16: C(W_i) = N(W_i) * p(W_i); N counts subscriptions by least frequent keyword",
            "algorithm": {"alg4": "Algorithm 4 (recursive bisection of the frequency order)",
                          "minmax": "consecutive ranges minimising max C(W_i)"}[chosen],
            "variance_eq17": float(var), "variance_eq17_candidates": {k: float(v[0]) for k, v in scored.items()},
            "heaviest_keywords": [{"keyword": voc.order[r], "worker": int(worker_of_rank[r]),
                                   "subscriptions": int(n_home[r]), "p": float(voc.p_single[r])}
                                  for r in np.asarray(top).tolist() if n_home[r] > 0],
            "probability_source": "sample" if voc.S else ("independence" if voc.n else "uniform")}
    return KeywordPlan(m, subs, assignment, costs, voc, ranges, p_range, n_range, info)
