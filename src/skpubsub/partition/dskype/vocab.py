"""The global keyword order (Skype paper, Section 3) and the O_init sample's keyword
co-occurrence, shared by ``keyword`` and ``prefix``: ``p(W)`` of Eq. (16), smoothed (NOTES.md)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

import numpy as np

from typing import NamedTuple

from ...core.scoring import unit_weights
from ...io.events import Sub
from ..stats import Statistics


class Sample(NamedTuple):
    """The object sample as the planners' kernels read it: postings per keyword rank (CSR),
    each object's ranks (CSR), weight and position, keywords the sample never saw, keyword
    probabilities, the sample size, whether keywords are taken as independent (no sample) and
    the space's MaxDist."""

    post_ptr: np.ndarray
    post_obj: np.ndarray
    obj_ptr: np.ndarray
    obj_rank: np.ndarray
    obj_wo: np.ndarray
    obj_x: np.ndarray
    obj_y: np.ndarray
    unseen: np.ndarray
    p_word: np.ndarray
    S: int
    indep: bool
    maxdist: float


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

    @property
    def sample(self) -> Sample:
        return Sample(self.post_ptr, self.post_obj, self.obj_ptr, self.obj_rank, self.obj_wo, self.obj_x, self.obj_y,
                      self.unseen, self.p_word, self.S, self.indep, self.maxdist)

    def key(self, word: str) -> tuple[int, str]:
        r = self.rank.get(word)
        return self.keys[r] if r is not None else (0, word)  # unknown when planning: frequency 0

    def pos(self, word: str) -> int:
        """Position of ``word`` in the global order (an unknown word: where it would be inserted)."""
        r = self.rank.get(word)
        return r if r is not None else bisect.bisect_left(self.keys, (0, word))

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
