"""The planning data of PS2Stream's planner: the O_init sample and the subscriptions as CSR
arrays, the load of Definition 1, and the posting rule (Sections IV-C/IV-D; kNN/top-k: NOTES.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...core.config import Space
from ...io.events import RANGE, TOPK, Sub
from ..stats import Statistics


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
