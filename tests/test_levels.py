"""The grid store's level summary (``PostingStore.track_levels``, ``lv``): for each token,
a bit per level that may hold one of its lists, so ``probe.scan`` skips the others. It must
cover every list (else a scan misses candidates) through list creation, growth (rehash)
and the rebuilds that drop stale bits; a scan with it finds what a scan of every level finds."""

from __future__ import annotations

import numpy as np

from skpubsub.core import postings as P
from skpubsub.core.config import Space
from skpubsub.index.cells import level_key
from skpubsub.io.events import Pub, Sub
from skpubsub.runtime.engines import make_engine


def _bits(st: P.PostingStore, tok: int) -> int:
    return int(st.lv[tok & (len(st.lv) - 1)])


def test_summary_covers_every_list_and_drops_stale_bits():
    rng = np.random.default_rng(3)
    lmax = 6
    st = P.PostingStore(4, 8)
    pre = [(-(305 + 1), 0), (level_key(309, 3, 2, 5, lmax), 3 + 1)]  # posted before tracking starts
    st.reserve(2, 2)
    for key, _ in pre:
        P.append(st.plain, np.int64(key), np.int64(1), P.NO_FILTER)
    st.track_levels(lmax)
    assert _bits(st, 305) == 1 and _bits(st, 309) == 1 << 4
    made = []
    for _ in range(3000):  # the store grows (rehash) several times on the way
        w = int(rng.integers(0, 300))
        level = 2 if w < 30 else int(rng.choice([-1, 0, 1, 3, 4, 5, 6]))  # tokens 0..29: level 2 only
        if level < 0:
            key = -(w + 1)
        else:
            g = 1 << level
            key = int(level_key(w, level, int(rng.integers(0, g)), int(rng.integers(0, g)), lmax))
        st.reserve(1, 1)
        P.append(st.plain, np.int64(key), np.int64(len(made)), P.NO_FILTER)
        made.append((w, level, key))
        assert _bits(st, w) >> (level + 1) & 1, (w, level)
    st._check()  # every live list's level bit is set
    # empty every level-2 list: the bits stay (a superset) until enough lists are gone, then
    # the summary is made exact again
    contents = st.contents()
    for key in {key for w, level, key in made if level == 2}:
        P.truncate(st.arrays, P.lookup(st.h_keys, st.h_vals, np.int64(key)), -1, 0, len(contents[key]))
    st._check()
    assert all(_bits(st, w) >> 3 & 1 for w in range(30))
    assert len(st.lv) > 310  # no two of the tokens share a summary slot
    st.meta[P.M_DROPS] = len(st.h_keys)  # as if many lists had emptied
    st.reserve(0, 0)
    st._check()
    assert all(_bits(st, w) == 0 for w in range(30))  # the stale bits are gone
    assert all(_bits(st, w) for w in {w for w, _, _ in made if w >= 30})


def _stream(seed: int, n_subs: int, n_pubs: int):
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(40)]
    evs, seq = [], 0
    for i in range(n_subs):
        kw = tuple(rng.choice(words, size=int(rng.integers(1, 3)), replace=False).tolist())
        x, y = float(rng.uniform(0, 100)), float(rng.uniform(0, 100))
        if i % 2:
            h = float(rng.choice([0.01, 0.3, 3.0, 30.0]))
            evs.append(Sub(seq=seq, id=f"s{i}", t=0, kind="range", keywords=kw, match_all=bool(i % 4 == 1),
                           rect=(x - h, y - h, x + h, y + h)))
        else:
            evs.append(Sub(seq=seq, id=f"s{i}", t=0, kind="knn", keywords=kw, match_all=bool(i % 4 == 0),
                           x=x, y=y, k=int(rng.integers(1, 4))))
        seq += 1
    for i in range(n_pubs):
        kw = tuple(rng.choice(words, size=int(rng.integers(1, 4)), replace=False).tolist())
        evs.append(Pub(seq=seq, id=f"o{i}", t=1 + i, x=float(rng.uniform(0, 100)), y=float(rng.uniform(0, 100)),
                       keywords=kw))
        seq += 1
    return evs


def test_engine_with_summary_equals_engine_probing_every_level(monkeypatch):
    """The same streams through ``auto`` and ``dkm`` with the summary kept and with it off
    (``track_levels`` a no-op: every level probed), and the reference engine: the same
    notifications and results."""
    space = Space(0.0, 0.0, 100.0, 100.0)
    for seed in (1, 2):
        evs = _stream(seed, 300, 1500)
        ref = make_engine("reference", space=space)
        want = [ref.apply(evs[i:i + 200]) for i in range(0, len(evs), 200)]
        for index in ("auto", "dkm"):
            on = make_engine(index, space=space)
            got_on = [on.apply(evs[i:i + 200]) for i in range(0, len(evs), 200)]
            with monkeypatch.context() as m:
                m.setattr(P.PostingStore, "track_levels", lambda self, lmax: None)
                off = make_engine(index, space=space)
                got_off = [off.apply(evs[i:i + 200]) for i in range(0, len(evs), 200)]
                assert off.index.kernel_grid.store.meta[P.M_LMAX] == 0
            assert on.index.kernel_grid.store.meta[P.M_LMAX] > 0
            assert got_on == got_off == want and on.all_results() == off.all_results() == ref.all_results()
            on.index.kernel_grid.store._check()
