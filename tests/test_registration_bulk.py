"""Bulk registration's fast paths (issue 20 item 3) give what the one-by-one paths give:
``PostingStore.append_many`` (entries grouped by key, the store grown to the distinct keys)
the lists of ``append`` in turn, ``cgrid.place_many`` past ``BULK`` entries the postings of
``place``, and the columnar ``SubTable.add_many`` the table of ``add``."""

from __future__ import annotations

import numpy as np
import pytest

from skpubsub.core import columns
from skpubsub.core import postings as P
from skpubsub.index import cgrid
from skpubsub.io.events import Sub
from skpubsub.runtime.engines import make_engine
from skpubsub.store.subscriptions import SubTable


def _filtered(store: P.PostingStore) -> dict[int, list]:
    """Every list's entries with their filters beside them, by key."""
    keys, ents, at = store._flat()
    rows = list(zip(ents.tolist(), store.blk_filter[at].tolist())) if len(store.blk_filter) else ents.tolist()
    out: dict[int, list] = {}
    for k, r in zip(keys.tolist(), rows):  # in list order
        out.setdefault(k, []).append(r)
    return out


def _same(a: P.PostingStore, b: P.PostingStore) -> bool:
    return _filtered(a) == _filtered(b)


def _filters(rng, n: int) -> np.ndarray:
    out = np.zeros(n, dtype=P.FILTER)
    for name in ("x1", "y1", "x2", "y2"):
        out[name] = rng.normal(size=n)
    out["sig"] = rng.integers(0, 2**32, size=n)
    for name in ("k0", "k1", "k2"):
        out[name] = rng.integers(-2, 2**31, size=n)
    return out


def _filter_tuple(f) -> tuple:
    """A ``FILTER`` record as the tuple ``postings.append`` takes."""
    return (*map(np.float32, f[:4]), np.uint32(f[4]), *map(np.int32, f[5:]))


@pytest.mark.parametrize("span_from", [columns.SPAN_FROM, 1], ids=["copies", "spans"])
def test_append_many_equals_appends_in_turn(span_from, monkeypatch):
    """With filters beside the entries (the grid's) and without (alive objects); the store's
    arrays grown by copies as small ones are, or each in place in a span (``grown``)."""
    monkeypatch.setattr(columns, "SPAN_FROM", span_from)
    rng = np.random.default_rng(7)
    for filtered in (False, True):
        _append_many_in_turn(rng, filtered)


def _append_many_in_turn(rng, filtered):
    a, b = P.PostingStore(4, 8, filters=filtered), P.PostingStore(4, 8, filters=filtered)
    for rnd in range(4):  # onto lists already there, some with part-filled tails, and freed ids
        keys = rng.integers(-50, 400, size=3000 + rnd).astype(np.int64)
        ents = rng.integers(0, 2**40, size=len(keys)).astype(np.int64)
        fl = _filters(rng, len(keys))
        a.append_many(keys, ents, fl)
        b.reserve(len(keys), len(keys))
        for k, e, f in zip(keys.tolist(), ents.tolist(), fl.tolist()):
            P.append(b.plain, k, e, _filter_tuple(f))
        ca, cb = a.contents(), b.contents()
        assert ca.keys() == cb.keys() and all(np.array_equal(ca[k], cb[k]) for k in ca)
        assert _same(a, b)
        a._check()
        assert 2 * len(ca) <= len(a.h_keys) < 8 * max(len(ca), 64)  # sized to the keys, not the entries
        p = P.lookup(a.h_keys, a.h_vals, int(keys[0]))  # empty one list: its id is reused next round
        P.truncate(a.arrays, p, -1, 0, len(ca[int(keys[0])]))
        q = P.lookup(b.h_keys, b.h_vals, int(keys[0]))
        P.truncate(b.arrays, q, -1, 0, len(cb[int(keys[0])]))
    keys = np.repeat(np.array([5, -3], dtype=np.int64), 5000)[rng.permutation(10000)]  # long runs
    ents = np.arange(10000, dtype=np.int64)
    a.append_many(keys, ents, np.zeros(10000, P.FILTER))
    got = a.contents()
    for k in (5, -3):
        assert np.array_equal(got[k][-int((keys == k).sum()):], ents[keys == k])
    a.append_many(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, P.FILTER))
    a._check()


def test_append_many_of_mostly_distinct_keys_equals_appends_in_turn():
    """What ``run``'s batches give ``append_many``: nearly every key of a call a different list,
    new or long open with its tail block at any fill, the same list again within the
    pipeline's reach (``_append_each``), over many calls and growths of every array."""
    rng = np.random.default_rng(11)
    a, b = P.PostingStore(4, 8, filters=True), P.PostingStore(4, 8, filters=True)
    for rnd in range(12):
        n = int(rng.integers(1, 4000))
        keys = rng.integers(-3000, 30000, size=n).astype(np.int64)
        keys[: n // 10] = keys[0]  # one long run among the short ones
        rng.shuffle(keys)
        ents = rng.integers(0, 2**40, size=n).astype(np.int64)
        fl = _filters(rng, n)
        a.append_many(keys, ents, fl)
        b.reserve(n, n)
        for k, e, f in zip(keys.tolist(), ents.tolist(), fl.tolist()):
            P.append(b.plain, k, e, _filter_tuple(f))
        for k in rng.choice(keys, size=3).tolist():  # empty a few lists: their ids and blocks are reused
            p, q = P.lookup(a.h_keys, a.h_vals, k), P.lookup(b.h_keys, b.h_vals, k)
            if p >= 0:
                m = len(a.contents()[k])
                P.truncate(a.arrays, p, -1, 0, m)
                P.truncate(b.arrays, q, -1, 0, m)
        assert _same(a, b), rnd
        a._check()


def _subs(n, seed=3, weights=False):
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(40)]
    out = []
    for i in range(n):
        kws = tuple(rng.choice(words, size=1 + i % 3, replace=False).tolist())
        x, y = float(rng.uniform(-170, 170)), float(rng.uniform(-80, 80))
        kind = ("range", "knn", "topk")[i % 3]
        h = float(rng.uniform(0.5, 12))
        out.append(Sub(i, f"s{i}" if i % 5 else i, 0, kind, kws, match_all=bool(i % 2),
                       rect=(x - h, y - h, x + h, y + h) if kind == "range" else None,
                       x=x, y=y, k=1 + i % 4, alpha=0.5 if kind == "topk" else 0.0,
                       weights=tuple(range(1, len(kws) + 1)) if weights and i % 7 == 0 else None,
                       expires=None if i % 4 else 1e9))
    return out


def test_bulk_place_many_posts_what_place_posts():
    subs = _subs(2500)
    a, b = make_engine("auto", "none"), make_engine("auto", "none")
    a.apply(subs)  # in bulk: far past cgrid.BULK entries
    for ev in subs:  # the lone path (``apply`` would hold them and register them as a run)
        assert b._subscribe_one(ev)
        b._settle()
    ia, ib = a.index, b.index
    assert ia.store.entries >= cgrid.BULK
    for f in ("epoch", "level", "box", "nkw", "kw0", "tok"):
        assert (getattr(ia, f)[: len(subs)] == getattr(ib, f)[: len(subs)]).all(), f
    ca, cb = ia.store.contents(), ib.store.contents()
    assert ca.keys() == cb.keys() and all(np.array_equal(ca[k], cb[k]) for k in ca)
    assert ia.live_entries == ib.live_entries
    a._check()


def test_columnar_add_many_equals_add_in_turn():
    subs = _subs(600, seed=5, weights=True)
    kw = {w: i for i, w in enumerate(sorted({w for s in subs for w in s.keywords}))}
    a, b = SubTable(kmax=1.5), SubTable(kmax=1.5)
    half = subs[:300]
    a.add_many(half, [kw[w] for s in half for w in s.keywords])
    for s in half:
        b.add(s, [kw[w] for w in s.keywords])
    for t in (a, b):  # free some slots and segments: the next run reuses them (not one stretch)
        for s in range(0, 300, 3):
            t.remove(s)
    rest = subs[300:]
    sa = a.add_many(rest, [kw[w] for s in rest for w in s.keywords])
    sb = [b.add(s, [kw[w] for w in s.keywords]) for s in rest]
    assert sa.tolist() == sb
    assert np.array_equal(a.cols.records, b.cols.records)
    for name in ("id", "ws"):
        assert np.array_equal(getattr(a.kw, name), getattr(b.kw, name)), name
    assert np.array_equal(a.ids[: a.cols.top], b.ids[: b.cols.top]) and a.slot_of == b.slot_of
    assert (a.max_k, a.max_kb, a.max_kw) == (b.max_k, b.max_kb, b.max_kw)
    a._check()


def test_finest_level_is_best_level():
    """``placing.finest_level`` (regions' plain rule from one box, coarser levels by shifts)
    gives ``cells.best_level``'s level and box: inside, outside and across the space, on cell
    boundaries, tiny and huge extents, and the infinite or NaN ones it hands to best_level."""
    from numba import njit

    from skpubsub.index.cells import best_level
    from skpubsub.index.placing import _finest_level

    plain = njit(lambda e, g, lmax, mc, o: best_level(e, g, lmax, mc, o))
    rng = np.random.default_rng(5)
    for i in range(30000):
        geo = np.array([-180.0, -90.0, 360.0, 180.0, 400.0]) if i % 2 else np.array([0.0, 0.0, 1.0, 1.0, 1.5])
        lmax, mc = int(rng.integers(0, 16)), int(rng.integers(1, 9))
        c = rng.uniform(geo[0] - geo[2] * 0.2, geo[0] + geo[2] * 1.2, 2)
        h = 10.0 ** rng.uniform(-9, 1) * geo[2] * rng.uniform(0, 1, 2)
        e = np.array([c[0] - h[0], c[1] - h[1], c[0] + h[0], c[1] + h[1]])
        if i % 7 == 0:  # corners on cell boundaries of some level
            g = 1 << int(rng.integers(0, lmax + 1))
            e[:2] = geo[:2] + geo[2:4] * rng.integers(-1, g + 2, 2) / g
            e[2:] = e[:2] + geo[2:4] * rng.integers(0, 3, 2) / g
        if i % 11 == 0:
            e[rng.integers(0, 4)] = rng.choice([1e300, -1e300, np.inf, -np.inf, 1e17, np.nan])
        got, want = np.zeros(4, np.int32), np.zeros(4, np.int32)
        assert _finest_level(e, geo, lmax, mc, got) == plain(e, geo, lmax, mc, want), (e, geo, lmax, mc)
        assert np.array_equal(got, want), (e, geo, lmax, mc, got, want)
