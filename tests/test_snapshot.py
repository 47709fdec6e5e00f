"""An engine pickled mid-stream (a worker snapshot, a restart) goes on exactly as the
reference engine; the snapshot leaves stale postings and spare capacity behind."""

from __future__ import annotations

import pickle

import pytest

from skpubsub.runtime.engines import make_engine
from skpubsub.io.events import Rejection
from skpubsub.io.validate import Gate
from skpubsub.testing.reference import ReferenceEngine
from skpubsub.testing.streams import random_stream


@pytest.mark.parametrize("index", ["dkm", "grid", "igpt", "aoiq"])  # every index class
def test_a_restored_engine_goes_on_like_the_reference(index: str) -> None:
    for seed in range(60):
        s = random_stream(seed, n_events=(60, 200))
        g = Gate(s.window, s.space)
        evs = [ev for i, r in enumerate(s.events, 1) if not isinstance(ev := g.admit(r, i), Rejection)]
        engine, ref = make_engine(index, s.window, s.space), ReferenceEngine(s.window, s.space)
        a, b = len(evs) // 3, 2 * len(evs) // 3
        for lo, hi in ((0, a), (a, b), (b, len(evs))):
            assert engine.apply(evs[lo:hi]) == ref.apply(evs[lo:hi]), (seed, lo)
            engine = pickle.loads(pickle.dumps(engine))  # restored at every cut
            engine._check()
        assert engine.all_results() == ref.all_results(), seed


def test_the_snapshot_drops_stale_postings_and_spare_capacity() -> None:
    s = random_stream(3, n_events=400, windows=("none",), junk=False)
    g = Gate(s.window, s.space)
    evs = [ev for i, r in enumerate(s.events, 1) if not isinstance(ev := g.admit(r, i), Rejection)]
    engine = make_engine("dkm", s.window, s.space)
    engine.apply(evs)
    back = pickle.loads(pickle.dumps(engine))
    assert back.index.store.entries == back.index.live_entries <= engine.index.store.entries
    assert len(pickle.dumps(engine)) < engine.nbytes


@pytest.mark.parametrize("index", ["dkm", "aoiq"])
def test_a_full_sweep_drops_every_stale_entry_and_keeps_results(index: str) -> None:
    """``compact_all`` (run when stale entries outnumber live ones) leaves exactly the live
    entries, and the engine goes on like the reference."""
    for seed in range(10):
        s = random_stream(seed, n_events=(200, 400))
        g = Gate(s.window, s.space)
        evs = [ev for i, r in enumerate(s.events, 1) if not isinstance(ev := g.admit(r, i), Rejection)]
        engine, ref = make_engine(index, s.window, s.space), ReferenceEngine(s.window, s.space)
        half = len(evs) // 2
        assert engine.apply(evs[:half]) == ref.apply(evs[:half]), seed
        ix = engine.index
        ix.kernel_grid.compact_all()
        assert ix.store.entries == ix.live_entries, seed
        engine._check()
        assert engine.apply(evs[half:]) == ref.apply(evs[half:]), seed
        assert engine.all_results() == ref.all_results(), seed
