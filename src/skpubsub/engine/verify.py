"""Candidate verification on the plain (not compiled) path: the subscription index only
filters, so each candidate of an object is checked here, vectorised over the candidates:
the keyword predicate, the rectangle of a range subscription, and the score against a
kNN/top-k buffer's entry rule; the few that pass are updated (SPEC section 2)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..results.kbest import insert_newest
from ..store.subscriptions import K_RANGE, K_TOPK

if TYPE_CHECKING:
    from .engine import Engine


def verify(eng: Engine, o: int, x: float, y: float, kw_arr: np.ndarray, cand: np.ndarray) -> None:
    """Filter object ``o``'s candidates (slots) with vectorised predicates, then update the
    few that pass. ``kw_arr``: the object's keyword ids."""
    if len(eng._mark) < len(eng.vocab):
        eng._mark = np.zeros(2 * len(eng.vocab), dtype=np.bool_)
    eng._mark[kw_arr] = True  # O(1) "keyword in object" lookups while verifying
    _verify(eng, o, x, y, cand)
    eng._mark[kw_arr] = False


def _verify(eng: Engine, o: int, x: float, y: float, cand: np.ndarray) -> None:
    c, t = eng.subs.cols, eng.subs
    kind = c.kind[cand]
    ok = _keywords_ok(eng, cand)
    rng = kind == K_RANGE
    inside = (c.rx1[cand] <= x) & (x <= c.rx2[cand]) & (c.ry1[cand] <= y) & (y <= c.ry2[cand])
    for s in cand[rng & ok & inside].tolist():
        eng._matches.append((s, o))
    ranked = ~rng & ok
    if not ranked.any():
        eng.stats["affected"] += int((rng & ok & inside).sum())
        return
    cs = cand[ranked]
    dx = x - c.x[cs]
    dy = y - c.y[cs]
    d2 = dx * dx + dy * dy  # scoring.dist2
    key = d2.copy()
    top = c.kind[cs] == K_TOPK
    if top.any():
        ts = cs[top]
        wo = eng.objs.cols.wo[o]
        tsim = _text_sim(eng, ts, wo)
        alpha = c.alpha[ts]
        ssim = np.maximum(0.0, 1.0 - np.sqrt(d2[top]) / eng.maxdist)
        key[top] = -(alpha * ssim + (1.0 - alpha) * tsim)  # scoring.topk_key
    enter = key <= c.kth[cs]
    eng.stats["affected"] += int((rng & ok & inside).sum()) + int(enter.sum())
    orec = eng.objs.cols.records
    for s, k in zip(cs[enter].tolist(), key[enter].tolist()):
        eng._touch(s)
        eng._take(s, o)
        n0 = int(c.res_n[s])
        dropped = insert_newest(t, orec, s, o, k)
        eng.stats["evictions"] += n0 + 1 - int(c.res_n[s]) - (dropped >= 0)
        if dropped >= 0:
            eng._unref.add(dropped)
        eng.index.update(s)


def _keywords_ok(eng: Engine, cand: np.ndarray) -> np.ndarray:
    """Keyword predicate: ``all`` subs need every keyword in the object; ``any`` subs hold
    by construction (found under a shared keyword); top-k subs are checked for one shared
    keyword (igpt's pruning offers slots by cell, not only by keyword)."""
    c = eng.subs.cols
    ok = np.ones(len(cand), dtype=np.bool_)
    kind = c.kind[cand]
    need = c.match_all[cand] & (c.kw_len[cand] > 1)
    if need.any():
        ok[need] = _carried(eng, cand[need], every=True)
    top = kind == K_TOPK
    if top.any():
        ok[top] = _carried(eng, cand[top], every=False)
    return ok


def _carried(eng: Engine, slots: np.ndarray, every: bool) -> np.ndarray:
    """Per slot: does the object being verified (``_mark``) carry every / one of its keywords?"""
    c, pool = eng.subs.cols, eng.subs.kw.id
    off, ln = c.kw_off[slots], c.kw_len[slots]
    got = np.full(len(slots), every, dtype=np.bool_)
    for j in range(int(ln.max())):
        has = j < ln
        carried = eng._mark[pool[off + np.minimum(j, ln - 1)]]
        got = got & (~has | carried) if every else got | (has & carried)
    return got


def _text_sim(eng: Engine, ts: np.ndarray, wo: float) -> np.ndarray:
    """scoring.text_sim vectorised: summed over each sub's keywords in order."""
    c, pool = eng.subs.cols, eng.subs.kw
    off, ln = c.kw_off[ts], c.kw_len[ts]
    tsim = np.zeros(len(ts))
    for j in range(int(ln.max())):
        idx = off + np.minimum(j, ln - 1)
        shared = (j < ln) & eng._mark[pool.id[idx]]
        tsim = tsim + np.where(shared, pool.ws[idx] * wo, 0.0)
    return tsim
