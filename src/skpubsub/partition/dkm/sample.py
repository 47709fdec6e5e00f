"""The O_init sample indexed for DkM-SKS's estimates: P(R) (Eq. 2), P(R, lambda) (Eq. 4), the
kNN ball B(s) (Section 3.2; top-k and range regions: NOTES.md), and the cost of Eq. (5)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...core.scoring import unit_weights
from ...io.events import RANGE, TOPK, Sub
from ..stats import Statistics

_GATHER_CHUNK = 1 << 20  # candidate (rectangle, object) pairs examined at once


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
        top-k (the k-th best score among qualifying sample objects, TSim <= 1); B(s) of a
        top-k subscription, not in the paper (NOTES.md)."""
        alpha, k = float(sub.alpha), int(sub.k)
        if alpha <= 0.0 or k < 1:
            return math.inf
        # the subscription's vector over all its (distinct) keywords, unit length, scaled as
        # every engine scales it (no overflow or underflow at 1e200 / 1e-200: SPEC section 6)
        unit = unit_weights(sub.weights, len(sub.keywords))
        known = [(kid, w) for kid, w in zip(kids, unit) if kid >= 0]
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
    cost = np.where(reg.any_mode[idx], sums, mins)  # match all: the minimum (NOTES.md)
    return np.maximum(cost, floor)
