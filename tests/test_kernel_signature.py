"""The scan's keyword signatures (probe.kw_sig, slots.sig): a live ``all`` slot whose
signature has a bit the object's lacks is no candidate. The test must only ever reject a
slot that lacks a keyword: a signature left over from a slot's earlier subscription, or
one missing after a snapshot, would drop true matches. Exact against the reference."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from skpubsub.bench.workload import WorkloadConfig, generate
from skpubsub.io.events import Pub, Sub, Unsub
from skpubsub.index.probe import kw_bit, kw_sig
from skpubsub.runtime.engines import make_engine
from skpubsub.testing.conformance import compare, compare_counting, engine_factory
from skpubsub.testing.streams import random_stream
from skpubsub.testing.checks import SCALE  # SKPUBSUB_CONFORMANCE_SCALE: e.g. 4 for a soak run


@given(st.lists(st.integers(0, 2**31 - 1), max_size=12), st.lists(st.integers(0, 2**31 - 1), max_size=12))
def test_a_subset_never_has_a_bit_outside_its_superset(a, b) -> None:
    sub = np.array(a, dtype=np.int64)
    obj = np.array(a + b, dtype=np.int64)
    assert kw_sig(sub) & ~kw_sig(obj) == 0
    assert 0 <= kw_sig(obj) < 2**32  # fits the slot record's uint32


def test_neighbouring_ids_get_different_bits() -> None:
    bits = {int(kw_bit(w)) for w in range(32)}
    assert len(bits) >= 20  # ids are handed out in order: w & 31 would do, a hash must too


def _words_apart(eng, n: int) -> list[str]:
    """``n`` new words whose ids have pairwise different signature bits."""
    out, seen = [], set()
    for i in range(200):
        w = f"w{i}"
        bit = int(kw_bit(eng.vocab.ids([w])[0]))
        if bit not in seen:
            seen.add(bit)
            out.append(w)
        if len(out) == n:
            return out
    raise AssertionError("not enough distinct bits")


@pytest.mark.parametrize("index", ["dkm", "auto"])
def test_the_scan_rejects_a_missing_keyword_and_a_reused_slot_has_its_own_signature(index: str) -> None:
    eng = make_engine(index)
    a, b, c, d = _words_apart(eng, 4)
    eng.apply([Sub(1, "A", 1, "knn", (a, b, c), True, x=0.0, y=0.0, k=2)])
    eng.flush()  # a lone subscription is held until something reads the engine (Engine._hold)
    ix = eng.index.kernel_grid
    s = int(np.flatnonzero(eng.subs.cols.active)[0])
    ids = eng.vocab.ids
    assert ix.sig[s] == kw_sig(np.array(ids([a, b, c]), dtype=np.int64))
    # unbounded: in the global lists, so only its keywords keep it from an object
    assert s in ix.candidates(5.0, 5.0, ids([a, b, c, d])).tolist()
    assert s not in ix.candidates(5.0, 5.0, ids([a, b, d])).tolist()  # lacks c (its bit too)
    eng.apply([Unsub(2, "A", 2), Sub(3, "B", 3, "knn", (a, d), False, x=0.0, y=0.0, k=2)])
    assert eng.subs.cols.active[s] and ix.sig[s] == 0  # the same slot, an `any` subscription now
    assert s in ix.candidates(5.0, 5.0, ids([d])).tolist()
    eng.apply([Unsub(4, "B", 4), Sub(5, "C", 5, "knn", (a, d), True, x=0.0, y=0.0, k=2)])
    assert eng.subs.cols.active[s] and ix.sig[s] == kw_sig(np.array(ids([a, d]), dtype=np.int64))
    assert s in ix.candidates(5.0, 5.0, ids([a, d])).tolist()
    back = pickle.loads(pickle.dumps(eng))  # a snapshot keeps the signatures
    assert back.index.kernel_grid.sig[s] == ix.sig[s]
    assert s in back.index.kernel_grid.candidates(5.0, 5.0, ids([a, d])).tolist()


def test_reused_slots_match_as_the_reference() -> None:
    """Subscriptions come and go on the same slots between `all` and `any` over a few
    words whose bits differ; objects carry some of them. Exact on every event."""
    rng = np.random.default_rng(11)
    words = [f"w{i}" for i in range(6)]
    events, seq = [], 0
    live: list[str] = []
    for step in range(400):
        seq += 1
        r = rng.random()
        if live and r < 0.25:
            events.append(Unsub(seq, live.pop(int(rng.integers(len(live)))), seq))
        elif r < 0.5:
            kws = tuple(rng.choice(words, size=int(rng.integers(1, 4)), replace=False).tolist())
            sid = f"s{seq}"
            live.append(sid)
            events.append(Sub(seq, sid, seq, "knn", kws, bool(rng.random() < 0.7),
                              x=float(rng.uniform(0, 20)), y=float(rng.uniform(0, 20)), k=int(rng.integers(1, 4))))
        else:
            kws = tuple(rng.choice(words, size=int(rng.integers(1, 5)), replace=False).tolist())
            events.append(Pub(seq, f"o{seq}", seq, float(rng.uniform(0, 20)), float(rng.uniform(0, 20)), kws))
    for index in ("dkm", "auto"):
        for window in ("none", "count:15", "time:30"):
            compare(events, window, None, engine_factory(index), batch_seed=3)


@pytest.mark.parametrize("window", ["count", "time", "none"])
def test_random_streams_with_signatures_as_the_reference(window: str) -> None:
    streams = [(random_stream(seed, windows=(window,)), seed) for seed in range(int(20 * SCALE))]
    assert compare_counting(streams, "auto")["affected"] > 500  # over 2000 here


@pytest.mark.parametrize("window", ["count:150", "time:20"])
def test_geonames_all_subscriptions_with_expiries_as_the_reference(window: str) -> None:
    """Real places, `all` subscriptions of 2-4 keywords: buffers emptied by expiries are
    refilled (their regions grow back) while the scan rejects by signature. The windows
    hold a third (count) or two fifths (time) of the objects: 450+ expiry removals, 60+ refills."""
    n = int(500 * SCALE)
    cfg = WorkloadConfig(objects=n, subscriptions=3 * n // 10, kind="knn", match="all", sub_rate=0.5,
                         unsub_rate=0.5, objects_per_step=10, seed=4, limit=2 * n, sub_keywords=3)

    class Once:  # compare wants streams; this one is fixed
        pass

    s = Once()
    s.events, s.window, s.space = list(generate(cfg)), window, None
    stats = compare_counting([(s, 1)], "auto", check_every_event=False)
    assert stats["refills"] > 20 and stats["expiry_removals"] > 200
