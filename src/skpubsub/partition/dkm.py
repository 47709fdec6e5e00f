"""The DkM-SKS family of planners: ``hash``, ``kop``, ``sop``, ``dkm``.

Papers: DkM-SKS (distributed continuous spatial-keyword kNN monitoring), sections
3-4, and DSkype's hashing-based distribution (Eq. 14).  Every planner is
``plan_NAME(subs, stats, m, **params) -> AssignedPlan``: each subscription goes to
exactly one worker in ``range(m)``, the plan records each subscription's
estimated cost under the planner's own cost model (``plan.loads()`` sums them
per worker) and places new subscriptions by the paper's rule.

- ``hash`` -- DSkype Eq. (14): worker ``crc32(repr(id)) mod m``, cost 1; new
  subscriptions by the same hash.
- ``kop`` (``min_cost``) -- keyword-oriented partition (DkM-SKS 3.1): cost Eq. (1),
  Algorithm 1 (LPT over subscriptions); a new subscription costs Eq. (1) and goes
  to the least-loaded worker.
- ``sop`` (``theta``, ``min_cost``) -- space-oriented partition (3.2): quadtree
  subspaces, the costliest (Eq. (3) with Eq. (2)) split first, until at least
  ``theta*m`` subsets; the subsets assigned by the greedy of Algorithm 1.  A new
  subscription costs Eq. (2) with the rectangle of its own kNN ball among O_init
  and goes to the least-loaded worker.
- ``dkm`` (``gamma1``, ``gamma2``, ``min_cost``) -- DkM-SKS (4): costs Eqs. (4)-(6),
  Algorithm 2 (space-only vs hybrid partition), Algorithm 3 (subsets heaviest
  first, their subscriptions heaviest first, each to the least-loaded worker).  A
  new subscription costs Eq. (5) with R*, the subset rectangle of most overlap
  with its own (Eq. (7)), and goes to the least-loaded worker.

Defaults are the paper's (section 5.1): theta = 20, gamma1 = 100,000, gamma2 = 20.
``sop`` and ``dkm`` plans also carry ``plan.groups`` (the subsets, as tuples of
subscription ids, aligned with ``describe()["subsets"]``; for ``dkm`` in the order
of Algorithm 3); ``plan.describe()`` gives the cost model,
``total_cost``, and for ``sop`` (and ``dkm`` up to 10,000 subsets) each subset's
space ``r``, rectangle ``R``, size and cost.

Estimates from O_init (the :class:`~skpubsub.partition.stats.Statistics`):

- ``P(lambda)`` (Eq. 1) is ``stats.probability`` (all of O_init).
- ``P(R)`` (Eq. 2) and ``P(R, lambda)`` (Eq. 4) count the objects of the stored
  sample (``stats.sample_x/sample_y/sample_kw``, which *is* O_init while O_init has
  at most ``sample_cap`` objects) inside the closed rectangle ``R``, divided by the
  sample size.  Counting is exact (NumPy: per keyword, postings sorted by x,
  searchsorted for the x-range, then a vectorised y test).
- ``B(s)``, the kNN ball: centre ``(s.x, s.y)``, radius the distance to the k-th
  nearest *qualifying* sample object (``match any``: shares a keyword;
  ``match all``: carries every keyword).  Fewer than k qualify: the ball is
  unbounded and its rectangle is the whole space.  Rectangles are clipped to the
  space.  Vectorised over the sample per subscription.

Extensions beyond the paper (which covers kNN with OR semantics only):

- ``match all`` (CkQST-style kNN, and ``range`` with ``all``): Eq. (1) and
  Eq. (5) take the *minimum* over the keywords instead of the sum -- an AND
  subscription can only be touched by objects carrying its rarest keyword (an
  inverted file indexes it under that one), so its expected work is
  ``min P(lambda)`` (an upper bound of the probability that an object carries all
  of them).  ``any`` keeps the paper's sum.
- ``range``: its region R(s) is its rectangle (clipped to the space) -- the
  exact set of places where an object can touch it; its location (for the
  quadtree) is the centre of that clipped rectangle.  Eq. (1) as for kNN
  (keyword-only cost, ``any``/``all`` as above).
- ``topk``: keywords with OR semantics (an object qualifies when it shares a
  keyword), so Eq. (1)/(5) are the paper's sums.  Its region is the ball that can
  still change its current top-k, estimated on the sample: with ``kScore`` the
  k-th best score among qualifying sample objects, an object can enter only if
  ``alpha*SSim + (1-alpha)*1 >= kScore`` (TSim <= 1), i.e. within distance
  ``MaxDist*(1 - (kScore-(1-alpha))/alpha)``; unbounded when ``alpha == 0``,
  fewer than k qualify, or ``kScore <= 1-alpha``.

Choices where the paper is silent or ambiguous (also in the report):

- A cost floor: a subscription whose estimate is 0 (e.g. keywords absent from
  O_init) costs ``min_cost`` (default ``1/(|O_init|+1)``, "as if one more object
  carried it"), so greedy assignment spreads such subscriptions instead of piling
  them all on one worker.  ``min_cost=0`` gives the paper's formulas unchanged.
- Subspaces/subsets are counted only when they hold subscriptions (empty quadrants
  are dropped); a quadrant split whose subscriptions all fall in one quadrant is
  repeated on that quadrant until they separate.  A subset that cannot be split
  (one subscription; all at the same point for a space split) is final, so the
  loops stop early when theta*m (gamma1*m) subsets are unreachable.
- Algorithm 2: the text of 4.2 is garbled ("if |S'| <= gamma2, DkM-SKS tests both
  SPACE-ONLY-PARTITION. DkM-SKS then selects the result of SPACE-ONLY-PARTITION");
  lines 10-17 and the definition of a better partition are followed: both are
  computed and SPACE-ONLY is taken when ``C_s < C_h``, otherwise HYBRID (so a tie
  goes to HYBRID).  A subset whose locations coincide cannot be space-split and is
  hybrid-partitioned whatever its size.
  HYBRID-PARTITION's greedy uses Eq. (5) with the parent's rectangle R; each part's
  cost is Eq. (6) with the part's own rectangle.  Hybrid parts keep the parent's
  space r (for later space-only splits).
- When ``gamma1*m >= |S|`` (always with the paper's gamma1 = 100,000 at our
  scales) Algorithm 2 ends only when every subset is a single subscription, so the
  result is computed directly: each subscription is its own subset with its own
  rectangle, and Algorithm 3 is LPT over the Eq. (5) costs.
- Eq. (7): when no subset rectangle overlaps R_n with positive area (R_n may be a
  point or a segment), the subset rectangle nearest to the subscription's
  location is used.  A new subscription only gets a cost from R*; it goes to the
  least-loaded worker, as the paper says.
- SOP's new-subscription rule is the paper's (Eq. (2), least-loaded worker), even
  though the paper notes it loses locality.
"""

from __future__ import annotations

import heapq
import math
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..io.events import RANGE, TOPK, Sub
from .common import AssignedPlan, lpt
from .stats import Statistics

#: System parameters from DkM-SKS section 5.1 ("theta = 20, gamma1 = 100,000, gamma2 = 20").
PAPER_THETA = 20
PAPER_GAMMA1 = 100_000
PAPER_GAMMA2 = 20

_MAX_SPLIT_DEPTH = 200  # halvings of a quadrant before points are treated as inseparable
_GATHER_CHUNK = 1 << 20  # candidate (rectangle, object) pairs examined at once


def _check_m(m: Any) -> int:
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"m must be an integer >= 1, got {m!r}")
    return int(m)


def _floor(stats: Statistics, min_cost: float | None) -> float:
    if min_cost is None:
        return 1.0 / (stats.n + 1)
    if not (isinstance(min_cost, (int, float)) and math.isfinite(min_cost) and min_cost >= 0):
        raise ValueError(f"min_cost must be a finite number >= 0, got {min_cost!r}")
    return float(min_cost)


def hash_worker(sub_id: Any, m: int) -> int:
    """DSkype Eq. (14), ``h(s) = s.id mod N_sb``, with a stable hash of the id
    (CRC-32 of its ``repr``: the same in every process, unlike Python's ``hash``)."""
    return zlib.crc32(repr(sub_id).encode("utf-8")) % m


# ---------------------------------------------------------------------------
# The sample of O_init, indexed for kNN balls and rectangle counts
# ---------------------------------------------------------------------------


class SampleIndex:
    """NumPy index over ``stats``' sample of O_init.

    - postings per keyword (object ids ascending, with their coordinates) for kNN
      balls among qualifying objects;
    - incidences (keyword, object) sorted by keyword then x, plus a pseudo-keyword
      "every object", for exact counts of objects in a closed rectangle
      (Eqs. (2) and (4)).
    """

    def __init__(self, stats: Statistics) -> None:
        self.space = stats.space
        self.maxdist = stats.space.maxdist
        n = min(len(stats.sample_x), len(stats.sample_y), len(stats.sample_kw))
        self.n = n
        self.x = np.asarray(stats.sample_x[:n], dtype=np.float64)
        self.y = np.asarray(stats.sample_y[:n], dtype=np.float64)
        vocab: dict[str, int] = {}
        inc_obj: list[int] = []
        inc_kw: list[int] = []
        nkw = np.zeros(n, dtype=np.float64)
        for i, kws in enumerate(stats.sample_kw[:n]):
            distinct = dict.fromkeys(kws)
            nkw[i] = len(distinct)
            for w in distinct:
                inc_obj.append(i)
                inc_kw.append(vocab.setdefault(w, len(vocab)))
        self.vocab = vocab
        K = len(vocab)
        self.K = K
        self.ALL = K  # pseudo-keyword carried by every object
        with np.errstate(divide="ignore"):
            self.inv_sqrt_nkw = np.where(nkw > 0, 1.0 / np.sqrt(np.maximum(nkw, 1.0)), 0.0)
        obj = np.asarray(inc_obj, dtype=np.int64)
        kw = np.asarray(inc_kw, dtype=np.int64)
        # postings: by keyword, then object id
        order = np.lexsort((obj, kw))
        self.post_obj = obj[order]
        self.post_x = self.x[self.post_obj]
        self.post_y = self.y[self.post_obj]
        self.post_ptr = np.zeros(K + 1, dtype=np.int64)
        np.cumsum(np.bincount(kw, minlength=K), out=self.post_ptr[1:])
        # counting structure: keyword (ALL appended), then x rank
        self.ux = np.unique(self.x)
        U1 = len(self.ux) + 1
        self._U1 = U1
        xr = np.searchsorted(self.ux, self.x)
        ckw = np.concatenate([kw, np.full(n, K, dtype=np.int64)])
        cobj = np.concatenate([obj, np.arange(n, dtype=np.int64)])
        keys = ckw * U1 + xr[cobj]
        order = np.argsort(keys, kind="stable")
        self.c_keys = keys[order]
        self.c_y = self.y[cobj[order]]
        ptr = np.zeros(K + 2, dtype=np.int64)
        np.cumsum(np.bincount(ckw, minlength=K + 1), out=ptr[1:])
        nonempty = ptr[1:] > ptr[:-1]
        self.kw_ymin = np.full(K + 1, np.inf)
        self.kw_ymax = np.full(K + 1, -np.inf)
        if len(self.c_y):
            starts = ptr[:-1][nonempty]
            self.kw_ymin[nonempty] = np.minimum.reduceat(self.c_y, starts)
            self.kw_ymax[nonempty] = np.maximum.reduceat(self.c_y, starts)

    # -- keyword ids -------------------------------------------------------

    def kw_id(self, word: str) -> int:
        """Keyword id, -1 when no sample object carries it."""
        return self.vocab.get(word, -1)

    def _posting(self, kid: int) -> tuple[int, int]:
        return int(self.post_ptr[kid]), int(self.post_ptr[kid + 1])

    # -- Eqs. (2) and (4): objects of O_init in a rectangle ----------------

    def count_in(self, kw: np.ndarray, rects: np.ndarray) -> np.ndarray:
        """Sample objects carrying keyword ``kw[i]`` (``self.ALL``: any object; -1:
        none) inside the closed rectangle ``rects[i] = (x1, y1, x2, y2)``."""
        kw = np.asarray(kw, dtype=np.int64)
        rects = np.asarray(rects, dtype=np.float64).reshape(-1, 4)
        Q = len(kw)
        out = np.zeros(Q, dtype=np.int64)
        if Q == 0 or self.n == 0:
            return out
        valid = kw >= 0
        kwv = np.where(valid, kw, 0)
        x1, y1, x2, y2 = rects[:, 0], rects[:, 1], rects[:, 2], rects[:, 3]
        r1 = np.searchsorted(self.ux, x1, side="left")
        r2 = np.searchsorted(self.ux, x2, side="right")
        base = kwv * self._U1
        a = np.searchsorted(self.c_keys, base + r1, side="left")
        b = np.searchsorted(self.c_keys, base + np.maximum(r1, r2), side="left")
        lens = np.where(valid & (y1 <= y2), b - a, 0)
        full = (y1 <= self.kw_ymin[kwv]) & (y2 >= self.kw_ymax[kwv])
        out[full] = lens[full]
        rest = np.flatnonzero(~full & (lens > 0))
        if len(rest) == 0:
            return out
        # gather the x-range slices of the remaining queries and test y, in chunks
        rl = lens[rest]
        cum = np.cumsum(rl)
        start = 0
        while start < len(rest):
            limit = (cum[start - 1] if start else 0) + _GATHER_CHUNK
            stop = max(start + 1, int(np.searchsorted(cum, limit, side="right")))
            q = rest[start:stop]
            ql = lens[q]
            tot = int(ql.sum())
            qid = np.repeat(np.arange(len(q)), ql)
            first = np.cumsum(ql) - ql
            pos = np.arange(tot, dtype=np.int64) - np.repeat(first - a[q], ql)
            ys = self.c_y[pos]
            ok = (ys >= y1[q][qid]) & (ys <= y2[q][qid])
            out[q] = np.bincount(qid[ok], minlength=len(q))
            start = stop
        return out

    def probability_in(self, rects: np.ndarray) -> np.ndarray:
        """Eq. (2): P(R) = |O_R| / |O_init| for each rectangle."""
        rects = np.asarray(rects, dtype=np.float64).reshape(-1, 4)
        if self.n == 0:
            return np.zeros(len(rects))
        return self.count_in(np.full(len(rects), self.ALL, dtype=np.int64), rects) / self.n

    # -- B(s): the kNN ball among O_init ------------------------------------

    def knn_radius(self, x: float, y: float, k: int, kids: Sequence[int], match_all: bool) -> float:
        """Distance from ``(x, y)`` to the k-th nearest sample object that carries
        any (``match_all``: every) keyword of ``kids``; ``inf`` if fewer than k do."""
        if k < 1:
            return math.inf
        if match_all:
            if not kids or any(kid < 0 for kid in kids):
                return math.inf
            spans = sorted((self._posting(kid) for kid in dict.fromkeys(kids)), key=lambda ab: ab[1] - ab[0])
            a, b = spans[0]
            cand = self.post_obj[a:b]
            for a2, b2 in spans[1:]:
                if len(cand) < k:
                    return math.inf
                other = self.post_obj[a2:b2]
                pos = np.minimum(np.searchsorted(other, cand), len(other) - 1)
                cand = cand[other[pos] == cand]
            if len(cand) < k:
                return math.inf
            d2 = (self.x[cand] - x) ** 2 + (self.y[cand] - y) ** 2
            return math.sqrt(float(np.partition(d2, k - 1)[k - 1]))
        known = [kid for kid in dict.fromkeys(kids) if kid >= 0]
        if not known:
            return math.inf
        if len(known) == 1:
            a, b = self._posting(known[0])
            if b - a < k:
                return math.inf
            d2 = (self.post_x[a:b] - x) ** 2 + (self.post_y[a:b] - y) ** 2
            return math.sqrt(float(np.partition(d2, k - 1)[k - 1]))
        spans = [self._posting(kid) for kid in known]
        if sum(b - a for a, b in spans) < k:
            return math.inf
        px, py = self.post_x, self.post_y
        d2 = np.concatenate([(px[a:b] - x) ** 2 + (py[a:b] - y) ** 2 for a, b in spans])
        objs = np.concatenate([self.post_obj[a:b] for a, b in spans])
        # an object appears at most len(known) times: the k nearest distinct objects
        # are among the k*len(known) nearest (object, keyword) pairs
        t = min(len(d2), k * len(known))
        if t < len(d2):
            near = np.argpartition(d2, t - 1)[:t]
            pairs = sorted(zip(d2[near].tolist(), objs[near].tolist()))
        else:
            pairs = sorted(zip(d2.tolist(), objs.tolist()))
        seen: set[int] = set()
        for d, o in pairs:
            if o not in seen:
                seen.add(o)
                if len(seen) == k:
                    return math.sqrt(d)
        return math.inf

    def topk_radius(self, sub: Sub, kids: Sequence[int]) -> float:
        """Radius around ``(sub.x, sub.y)`` outside which no object can enter the
        top-k (the k-th best score among qualifying sample objects, TSim <= 1)."""
        alpha, k = float(sub.alpha), int(sub.k)
        if alpha <= 0.0 or k < 1:
            return math.inf
        weights = sub.weights if sub.weights is not None else (1.0,) * len(sub.keywords)
        # the subscription's vector over all its (distinct) keywords, unit length
        norm = math.sqrt(math.fsum(float(w) * float(w) for w in weights)) or 1.0
        known = [(kid, float(w) / norm) for kid, w in zip(kids, weights) if kid >= 0]
        if not known:
            return math.inf
        spans = [self._posting(kid) for kid, _ in known]
        lens = [b - a for a, b in spans]
        if sum(lens) < k:
            return math.inf
        if len(spans) == 1:  # one keyword: every object once
            a, b = spans[0]
            uniq = self.post_obj[a:b]
            tsim = known[0][1] * self.inv_sqrt_nkw[uniq]
            d = np.hypot(self.post_x[a:b] - sub.x, self.post_y[a:b] - sub.y)
        else:  # objects carrying several of the keywords: sum their weights (TSim)
            objs = np.concatenate([self.post_obj[a:b] for a, b in spans])
            wts = np.repeat(np.array([w for _, w in known]), lens)
            uniq, inv = np.unique(objs, return_inverse=True)
            if len(uniq) < k:
                return math.inf
            tsim = np.bincount(inv, weights=wts, minlength=len(uniq)) * self.inv_sqrt_nkw[uniq]
            d = np.hypot(self.x[uniq] - sub.x, self.y[uniq] - sub.y)
        ssim = np.maximum(0.0, 1.0 - d / self.maxdist)
        score = alpha * ssim + (1.0 - alpha) * tsim
        kscore = float(np.partition(score, len(score) - k)[len(score) - k])
        smin = (kscore - (1.0 - alpha)) / alpha
        if smin <= 0.0:
            return math.inf
        return self.maxdist * max(0.0, 1.0 - smin)

    # -- regions of subscriptions --------------------------------------------

    def regions(self, subs: Sequence[Sub]) -> "Regions":
        """Location, keyword ids and region rectangle R(s) of each subscription."""
        N = len(subs)
        sp = self.space
        px = np.empty(N)
        py = np.empty(N)
        rect = np.empty((N, 4))
        radius = np.full(N, np.nan)
        kw_ptr = np.zeros(N + 1, dtype=np.int64)
        kw_ids: list[int] = []
        any_mode = np.empty(N, dtype=bool)
        vget = self.vocab.get
        for i, s in enumerate(subs):
            kids = [vget(w, -1) for w in s.keywords]
            kw_ids.extend(kids)
            kw_ptr[i + 1] = len(kw_ids)
            any_mode[i] = s.kind == TOPK or not s.match_all
            if s.kind == RANGE:
                x1, y1, x2, y2 = s.rect  # type: ignore[misc]
                rect[i] = (x1, y1, x2, y2)
                # location: the centre of the part inside the space
                px[i] = (max(x1, sp.x1) + min(x2, sp.x2)) / 2.0
                py[i] = (max(y1, sp.y1) + min(y2, sp.y2)) / 2.0
                continue
            r = self.topk_radius(s, kids) if s.kind == TOPK else self.knn_radius(s.x, s.y, s.k, kids, s.match_all)
            radius[i] = r
            px[i], py[i] = s.x, s.y
            rect[i] = (s.x - r, s.y - r, s.x + r, s.y + r)
        rect = _clip(rect, sp)
        np.clip(px, sp.x1, sp.x2, out=px)
        np.clip(py, sp.y1, sp.y2, out=py)
        return Regions(px, py, rect, radius, kw_ptr, np.asarray(kw_ids, dtype=np.int64), any_mode)


def _clip(rect: np.ndarray, sp: Any) -> np.ndarray:
    rect = np.array(rect, dtype=np.float64).reshape(-1, 4)
    rect[:, 0] = np.maximum(rect[:, 0], sp.x1)
    rect[:, 1] = np.maximum(rect[:, 1], sp.y1)
    rect[:, 2] = np.minimum(rect[:, 2], sp.x2)
    rect[:, 3] = np.minimum(rect[:, 3], sp.y2)
    return rect


class Regions:
    """Per-subscription arrays: location, region rectangle R(s), keyword ids (CSR)."""

    def __init__(self, px: np.ndarray, py: np.ndarray, rect: np.ndarray, radius: np.ndarray,
                 kw_ptr: np.ndarray, kw_ids: np.ndarray, any_mode: np.ndarray) -> None:
        self.px, self.py, self.rect, self.radius = px, py, rect, radius
        self.kw_ptr, self.kw_ids, self.any_mode = kw_ptr, kw_ids, any_mode

    def __len__(self) -> int:
        return len(self.px)

    def bbox(self, idx: np.ndarray) -> np.ndarray:
        """The rectangle R enclosing the regions of the subscriptions ``idx``."""
        r = self.rect[idx]
        return np.array([r[:, 0].min(), r[:, 1].min(), r[:, 2].max(), r[:, 3].max()])


def _eq5(index: SampleIndex, reg: Regions, idx: np.ndarray, rects: np.ndarray, floor: float) -> np.ndarray:
    """Eq. (5) for subscriptions ``idx`` each against its rectangle ``rects[j]``:
    ``C(s) = sum_{lambda in s} P(R, lambda)`` with Eq. (4) (``all``: the minimum)."""
    idx = np.asarray(idx, dtype=np.int64)
    if len(idx) == 0:
        return np.zeros(0)
    lo, hi = reg.kw_ptr[idx], reg.kw_ptr[idx + 1]
    lens = hi - lo
    pair_sub = np.repeat(np.arange(len(idx)), lens)
    first = np.cumsum(lens) - lens
    pos = np.arange(int(lens.sum()), dtype=np.int64) - np.repeat(first - lo, lens)
    pkw = reg.kw_ids[pos]
    counts = index.count_in(pkw, np.asarray(rects).reshape(-1, 4)[pair_sub]).astype(np.float64)
    p = counts / index.n if index.n else counts * 0.0
    sums = np.add.reduceat(p, first)
    mins = np.minimum.reduceat(p, first)
    cost = np.where(reg.any_mode[idx], sums, mins)
    return np.maximum(cost, floor)


# ---------------------------------------------------------------------------
# hash: DSkype Eq. (14)
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# kop: keyword-oriented partition, Eq. (1) + Algorithm 1
# ---------------------------------------------------------------------------


def eq1_cost(sub: Sub, stats: Statistics, min_cost: float = 0.0) -> float:
    """DkM-SKS Eq. (1): ``C(s) = sum_{lambda in s.psi} P(lambda)``, ``P(lambda) =
    |O_lambda| / |O_init|``; for ``match all`` (kNN/range) the minimum instead of
    the sum (see the module docstring); at least ``min_cost``."""
    ps = [stats.probability(w) for w in sub.keywords]
    if not ps:
        return float(min_cost)
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


# ---------------------------------------------------------------------------
# quadtree splitting shared by sop and dkm
# ---------------------------------------------------------------------------


def _quad_split(reg: Regions, idx: np.ndarray, r: tuple[float, float, float, float]
                ) -> list[tuple[np.ndarray, tuple[float, float, float, float]]] | None:
    """Split space ``r`` into four equal quadrants and ``idx`` by location; repeat on
    the only non-empty quadrant until at least two hold subscriptions.  ``None``
    when the locations coincide (they cannot be separated)."""
    px, py = reg.px[idx], reg.py[idx]
    if len(idx) < 2 or (px.min() == px.max() and py.min() == py.max()):
        return None
    for _ in range(_MAX_SPLIT_DEPTH):
        x1, y1, x2, y2 = r
        mx, my = (x1 + x2) / 2.0, (y1 + y2) / 2.0
        q = (px > mx).astype(np.int8) + 2 * (py > my).astype(np.int8)
        quads = [(x1, y1, mx, my), (mx, y1, x2, my), (x1, my, mx, y2), (mx, my, x2, y2)]
        parts = [(idx[q == j], quads[j], q == j) for j in range(4)]
        parts = [p for p in parts if len(p[0])]
        if len(parts) >= 2:
            return [(p[0], p[1]) for p in parts]
        idx, r, keep = parts[0]
        px, py = px[keep], py[keep]
    return None


# ---------------------------------------------------------------------------
# sop: space-oriented partition, Eqs. (2)-(3)
# ---------------------------------------------------------------------------


def plan_sop(subs: Sequence[Sub], stats: Statistics, m: int, *, theta: float = PAPER_THETA,
             min_cost: float | None = None) -> AssignedPlan:
    """Space-oriented partition (DkM-SKS 3.2): quadtree subspaces split largest
    ``C(S_r)`` first until at least ``theta*m`` non-empty subsets (Eq. (3) with
    Eq. (2)), then the greedy of Algorithm 1 over the subsets."""
    m = _check_m(m)
    if not (isinstance(theta, (int, float)) and theta > 0 and math.isfinite(theta)):
        raise ValueError(f"theta must be a finite number > 0, got {theta!r}")
    floor = _floor(stats, min_cost)
    index = SampleIndex(stats)
    reg = index.regions(subs)
    ids = [s.id for s in subs]
    sp = stats.space

    def make(idx: np.ndarray, r: tuple) -> dict:
        R = reg.bbox(idx)
        return {"idx": idx, "r": r, "R": R}

    def cost_of(nodes: list[dict]) -> None:
        # Eq. (3): C(S_r) = P(R) * |S_r|, P(R) by Eq. (2); per subscription P(R) (>= floor)
        p = index.probability_in(np.array([nd["R"] for nd in nodes]))
        for nd, pr in zip(nodes, p):
            nd["p"] = max(float(pr), floor)
            nd["cost"] = nd["p"] * len(nd["idx"])

    target = theta * m
    heap: list = []
    final: list[dict] = []
    counter = 0
    if len(subs):
        root = make(np.arange(len(subs)), (sp.x1, sp.y1, sp.x2, sp.y2))
        cost_of([root])
        heap.append((-root["cost"], counter, root))
    while heap and len(heap) + len(final) < target:
        _, _, nd = heapq.heappop(heap)  # the subspace with the largest C(S_r)
        parts = _quad_split(reg, nd["idx"], nd["r"])
        if parts is None:
            final.append(nd)
            continue
        kids = [make(ci, cr) for ci, cr in parts]
        cost_of(kids)
        for ch in kids:
            counter += 1
            heapq.heappush(heap, (-ch["cost"], counter, ch))
    nodes = final + [nd for _, _, nd in heap]
    # Algorithm 1 over the subsets S_r ("the input of the greedy algorithm is a collection of subsets")
    where, _ = lpt(((j, nd["cost"]) for j, nd in enumerate(nodes)), m)
    assignment: dict = {}
    costs: dict = {}
    for j, nd in enumerate(nodes):
        w = where[j]
        nd["worker"] = w
        for i in nd["idx"].tolist():
            assignment[ids[i]] = (w,)
            costs[ids[i]] = nd["p"]

    def new_rule(sub: Sub, plan: AssignedPlan) -> tuple[tuple[int, ...], float]:
        # its kNN among O_init gives B(s) and its rectangle R; Eq. (3) with S_r = {s} is Eq. (2)
        R = index.regions([sub]).rect
        p = max(float(index.probability_in(R)[0]), floor)
        return (plan.least_loaded(),), p

    info = {"cost_model": "DkM-SKS Eqs. (2)-(3)", "theta": theta, "min_cost": floor,
            "subsets": [{"r": list(map(float, nd["r"])), "R": nd["R"].tolist(), "size": int(len(nd["idx"])),
                         "cost": nd["cost"], "worker": nd["worker"]} for nd in nodes],
            "total_cost": math.fsum(nd["cost"] for nd in nodes)}
    plan = AssignedPlan(m, "sop", assignment, costs, new_rule, info=info)
    plan.groups = [tuple(ids[i] for i in nd["idx"].tolist()) for nd in nodes]  # type: ignore[attr-defined]
    return plan


# ---------------------------------------------------------------------------
# dkm: DkM-SKS, Eqs. (4)-(7), Algorithms 2-3
# ---------------------------------------------------------------------------


def plan_dkm(subs: Sequence[Sub], stats: Statistics, m: int, *, gamma1: float = PAPER_GAMMA1,
             gamma2: int = PAPER_GAMMA2, min_cost: float | None = None) -> AssignedPlan:
    """DkM-SKS (section 4): Algorithm 2 partitions S into at least ``gamma1*m``
    subsets (space-only partition when ``|S'| > gamma2``, else the cheaper of
    space-only and hybrid by Eq. (6)); Algorithm 3 assigns the subsets, heaviest
    first, each subscription (heaviest first) to the least-loaded worker."""
    m = _check_m(m)
    if not (isinstance(gamma1, (int, float)) and gamma1 > 0 and math.isfinite(gamma1)):
        raise ValueError(f"gamma1 must be a finite number > 0, got {gamma1!r}")
    if isinstance(gamma2, bool) or not isinstance(gamma2, (int, np.integer)) or gamma2 < 0:
        raise ValueError(f"gamma2 must be an integer >= 0, got {gamma2!r}")
    floor = _floor(stats, min_cost)
    index = SampleIndex(stats)
    reg = index.regions(subs)
    ids = [s.id for s in subs]
    N = len(subs)
    sp = stats.space
    target = gamma1 * m
    n_space = n_hybrid = 0

    if N and target >= N:
        # Algorithm 2 ends only when every subset is one subscription: each is its own
        # subset with its own rectangle; Eq. (5) = Eq. (6) per subset.
        sub_cost = _eq5(index, reg, np.arange(N), reg.rect, floor)
        subset_rect = reg.rect
        subset_cost = sub_cost
        # Algorithm 3 over singletons, heaviest first = LPT over the costs
        where, _ = lpt(zip(range(N), sub_cost.tolist()), m)
        worker_of = [where[i] for i in range(N)]
        subsets_info = None
        n_subsets = N
        singletons = True
        groups = [(sid,) for sid in ids]
    else:
        singletons = False
        counter = 0

        def node(idx: np.ndarray, r: tuple, cost: np.ndarray, R: np.ndarray) -> dict:
            nonlocal counter
            counter += 1
            return {"idx": idx, "r": r, "R": R, "c": cost, "cost": float(cost.sum()), "seq": counter}

        def with_costs(parts: list[tuple[np.ndarray, tuple]]) -> list[dict]:
            # Eq. (6) for each group: C(S_r) = sum Eq. (5) against the group's rectangle R
            Rs = [reg.bbox(g) for g, _ in parts]
            allidx = np.concatenate([g for g, _ in parts])
            rects = np.concatenate([np.broadcast_to(R, (len(g), 4)) for R, (g, _) in zip(Rs, parts)])
            c = _eq5(index, reg, allidx, rects, floor)
            out, at = [], 0
            for R, (g, r) in zip(Rs, parts):
                out.append(node(g, r, c[at:at + len(g)], R))
                at += len(g)
            return out

        def hybrid(nd: dict) -> list[tuple[np.ndarray, tuple]]:
            # HYBRID-PARTITION: greedy over Eq. (5) (w.r.t. the parent's R) into four subsets
            g, _ = lpt(enumerate(nd["c"].tolist()), 4)
            parts = [[] for _ in range(4)]
            for pos in range(len(nd["idx"])):
                parts[g[pos]].append(pos)
            return [(nd["idx"][np.asarray(p, dtype=np.int64)], nd["r"]) for p in parts if p]

        heap: list = []
        final: list[dict] = []
        if N:
            idx0 = np.arange(N)
            R0 = reg.bbox(idx0)
            root = node(idx0, (sp.x1, sp.y1, sp.x2, sp.y2), _eq5(index, reg, idx0, np.broadcast_to(R0, (N, 4)), floor), R0)
            heap.append((-0.0, root["seq"], root))  # Algorithm 2 line 1: S <- <S, 0>
        while heap and len(heap) + len(final) < target:  # line 2
            _, _, nd = heapq.heappop(heap)  # lines 3-4: the front (largest C(S'))
            if len(nd["idx"]) < 2:
                final.append(nd)  # a single subscription cannot be split
                continue
            sparts = _quad_split(reg, nd["idx"], nd["r"])
            if sparts is not None and len(nd["idx"]) > gamma2:  # lines 5-8
                kids = with_costs(sparts)
                n_space += 1
            else:  # lines 9-17: test both; SPACE-ONLY if C_s < C_h, else HYBRID
                hparts = hybrid(nd)
                both = with_costs((sparts or []) + hparts)
                skids, hkids = both[:len(sparts or [])], both[len(sparts or []):]
                c_s = sum(k["cost"] for k in skids) if sparts is not None else math.inf
                c_h = sum(k["cost"] for k in hkids)
                if c_s < c_h:
                    kids = skids
                    n_space += 1
                else:
                    kids = hkids
                    n_hybrid += 1
            for ch in kids:
                heapq.heappush(heap, (-ch["cost"], ch["seq"], ch))
        # line 18: sort S in descending order of C(S') (ties: order of creation)
        nodes = sorted(final + [nd for _, _, nd in heap], key=lambda nd: (-nd["cost"], nd["seq"]))
        # Algorithm 3: for each subset (heaviest first), its subscriptions heaviest first, to argmin C(w)
        loads = [0.0] * m
        worker_of = [0] * N
        sub_cost = np.zeros(N)
        for nd in nodes:
            pos_where, loads = lpt(enumerate(nd["c"].tolist()), m, loads)
            for pos, i in enumerate(nd["idx"].tolist()):
                worker_of[i] = pos_where[pos]
                sub_cost[i] = nd["c"][pos]
        subset_rect = np.array([nd["R"] for nd in nodes]).reshape(-1, 4)
        subset_cost = np.array([nd["cost"] for nd in nodes])
        n_subsets = len(nodes)
        groups = [tuple(ids[i] for i in nd["idx"].tolist()) for nd in nodes]
        subsets_info = [{"r": list(map(float, nd["r"])), "R": nd["R"].tolist(), "size": int(len(nd["idx"])),
                         "cost": nd["cost"]} for nd in nodes]

    assignment = {ids[i]: (worker_of[i],) for i in range(N)}
    costs = {ids[i]: float(sub_cost[i]) for i in range(N)}

    cols = np.ascontiguousarray(subset_rect.T)

    def new_rule(sub: Sub, plan: AssignedPlan) -> tuple[tuple[int, ...], float]:
        # B(s_n) among O_init gives R_n; Eq. (7) picks R*, the subset rectangle overlapping R_n most
        one = index.regions([sub])
        Rn = one.rect[0]
        j = _most_overlap_cols(cols, Rn, (float(one.px[0]), float(one.py[0])))
        Rstar = subset_rect[j] if j is not None else Rn
        c = float(_eq5(index, one, np.array([0]), Rstar.reshape(1, 4), floor)[0])  # Eq. (5) with R*
        return (plan.least_loaded(),), c

    info: dict = {"cost_model": "DkM-SKS Eqs. (4)-(6)", "gamma1": gamma1, "gamma2": gamma2, "min_cost": floor,
                  "n_subsets": n_subsets, "singleton_subsets": singletons,
                  "space_only_splits": n_space, "hybrid_splits": n_hybrid,
                  "total_cost": float(math.fsum(subset_cost.tolist()))}
    if subsets_info is not None and len(subsets_info) <= 10_000:
        info["subsets"] = subsets_info
    plan = AssignedPlan(m, "dkm", assignment, costs, new_rule, info=info)
    # the subsets of Algorithm 2 (subscription ids), in the order Algorithm 3 visits them
    plan.groups = groups  # type: ignore[attr-defined]
    return plan


def most_overlap(rects: np.ndarray, Rn: np.ndarray, point: tuple[float, float]) -> int | None:
    """Eq. (7): index of the rectangle with the largest overlap area with ``Rn``
    (first on ties); if none overlaps with positive area, the rectangle nearest to
    ``point`` (containing it, if any).  ``None`` when there are no rectangles."""
    rects = np.asarray(rects, dtype=np.float64).reshape(-1, 4)
    return _most_overlap_cols(np.ascontiguousarray(rects.T), Rn, point)


def _most_overlap_cols(cols: np.ndarray, Rn: np.ndarray, point: tuple[float, float]) -> int | None:
    """:func:`most_overlap` over the rectangles as four contiguous columns (4, n)."""
    if cols.shape[1] == 0:
        return None
    x1, y1, x2, y2 = cols
    w = np.minimum(x2, Rn[2]) - np.maximum(x1, Rn[0])
    h = np.minimum(y2, Rn[3]) - np.maximum(y1, Rn[1])
    area = np.maximum(w, 0.0) * np.maximum(h, 0.0)
    j = int(np.argmax(area))
    if area[j] > 0.0:
        return j
    x, y = point
    dx = np.maximum(np.maximum(x1 - x, x - x2), 0.0)
    dy = np.maximum(np.maximum(y1 - y, y - y2), 0.0)
    return int(np.argmin(dx * dx + dy * dy))


PLANNERS = {"hash": plan_hash, "kop": plan_kop, "sop": plan_sop, "dkm": plan_dkm}
