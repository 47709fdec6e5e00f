"""The kd^t-tree of PS2Stream (Section IV-B): leaves with their objects and subscriptions, sim_t of
Algorithm 1, partition units, and PartitionNode by space and by text (lines 15-16 and 24-25)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..common import lpt
from .data import _Data, _rows

_FRACTIONS = (0.25, 0.375, 0.5, 0.625, 0.75)  # candidate cut lines of a space bisection (quantiles)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two count vectors; 0 when either is zero (sim_t of Algorithm 1)."""
    na = math.sqrt(float(np.dot(a, a)))
    nb = math.sqrt(float(np.dot(b, b)))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(a, b)) / (na * nb)


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
