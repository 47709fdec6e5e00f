"""Every registered index and variant through the per-index check suite
(:mod:`skpubsub.testing.checks`), and the containers' ``_check()`` shown able to fail."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest

from skpubsub.core import postings as P
from skpubsub.core.config import Space, Window
from skpubsub.engine.engine import Engine
from skpubsub.index import INDEXES
from skpubsub.io.events import Pub
from skpubsub.testing.checks import index_specs, parse, spec, yield_checks
from skpubsub.testing.conformance import validate
from skpubsub.testing.streams import random_stream

SPECS = index_specs()
CASES = [pytest.param(s, check.__name__, id=f"{s}-{check.__name__}") for s in SPECS for check in yield_checks(s)]


@pytest.mark.parametrize("index,check", CASES)
def test_index_passes_check(index: str, check: str) -> None:
    [run] = [c for c in yield_checks(index) if c.__name__ == check]
    run()


def test_every_registered_index_is_checked() -> None:
    assert {parse(s)[0] for s in SPECS} == set(INDEXES)
    assert all(spec(*parse(s)) == s for s in SPECS)  # specs round-trip through the bench's parser
    assert parse("aoiq[batch=true]") == ("aoiq", {"batch": True})
    names = [c.__name__ for c in yield_checks("dkm")]
    assert len(names) == len(set(names)) >= 7


# -- each container's _check() can fail --------------------------------------------------------
def _engine() -> Engine:
    """A dkm engine under a count window, mid-stream: subscriptions, results, alive objects."""
    for seed in range(100):
        s = random_stream(seed, windows=("count",), junk=False)
        window, space = Window.parse(s.window), s.space or Space()
        evs, _ = validate(s.events, window, space)
        eng = Engine(window, space, index="dkm")
        eng.apply(evs)
        c = eng.subs.cols
        ranked = c.active[: c.top] & (c.kind[: c.top] != 0) & (c.res_n[: c.top] > 0)
        if ranked.sum() >= 2 and eng.alive.count >= 2 and eng.index.store.entries >= 2:
            eng._check()
            return eng
    raise AssertionError("no stream gave a populated engine")


def _first_ranked(eng: Engine) -> int:
    c = eng.subs.cols
    return int(np.flatnonzero(c.active[: c.top] & (c.kind[: c.top] != 0) & (c.res_n[: c.top] > 0))[0])


def _active(eng: Engine) -> np.ndarray:
    c = eng.subs.cols
    return np.flatnonzero(c.active[: c.top])


def _chained_block_freed(eng: Engine) -> None:
    st = eng.index.store
    p = int(np.flatnonzero(st.p_head[: st.meta[P.M_POSTINGS]] >= 0)[0])
    st.blk_free[st.meta[P.M_FREE_TOP]] = st.p_head[p]
    st.meta[P.M_FREE_TOP] += 1


def _entry_count_off(eng: Engine) -> None:
    eng.index.store.meta[P.M_ENTRIES] += 1


def _key_names_another_list(eng: Engine) -> None:
    st = eng.index.store
    used = np.flatnonzero(st.h_keys != P.EMPTY)
    st.h_vals[used[0]] = st.h_vals[used[1]]


def _key_out_of_probe_reach(eng: Engine) -> None:
    st = eng.index.store
    mask = len(st.h_keys) - 1
    for i in np.flatnonzero(st.h_keys != P.EMPTY).tolist():  # move a key to the EMPTY slot before its home
        home = P.slot_of(np.full(mask + 1, P.EMPTY, dtype=np.int64), st.h_keys[i])
        j = (home - 1) & mask
        if st.h_keys[j] == P.EMPTY:
            st.h_keys[j], st.h_vals[j] = st.h_keys[i], st.h_vals[i]
            st.h_keys[i], st.h_vals[i] = P.EMPTY, -1
            return
    raise AssertionError("no key to move")


def _tail_fill_zero(eng: Engine) -> None:
    st = eng.index.store
    p = int(np.flatnonzero(st.p_head[: st.meta[P.M_POSTINGS]] >= 0)[0])
    st.meta[P.M_ENTRIES] -= int(st.p_fill[p])
    st.p_fill[p] = 0


def _slot_of_wrong(eng: Engine) -> None:
    a, b = _active(eng)[:2].tolist()
    eng.subs.slot_of[eng.subs.ids[a]] = b


def _res_n_over_kb(eng: Engine) -> None:
    s = _first_ranked(eng)
    eng.subs.cols.res_n[s] = eng.subs.cols.kb[s] + 1


def _keyword_segments_overlap(eng: Engine) -> None:
    c = eng.subs.cols
    act = _active(eng).tolist()
    a, b = next((a, b) for a in act for b in act
                if a != b and c.kw_len[a] == c.kw_len[b] and (c.kind[a] == 0) == (c.kind[b] == 0))
    c.kw_off[a] = c.kw_off[b]  # two slots share one segment (and a's is lost)


def _active_slot_on_free_list(eng: Engine) -> None:
    eng.subs.cols._free.append(int(_active(eng)[0]))


def _pool_used_off(eng: Engine) -> None:
    eng.subs.res.used += 1


def _object_weight_wrong(eng: Engine) -> None:
    o = int(np.flatnonzero(eng.objs.cols.alive[: eng.objs.cols.top])[0])
    eng.objs.cols.wo[o] *= 2


def _freed_object_keeps_refs(eng: Engine) -> None:
    oc = eng.objs.cols
    o = oc.add()  # a slot taken and freed, then left dirty
    oc.free(o)
    oc.refs[o] = 1


def _alive_count_off(eng: Engine) -> None:
    eng.alive.count += 1


def _alive_posted_twice(eng: Engine) -> None:
    oc = eng.objs.cols
    o = int(np.flatnonzero(oc.alive[: oc.top])[0])
    kw = int(eng.objs.keywords(o)[0])
    eng.alive.store.reserve(1, 1)
    P.append(eng.alive.store.arrays, np.int64(kw), (np.int64(o) << 32) | (int(oc.seq[o]) & 0xFFFFFFFF), P.NO_FILTER)


def _object_leaked(eng: Engine) -> None:
    eng.objs.add(Pub(10**6, "leak", 0, 0.0, 0.0, ("a",)), [0], math.inf, alive=False)  # neither alive nor held


CORRUPTIONS: list[Callable[[Engine], None]] = [
    _chained_block_freed, _entry_count_off, _key_names_another_list, _key_out_of_probe_reach, _tail_fill_zero,
    _slot_of_wrong,
    _res_n_over_kb, _keyword_segments_overlap, _active_slot_on_free_list, _pool_used_off, _object_weight_wrong,
    _freed_object_keeps_refs, _alive_count_off, _alive_posted_twice, _object_leaked,
]


@pytest.mark.parametrize("corrupt", CORRUPTIONS, ids=[f.__name__.lstrip("_") for f in CORRUPTIONS])
def test_container_checks_catch_corruption(corrupt: Callable[[Engine], None]) -> None:
    eng = _engine()
    corrupt(eng)
    with pytest.raises(AssertionError):
        eng._check()
