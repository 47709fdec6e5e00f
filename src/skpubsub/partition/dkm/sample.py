"""The O_init sample indexed for DkM-SKS's estimates: P(R) (Eq. 2), P(R, lambda) (Eq. 4), the
kNN ball B(s) (Section 3.2; top-k and range regions: NOTES.md), and the cost of Eq. (5)."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain, repeat
from operator import attrgetter, is_not
from typing import NamedTuple

import numpy as np
from numba import njit

from ...core.scoring import unit_weights
from ...io.events import KNN, RANGE, TOPK, Rects, Sub, SubBlock
from ...io.lexicon import Words
from ..stats import Statistics


class _Posted(NamedTuple):
    """The sample for ``_radii_kernel``: object ids per keyword (``obj[ptr[w]:ptr[w + 1]]``,
    ascending), each object's position and ``1/sqrt`` of its keyword count."""

    obj: np.ndarray
    ptr: np.ndarray
    ox: np.ndarray
    oy: np.ndarray
    inv_sqrt_nkw: np.ndarray


class _Asks(NamedTuple):
    """Subscriptions for ``_radii_kernel``: kind (``_KNN``, ``_RANGE``, ``_TOPK``), position,
    k, match all, alpha, keyword ids (CSR by ``kw_ptr``; -1: unknown to the sample) and their
    unit weights (top-k; aligned with the ids)."""

    kind: np.ndarray
    sx: np.ndarray
    sy: np.ndarray
    k: np.ndarray
    match_all: np.ndarray
    alpha: np.ndarray
    kw_ptr: np.ndarray
    kw_ids: np.ndarray
    unit: np.ndarray


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
        kw = np.ascontiguousarray(kw, dtype=np.int64)
        rects = np.ascontiguousarray(rects, dtype=np.float64).reshape(-1, 4)
        if len(kw) == 0 or self.n == 0:
            return np.zeros(len(kw), dtype=np.int64)
        return _count_kernel(kw, rects, self.ux, self.c_keys, self.c_y, self._U1, self.kw_ymin, self.kw_ymax)

    def probability_in(self, rects: np.ndarray) -> np.ndarray:
        """Eq. (2): P(R) = |O_R| / |O_init| for each rectangle."""
        rects = np.asarray(rects, dtype=np.float64).reshape(-1, 4)
        if self.n == 0:
            return np.zeros(len(rects))
        return self.count_in(np.full(len(rects), self.ALL, dtype=np.int64), rects) / self.n

    # -- B(s): the kNN ball among O_init; the top-k bound ------------------

    def knn_radius(self, x: float, y: float, k: int, kids: Sequence[int], match_all: bool) -> float:
        """Distance from ``(x, y)`` to the k-th nearest sample object that carries
        any (``match_all``: every) keyword of ``kids``; ``inf`` if fewer than k do."""
        kids = np.asarray(kids, dtype=np.int64).reshape(-1)
        return float(self._radii(np.array([_KNN], dtype=np.int8), np.array([float(x)]), np.array([float(y)]),
                                 np.array([k], dtype=np.int64), np.array([bool(match_all)]), np.zeros(1),
                                 np.array([0, len(kids)], dtype=np.int64), kids, np.zeros(len(kids)))[0])

    def topk_radius(self, sub: Sub, kids: Sequence[int]) -> float:
        """Radius around ``(sub.x, sub.y)`` outside which no object can enter the
        top-k (the k-th best score among qualifying sample objects, TSim <= 1); B(s) of a
        top-k subscription, not in the paper (NOTES.md)."""
        kids = np.asarray(kids, dtype=np.int64).reshape(-1)
        # the subscription's vector over all its keywords, unit length, scaled as every
        # engine scales it (no overflow or underflow at 1e200 / 1e-200: SPEC section 6)
        unit = np.array(unit_weights(sub.weights, len(sub.keywords)), dtype=np.float64)[:len(kids)]
        return float(self._radii(np.array([_TOPK], dtype=np.int8), np.array([float(sub.x)]),
                                 np.array([float(sub.y)]), np.array([int(sub.k)], dtype=np.int64),
                                 np.zeros(1, dtype=bool), np.array([float(sub.alpha)]),
                                 np.array([0, len(kids)], dtype=np.int64), kids, unit)[0])

    def _radii(self, kind, sx, sy, k, match_all, alpha, kw_ptr, kw_ids, unit) -> np.ndarray:
        return _radii_kernel(_Posted(self.post_obj, self.post_ptr, self.x, self.y, self.inv_sqrt_nkw),
                             float(self.maxdist), _Asks(kind, sx, sy, k, match_all, alpha, kw_ptr, kw_ids, unit))

    # -- regions of subscriptions --------------------------------------------

    def regions(self, subs: Sequence[Sub]) -> "Regions":
        """Location, keyword ids and region rectangle R(s) of each subscription: the radii of
        B(s) of a whole run in one compiled pass (``_radii_kernel``), the rest by columns.
        ``subs``: events, or a ``SubBlock`` read by its columns (no ``Sub`` a record)."""
        N = len(subs)
        sp = self.space
        cols = _block_columns(subs, self.vocab) if type(subs) is SubBlock else None
        if cols is not None:
            kind, lens, kw_ids, match_all, col = cols
        else:
            kind = np.fromiter(map(_KIND_CODE.__getitem__, map(_KIND, subs)), dtype=np.int8, count=N)
            kwl = list(map(_KEYWORDS, subs))
            lens = np.fromiter(map(len, kwl), dtype=np.int64, count=N)
            L = int(lens.sum())
            kw_ids = np.fromiter(map(self.vocab.get, chain.from_iterable(kwl), repeat(-1, L)), dtype=np.int64, count=L)
            match_all = np.fromiter(map(_MATCH_ALL, subs), dtype=bool, count=N)
            col = {"x": _X, "y": _Y, "k": _K, "alpha": _ALPHA, "weights": _WEIGHTS}
            col = {f: (lambda get: lambda: map(get, subs))(get) for f, get in col.items()}
            col["rects"] = lambda idx: np.array([subs[i].rect for i in idx.tolist()], dtype=np.float64)
        kw_ptr = np.zeros(N + 1, dtype=np.int64)
        np.cumsum(lens, out=kw_ptr[1:])
        any_mode = (kind == _TOPK) | ~match_all
        is_range = kind == _RANGE
        ranged = is_range.nonzero()[0]
        pointed = (~is_range).nonzero()[0]
        px = np.zeros(N)
        py = np.zeros(N)
        rect = np.empty((N, 4))
        radius = np.full(N, np.nan)
        if len(ranged):
            rr = col["rects"](ranged).reshape(-1, 4)
            rect[ranged] = rr
            # location: the centre of the part inside the space
            px[ranged] = (np.maximum(rr[:, 0], sp.x1) + np.minimum(rr[:, 2], sp.x2)) / 2.0
            py[ranged] = (np.maximum(rr[:, 1], sp.y1) + np.minimum(rr[:, 3], sp.y2)) / 2.0
        if len(pointed):
            sx = np.fromiter(col["x"](), dtype=np.float64, count=N)
            sy = np.fromiter(col["y"](), dtype=np.float64, count=N)
            ks = np.fromiter(col["k"](), dtype=np.int64, count=N)
            alpha = np.fromiter(col["alpha"](), dtype=np.float64, count=N)
            unit = self._unit_weights(col["weights"], kind, lens, kw_ptr)
            r = self._radii(kind, sx, sy, ks, match_all, alpha, kw_ptr, kw_ids, unit)
            r = r[pointed]
            x, y = sx[pointed], sy[pointed]
            radius[pointed] = r
            px[pointed], py[pointed] = x, y
            rect[pointed, 0], rect[pointed, 1], rect[pointed, 2], rect[pointed, 3] = x - r, y - r, x + r, y + r
        np.maximum(rect[:, 0], sp.x1, out=rect[:, 0])
        np.maximum(rect[:, 1], sp.y1, out=rect[:, 1])
        np.minimum(rect[:, 2], sp.x2, out=rect[:, 2])
        np.minimum(rect[:, 3], sp.y2, out=rect[:, 3])
        np.minimum(np.maximum(px, sp.x1, out=px), sp.x2, out=px)
        np.minimum(np.maximum(py, sp.y1, out=py), sp.y2, out=py)
        return Regions(px, py, rect, radius, kw_ptr, kw_ids, any_mode)

    @staticmethod
    def _unit_weights(weights, kind: np.ndarray, lens: np.ndarray, kw_ptr: np.ndarray) -> np.ndarray:
        """``unit_weights`` of each top-k subscription at its keywords' places (0 elsewhere):
        those without weights from a table by (length, position), the others one by one
        (``weights()``: each subscription's weights)."""
        unit = np.zeros(int(kw_ptr[-1]))
        top = ((kind == _TOPK) & (lens > 0)).nonzero()[0]
        if len(top) == 0:
            return unit
        tl = lens[top]
        idx = np.repeat(kw_ptr[top] - (np.cumsum(tl) - tl), tl) + np.arange(int(tl.sum()))
        table = np.zeros((int(tl.max()) + 1, int(tl.max())))
        for n in np.unique(tl).tolist():
            table[n, :n] = unit_weights(None, n)
        unit[idx] = table[np.repeat(tl, tl), idx - np.repeat(kw_ptr[top], tl)]
        wl = list(weights())
        if any(map(is_not, wl, repeat(None))):
            for i in top.tolist():
                if wl[i] is not None:
                    unit[kw_ptr[i]:kw_ptr[i + 1]] = unit_weights(wl[i], int(lens[i]))
        return unit


_KNN, _RANGE, _TOPK = 0, 1, 2


def _block_columns(b: SubBlock, vocab: dict[str, int]):
    """``regions``' inputs read from block ``b``'s columns: kinds, keyword counts, keyword
    ids in the sample's ``vocab`` (the codes' words looked up once a word), match-all, and
    the other columns as callables; None when its keywords are not codes."""
    kws = b.keywords
    if type(kws) is not Words:
        return None
    n = len(b)
    if b.one_kind is not None:
        kind = np.full(n, _KIND_CODE[b.one_kind], dtype=np.int8)
    else:
        kind = np.fromiter(map(_KIND_CODE.__getitem__, b.kind), dtype=np.int8, count=n)
    words = kws.lex.words
    table = np.fromiter(map(vocab.get, words, repeat(-1, len(words))), dtype=np.int64, count=len(words))
    kw_ids = table[kws.flat()] if len(table) else np.zeros(0, dtype=np.int64)
    match_all = (np.zeros(n, dtype=bool) if b.match_all is None
                 else np.fromiter(b.match_all, dtype=bool, count=n))

    def rects(idx: np.ndarray) -> np.ndarray:
        r = b.rect
        if type(r) is Rects:
            return r.array[idx]
        return np.array([r[i] for i in idx.tolist()], dtype=np.float64)

    col = {f: (lambda f: lambda: b.column(f))(f) for f in ("x", "y", "k", "alpha", "weights")}
    col["rects"] = rects
    return kind, kws.lens(), kw_ids, match_all, col


_SLACK = 1e-9  # >> the few-ulp gap between top-k scores from sqrt(dx*dx + dy*dy) and from hypot
_KIND_CODE = {KNN: _KNN, RANGE: _RANGE, TOPK: _TOPK}
_KIND, _KEYWORDS, _MATCH_ALL = attrgetter("kind"), attrgetter("keywords"), attrgetter("match_all")
_X, _Y, _K, _ALPHA, _WEIGHTS = attrgetter("x"), attrgetter("y"), attrgetter("k"), attrgetter("alpha"), attrgetter("weights")


@njit(cache=True)
def _radii_kernel(posted, maxdist, asks):  # pragma: no cover (compiled)
    """The radius of B(s) of each kNN and top-k subscription i of ``asks`` (``kind[i]``; range:
    nan) among the sample ``posted``, its keyword ids ``kw_ids[kw_ptr[i]:kw_ptr[i+1]]`` (-1:
    unknown to the sample):

    - kNN: sqrt of the k-th smallest squared distance to a qualifying sample object, each
      object once (``match_all``: carries every keyword; else any); inf when fewer than k;
    - top-k (``unit``: its unit weights aligned with the keywords): from the k-th best score
      ``alpha*SSim + (1-alpha)*TSim`` among the objects sharing a keyword (TSim: the sum of
      the weights of the keywords it carries, in keyword order, times its ``1/sqrt(|kw|)``),
      ``MaxDist*(1 - (kScore-(1-alpha))/alpha)``; inf when ``alpha <= 0``, fewer than k, or
      that bound <= 0 (NOTES.md).

    Each value is the same float as the NumPy expressions it replaces (the same elementwise
    operations; an order statistic does not depend on how it is found)."""
    post_obj, post_ptr, ox, oy, inv_sqrt_nkw = posted
    kind, sx, sy, k, match_all, alpha, kw_ptr, kw_ids, unit = asks
    N = len(kind)
    n = len(ox)
    out = np.empty(N)
    stamp = np.full(n, -1, dtype=np.int64)  # stamp[o] == i: object o already seen for i
    cnt = np.zeros(n, dtype=np.int64)  # match all: keywords of i that o carries so far
    acc = np.zeros(n)  # top-k: the sum of i's weights o carries
    buf = np.empty(n)
    exact = np.empty(n)
    objs = np.empty(n, dtype=np.int64)
    for i in range(N):
        if kind[i] == 1:  # range
            out[i] = np.nan
            continue
        a0, b0 = kw_ptr[i], kw_ptr[i + 1]
        kk = k[i]
        x, y = sx[i], sy[i]
        r = np.inf
        if kind[i] == 0 and match_all[i]:
            if kk < 1 or b0 == a0:
                out[i] = r
                continue
            # the shortest posting of the keywords; unknown keyword: nothing qualifies
            best = -1
            ok = True
            for j in range(a0, b0):
                kid = kw_ids[j]
                if kid < 0:
                    ok = False
                    break
                if best < 0 or post_ptr[kid + 1] - post_ptr[kid] < post_ptr[best + 1] - post_ptr[best]:
                    best = kid
            if not ok or post_ptr[best + 1] - post_ptr[best] < kk:
                out[i] = r
                continue
            for p in range(post_ptr[best], post_ptr[best + 1]):
                cnt[post_obj[p]] = 0
            # cnt[o] == nd: o carries the first nd keywords (a repeated keyword changes nothing)
            nd = 0
            for j in range(a0, b0):
                kid = kw_ids[j]
                nd += 1
                for p in range(post_ptr[kid], post_ptr[kid + 1]):
                    o = post_obj[p]
                    if cnt[o] == nd - 1:
                        cnt[o] = nd
            m = 0
            for p in range(post_ptr[best], post_ptr[best + 1]):
                o = post_obj[p]
                if cnt[o] == nd:
                    dx = ox[o] - x
                    dy = oy[o] - y
                    buf[m] = dx * dx + dy * dy
                    m += 1
            if m >= kk:
                r = np.sqrt(_select(buf, m, kk - 1))
            out[i] = r
            continue
        if kk < 1 or (kind[i] == 2 and alpha[i] <= 0.0):
            out[i] = r
            continue
        # any keyword (kNN any, top-k): the distinct objects carrying one
        m = 0
        for j in range(a0, b0):
            kid = kw_ids[j]
            if kid < 0:
                continue
            w = unit[j]
            for p in range(post_ptr[kid], post_ptr[kid + 1]):
                o = post_obj[p]
                if stamp[o] != i:
                    stamp[o] = i
                    acc[o] = w
                    objs[m] = o
                    m += 1
                else:
                    acc[o] += w
        if m < kk:
            out[i] = r
            continue
        if kind[i] == 0:
            for q in range(m):
                o = objs[q]
                dx = ox[o] - x
                dy = oy[o] - y
                buf[q] = dx * dx + dy * dy
            out[i] = np.sqrt(_select(buf, m, kk - 1))
            continue
        al = alpha[i]
        # first with sqrt(dx*dx + dy*dy), a few ulps from hypot and several times cheaper:
        # scores then move by far less than _SLACK, so every object whose exact score is
        # among the k best is within 2*_SLACK of the k-th best of these (and there are >= k)
        for q in range(m):
            o = objs[q]
            dx = ox[o] - x
            dy = oy[o] - y
            ssim = 1.0 - np.sqrt(dx * dx + dy * dy) / maxdist
            if ssim < 0.0:
                ssim = 0.0
            buf[q] = al * ssim + (1.0 - al) * (acc[o] * inv_sqrt_nkw[o])
        exact[:m] = buf[:m]
        cut = _select(exact, m, m - kk) - 2.0 * _SLACK  # (buf stays aligned with objs)
        c = 0
        for q in range(m):
            if buf[q] >= cut or not cut == cut:  # (NaN: every object)
                o = objs[q]
                d = np.hypot(ox[o] - x, oy[o] - y)
                ssim = 1.0 - d / maxdist
                if ssim < 0.0:
                    ssim = 0.0
                exact[c] = al * ssim + (1.0 - al) * (acc[o] * inv_sqrt_nkw[o])
                c += 1
        kscore = _select(exact, c, c - kk)
        smin = (kscore - (1.0 - al)) / al
        if not smin <= 0.0:
            r = maxdist * max(0.0, 1.0 - smin)
        out[i] = r
    return out


@njit(cache=True)
def _count_kernel(kw, rects, ux, c_keys, c_y, U1, kw_ymin, kw_ymax):  # pragma: no cover (compiled)
    """``SampleIndex.count_in``: for each query, the incidences of its keyword in the x-range
    (two binary searches on (keyword, x rank)), then those in the y-range counted (all of
    them when the keyword's objects all lie within it)."""
    Q = len(kw)
    out = np.zeros(Q, dtype=np.int64)
    for i in range(Q):
        kid = kw[i]
        x1, y1, x2, y2 = rects[i, 0], rects[i, 1], rects[i, 2], rects[i, 3]
        if kid < 0 or not y1 <= y2:
            continue
        r1 = np.searchsorted(ux, x1, side="left")
        r2 = max(r1, np.searchsorted(ux, x2, side="right"))
        a = np.searchsorted(c_keys, kid * U1 + r1, side="left")
        b = np.searchsorted(c_keys, kid * U1 + r2, side="left")
        if y1 <= kw_ymin[kid] and y2 >= kw_ymax[kid]:
            out[i] = b - a
            continue
        c = 0
        for p in range(a, b):
            if c_y[p] >= y1 and c_y[p] <= y2:
                c += 1
        out[i] = c
    return out


@njit(cache=True)
def _select(a, m, k):  # pragma: no cover (compiled)
    """The k-th smallest (from 0) of ``a[:m]`` (finite values), reordering them in place:
    Hoare's FIND (Wirth's form), the value np.partition would put at k, without its copy."""
    lo, hi = 0, m - 1
    while lo < hi:
        x = a[k]
        i, j = lo, hi
        while i <= j:
            while a[i] < x:
                i += 1
            while x < a[j]:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if j < k:
            lo = i
        if k < i:
            hi = j
    return a[k]


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
