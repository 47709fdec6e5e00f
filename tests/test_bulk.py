"""Registration in bulk (Engine._subscribe_many, index insert_many, cgrid.regions/post_many)
gives what one-by-one registration gives: the same notifications and results as the
reference, the index's invariants, and the same postings as placing each slot in turn."""

from __future__ import annotations

import pytest

from skpubsub.engine.engine import FEW_SUBS
from skpubsub.index.cgrid import CompiledGrid
from skpubsub.io.events import Sub
from skpubsub.io.validate import Gate
from skpubsub.runtime.engines import make_engine
from skpubsub.testing.streams import random_stream

INDEXES = ["dkm", "gi2", "aoiq", "igpt", "auto", "grid"]


def _events(seed: int, window: str):
    s = random_stream(seed, n_events=(60, 160), window=window, junk=False)
    gate = Gate(s.window, s.space_or_default)
    return [gate.admit(rec) for rec in s.events], s.space_or_default


@pytest.mark.parametrize("index", INDEXES)
@pytest.mark.parametrize("window", ["none", "count:4", "time:3"])
@pytest.mark.parametrize("few", [0, FEW_SUBS])
def test_bulk_registration_equals_the_reference_and_one_by_one(index, window, few, monkeypatch):
    """With ``few`` = 0 every run the terms allow goes by columns (the random streams' runs
    are short: with the default ``FEW_SUBS`` most go one by one)."""
    monkeypatch.setattr("skpubsub.engine.engine.FEW_SUBS", few)
    bulk_runs = []
    orig = CompiledGrid.place_many

    def counted(self, slots):
        bulk_runs.append(len(slots))
        return orig(self, slots)

    monkeypatch.setattr(CompiledGrid, "place_many", counted)
    for seed in range(12):
        events, space = _events(seed, window)
        ref = make_engine("reference", window, space)
        one = make_engine(index, window, space)
        many = make_engine(index, window, space)
        expect = ref.apply(events)
        singly = [n for ev in events for n in one.apply([ev])]  # runs of one: never in bulk
        together = many.apply(events)
        assert singly == expect and together == expect, (seed, index, window)
        assert many.all_results() == ref.all_results()
        many._check()
    if index != "grid" and index != "igpt" and window == "none" and few == 0:
        assert sum(n > 1 for n in bulk_runs) >= 5, "the bulk path was hardly taken"


def test_place_many_posts_what_place_posts_one_by_one():
    subs = [Sub(i, f"s{i}", 0, kind, ("a", "b", "c")[: 1 + i % 3], match_all=bool(i % 2),
                rect=(i % 7, i % 5, i % 7 + (i % 4) * 0.5, i % 5 + 1.0) if kind == "range" else None,
                x=float(i % 9), y=float(i % 4), k=1 + i % 3)
            for i, kind in enumerate(["range", "knn"] * 40)]
    a = make_engine("dkm", "none")
    b = make_engine("dkm", "none")
    a.apply(subs)  # in bulk
    for ev in subs:  # the lone path (``apply`` would hold them and register them as a run)
        assert b._subscribe_one(ev)
        b._settle()
    ia, ib = a.index, b.index
    for f in ("epoch", "level", "box", "nkw", "kw0", "pending"):
        assert (getattr(ia, f)[: len(subs)] == getattr(ib, f)[: len(subs)]).all(), f
    ca, cb = ia.store.contents(), ib.store.contents()
    assert ca.keys() == cb.keys() and all((ca[k] == cb[k]).all() for k in ca)
    assert ia.live_entries == ib.live_entries
    a._check()
