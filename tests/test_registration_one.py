"""The lean path for a lone subscription or unsubscription (``Engine._subscribe_one``,
``_unsubscribe_one``; issue 20 item 3, one by one) gives what the plain path and the bulk
path give: seeded random streams where subscriptions, unsubscriptions and publications
interleave, applied one event at a time and in random batches, against the reference
engine (``conformance.compare``), with each engine's ``_check`` after every step; and the
lean path is really taken."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings

from skpubsub.engine.engine import Engine
from skpubsub.io.events import RANGE, Sub, Unsub
from skpubsub.runtime.engines import make_engine
from skpubsub.testing.conformance import compare, engine_factory, validate
from skpubsub.testing.streams import random_stream, streams

INDEXES = [("dkm", {}), ("gi2", {}), ("aoiq", {"warm_n": 0}), ("igpt", {"grid": 2, "group": 2}), ("auto", {})]


def _with(ev, **changes):
    """``ev`` with some fields changed (events are msgspec structs or dataclasses)."""
    if isinstance(ev, msgspec.Struct):
        return msgspec.structs.replace(ev, **changes)
    return dataclasses.replace(ev, **changes)


class _Counting:
    """An engine factory that counts the lone events the lean path took."""

    def __init__(self, index: str, params: dict) -> None:
        self.make = engine_factory(index, **params)
        self.__name__ = self.make.__name__
        self.taken = {"sub": 0, "unsub": 0}

    def __call__(self, window, space):
        eng = self.make(window, space)
        sub_one, unsub_one = eng._subscribe_one, eng._unsubscribe_one

        def subscribe_one(ev):
            done = sub_one(ev)
            self.taken["sub"] += done
            return done

        def unsubscribe_one(ev):
            done = unsub_one(ev)
            self.taken["unsub"] += done
            return done

        eng._subscribe_one, eng._unsubscribe_one = subscribe_one, unsubscribe_one
        return eng


@pytest.mark.parametrize("index,params", INDEXES, ids=[i for i, _ in INDEXES])
@pytest.mark.parametrize("window", ["none", "count", "time"])
def test_lone_events_agree_with_reference(index, params, window):
    factory = _Counting(index, params)
    for seed in range(6):
        s = random_stream(1000 + seed, n_events=(40, 120), windows=(window,))
        compare(s.events, s.window, s.space, factory, batch_seed=seed)
    assert factory.taken["sub"] > 0 and factory.taken["unsub"] > 0, factory.taken


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=streams(min_events=5, max_events=50))
def test_lone_events_hypothesis(stream):
    compare(stream.events, stream.window, stream.space, engine_factory("auto"), batch_seed=1)


def test_lone_path_equals_bulk_path():
    """A run of subscriptions registered one ``apply`` at a time leaves the same tables and
    postings as one ``apply`` of the whole run (the bulk path), then the same notifications."""
    s = random_stream(7, n_events=400, windows=("none",), junk=False)
    evs, _ = validate(s.events, s.window, s.space)
    subs = [ev for ev in evs if isinstance(ev, Sub)]
    pubs = [ev for ev in evs if not isinstance(ev, (Sub, Unsub))]
    t = max([ev.t for ev in subs], default=0)
    subs = [_with(ev, id=f"u{i}", t=t, expires=None) for i, ev in enumerate(subs)]  # ids unique
    for index in ("dkm", "aoiq", "auto", "igpt"):
        one, bulk = make_engine(index, s.window, s.space), make_engine(index, s.window, s.space)
        taken = 0
        for ev in subs:
            taken += one._subscribe_one(ev)
            one._settle()
        assert taken == len(subs)
        assert bulk.apply(subs) == []
        for eng in (one, bulk):
            eng._check()
        c1, c2 = one.subs.cols, bulk.subs.cols
        assert (c1._rec[: c1.top] == c2._rec[: c2.top]).all()
        for p in pubs:
            p = _with(p, t=max(t, p.t), expires=None)
            assert one.apply([p]) == bulk.apply([p])
        assert one.all_results() == bulk.all_results()
        one._check()
        # then unsubscribe everything one at a time: tables empty, keywords released
        for ev in subs:
            assert one._unsubscribe_one(Unsub(ev.seq, ev.id, t + 10**6))
            one._settle()
        assert one.subs.cols.count == 0 and not one.subs.slot_of
        one._check()


def test_engine_lean_conditions():
    """Under a retaining window a kNN subscription takes the plain path (its result starts
    from the alive objects); a range one the lean path."""
    eng = Engine("count:10", index="auto")
    knn = Sub(1, "a", 0, "knn", ("x",), x=0.0, y=0.0, k=2)
    rng = Sub(2, "b", 0, RANGE, ("x",), rect=(0.0, 0.0, 1.0, 1.0))
    assert not eng._subscribe_one(knn)
    assert eng._subscribe_one(rng)
    eng._settle()
    eng._check()
