"""PS2Stream's hybrid space/text partitioning: the ``ps2`` planner.

Paper: Chen, Cong, Zhang, Fu, Chen, "Distributed Publish/Subscribe Query
Processing on the Spatio-Textual Data Stream" (PS2Stream), section IV.

``plan_ps2(subs, stats, m, **params) -> PS2Plan`` builds the kd^t-tree of
Algorithm 1 over the O_init :class:`~skpubsub.partition.stats.Statistics` and the
subscriptions, divides its leaves among the ``m`` workers, and places every
subscription on each worker owning a leaf it reaches.  New subscriptions are
placed by the grid^t index (IV-C) built from the leaves.

The cost model (Definition 1)
-----------------------------
The load of a worker ``w_i`` is

    L_i = c1 * |O_i| * |Q_i| + c2 * |O_i| + c3 * |Q_i^i| + c4 * |Q_i^d|        (Def. 1)

with ``O_i`` the objects sent to ``w_i`` and ``Q_i`` the subscriptions it holds.
It is evaluated on the O_init sample (``stats.sample_*``; every sample object
stands for ``stats.n / sample`` objects of the period):

- objects sent to a leaf unit: those inside its region (a kd leaf is the
  half-open box ``[x1, x2) x [y1, y2)``, closed on the space's upper edges)
  that carry a keyword some subscription of the unit is posted under -- the
  dispatcher drops an object with no term in H2 (IV-C);
- subscriptions of a leaf unit: those whose (clipped) rectangle meets its
  region and, for a text unit, that are posted under one of its keywords;
- ``|Q_i^i| = |Q_i^d| = |Q_i|``: every subscription is inserted once and deleted
  once (the paper's workload, VI-A: insertions and deletions arrive at the same
  rate); so the per-subscription update cost is ``c3 + c4``.

The load of a *unit* (a kd^t leaf, or one keyword group of a text-partitioned
leaf) is Def. 1 with that unit alone; the load of a worker is Def. 1 over the
*union* of its units' objects and subscriptions (a subscription replicated in two
units of one worker is stored once; an object is received once).
``plan.loads()`` starts as exactly these worker loads (each subscription of
``w_i`` carries ``L_i / |Q_i|``), so it sums to ``describe()["total_cost"]``.

Posting (which keyword a subscription is filed under; the paper's GI^2 and
H1/H2 rule, IV-C/IV-D): ``match all`` -> its least frequent keyword in O_init
(ties by the keyword), ``match any`` -> every keyword.  In a text-partitioned
leaf a range ``any`` subscription goes to the group of each of its keywords
(replicated), an ``all`` one to the group of its least frequent keyword.

Algorithm 1, as implemented
---------------------------
Phase 1 (lines 1-12).  ``sim_t(O_n, Q_n)`` is the cosine similarity of the
keyword-count vectors of the objects in ``n`` and of the subscriptions meeting
``n`` (all their keywords).  A node with ``sim_t >= delta`` goes to ``N_s``;
otherwise it is split at the median (of its objects' coordinates) on the axis
giving the smaller ``alpha = min(sim_t(n1), sim_t(n2))`` (line 8); if
``|alpha - sim_t(n)| <= epsilon`` (line 9, "approximately 0") it goes to ``N_t``,
else both halves go back to ``N_u``.

PartitionNode(n, p) (IV-B "Node partitioning").  Text partitioning of a leaf
into ``p`` groups: its posting keywords, weighted by Def. 1 restricted to one
keyword (``c1*|O_w|*|Q_w| + c2*|O_w| + (c3+c4)*|Q_w|``), are divided by LPT
(:func:`~skpubsub.partition.common.lpt`, the frequency-based text partitioning
of VI-B); a text group is split in two the same way.  Space partitioning into
``p`` parts: ``p - 1`` kd bisections, each of the part of largest load; a
bisection tries cut lines at the 25/37.5/50/62.5/75 % quantiles of the part's
object coordinates and of its subscriptions' centres on both axes (midway
between neighbouring distinct values) and keeps the one with the smallest sum of
the two halves' loads (ties: the more even one).  A node of ``N_t`` is
text-partitioned; a node of ``N_s`` takes whichever of the two gives the smaller
sum of loads.

ComputeNumberPartitions (lines 13-14).  When ``|N_t| + |N_s| < m``:
``C[i, k]`` is the sum of loads of node ``i`` in ``k`` parts (PartitionNode
without committing) and

    L[i, j] = min_{1 <= k <= j - i + 1} L[i-1, j-k] + C[i, k]                (DP)

``A[n]`` is read back from ``L[|N|, m]`` (:func:`partition_counts`).

MergeNodesIntoPartitions (line 18).  Units by load descending; each goes to the
worker whose Def. 1 load grows least (ties: the least-loaded, then the lowest
index) unless that raises ``L_max / L_min`` (``L_min = 0`` counts as an infinite
factor), in which case it goes to the least-loaded worker.

Lines 17-27.  While ``L_max / L_min > sigma`` the unit of largest load is
PartitionNode'd into 2 and the units are merged again, until ``theta`` units
exist.

grid^t (IV-C).  The cell boundaries are the leaves' edges (the granularity "is
decided by the leaf nodes"), so every cell lies in exactly one leaf; a cell of a
space leaf maps to the leaf's worker (the brief's H1), a cell of a text leaf to
its keyword -> worker map (H2).  A new subscription goes to the workers of the
cells its rectangle meets (range) or of the cell of its point (kNN, top-k),
looked up with its posting keywords; its cost is its Def. 1 increment
``c1*|O_w| + c3 + c4`` on each.

Choices where the paper is silent or does not fit (also in the report)
--------------------------------------------------------------------------
- Parameter values are not given by the paper: defaults ``delta = 0.5``,
  ``epsilon = 0.05``, ``sigma = 1.25``, ``theta = max(64, 16 m)`` units,
  ``c1 = c2 = c3 = c4 = 1``.  Phase 1 only splits a node holding at least
  ``min_objects`` (64) sample objects (a cosine over a handful of objects is
  noise) and stops at ``theta // 2`` nodes (the remaining undecided nodes go to
  ``N_t``: their similarity is below ``delta``).
- Units, not nodes: line 24's "node having the largest load" is read as the
  kd^t *leaf unit* of largest load (a keyword group of a text-partitioned leaf is
  split by text again; a space leaf of ``N_s`` by the cheaper of space and text;
  of ``N_t`` by text).  A unit that cannot be split (one keyword; no two
  distinct coordinates) is skipped.
- When ``sigma`` is never met before ``theta`` units, the paper returns the
  last tree; here the state (tree and merge) of smallest ``L_max`` seen is kept
  (further splits can only raise the total, and a broken ``theta`` loop leaves
  the newest leaves unassigned otherwise).
- Line 26 counts leaf units (``|N_t| + |N_s|`` after text groups are made).
- kNN and top-k subscriptions (not in the paper) are points: they belong to the
  one space leaf containing ``(x, y)`` and, in a text leaf, to the group of their
  least frequent keyword -- always exactly one worker (their results are not
  merged across replicas).  Their posting keywords are those the dispatcher
  uses (kNN ``all``: the least frequent; kNN ``any`` and top-k: all), so in the
  cost model an object carrying any of them is sent to their unit.
- Keywords a text leaf has not seen at planning time (new subscriptions) go to
  group ``crc32(keyword) mod groups`` of that leaf (stable across processes).
- A rectangle reaching outside the space is clipped to it (a rectangle wholly
  outside lands on the boundary leaves); points are clamped into the space.
- Without O_init objects all matching costs are 0 and only the update costs
  ``(c3 + c4) |Q|`` remain; without subscriptions the tree is the root alone.
- The runtime routes objects by keyword only (see
  :mod:`skpubsub.runtime.dispatcher`), not by the grid^t; the estimated loads
  are the paper's model of the paper's dispatcher, not a measurement of the
  runtime's messages.

Parameters a planner does not know are ignored, so a runtime may pass one set to
every planner.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.config import Space
from ..io.events import RANGE, TOPK, Sub
from .common import AssignedPlan, lpt
from .stats import Statistics

__all__ = ["PLANNERS", "PS2Plan", "GridT", "plan_ps2", "partition_counts", "cosine"]

DEFAULTS = {"delta": 0.5, "epsilon": 0.05, "sigma": 1.25, "c1": 1.0, "c2": 1.0, "c3": 1.0, "c4": 1.0,
            "min_objects": 64}
_FRACTIONS = (0.25, 0.375, 0.5, 0.625, 0.75)  # candidate cut lines of a space bisection (quantiles)
_TOP_KEYWORDS = 20  # keywords of a text group listed by describe()


# ---------------------------------------------------------------------------------------------
# small helpers


def _check_m(m: Any) -> int:
    if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
        raise ValueError(f"m (workers) must be an integer >= 1, got {m!r}")
    return int(m)


def _num(name: str, v: Any, lo: float, strict: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not math.isfinite(v) \
            or (v <= lo if strict else v < lo):
        raise ValueError(f"{name} must be a finite number {'>' if strict else '>='} {lo}, got {v!r}")
    return float(v)


def _rows(ptr: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CSR entries of rows ``idx``: (positions in the data arrays, local row 0..len(idx)-1 of each)."""
    starts = ptr[idx]
    lens = ptr[idx + 1] - starts
    tot = int(lens.sum())
    local = np.repeat(np.arange(len(idx), dtype=np.int64), lens)
    if tot == 0:
        return np.zeros(0, dtype=np.int64), local
    first = np.cumsum(lens) - lens
    pos = np.arange(tot, dtype=np.int64) + np.repeat(starts - first, lens)
    return pos, local


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two count vectors; 0 when either is zero (sim_t of Algorithm 1)."""
    na = math.sqrt(float(np.dot(a, a)))
    nb = math.sqrt(float(np.dot(b, b)))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(a, b)) / (na * nb)


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


# ---------------------------------------------------------------------------------------------
# the planning data: the O_init sample and the subscriptions as arrays


class _Data:
    def __init__(self, subs: Sequence[Sub], stats: Statistics, c1: float, c2: float, cq: float) -> None:
        sp = stats.space
        self.space = sp
        self.c1, self.c2, self.cq = c1, c2, cq
        freq = stats.keyword_freq
        self.freq = freq
        vocab: dict[str, int] = {}
        setdef = vocab.setdefault

        S = min(len(stats.sample_x), len(stats.sample_y), len(stats.sample_kw))
        self.S = S
        self.scale = stats.n / S if S else 0.0  # objects of the period per sample object
        self.ox = np.asarray(stats.sample_x[:S], dtype=np.float64)
        self.oy = np.asarray(stats.sample_y[:S], dtype=np.float64)
        o_len: list[int] = []
        o_kw: list[int] = []
        for kws in stats.sample_kw[:S]:
            ids = [setdef(w, len(vocab)) for w in dict.fromkeys(kws)]
            o_kw.extend(ids)
            o_len.append(len(ids))
        self.o_ptr = np.concatenate([[0], np.cumsum(o_len, dtype=np.int64)]).astype(np.int64)
        self.o_kw = np.asarray(o_kw, dtype=np.int64)

        N = len(subs)
        self.N = N
        rect = np.zeros((N, 4), dtype=np.float64)
        point = np.zeros(N, dtype=bool)
        t_len: list[int] = []
        p_len: list[int] = []
        t_kw: list[int] = []
        p_kw: list[int] = []
        p_home: list[int] = []
        p_first: list[bool] = []
        rects: list[tuple] = []
        fget = freq.get
        for s in subs:
            kws = tuple(dict.fromkeys(s.keywords))
            ids = [setdef(w, len(vocab)) for w in kws]
            t_kw.extend(ids)
            t_len.append(len(ids))
            if len(kws) == 1:
                p_kw.append(ids[0])
                p_home.append(ids[0])
                p_first.append(True)
                p_len.append(1)
            else:
                rare = vocab[min(kws, key=lambda w: (fget(w, 0), w))]
                if s.match_all and s.kind != TOPK:  # posted under its least frequent keyword
                    p_kw.append(rare)
                    p_home.append(rare)
                    p_first.append(True)
                    p_len.append(1)
                elif s.kind == RANGE:  # any: every keyword, each its own home
                    p_kw.extend(ids)
                    p_home.extend(ids)
                    p_first.extend([True] * len(ids))
                    p_len.append(len(ids))
                else:  # kNN any, top-k: every keyword, homed at the least frequent
                    p_kw.extend(ids)
                    p_home.extend([rare] * len(ids))
                    p_first.extend([True] + [False] * (len(ids) - 1))
                    p_len.append(len(ids))
            if s.kind == RANGE:
                rects.append(s.rect)  # type: ignore[arg-type]
            else:
                point_x, point_y = s.x, s.y
                rects.append((point_x, point_y, point_x, point_y))
                point[len(rects) - 1] = True
        if N:
            rect[:] = np.asarray(rects, dtype=np.float64)
            np.clip(rect[:, 0], sp.x1, sp.x2, out=rect[:, 0])
            np.clip(rect[:, 2], sp.x1, sp.x2, out=rect[:, 2])
            np.clip(rect[:, 1], sp.y1, sp.y2, out=rect[:, 1])
            np.clip(rect[:, 3], sp.y1, sp.y2, out=rect[:, 3])
        self.rect, self.point = rect, point
        self.t_ptr = np.concatenate([[0], np.cumsum(t_len, dtype=np.int64)]).astype(np.int64)
        self.p_ptr = np.concatenate([[0], np.cumsum(p_len, dtype=np.int64)]).astype(np.int64)
        self.t_kw = np.asarray(t_kw, dtype=np.int64)
        self.p_kw = np.asarray(p_kw, dtype=np.int64)
        self.p_home = np.asarray(p_home, dtype=np.int64)
        self.p_first = np.asarray(p_first, dtype=bool)
        self.vocab = vocab
        self.words = list(vocab)
        self.V = len(vocab)

    def load(self, n_obj: int, n_sub: int) -> float:
        """Def. 1 for one unit or worker: ``n_obj`` sample objects, ``n_sub`` subscriptions."""
        o = n_obj * self.scale
        return self.c1 * o * n_sub + self.c2 * o + self.cq * n_sub


def posting(sub: Sub, freq: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(posting keywords, home keywords aligned with them) of a subscription.

    Posting keywords are those an object must carry one of to be sent to it (the
    dispatcher's rule: ``all`` -> the least frequent keyword, otherwise all);
    the home keyword decides its group in a text-partitioned leaf (range ``any``:
    the keyword itself -> replicated over groups; otherwise the least frequent).
    """
    kws = tuple(dict.fromkeys(sub.keywords))
    rare = min(kws, key=lambda w: (freq.get(w, 0), w))
    if sub.match_all and sub.kind != TOPK:
        return (rare,), (rare,)
    if sub.kind == RANGE:
        return kws, kws
    return kws, (rare,) * len(kws)


def clip_rect(r: tuple[float, float, float, float], sp: Space) -> tuple[float, float, float, float]:
    x1 = min(max(r[0], sp.x1), sp.x2)
    y1 = min(max(r[1], sp.y1), sp.y2)
    x2 = min(max(r[2], sp.x1), sp.x2)
    y2 = min(max(r[3], sp.y1), sp.y2)
    return x1, y1, x2, y2


def clamp_point(x: float, y: float, sp: Space) -> tuple[float, float]:
    return min(max(x, sp.x1), sp.x2), min(max(y, sp.y1), sp.y2)


# ---------------------------------------------------------------------------------------------
# kd^t-tree leaves and units


class _Leaf:
    """A kd leaf: region, its sample objects and subscriptions, with their keyword incidences."""

    _next = 0

    def __init__(self, d: _Data, rect: tuple, oidx: np.ndarray, qidx: np.ndarray, o_inc, q_inc, t_inc,
                 cls: str = "s") -> None:
        self.d = d
        self.rect = tuple(float(v) for v in rect)
        self.oidx, self.qidx = oidx, qidx
        self.o_inc = o_inc  # (object local, keyword)
        self.q_inc = q_inc  # (sub local, posting keyword, home keyword, first incidence of (sub, home))
        self.t_inc = t_inc  # (sub local, keyword) -- all keywords, for sim_t
        self.cls = cls  # "s" (N_s) or "t" (N_t)
        self.id = _Leaf._next
        _Leaf._next += 1
        self._weights: tuple | None = None

    @classmethod
    def root(cls, d: _Data) -> "_Leaf":
        sp = d.space
        oidx = np.arange(d.S, dtype=np.int64)
        qidx = np.arange(d.N, dtype=np.int64)
        pos, loc = _rows(d.o_ptr, oidx)
        o_inc = (loc, d.o_kw[pos])
        pos, loc = _rows(d.p_ptr, qidx)
        q_inc = (loc, d.p_kw[pos], d.p_home[pos], d.p_first[pos])
        pos, loc = _rows(d.t_ptr, qidx)
        t_inc = (loc, d.t_kw[pos])
        return cls(d, (sp.x1, sp.y1, sp.x2, sp.y2), oidx, qidx, o_inc, q_inc, t_inc)

    # -- membership of a half-plane ------------------------------------------------------
    def sides(self, axis: int, cut: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(objects left, objects right, subs left, subs right) as boolean masks for cut ``axis < cut``."""
        d = self.d
        oc = (d.ox if axis == 0 else d.oy)[self.oidx]
        lo = d.rect[self.qidx, axis]
        hi = d.rect[self.qidx, axis + 2]
        o_left = oc < cut
        return o_left, ~o_left, lo < cut, hi >= cut

    def child(self, axis: int, cut: float, left: bool, o_sel: np.ndarray, q_sel: np.ndarray) -> "_Leaf":
        x1, y1, x2, y2 = self.rect
        if axis == 0:
            rect = (x1, y1, cut, y2) if left else (cut, y1, x2, y2)
        else:
            rect = (x1, y1, x2, cut) if left else (x1, cut, x2, y2)
        omap = np.cumsum(o_sel) - 1
        qmap = np.cumsum(q_sel) - 1
        ol, ok = self.o_inc
        keep = o_sel[ol]
        o_inc = (omap[ol[keep]], ok[keep])
        ql, pk, ph, pf = self.q_inc
        keep = q_sel[ql]
        q_inc = (qmap[ql[keep]], pk[keep], ph[keep], pf[keep])
        tl, tk = self.t_inc
        keep = q_sel[tl]
        t_inc = (qmap[tl[keep]], tk[keep])
        return _Leaf(self.d, rect, self.oidx[o_sel], self.qidx[q_sel], o_inc, q_inc, t_inc, self.cls)

    # -- costs -----------------------------------------------------------------------------
    def space_cost(self, o_sel: np.ndarray | None = None, q_sel: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray, float]:
        """(objects sent, subscriptions, Def. 1 load) of the leaf (or of a part of it) as one unit."""
        d = self.d
        ql, pk = self.q_inc[0], self.q_inc[1]
        ol, ok = self.o_inc
        if q_sel is None:
            q_sel = np.ones(len(self.qidx), dtype=bool)
        if o_sel is None:
            o_sel = np.ones(len(self.oidx), dtype=bool)
        Q = self.qidx[q_sel]
        if len(Q) == 0 or len(ok) == 0:
            return np.zeros(0, dtype=np.int64), Q, d.load(0, len(Q))
        mask = np.zeros(d.V, dtype=bool)
        mask[pk[q_sel[ql]]] = True  # H2 of the unit: its posting keywords
        hit = mask[ok] & o_sel[ol]
        keep = np.zeros(len(self.oidx), dtype=bool)
        keep[ol[hit]] = True
        O = self.oidx[keep]
        return O, Q, d.load(len(O), len(Q))

    def text_costs(self, groups: Sequence[np.ndarray]) -> list[tuple[np.ndarray, np.ndarray, float]]:
        """(objects sent, subscriptions, load) of each keyword group (arrays of home keyword ids)."""
        d = self.d
        G = len(groups)
        gmap = np.full(d.V, -1, dtype=np.int64)
        for g, arr in enumerate(groups):
            gmap[arr] = g
        ql, pk, ph, _ = self.q_inc
        gi = gmap[ph]
        sel = gi >= 0
        ql, pk, gi = ql[sel], pk[sel], gi[sel]
        qmat = np.zeros((G, len(self.qidx)), dtype=bool)  # subscriptions of each group
        qmat[gi, ql] = True
        posted = np.zeros((G, d.V), dtype=bool)  # H2 of each group: its posting keywords
        posted[gi, pk] = True
        ol, ok = self.o_inc
        out = []
        for g in range(G):
            keep = np.zeros(len(self.oidx), dtype=bool)
            if len(ok):
                keep[ol[posted[g, ok]]] = True
            O = self.oidx[keep]
            Q = self.qidx[qmat[g]]
            out.append((O, Q, d.load(len(O), len(Q))))
        return out

    def keyword_weights(self) -> tuple[np.ndarray, np.ndarray]:
        """Home keywords of the leaf and their Def. 1 weight ``c1|O_w||Q_w| + c2|O_w| + (c3+c4)|Q_w|``."""
        if self._weights is None:
            d = self.d
            _, _, ph, pf = self.q_inc
            qall = np.bincount(ph[pf], minlength=d.V)  # subscriptions homed at each keyword
            homes = np.flatnonzero(qall)
            qcount = qall[homes]
            ol, ok = self.o_inc
            ocount = np.bincount(ok, minlength=d.V)[homes] if len(ok) else np.zeros(len(homes), dtype=np.int64)
            o = ocount * d.scale
            w = d.c1 * o * qcount + d.c2 * o + d.cq * qcount
            self._weights = (homes, w)
        return self._weights

    def text_groups(self, homes: np.ndarray, k: int) -> list[np.ndarray] | None:
        """LPT of the home keywords ``homes`` into ``k`` groups by weight (frequency-based text partition)."""
        if len(homes) < k:
            return None
        allh, w = self.keyword_weights()
        wi = w[np.searchsorted(allh, homes)]
        wi = wi + 1e-12 * max(1.0, float(wi.max()))  # no zero weights: every group gets a keyword
        where, _ = lpt(zip(homes.tolist(), wi.tolist()), k)
        parts: list[list[int]] = [[] for _ in range(k)]
        for h in homes.tolist():
            parts[where[h]].append(h)
        return [np.asarray(sorted(p), dtype=np.int64) for p in parts]

    def sim(self, o_sel: np.ndarray | None = None, q_sel: np.ndarray | None = None) -> float:
        """sim_t(O_n, Q_n): cosine of the keyword-count vectors of objects and subscriptions."""
        d = self.d
        ol, ok = self.o_inc
        tl, tk = self.t_inc
        a = ok if o_sel is None else ok[o_sel[ol]]
        b = tk if q_sel is None else tk[q_sel[tl]]
        if len(a) == 0 or len(b) == 0:
            return 0.0
        va = np.bincount(a, minlength=d.V).astype(np.float64)
        vb = np.bincount(b, minlength=d.V).astype(np.float64)
        return cosine(va, vb)

    # -- candidate cut lines -----------------------------------------------------------------
    def cuts(self, axis: int, fractions: Sequence[float]) -> list[float]:
        """Cut lines strictly inside the leaf, midway between neighbouring distinct values at the
        given quantiles of the objects' coordinates and of the subscriptions' centres."""
        d = self.d
        lo, hi = self.rect[axis], self.rect[axis + 2]
        out: list[float] = []
        sources = [(d.ox if axis == 0 else d.oy)[self.oidx],
                   np.clip((d.rect[self.qidx, axis] + d.rect[self.qidx, axis + 2]) / 2, lo, hi)]
        for vals in sources:
            u = np.unique(vals)
            if len(u) < 2:
                continue
            for f in fractions:
                j = min(len(u) - 2, int(f * (len(u) - 1)))
                c = (float(u[j]) + float(u[j + 1])) / 2
                if lo < c < hi and c not in out:
                    out.append(c)
        return out

    def can_space_split(self) -> bool:
        return bool(self.cuts(0, (0.5,)) or self.cuts(1, (0.5,)))


class _Unit:
    """A partition unit: a space leaf, or one keyword group of a text-partitioned leaf."""

    __slots__ = ("leaf", "homes", "O", "Q", "load", "seq", "mode")
    _next = 0

    def __init__(self, leaf: _Leaf, homes: np.ndarray | None, O: np.ndarray, Q: np.ndarray, load: float) -> None:
        self.leaf, self.homes, self.O, self.Q, self.load = leaf, homes, O, Q, float(load)
        self.mode = "space" if homes is None else "text"
        self.seq = _Unit._next
        _Unit._next += 1


def _space_unit(leaf: _Leaf) -> _Unit:
    O, Q, load = leaf.space_cost()
    return _Unit(leaf, None, O, Q, load)


def _bisect(leaf: _Leaf) -> tuple[float, list[_Unit]] | None:
    """Best kd bisection of a leaf: min sum of the halves' loads (ties: the more even)."""
    best = None
    for axis in (0, 1):
        for cut in leaf.cuts(axis, _FRACTIONS):
            ol, orr, ql, qr = leaf.sides(axis, cut)
            a = leaf.space_cost(ol, ql)
            b = leaf.space_cost(orr, qr)
            key = (a[2] + b[2], abs(a[2] - b[2]))
            if best is None or key < best[0]:
                best = (key, axis, cut, ol, orr, ql, qr, a, b)
    if best is None:
        return None
    (total, _), axis, cut, ol, orr, ql, qr, a, b = best
    L = leaf.child(axis, cut, True, ol, ql)
    R = leaf.child(axis, cut, False, orr, qr)
    return total, [_Unit(L, None, *a), _Unit(R, None, *b)]


def _text_split(leaf: _Leaf, homes: np.ndarray, k: int) -> tuple[float, list[_Unit]] | None:
    groups = leaf.text_groups(homes, k)
    if groups is None:
        return None
    units = [_Unit(leaf, g, O, Q, load) for g, (O, Q, load) in zip(groups, leaf.text_costs(groups))]
    return math.fsum(u.load for u in units), units


def _space_sequence(unit: _Unit, kmax: int) -> list[tuple[float, list[_Unit]] | None]:
    """Space partitioning of a space unit into k = 1..kmax parts: k-1 bisections of the part of
    largest load (each prefix is the k-part partition)."""
    parts = [unit]
    dead: set[int] = set()
    out: list[tuple[float, list[_Unit]] | None] = [(unit.load, [unit])]
    while len(out) < kmax:
        cand = [u for u in parts if u.seq not in dead]
        if not cand:
            break
        u = max(cand, key=lambda v: (v.load, -v.seq))
        r = _bisect(u.leaf)
        if r is None:
            dead.add(u.seq)
            continue
        parts = [p for p in parts if p is not u] + r[1]
        out.append((math.fsum(p.load for p in parts), list(parts)))
    out.extend([None] * (kmax - len(out)))
    return out


def _partition(unit: _Unit, k: int) -> tuple[float, list[_Unit]] | None:
    """PartitionNode(unit, k) for k = 2 (lines 24-25): by text for a text group or an N_t leaf,
    otherwise the cheaper of space and text."""
    leaf = unit.leaf
    if unit.mode == "text":
        return _text_split(leaf, unit.homes, k)  # type: ignore[arg-type]
    homes = leaf.keyword_weights()[0]
    t = _text_split(leaf, homes, k)
    if leaf.cls == "t":
        return t
    s = _space_sequence(unit, k)[k - 1]
    if s is None:
        return t
    if t is None or s[0] <= t[0]:
        return s
    return t


# ---------------------------------------------------------------------------------------------
# MergeNodesIntoPartitions


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


# ---------------------------------------------------------------------------------------------
# grid^t


class GridT:
    """The dispatcher's grid^t (IV-C): cells bounded by the kd^t leaves' edges, each in one leaf.

    ``leaves[i]`` is a dict: ``rect``, ``mode`` ("space" or "text"), ``worker`` (space) or
    ``workers`` per group and ``groups`` (keyword -> group) for text.
    """

    def __init__(self, space: Space, leaves: list[dict], freq: Any) -> None:
        self.space = space
        self.leaves = leaves
        self.freq = freq
        xs = sorted({v for lf in leaves for v in (lf["rect"][0], lf["rect"][2])} - {space.x1, space.x2})
        ys = sorted({v for lf in leaves for v in (lf["rect"][1], lf["rect"][3])} - {space.y1, space.y2})
        self.xs = np.asarray(xs, dtype=np.float64)
        self.ys = np.asarray(ys, dtype=np.float64)
        cell = np.full((len(xs) + 1, len(ys) + 1), -1, dtype=np.int32)
        for i, lf in enumerate(leaves):
            x1, y1, x2, y2 = lf["rect"]
            a = int(np.searchsorted(self.xs, x1, side="right"))
            b = int(np.searchsorted(self.xs, x2, side="left"))
            c = int(np.searchsorted(self.ys, y1, side="right"))
            e = int(np.searchsorted(self.ys, y2, side="left"))
            cell[a:b + 1, c:e + 1] = i
        if (cell < 0).any():  # pragma: no cover - the leaves tile the space by construction
            raise AssertionError("grid^t: a cell outside every leaf")
        self.cell = cell

    def leaf_at(self, x: float, y: float) -> int:
        """The leaf containing a point (cells are half-open, closed on the space's upper edges)."""
        x, y = clamp_point(x, y, self.space)
        return int(self.cell[int(np.searchsorted(self.xs, x, side="right")),
                             int(np.searchsorted(self.ys, y, side="right"))])

    def leaves_in(self, rect: tuple[float, float, float, float]) -> list[int]:
        """The leaves a closed rectangle (clipped to the space) meets, in leaf order."""
        x1, y1, x2, y2 = clip_rect(rect, self.space)
        a = int(np.searchsorted(self.xs, x1, side="right"))
        b = int(np.searchsorted(self.xs, x2, side="right"))
        c = int(np.searchsorted(self.ys, y1, side="right"))
        e = int(np.searchsorted(self.ys, y2, side="right"))
        return np.unique(self.cell[a:b + 1, c:e + 1]).tolist()

    def _group(self, lf: dict, w: str) -> int:
        g = lf["groups"].get(w)
        if g is None:
            g = zlib.crc32(w.encode("utf-8")) % len(lf["workers"])
        return g

    def workers(self, sub: Sub) -> tuple[int, ...]:
        """Workers of a subscription: H1 (space leaves) / H2 (text leaves) of the cells it meets."""
        if sub.kind == RANGE:
            leaves = self.leaves_in(sub.rect)  # type: ignore[arg-type]
        else:
            leaves = [self.leaf_at(sub.x, sub.y)]
        _, homes = posting(sub, self.freq)
        out: set[int] = set()
        for i in leaves:
            lf = self.leaves[i]
            if lf["mode"] == "space":
                out.add(lf["worker"])
            else:
                for h in dict.fromkeys(homes):
                    out.add(lf["workers"][self._group(lf, h)])
        return tuple(sorted(out))


# ---------------------------------------------------------------------------------------------
# the plan


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


def plan_ps2(subs: Sequence[Sub], stats: Statistics, m: int, *, delta: float = DEFAULTS["delta"],
             epsilon: float = DEFAULTS["epsilon"], sigma: float = DEFAULTS["sigma"], theta: int | None = None,
             c1: float = 1.0, c2: float = 1.0, c3: float = 1.0, c4: float = 1.0,
             min_objects: int = DEFAULTS["min_objects"], **_ignored: Any) -> PS2Plan:
    """PS2Stream hybrid partitioning (Algorithm 1) -> a :class:`PS2Plan` (see the module docstring)."""
    m = _check_m(m)
    delta = _num("delta", delta, 0.0)
    epsilon = _num("epsilon", epsilon, 0.0)
    sigma = _num("sigma", sigma, 1.0)
    if theta is None:
        theta = max(64, 16 * m)
    if isinstance(theta, bool) or not isinstance(theta, (int, np.integer)) or theta < 1:
        raise ValueError(f"theta must be an integer >= 1, got {theta!r}")
    theta = int(theta)
    if isinstance(min_objects, bool) or not isinstance(min_objects, (int, np.integer)) or min_objects < 2:
        raise ValueError(f"min_objects must be an integer >= 2, got {min_objects!r}")
    c1, c2, c3, c4 = (_num(n, v, 0.0) for n, v in (("c1", c1), ("c2", c2), ("c3", c3), ("c4", c4)))
    if len({s.id for s in subs}) != len(subs):
        raise ValueError("duplicate subscription ids")
    d = _Data(subs, stats, c1, c2, c3 + c4)
    ids = [s.id for s in subs]

    # ---- phase 1 (Algorithm 1 lines 1-12) -------------------------------------------------
    root = _Leaf.root(d)
    Nu = [root]
    Ns: list[_Leaf] = []
    Nt: list[_Leaf] = []
    cap = max(1, theta // 2)
    while Nu:
        n = Nu.pop(0)  # line 4 (FIFO: breadth first)
        if len(Nu) + len(Ns) + len(Nt) + 1 >= cap or d.N == 0:
            (Ns if n.sim() >= delta else Nt).append(n)
            continue
        s = n.sim()
        if s >= delta:  # lines 5-6
            n.cls = "s"
            Ns.append(n)
            continue
        best = None
        if len(n.oidx) >= min_objects:
            for axis in (0, 1):  # line 8: the median cut on the axis of smaller alpha
                cut = n.cuts(axis, (0.5,))[:1]
                if not cut:
                    continue
                ol, orr, ql, qr = n.sides(axis, cut[0])
                alpha = min(n.sim(ol, ql), n.sim(orr, qr))
                if best is None or alpha < best[0]:
                    best = (alpha, axis, cut[0], ol, orr, ql, qr)
        if best is None or abs(best[0] - s) <= epsilon:  # lines 9-10
            n.cls = "t"
            Nt.append(n)
            continue
        _, axis, cut, ol, orr, ql, qr = best  # line 12
        Nu.append(n.child(axis, cut, True, ol, ql))
        Nu.append(n.child(axis, cut, False, orr, qr))
    for n in Ns:
        n.cls = "s"
    for n in Nt:
        n.cls = "t"
    nodes = sorted(Ns + Nt, key=lambda lf: lf.id)
    n_s, n_t = len(Ns), len(Nt)

    # ---- ComputeNumberPartitions + PartitionNode (lines 13-16) -----------------------------
    units: list[_Unit] = [_space_unit(n) for n in nodes]
    dp_counts: list[int] | None = None
    dp_costs: list[list[float | None]] | None = None
    if len(nodes) < m and d.N:
        kmax = m - len(nodes) + 1
        options: list[list[tuple[float, list[_Unit]] | None]] = []
        for u in units:
            homes = u.leaf.keyword_weights()[0]
            text = [(u.load, [u])] + [_text_split(u.leaf, homes, k) for k in range(2, kmax + 1)]
            if u.leaf.cls == "t":
                opts = text
            else:
                space = _space_sequence(u, kmax)
                opts = []
                for s_, t_ in zip(space, text):
                    if s_ is None or (t_ is not None and t_[0] < s_[0]):
                        opts.append(t_)
                    else:
                        opts.append(s_)
            options.append(opts)
        C = [[o[0] if o is not None else math.inf for o in opts] for opts in options]
        dp_counts, _ = partition_counts(C, m)
        dp_costs = [[c if math.isfinite(c) else None for c in row] for row in C]
        units = [v for opts, k in zip(options, dp_counts) for v in opts[k - 1][1]]  # type: ignore[index]

    # ---- lines 17-27: merge, check sigma, split the heaviest unit -------------------------------
    iterations = 0
    dead: set[int] = set()
    history: list[tuple] = []
    while True:
        where, loads, no, nq = _merge(d, units, m)  # line 18
        f = _factor(loads)
        history.append((float(loads.max()), len(units), list(units), where, loads, no, nq, f))
        if f <= sigma:  # lines 21-22
            break
        if len(units) >= theta:  # lines 26-27
            break
        split = None
        for u in sorted(units, key=lambda v: (-v.load, v.seq)):  # line 24 (splittable units only)
            if u.seq in dead or u.load <= 0.0:
                continue
            split = _partition(u, 2)  # line 25
            if split is not None:
                units = [v for v in units if v is not u] + split[1]
                break
            dead.add(u.seq)
        if split is None:
            break
        iterations += 1
    chosen = history[-1]
    if chosen[7] > sigma:  # sigma never met: keep the state of smallest L_max (fewest units on ties)
        chosen = min(history, key=lambda h: (h[0], h[1]))
    _, _, units, where, loads, no, nq, factor = chosen

    # ---- the kd^t leaves, the grid^t, the placement ------------------------------------------------
    by_leaf: dict[int, list[int]] = {}
    for i, u in enumerate(units):
        by_leaf.setdefault(u.leaf.id, []).append(i)
    leaves_out: list[dict] = []
    info_leaves: list[dict] = []
    for lid in sorted(by_leaf):
        us = by_leaf[lid]
        leaf = units[us[0]].leaf
        rect = list(leaf.rect)
        if units[us[0]].mode == "space":
            u = units[us[0]]
            leaves_out.append({"rect": rect, "mode": "space", "worker": where[us[0]]})
            info_leaves.append({"rect": rect, "mode": "space", "class": "N_" + leaf.cls, "worker": where[us[0]],
                                "load": u.load, "subscriptions": int(len(u.Q)),
                                "objects": float(len(u.O) * d.scale)})
            continue
        us = sorted(us, key=lambda i: units[i].seq)
        groups: dict[str, int] = {}
        allh, w = leaf.keyword_weights()
        ginfo = []
        for g, i in enumerate(us):
            u = units[i]
            for h in u.homes.tolist():  # type: ignore[union-attr]
                groups[d.words[h]] = g
            hw = w[np.searchsorted(allh, u.homes)]
            top = u.homes[np.argsort(-hw, kind="stable")[:_TOP_KEYWORDS]]  # type: ignore[index]
            ginfo.append({"worker": where[i], "n_keywords": int(len(u.homes)),  # type: ignore[arg-type]
                          "keywords": [d.words[h] for h in top.tolist()], "load": u.load,
                          "subscriptions": int(len(u.Q)), "objects": float(len(u.O) * d.scale)})
        leaves_out.append({"rect": rect, "mode": "text", "workers": [where[i] for i in us], "groups": groups})
        info_leaves.append({"rect": rect, "mode": "text", "class": "N_" + leaf.cls, "groups": ginfo})
    grid = GridT(d.space, leaves_out, d.freq)

    pair_q = np.concatenate([u.Q for u in units] + [np.zeros(0, dtype=np.int64)])
    pair_w = np.concatenate([np.full(len(u.Q), where[i], dtype=np.int64) for i, u in enumerate(units)]
                            + [np.zeros(0, dtype=np.int64)])
    key = np.unique(pair_q * m + pair_w)
    qs, ws = key // m, key % m
    bounds = np.searchsorted(qs, np.arange(d.N + 1))
    share = [float(loads[w]) / nq[w] if nq[w] else 0.0 for w in range(m)]
    ws_l, b_l = ws.tolist(), bounds.tolist()
    combos: dict[tuple[int, ...], tuple[float, ...]] = {}
    assignment: dict = {}
    wcosts: dict = {}
    for j in range(d.N):
        wj = tuple(ws_l[b_l[j]:b_l[j + 1]])
        if not wj:  # pragma: no cover - every subscription meets a leaf
            wj = grid.workers(subs[j])
        c = combos.get(wj)
        if c is None:
            c = combos[wj] = tuple(share[w] for w in wj)
        assignment[ids[j]] = wj
        wcosts[ids[j]] = c
    replicas = sum(len(v) for v in assignment.values())
    info = {
        "cost_model": "PS2Stream Definition 1 (c1|O||Q| + c2|O| + (c3+c4)|Q|), Algorithm 1",
        "params": {"delta": delta, "epsilon": epsilon, "sigma": sigma, "theta": theta, "c1": c1, "c2": c2,
                   "c3": c3, "c4": c4, "min_objects": min_objects},
        "phase1": {"N_s": n_s, "N_t": n_t},
        "dp_partitions": dp_counts,  # A[n] per node of N_t u N_s (creation order); None without the DP
        "dp_costs": dp_costs,  # C[i][k-1]: node i's sum of loads in k parts (None: impossible)
        "nodes": [{"rect": list(n.rect), "class": "N_" + n.cls} for n in nodes],
        "iterations": iterations,
        "units": len(units),
        "leaves": info_leaves,
        "grid_cells": [int(grid.cell.shape[0]), int(grid.cell.shape[1])],
        "replication_ratio": replicas / d.N if d.N else 1.0,
        "estimated_loads": [float(v) for v in loads],
        "objects_per_worker": [float(v * d.scale) for v in no],
        "subscriptions_per_worker": [int(v) for v in nq],
        "balance_factor": factor if math.isfinite(factor) else None,
        "total_cost": float(math.fsum(loads.tolist())),
    }
    return PS2Plan(m, assignment, wcosts, grid, [float(v * d.scale) for v in no], c1, c3 + c4, info,
                   dict(zip(ids, subs)))


PLANNERS = {"ps2": plan_ps2}
