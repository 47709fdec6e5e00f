"""DSkype's distribution mechanisms (Skype paper, Section 7.3): location, keyword, prefix.

Every planner here is ``plan_NAME(subs, stats, m, **params) -> plan`` and places
each subscription on exactly one worker in ``range(m)`` (the runtime derives
which workers receive an object from where the subscriptions actually are, so
results stay exact whatever the placement).  The paper's cost models are
products ``C = N x p`` (number of subscriptions times the probability that a
random message must be processed by them); each plan records a per-subscription
cost such that ``plan.loads()[w]`` is exactly the cost model's estimate for
worker ``w``:

=========  ===================================  ===========================================
planner    cost of worker ``w`` (``loads()``)    per-subscription cost
=========  ===================================  ===========================================
location   Eq. (15): ``N(leaf) * p(leaf)``       ``p(leaf)``: a message falls in the leaf
keyword    Eq. (16): ``N(W_w) * p(W_w)``         ``p(W_w)``: a message has a keyword of W_w
prefix     Eq. (16) per prefix group, summed:    ``p(pref(s))``: a message has a keyword of
           ``sum_g N(g) * p(pref_g)``            the loose prefix (Lemma 7: only those matter)
=========  ===================================  ===========================================

Probabilities come from the O_init :class:`Statistics`: its sample of objects
(exact co-occurrence for keyword sets, exact positions for rectangles), with one
pseudo-object for smoothing: a keyword never seen in O_init counts as seen once,
and one object is spread uniformly over the space, so ``p = (hits + pseudo) /
(sample + 1)`` is never 0 for a region or keyword set a subscription can use.
Without a sample (``sample_cap=0``) the grid histogram (location) and keyword
independence (keyword, prefix) are used instead.

Choices where the paper is silent or does not fit single placement:

- The paper's keyword and prefix methods *replicate* a subscription on every
  bolt whose keyword set meets ``s.psi`` (resp. ``pref(s)``) and route a
  message by its keywords only.  Here a subscription is placed once: keyword ->
  on the worker owning its least frequent keyword (``s.psi[1]`` in the global
  order, which is also the first keyword of every loose prefix); prefix -> on
  the worker of its prefix group.  Messages then go wherever subscriptions
  sharing one of their keywords are (:meth:`DSkypePlan.workers_for`).
- Algorithms 3 and 4 build ``2^maxdepth`` parts.  For any ``m`` a node that must
  yield ``q`` parts is split into ``q1 = q//2`` and ``q2 = q - q1`` parts; for
  ``q1 = q2`` (every split when ``m`` is a power of two) the rule is the paper's
  ``min |C1 - C2|``.  Otherwise Algorithm 3 minimises ``|C1/q1^2 - C2/q2^2|``:
  p is additive over disjoint regions, so cutting a side in ``q`` leaves divides
  both its N and its p by about ``q`` and each leaf costs about ``C/q^2``.
  Algorithm 4 minimises ``|C1/q1 - C2/q2|``: p is far from additive over keyword
  ranges (frequent keywords co-occur), and the linear rule balances better there
  (measured on GeoNames postal codes).
- Algorithm 3's split line is put halfway between the chosen subscription
  coordinate and the next one (the paper picks "a value from the coordinates of
  the subscriptions"; the midpoint keeps every subscription off the boundary).
  A point on a split line belongs to the lower (left/bottom) leaf.
- Algorithm 4 is the paper's heuristic for "minimise Var (Eq. 17) over
  consecutive ranges".  ``plan_keyword(method="best")`` (default) also computes
  the consecutive partition minimising the largest ``C(W_i)`` (exact, by
  bisection on the bound with a greedy sweep) and keeps whichever of the two has
  the smaller Eq. (17) variance; ``method="alg4"`` is the paper's alone.
- ``kScore(s)`` in Eq. (18) is unknown when planning: it is estimated as the
  k-th best score of ``s`` among the O_init sample (0 if fewer than ``k`` sample
  objects share a keyword), or fixed by ``kscore=``.  The loose prefix drives the
  grouping and the costs; it is *not* a guaranteed bound at run time, so exact
  routing must not rely on it (see :meth:`PrefixPlan.workers_for_prefix`).
- Prefix groups are distributed heaviest first to the worker that adds the
  least message-routing probability (keywords it does not hold yet) among those
  staying under ``(1 + slack) * total / m``, else to the least-loaded worker
  (``affinity=False``: plain LPT).  The paper does not say how the groups are
  packed; this keeps the balance and cuts the messages per object.
- For non-top-k subscriptions the "prefix" is what Lemma 7 needs for their
  predicate: ``match all`` -> the least frequent keyword alone (an object must
  carry it), ``match any`` -> all keywords.

Parameters a planner does not know are ignored, so a runtime may pass one set to
every planner.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from numba import njit

from ..core.config import Space
from ..io.events import RANGE, TOPK, Sub
from ..core.scoring import unit_weights
from .common import AssignedPlan, lpt
from .stats import Statistics

__all__ = ["PLANNERS", "DSkypePlan", "LocationPlan", "KeywordPlan", "PrefixPlan",
           "plan_location", "plan_keyword", "plan_prefix", "sub_point", "loose_prefix"]


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


# ---------------------------------------------------------------------------------------------
# The shared plan: explicit assignment + routing bookkeeping (which keywords live on which worker)


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
        super().__init__(m, name, assignment, costs, new_rule=self._place_new, info=info)
        self._subs: dict[Any, Sub] = {s.id: s for s in subs}
        self._kw_workers: dict[str, dict[int, int]] | None = None

    def _place_new(self, sub: Sub, plan: AssignedPlan) -> tuple[tuple[int, ...], float]:  # pragma: no cover
        raise NotImplementedError

    def _table(self) -> dict[str, dict[int, int]]:
        if self._kw_workers is None:
            table: dict[str, dict[int, int]] = {}
            for sid, sub in self._subs.items():
                for w in self._where[sid]:
                    for k in sub.keywords:
                        _inc(table, k, w, 1)
            self._kw_workers = table
        return self._kw_workers

    def _route(self, sid: Any, ws: tuple[int, ...], d: int) -> None:
        if self._kw_workers is not None:
            for k in self._subs[sid].keywords:
                for w in ws:
                    _inc(self._kw_workers, k, w, d)

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
        table = self._table()
        out: set[int] = set()
        for k in keywords:
            c = table.get(k)
            if c:
                out.update(c)
        return out

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


# ---------------------------------------------------------------------------------------------
# location: Eq. (15), Algorithm 3 - a cost kd-tree


def sub_point(sub: Sub, space: Space) -> tuple[float, float]:
    """The location a subscription is placed by: its point (knn, topk) or, for a range
    subscription, the centre of its rectangle; clamped into the space."""
    if sub.kind == RANGE and sub.rect is not None:
        x1, y1, x2, y2 = sub.rect
        x, y = (x1 + x2) / 2.0, (y1 + y2) / 2.0
    else:
        x, y = sub.x, sub.y
    return min(max(x, space.x1), space.x2), min(max(y, space.y1), space.y2)


class LocationPlan(DSkypePlan):
    """Leaves of the cost kd-tree are the workers (in depth-first order, left/bottom first)."""

    def __init__(self, m, subs, assignment, costs, space, nodes, leaves, info):
        self.space = space
        self._nodes = nodes  # [axis, line, left, right, worker]; a leaf has worker >= 0
        self._leaves = leaves  # worker -> {"rect", "subs", "p", "cost"} as planned
        super().__init__(m, "location", subs, assignment, costs, info=info)

    def leaf_of(self, x: float, y: float) -> int:
        """Worker whose leaf contains ``(x, y)`` (clamped into the space); O(log m)."""
        s = self.space
        p = (min(max(x, s.x1), s.x2), min(max(y, s.y1), s.y2))
        i = 0
        while True:
            axis, line, left, right, worker = self._nodes[i]
            if worker >= 0:
                return worker
            i = left if p[axis] <= line else right

    def leaf_rects(self) -> list[tuple[float, float, float, float]]:
        """Worker -> its leaf ``(x1, y1, x2, y2)`` (closed; shared edges go to the lower leaf)."""
        return [tuple(leaf["rect"]) for leaf in self._leaves]

    def _place_new(self, sub, plan):
        w = self.leaf_of(*sub_point(sub, self.space))
        return (w,), self._leaves[w]["p"]

    def describe(self) -> dict:
        d = super().describe()
        d["leaves"] = [{"worker": w, **leaf} for w, leaf in enumerate(self._leaves)]
        return d


class _Points:
    """Weighted message positions for p(nd): the O_init sample (weight 1 each) or, without
    one, the histogram cells' centres weighted by their counts; plus one pseudo-object spread
    uniformly over the space."""

    def __init__(self, stats: Statistics) -> None:
        sp = stats.space
        if len(stats.sample_x):
            x = np.asarray(stats.sample_x, dtype=np.float64)
            y = np.asarray(stats.sample_y, dtype=np.float64)
            w = np.ones(len(x))
            self.source = "sample"
        else:
            g = stats.grid
            cells = np.nonzero(stats.cell_count)[0]
            cx, cy = cells // g, cells % g
            x = sp.x1 + (cx + 0.5) * (sp.x2 - sp.x1) / g
            y = sp.y1 + (cy + 0.5) * (sp.y2 - sp.y1) / g
            w = stats.cell_count[cells].astype(np.float64)
            self.source = "histogram" if len(cells) else "uniform"
        self.x = np.clip(x, sp.x1, sp.x2)
        self.y = np.clip(y, sp.y1, sp.y2)
        self.w = w
        self.total = float(w.sum()) + 1.0  # + the pseudo-object
        self.area = (sp.x2 - sp.x1) * (sp.y2 - sp.y1)


def _area(r) -> float:
    return (r[2] - r[0]) * (r[3] - r[1])


def plan_location(subs: Sequence[Sub], stats: Statistics, m: int, **params: Any) -> LocationPlan:
    """Cost kd-tree (Eq. 15, Algorithm 3): split alternately on x and y at the line minimising
    the difference of the children's costs ``C(nd) = N(nd) * p(nd)`` until there are ``m``
    leaves; a subscription goes to the leaf holding its point (range: the rectangle's centre).

    O(|S| log |S| + |O| log |O|) per tree level, ``ceil(log2 m)`` levels.
    """
    _check(subs, m)
    space = stats.space
    pts = _Points(stats)
    n = len(subs)
    sxy = np.empty((2, n))
    for i, s in enumerate(subs):
        sxy[0, i], sxy[1, i] = sub_point(s, space)
    oxy = np.vstack([pts.x, pts.y])
    nodes: list[list] = []
    leaves: list[dict] = []
    leaf_of_sub = np.zeros(n, dtype=np.int64)

    def build(rect, si, oi, parts, depth) -> int:
        me = len(nodes)
        nodes.append([0, 0.0, -1, -1, -1])
        if parts == 1:  # Algorithm 3, lines 1-2: the depth limit -> a leaf, one worker
            w = len(leaves)
            p = (float(pts.w[oi].sum()) + _area(rect) / pts.area) / pts.total  # p(nd)
            leaves.append({"rect": [float(v) for v in rect], "subs": int(len(si)), "p": p,
                           "cost": len(si) * p})  # Eq. (15)
            leaf_of_sub[si] = w
            nodes[me][4] = w
            return me
        q1 = parts // 2
        q2 = parts - q1
        axis, line = _best_split(rect, sxy[:, si], oxy[:, oi], pts.w[oi], depth, q1, q2, pts)
        go_left = sxy[axis, si] <= line  # Algorithm 3, line 7
        o_left = oxy[axis, oi] <= line
        lo = list(rect)
        hi = list(rect)
        lo[axis + 2] = line
        hi[axis] = line
        nodes[me][0], nodes[me][1] = axis, line
        nodes[me][2] = build(tuple(lo), si[go_left], oi[o_left], q1, depth + 1)  # line 8
        nodes[me][3] = build(tuple(hi), si[~go_left], oi[~o_left], q2, depth + 1)  # line 9
        return me

    build((space.x1, space.y1, space.x2, space.y2), np.arange(n), np.arange(len(pts.w)), m, 0)
    assignment = {}
    costs = {}
    for i, s in enumerate(subs):
        w = int(leaf_of_sub[i])
        assignment[s.id] = (w,)
        costs[s.id] = leaves[w]["p"]  # so that loads()[w] = N(leaf) * p(leaf), Eq. (15)
    info = {"cost_model": "Eq. 15: C(leaf) = N(leaf) * p(leaf)", "algorithm": "Algorithm 3 (cost kd-tree)",
            "point_rule": "knn/topk: (x, y); range: centre of rect; clamped into the space",
            "boundary_rule": "a point on a split line belongs to the lower (left/bottom) leaf",
            "probability_source": pts.source}
    return LocationPlan(m, subs, assignment, costs, space, nodes, leaves, info)


def _best_split(rect, sxy, oxy, ow, depth, q1, q2, pts: _Points) -> tuple[int, float]:
    """Algorithm 3, lines 3-6: the split line (on x at even depth, y at odd) between two
    consecutive subscription coordinates minimising ``|C(nd1)/q1 - C(nd2)/q2|``."""
    first = depth % 2
    for axis in (first, 1 - first):  # the other axis if this one cannot separate anything
        u, cnt = np.unique(sxy[axis], return_counts=True)
        if len(u) >= 2:
            break
    else:  # fewer than two distinct subscription points: halve the node
        return first, (rect[first] + rect[first + 2]) / 2.0
    lo, hi = rect[axis], rect[axis + 2]
    lines = (u[:-1] + u[1:]) / 2.0
    n_left = np.cumsum(cnt)[:-1].astype(np.float64)
    n_all = float(cnt.sum())
    order = np.argsort(oxy[axis], kind="stable")
    cw = np.concatenate([[0.0], np.cumsum(ow[order])])
    w_left = cw[np.searchsorted(oxy[axis][order], lines, side="right")]
    a_all = _area(rect) / pts.area
    a_left = a_all * (lines - lo) / (hi - lo) if hi > lo else np.zeros_like(lines)
    c1 = n_left * (w_left + a_left) / pts.total  # Eq. (15) for both children
    c2 = (n_all - n_left) * (cw[-1] - w_left + a_all - a_left) / pts.total
    j = int(np.argmin(np.abs(c1 / q1 ** 2 - c2 / q2 ** 2)))
    return axis, float(lines[j])


# ---------------------------------------------------------------------------------------------
# The keyword order and the sample's co-occurrence, shared by keyword and prefix


class _Vocab:
    """The global keyword order (increasing O_init frequency, ties by the keyword; Section 3) over
    the sample's and the subscriptions' keywords; the sample as ranks per object and as postings
    per keyword.  Rank ``V`` stands for every keyword unknown when planning (no postings)."""

    def __init__(self, subs: Sequence[Sub], stats: Statistics) -> None:
        freq = stats.keyword_freq
        words = set(freq)
        for s in subs:
            words.update(s.keywords)
        self.order = sorted(words, key=lambda w: (freq.get(w, 0), w))
        self.keys = [(freq.get(w, 0), w) for w in self.order]
        self.rank = {w: i for i, w in enumerate(self.order)}
        V = self.V = len(self.order)
        self.n = stats.n
        rank = self.rank
        sizes = []
        ranks: list[int] = []
        for kws in stats.sample_kw:
            rs = sorted({rank[k] for k in kws})
            ranks.extend(rs)
            sizes.append(len(rs))
        self.S = S = len(sizes)
        sizes_a = np.asarray(sizes, dtype=np.int64)
        self.obj_rank = np.asarray(ranks, dtype=np.int64)
        self.obj_ptr = np.concatenate([[0], np.cumsum(sizes_a)]).astype(np.int64)
        self.obj_id = np.repeat(np.arange(S, dtype=np.int64), sizes_a)
        self.obj_wo = np.where(sizes_a > 0, 1.0 / np.sqrt(np.maximum(sizes_a, 1)), 0.0)
        self.obj_x = np.asarray(stats.sample_x[:S], dtype=np.float64)
        self.obj_y = np.asarray(stats.sample_y[:S], dtype=np.float64)
        sample_freq = np.bincount(self.obj_rank, minlength=V + 1)
        self.unseen = sample_freq == 0  # counted once by the smoothing pseudo-object
        self.post_obj = self.obj_id[np.argsort(self.obj_rank, kind="stable")]
        self.post_ptr = np.concatenate([[0], np.cumsum(sample_freq)]).astype(np.int64)
        self.maxdist = stats.space.maxdist
        self.indep = S == 0 and self.n > 0  # no sample: keyword independence, full counts
        f = np.array([freq.get(w, 0) for w in self.order] + [0], dtype=np.float64)
        self.p_word = np.where(f > 0, f, 1.0) / (self.n + 1.0)
        # p({w}) per rank, the weights of the routing-affinity heuristic
        self.p_single = self.p_word if self.indep else (sample_freq + self.unseen) / (S + 1.0)

    def key(self, word: str) -> tuple[int, str]:
        r = self.rank.get(word)
        return self.keys[r] if r is not None else (0, word)  # unknown when planning: frequency 0

    def pos(self, word: str) -> int:
        """Position of ``word`` in the global order (an unknown word: where it would be inserted)."""
        r = self.rank.get(word)
        return r if r is not None else bisect.bisect_left(self.keys, (0, word))

    def p_set(self, words: Iterable[str]) -> float:
        """p(W): probability that a message carries a keyword of ``words`` (sample, smoothed)."""
        ranks = [self.rank.get(w, self.V) for w in words]
        if self.indep:
            return 1.0 - float(np.prod(1.0 - self.p_word[ranks]))
        hit: set[int] = set()
        pseudo = 0
        for r in ranks:
            pseudo |= int(self.unseen[r])
            hit.update(self.post_obj[self.post_ptr[r]:self.post_ptr[r + 1]].tolist())
        return (len(hit) + pseudo) / (self.S + 1.0)

    def sorted_subs(self, subs: Sequence[Sub]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """CSR (ptr, ranks, unit weights) of the subscriptions' keywords in the global order."""
        rank, V = self.rank, self.V
        lens = [len(s.keywords) for s in subs]
        ptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        ranks: list[int] = []
        sort_key: list[int] = []
        wts: list[float] = []
        unit = [()] + [[1.0 / math.sqrt(n)] * n for n in range(1, 65)]
        for s in subs:
            n = len(s.keywords)
            try:
                rs = [rank[k] for k in s.keywords]
            except KeyError:  # unknown words: order by their keys
                pairs = sorted(zip(s.keywords, unit_weights(s.weights, n)), key=lambda kw: self.key(kw[0]))
                ranks.extend(rank.get(k, V) for k, _ in pairs)
                sort_key.extend(range(n))  # already in order
                wts.extend(v for _, v in pairs)
                continue
            ranks.extend(rs)
            sort_key.extend(rs)
            if s.weights is None and n < len(unit):
                wts.extend(unit[n])
            else:
                wts.extend(unit_weights(s.weights, n))
        r = np.asarray(ranks, dtype=np.int64)
        w = np.asarray(wts, dtype=np.float64)
        owner = np.repeat(np.arange(len(subs)), np.diff(ptr))
        o = np.lexsort((np.asarray(sort_key, dtype=np.int64), owner))
        return ptr, r[o], w[o]


def _range_p(voc: _Vocab, l: int, r: int) -> tuple[np.ndarray, np.ndarray]:
    """For every split ``s`` in ``l..r``: ``p([l, s))`` and ``p([s, r))``, the probability that a
    message carries a keyword of the range (``p(W_i)`` of Eq. 16), from the sample."""
    if voc.indep:  # p(W) = 1 - prod(1 - p_w)
        lg = np.log1p(-np.minimum(voc.p_word[l:r], 1.0 - 1e-15))
        cl = np.concatenate([[0.0], np.cumsum(lg)])
        return 1.0 - np.exp(cl), 1.0 - np.exp(cl[-1] - cl)
    R = voc.obj_rank
    inside = (R >= l) & (R < r)
    big = np.iinfo(np.int64).max
    first = np.full(voc.S, big)
    last = np.full(voc.S, -1)
    np.minimum.at(first, voc.obj_id[inside], R[inside])
    np.maximum.at(last, voc.obj_id[inside], R[inside])
    # an object meets [l, s) iff its first rank in [l, r) is < s, and [s, r) iff its last is >= s
    f_hist = np.bincount(first[first != big] - l, minlength=r - l)
    l_hist = np.bincount(last[last >= 0] - l, minlength=r - l)
    left_hits = np.concatenate([[0], np.cumsum(f_hist)])
    right_hits = np.concatenate([np.cumsum(l_hist[::-1])[::-1], [0]])
    un = np.concatenate([[0], np.cumsum(voc.unseen[l:r])])  # the seen-once pseudo-object
    return (left_hits + (un > 0)) / (voc.S + 1.0), (right_hits + ((un[-1] - un) > 0)) / (voc.S + 1.0)


# ---------------------------------------------------------------------------------------------
# keyword: Eqs. (16)-(17), Algorithm 4


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
def _sweep(T, lo, hi, n_home, post_ptr, post_obj, unseen, S, indep, p_word, stamp, tag0, starts):
    """Greedy left-to-right cut of ``[lo, hi)`` into consecutive ranges each of Eq. (16) cost
    ``<= T`` (a single keyword may exceed it); returns how many, writing the starts (up to
    ``len(starts)``).  Range costs only grow with the range, so the greedy count is minimal."""
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
        c = _sweep(T, 0, V, nh, voc.post_ptr, voc.post_obj, voc.unseen, voc.S, voc.indep, voc.p_word,
                   stamp, tag[0], starts)
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


# ---------------------------------------------------------------------------------------------
# prefix: Eq. (18), Definition 12, lazy reallocation

_MODE_TOPK, _MODE_ANY, _MODE_ALL = 0, 1, 2


@njit(cache=True)
def _kth_largest(a, n, k):
    """The k-th largest of ``a[:n]`` (reorders it): quickselect with Hoare partitioning."""
    target = n - k
    lo = 0
    hi = n - 1
    while lo < hi:
        pivot = a[(lo + hi) // 2]
        i = lo
        j = hi
        while i <= j:
            while a[i] < pivot:
                i += 1
            while a[j] > pivot:
                j -= 1
            if i <= j:
                t = a[i]
                a[i] = a[j]
                a[j] = t
                i += 1
                j -= 1
        if target <= j:
            hi = j
        elif target >= i:
            lo = i
        else:
            return a[target]
    return a[target]


@njit(cache=True)
def _prefix_kernel(sub_ptr, sub_rank, sub_w, sub_x, sub_y, sub_alpha, sub_k, sub_mode, sub_kscore,
                   post_ptr, post_obj, obj_ptr, obj_rank, obj_wo, obj_x, obj_y, unseen, maxdist,
                   out_plen, out_kscore, out_hits, out_pseudo):
    """Per subscription: the loose prefix length of Definition 12 with lambda_T of Eq. (18),
    kScore (given, or estimated among the sample) and how many sample objects carry a prefix
    keyword (for p(pref(s))).

    Only the postings of ``psi[1..n-1]`` are walked (the last, most frequent keyword's are
    usually the longest): an object sharing nothing but ``psi[n]`` scores at most
    ``alpha + (1-alpha) * wt(psi[n])``, the lowest threshold that can cut the prefix, so the
    k-th best score among the walked objects (``A``) gives the same prefix as the k-th best
    among all; it is the kScore reported (exact whenever it shortens the prefix).  The hits of
    a prefix ``psi[1..p]`` are the objects of ``A`` first reached through ``psi[1..p]`` and, for
    ``p = n``, ``|A| + |postings(psi[n])| - |A with psi[n]|``.
    """
    S = obj_wo.shape[0]
    acc = np.zeros(S)
    stamp = np.zeros(S, dtype=np.int64)
    first = np.zeros(S, dtype=np.int64)
    touched = np.empty(S, dtype=np.int64)
    buf = np.empty(S)
    for i in range(sub_ptr.shape[0] - 1):
        a, b = sub_ptr[i], sub_ptr[i + 1]
        n = b - a
        alpha = sub_alpha[i]
        last = sub_rank[b - 1]
        n_last = post_ptr[last + 1] - post_ptr[last]
        # A: objects carrying one of psi[1..n-1]; TSim and first keyword index per object
        c = 0
        both = 0
        tag = i + 1
        for j in range(a, b - 1):
            r = sub_rank[j]
            for q in range(post_ptr[r], post_ptr[r + 1]):
                o = post_obj[q]
                if stamp[o] != tag:
                    stamp[o] = tag
                    acc[o] = 0.0
                    first[o] = j - a
                    touched[c] = o
                    c += 1
                acc[o] += sub_w[j] * obj_wo[o]
        for t in range(c):
            o = touched[t]
            for q in range(obj_ptr[o], obj_ptr[o + 1]):
                if obj_rank[q] == last:
                    acc[o] += sub_w[b - 1] * obj_wo[o]
                    both += 1
                    break
        ks = sub_kscore[i]
        p = n
        if sub_mode[i] == 2:
            p = 1
        elif sub_mode[i] == 0 and alpha < 1.0 and n > 1:
            if np.isnan(ks):  # estimate kScore(s) among the sample (A suffices, see above)
                k = sub_k[i]
                if c < k or k < 1:
                    ks = 0.0
                else:
                    for t in range(c):
                        o = touched[t]
                        dx = obj_x[o] - sub_x[i]
                        dy = obj_y[o] - sub_y[i]
                        ssim = 1.0 - math.sqrt(dx * dx + dy * dy) / maxdist
                        if ssim < 0.0:
                            ssim = 0.0
                        buf[t] = alpha * ssim + (1.0 - alpha) * acc[o]
                    ks = _kth_largest(buf, c, k)
            lam = ks / (1.0 - alpha) - alpha / (1.0 - alpha)  # Eq. (18)
            # Definition 12: p = argmin_t {wtsum(psi[t+1]) < lambda_T}; wtsum (Eq. 3) is the
            # weight of psi[t+1:], 0 past the end
            suffix = 0.0
            for j in range(a, b):
                suffix += sub_w[j]
            for t in range(n + 1):
                if t == n:
                    suffix = 0.0
                if suffix < lam:
                    p = t
                    break
                suffix -= sub_w[a + t]
            if p < 1:
                p = 1
        out_kscore[i] = ks
        out_plen[i] = p
        if p == n:
            h = c + n_last - both
        else:
            h = 0
            for t in range(c):
                if first[touched[t]] < p:
                    h += 1
        pseudo = False
        for j in range(a, a + p):
            if unseen[sub_rank[j]]:
                pseudo = True
        out_hits[i] = h
        out_pseudo[i] = pseudo


def _mode(sub: Sub) -> int:
    if sub.kind == TOPK:
        return _MODE_TOPK
    return _MODE_ALL if sub.match_all else _MODE_ANY


def _prefixes(voc: _Vocab, subs: Sequence[Sub], kscore):
    """(CSR of ordered keyword ranks, prefix lengths, kScores used, p(pref)) per subscription."""
    n = len(subs)
    ptr, ranks, wts = voc.sorted_subs(subs)
    if kscore is None:
        ks = np.full(n, np.nan)
    else:
        ks = np.full(n, float(kscore))
    plen = np.zeros(n, dtype=np.int64)
    kout = np.zeros(n)
    hits = np.zeros(n, dtype=np.int64)
    pseudo = np.zeros(n, dtype=np.bool_)
    S = voc.S
    _prefix_kernel(ptr, ranks, wts,
                   np.array([s.x for s in subs], dtype=np.float64), np.array([s.y for s in subs], dtype=np.float64),
                   np.array([s.alpha for s in subs], dtype=np.float64), np.array([s.k for s in subs], dtype=np.int64),
                   np.array([_mode(s) for s in subs], dtype=np.int64), ks,
                   voc.post_ptr, voc.post_obj, voc.obj_ptr, voc.obj_rank, voc.obj_wo, voc.obj_x, voc.obj_y,
                   voc.unseen, voc.maxdist, plen, kout, hits, pseudo)
    if voc.indep:
        p = np.array([1.0 - float(np.prod(1.0 - voc.p_word[ranks[ptr[i]:ptr[i] + plen[i]]])) for i in range(n)])
    else:
        p = (hits + pseudo) / (S + 1.0)
    return ptr, ranks, plen, kout, p


def loose_prefix(keywords: Sequence[str], weights: Sequence[float], alpha: float, kscore: float) -> int:
    """Definition 12 on keywords already in the global order with their unit weights: the length
    ``p`` of ``pref(s) = s.psi[1:p]`` for ``lambda_T`` of Eq. (18) (at least 1; all keywords
    when ``alpha >= 1``).  The pure-Python statement of what the planner's kernel computes."""
    n = len(keywords)
    if alpha >= 1.0 or n <= 1:
        return n
    lam = kscore / (1.0 - alpha) - alpha / (1.0 - alpha)
    suffix = [0.0] * (n + 1)
    for i in range(n - 1, -1, -1):
        suffix[i] = suffix[i + 1] + weights[i]
    for i in range(n + 1):
        if suffix[i] < lam:
            return max(i, 1)
    return n


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
        self._kscore_param = kscore
        self._slack = slack
        self._pref_workers: dict[str, dict[int, int]] | None = None
        super().__init__(m, "prefix", subs, assignment, costs, info=info)

    def _pref_table(self) -> dict[str, dict[int, int]]:
        if self._pref_workers is None:
            table: dict[str, dict[int, int]] = {}
            for sid, pref in self._prefix.items():
                for w in self._where[sid]:
                    for k in pref:
                        _inc(table, k, w, 1)
            self._pref_workers = table
        return self._pref_workers

    def _pref_route(self, pref, ws, d):
        if self._pref_workers is not None:
            for k in pref:
                for w in ws:
                    _inc(self._pref_workers, k, w, d)

    def prefix(self, sub_id: Any) -> tuple[str, ...] | None:
        """The loose prefix ``sub_id`` was placed with (keywords in the global order)."""
        return self._prefix.get(sub_id)

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
        d = 1
        while pref[:d] in self._split and d < len(pref):
            d += 1
        key = pref[:d]
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

    def _place_new(self, sub, plan):
        pref, cost = self._compute(sub, self._kscore_param)
        self._prefix[sub.id] = pref
        w = self.group_worker(pref, sub.keywords, cost)
        self._pref_route(pref, (w,), +1)
        return (w,), cost

    def remove(self, sub_id: Any) -> None:
        ws = self._where.get(sub_id)
        if ws is None:
            return
        self._pref_route(self._prefix.pop(sub_id), ws, -1)
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
        self._move(sub_id, new, cost)
        self._prefix[sub_id] = pref
        self._pref_route(pref, new, +1)
        return new if new != ws else None

    def workers_for_prefix(self, keywords: Iterable[str]) -> set[int]:
        """Workers holding a subscription whose loose prefix meets ``keywords`` (Lemma 7's
        routing; exact only while every kScore stays at or above the one planned with)."""
        table = self._pref_table()
        out: set[int] = set()
        for k in keywords:
            c = table.get(k)
            if c:
                out.update(c)
        return out

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

    ``kscore``: None estimates ``kScore(s)`` from the sample (see the module notes); a number
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


PLANNERS = {"location": plan_location, "keyword": plan_keyword, "prefix": plan_prefix}
