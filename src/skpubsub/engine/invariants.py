"""The indexed engine's invariants, checked by the tests after events (``Engine._check``):
the structural oracle beside the reference engine's results."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..store.subscriptions import B_KMAX, K_RANGE

if TYPE_CHECKING:
    from .engine import Engine


def check(eng: Engine) -> None:
    """Invariants: the containers' own (subscription and object tables, alive postings),
    results ranked, kth consistent, refcounts match, no object kept that is neither
    alive nor held, index exact."""
    eng.subs._check()
    eng.objs._check()
    eng.alive._check()  # under ``none`` nothing is alive: the store must be empty
    c, oc = eng.subs.cols, eng.objs.cols
    refs = np.zeros(oc.capacity, dtype=np.int64)
    for s in np.flatnonzero(c.active[: c.top]).tolist():
        if c.kind[s] == K_RANGE:
            continue
        off, n, k = int(c.res_off[s]), int(c.res_n[s]), int(c.k[s])
        keys = eng.subs.res.key[off:off + n]
        objs = eng.subs.res.obj[off:off + n]
        assert n <= c.kb[s] and k <= c.kb[s]
        assert n >= k or c.complete[s], "buffer short of k but not known complete"
        assert np.all(np.diff(keys) >= 0), "result not ranked"
        seqs = oc.seq[objs]
        assert np.all((np.diff(keys) > 0) | (np.diff(seqs) < 0)), "ties not newest first"
        if c.complete[s]:
            assert c.kth[s] == math.inf and n < c.kb[s], "a complete buffer admits everything"
            assert eng.subs.policy == B_KMAX or n < k, "a k-skyband of k takes a threshold"
        elif n:
            assert c.kth[s] >= keys[-1], "entry rule below the buffer's last entry"
            assert n < c.kb[s] or c.kth[s] == keys[-1], "a full buffer admits only what beats its last"
        dom = eng.subs.res.dom[off:off + n]
        if eng.subs.policy == B_KMAX:
            assert not dom.any()
        else:
            hi, lo = oc.expiry[objs], oc.expiry_lo[objs]  # exact pairs (kbest.later)
            for j in range(n):  # its dominators: ranked before it, leaving no earlier
                ge = (hi[:j] > hi[j]) | ((hi[:j] == hi[j]) & (lo[:j] >= lo[j]))
                assert dom[j] == int(ge.sum()) < k, "dominance count wrong"
        np.add.at(refs, objs, 1)
        if eng.window.retains:
            assert oc.alive[objs].all(), "result holds a dead object"
    assert np.array_equal(refs[: oc.top], oc.refs[: oc.top]), "refcounts drifted"
    in_use = np.ones(oc.top, dtype=np.bool_)
    in_use[np.asarray(oc._free, dtype=np.int64)] = False
    # keyword holders: every object slot in use and every active subscription (SPEC 6)
    v = eng.vocab
    v._check()
    if eng.objs.keep_words:  # each id an object has is one of its words' or a placeholder (``add_run``)
        held_for_good = set(v.placeholders(0).tolist())
        for o in np.flatnonzero(in_use).tolist():
            ids = eng.objs.keywords(o).tolist()
            assert {v.words[i] for i in ids if i not in held_for_good} <= set(eng.objs.words[o]), \
                ("an object's keyword id not of its words", o)
    live = np.flatnonzero(c.active[: c.top])
    held = np.concatenate([eng.objs.keywords_csr(np.flatnonzero(in_use))[1],
                           *[eng.subs.kw.id[int(c.kw_off[s]):int(c.kw_off[s]) + int(c.kw_len[s])]
                             for s in live.tolist()]]).astype(np.int64)
    held = np.concatenate([held, *[u.astype(np.int64) for u in eng._unheld],  # released at apply's end
                           v.placeholders(0)])  # held for good
    want = np.bincount(held, minlength=len(v))[: len(v)]
    for h in eng._held:  # counted at apply's end
        np.subtract.at(want, np.asarray(h, dtype=np.int64), 1)
    assert np.array_equal(want, v.refs[: len(v)]), "keyword references drifted"
    kept = in_use & ~oc.alive[: oc.top] & (oc.refs[: oc.top] == 0)
    assert not kept.any(), ("object slots neither alive nor held (leaked)", np.flatnonzero(kept)[:5])
    eng.index._check()
