"""Planner ``prefix`` (Skype paper, Section 7.3.4): loose-prefix groups (Definition 12, Eq. (18))
costed by Eq. (16), packed with routing affinity; lazy reallocation when kScore grows."""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from numba import njit

from ...io.events import Sub
from ..common import lpt
from ..stats import Statistics
from .loose import _prefixes
from .plan import DSkypePlan, _check, _route_table, _table_of, _workers_in
from .vocab import _Vocab


@njit(cache=True)
def _affinity(order, gcost, g_ptr, g_rank, p_rank, m, cap, loads, out):
    """Groups in ``order`` each to the worker adding the least routing probability (its keywords
    not yet on the worker) among those staying within ``cap``; else the least loaded."""
    has = np.zeros((p_rank.shape[0], m), dtype=np.bool_)
    saved = np.zeros(m)
    for g in order:
        a, b = g_ptr[g], g_ptr[g + 1]
        saved[:] = 0.0
        for j in range(a, b):
            r = g_rank[j]
            for w in range(m):
                if has[r, w]:
                    saved[w] += p_rank[r]
        best = -1
        for w in range(m):
            if loads[w] + gcost[g] <= cap:
                if best < 0 or saved[w] > saved[best] or (saved[w] == saved[best] and loads[w] < loads[best]):
                    best = w
        if best < 0:
            best = 0
            for w in range(1, m):
                if loads[w] < loads[best]:
                    best = w
        out[g] = best
        loads[best] += gcost[g]
        for j in range(a, b):
            has[g_rank[j], best] = True


class PrefixPlan(DSkypePlan):
    """Prefix groups (nodes of the trie of loose prefixes in the global order) mapped to workers."""

    def __init__(self, m, subs, assignment, costs, voc, units, split, prefix_of, kscore, slack, info):
        self._voc = voc
        self._units = units  # prefix tuple -> worker: the groups
        self._split = split  # prefixes whose group was split one keyword deeper
        self._prefix = prefix_of  # sub id -> the prefix it was placed with
        # group -> live subscriptions placed in it: a group is dropped at zero, so the table
        # stays at what the live subscriptions hold (SPEC 6 "Memory": an endless vocabulary)
        self._members: dict[tuple[str, ...], int] = {}
        for pref in prefix_of.values():
            self._join(pref)
        self._kscore_param = kscore
        self._slack = slack
        self._pref_workers: dict[str, dict[int, int]] | None = None
        super().__init__(m, "prefix", subs, assignment, costs, info=info)

    def _pref_table(self) -> dict[str, dict[int, int]]:
        if self._pref_workers is None:
            self._pref_workers = _table_of(self._where, self._prefix.items())
        return self._pref_workers

    def _pref_route(self, pref, ws, d):
        if self._pref_workers is not None:
            _route_table(self._pref_workers, pref, ws, d)

    def prefix(self, sub_id: Any) -> tuple[str, ...] | None:
        """The loose prefix ``sub_id`` was placed with (keywords in the global order)."""
        return self._prefix.get(sub_id)

    def _key(self, pref: tuple[str, ...]) -> tuple[str, ...]:
        """The group key of ``pref``: its first prefix not split (or ``pref`` itself)."""
        d = 1
        while pref[:d] in self._split and d < len(pref):
            d += 1
        return pref[:d]

    def _join(self, pref: tuple[str, ...]) -> None:
        key = self._key(pref)
        self._members[key] = self._members.get(key, 0) + 1

    def _leave(self, pref: tuple[str, ...]) -> None:
        """A subscription placed with ``pref`` left its group; the last one drops the group
        (a later subscription with that prefix starts it again, placed afresh)."""
        key = self._key(pref)
        n = self._members[key] - 1
        if n:
            self._members[key] = n
        else:
            del self._members[key]
            self._units.pop(key, None)

    def group_of(self, pref: tuple[str, ...]) -> tuple[str, ...] | None:
        """The group (a prefix of ``pref``) that ``pref`` belongs to, None if none yet."""
        for d in range(1, len(pref) + 1):
            key = pref[:d]
            if key in self._split and d < len(pref):
                continue  # that group was split: one keyword deeper
            return key if key in self._units else None
        return None

    def group_worker(self, pref: tuple[str, ...], keywords: Iterable[str] = (), cost: float = 0.0) -> int:
        """Worker of a prefix: its group's.  A prefix in no group starts a new group (the table
        grows lazily): with affinity, on the worker already routing most of ``keywords`` (by
        probability) among those staying within the load bound after adding ``cost``; else on
        the least-loaded worker."""
        key = self.group_of(pref)
        if key is not None:
            return self._units[key]
        key = self._key(pref)
        w = self.least_loaded()
        if self._slack is not None:
            table = self._table()
            voc = self._voc
            saved = [0.0] * self.m
            for k in sorted(set(keywords) | set(pref)):
                p = float(voc.p_single[voc.rank.get(k, voc.V)])
                for x in table.get(k, ()):
                    saved[x] += p
            loads = self.loads()
            cap = (1.0 + self._slack) * (sum(loads) + cost) / self.m
            fits = [x for x in range(self.m) if loads[x] + cost <= cap]
            if fits:
                w = max(fits, key=lambda x: (saved[x], -loads[x], -x))
        self._units[key] = w
        return w

    def _compute(self, sub: Sub, kscore) -> tuple[tuple[str, ...], float]:
        ptr, ranks, plen, _, p = _prefixes(self._voc, [sub], kscore)
        kws = sorted(sub.keywords, key=self._voc.key)
        return tuple(kws[:int(plen[0])]), float(p[0])

    def _prepare_new(self, subs: list[Sub]) -> list[tuple[tuple[str, ...], float]]:
        """``_compute`` for a run of subscriptions in one kernel pass (the kernel's rows are
        independent: the planner computes all of them so)."""
        ptr, ranks, plen, _, p = _prefixes(self._voc, subs, self._kscore_param)
        key = self._voc.key
        return [(tuple(sorted(s.keywords, key=key)[:n]), c) for s, n, c in zip(subs, plen.tolist(), p.tolist())]

    def _place_new(self, sub, plan):
        return self._place_prepared(sub, plan, self._compute(sub, self._kscore_param))

    def _place_prepared(self, sub, plan, pre):
        pref, cost = pre
        self._prefix[sub.id] = pref
        w = self.group_worker(pref, sub.keywords, cost)
        self._join(pref)
        self._pref_route(pref, (w,), +1)
        return (w,), cost

    def remove(self, sub_id: Any) -> None:
        ws = self._where.get(sub_id)
        if ws is None:
            return
        pref = self._prefix.pop(sub_id)
        self._pref_route(pref, ws, -1)
        self._leave(pref)
        super().remove(sub_id)

    def move(self, sub_id: Any, workers: tuple[int, ...]) -> None:
        ws = self._where.get(sub_id)
        if ws is None:
            return
        pref = self._prefix[sub_id]
        self._pref_route(pref, ws, -1)
        super().move(sub_id, workers)
        self._pref_route(pref, workers, +1)

    def observe_kscore(self, sub_id: Any, kscore: float) -> tuple[int, ...] | None:
        """Lazy reallocation (Section 7.3.4): ``kScore(s)`` changed at run time.  The loose prefix
        is recomputed (Eq. 18, Definition 12); only when it must cover *more* keywords than the
        one ``s`` was placed with is ``s`` re-placed, by the group of its new prefix (its cost
        becomes ``p`` of the longer prefix).  Returns the new workers if ``s`` moved, else None;
        a prefix that shrinks changes nothing."""
        sub = self._subs.get(sub_id)
        if sub is None:
            return None
        old = self._prefix[sub_id]
        pref, cost = self._compute(sub, kscore)
        if len(pref) <= len(old):
            return None
        ws = self._where[sub_id]
        self._pref_route(old, ws, -1)
        new = (self.group_worker(pref, sub.keywords, cost),)
        self._join(pref)  # before leaving the old group: a group shared by both stays put
        self._leave(old)
        self._move(sub_id, new, cost)
        self._prefix[sub_id] = pref
        self._pref_route(pref, new, +1)
        return new if new != ws else None

    def workers_for_prefix(self, keywords: Iterable[str]) -> set[int]:
        """Workers holding a subscription whose loose prefix meets ``keywords`` (Lemma 7's
        routing; exact only while every kScore stays at or above the one planned with)."""
        return _workers_in(self._pref_table(), keywords)

    def describe(self) -> dict:
        d = super().describe()
        per = [0] * self.m
        for w in self._units.values():
            per[w] += 1
        prefixes = [set() for _ in range(self.m)]
        for sid, pref in self._prefix.items():
            for w in self._where[sid]:
                prefixes[w].add(pref)
        pk = [0] * self.m
        for c in self._pref_table().values():
            for w in c:
                pk[w] += 1
        d["groups_per_worker"] = per
        d["prefixes_per_worker"] = [len(s) for s in prefixes]
        d["prefix_keywords_per_worker"] = pk
        return d


def plan_prefix(subs: Sequence[Sub], stats: Statistics, m: int, *, kscore: float | None = None,
                split_factor: float = 1.0, affinity: bool = True, slack: float = 0.05,
                **params: Any) -> PrefixPlan:
    """Loose-prefix distribution (Eq. 18, Definition 12, Section 7.3.4).

    Each subscription's loose prefix ``pref(s)`` (its keywords in the global order, cut where the
    remaining weight can no longer lift a message to ``kScore(s)``) names its group.  A group's
    cost is Eq. (16) with ``W = pref``: ``N(g) * p(pref_g)``, ``p`` the probability that a message
    carries a prefix keyword (only those can affect ``s``, Lemma 7).  Groups are nodes of the
    prefix trie: all subscriptions with the same first prefix keyword, a group heavier than
    ``split_factor * total / m`` split by the next prefix keyword (those whose prefix ends there
    stay together), recursively.  Groups go heaviest first to a worker: with ``affinity`` the one
    already routing most of the group's keywords (by probability) among those staying within
    ``(1 + slack) * total / m``, else (or ``affinity=False``: LPT) the least loaded.
    Subscriptions with equal prefixes always share a worker.

    ``kscore``: None estimates ``kScore(s)`` from the sample (see NOTES.md); a number
    fixes it for every top-k subscription (0 gives full prefixes).
    O(sum over subscriptions of their keywords' sample postings + |S| log |S| + groups * m).
    """
    _check(subs, m)
    voc = _Vocab(subs, stats)
    order = voc.order
    ptr, ranks, plen, _, p = _prefixes(voc, subs, kscore)
    rl = ranks.tolist()
    pl = plen.tolist()
    pt = ptr.tolist()
    prefs = [tuple([order[r] for r in rl[pt[i]:pt[i] + pl[i]]]) for i in range(len(subs))]
    total = float(p.sum())
    limit = split_factor * total / m

    # the trie groups: first prefix keyword, heavy groups split one keyword deeper
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, pr in enumerate(prefs):
        groups.setdefault(pr[:1], []).append(i)
    gcost = {k: float(p[v].sum()) for k, v in groups.items()}
    split: set[tuple[str, ...]] = set()
    heap = [(-c, j, k) for j, (k, c) in enumerate(gcost.items())]
    heapq.heapify(heap)
    tie = len(heap)
    while heap and -heap[0][0] > limit and m > 1:
        _, _, key = heapq.heappop(heap)
        d = len(key)
        members = groups.pop(key)
        children: dict[tuple[str, ...], list[int]] = {}
        for i in members:
            children.setdefault(prefs[i][:d + 1], []).append(i)
        if len(children) == 1 and key in children:  # every prefix ends here: cannot split
            groups[key] = members
            continue
        split.add(key)
        del gcost[key]
        for ck, cm in children.items():
            groups[ck] = cm
            gcost[ck] = float(p[cm].sum())
            if len(ck) > d:  # the terminal child (same key) cannot split further
                heapq.heappush(heap, (-gcost[ck], tie, ck))
                tie += 1
    # deterministic: groups by key in the global order, then heaviest first (stable)
    keys = sorted(groups, key=lambda k: [voc.rank[w] for w in k])
    if affinity and m > 1:
        G = len(keys)
        gid = np.empty(len(subs), dtype=np.int64)
        for g, k in enumerate(keys):
            gid[groups[k]] = g
        ent_g = np.repeat(gid, np.diff(ptr))
        code = np.unique(ent_g * (voc.V + 1) + ranks)  # (group, keyword) pairs, sorted
        g_rank = code % (voc.V + 1)
        g_ptr = np.searchsorted(code // (voc.V + 1), np.arange(G + 1)).astype(np.int64)
        gc = np.array([gcost[k] for k in keys])
        gorder = np.argsort(-gc, kind="stable")
        out = np.zeros(G, dtype=np.int64)
        _affinity(gorder, gc, g_ptr, g_rank, voc.p_single, m, (1.0 + slack) * total / m, np.zeros(m), out)
        where = {k: int(out[g]) for g, k in enumerate(keys)}
    else:
        where, _ = lpt([(k, gcost[k]) for k in keys], m)
    assignment = {}
    costs = {}
    prefix_of = {}
    for k in keys:
        w = where[k]
        for i in groups[k]:
            s = subs[i]
            assignment[s.id] = (w,)
            costs[s.id] = float(p[i])  # loads()[w] = sum over its groups of N(g) * p(pref_g)
            prefix_of[s.id] = prefs[i]
    n_kw = np.diff(ptr)
    top = sorted(keys, key=lambda k: -gcost[k])[:10]
    info = {"cost_model": "Eq. 16 per prefix group: C(g) = N(g) * p(pref_g); loads sum the groups",
            "prefix": "Definition 12 with lambda_T of Eq. 18",
            "kscore": "estimated from the O_init sample" if kscore is None else float(kscore),
            "packing": f"routing affinity within (1 + {slack}) * mean load" if affinity else "LPT",
            "groups": len(groups), "split_groups": len(split),
            "mean_prefix_length": float(plen.mean()) if len(subs) else 0.0,
            "mean_keywords": float(n_kw.mean()) if len(subs) else 0.0,
            "shortened_prefixes": int((plen < n_kw).sum()),
            "heaviest_groups": [{"prefix": list(k), "worker": where[k], "subscriptions": len(groups[k]),
                                 "cost": gcost[k]} for k in top],
            "probability_source": "sample" if voc.S else ("independence" if voc.n else "uniform")}
    return PrefixPlan(m, subs, assignment, costs, voc, dict(where), split, prefix_of, kscore,
                      slack if affinity else None, info)
