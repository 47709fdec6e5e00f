"""Initial results of runs of kNN/top-k subscriptions registered against a full window,
found best-first through the alive objects' tree (``results.initial``, ``Engine._initial``):
exact against the reference engine (count and time windows, kNN `all`/`any`, top-k with and
without weights, ties of distance and score), and the notifications the one-by-one path
gives."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import skpubsub.engine.engine as E
from skpubsub.bench.inputs import phases
from skpubsub.bench.workload import WorkloadConfig, generate
from skpubsub.core.config import Space, Window
from skpubsub.io.validate import Gate
from skpubsub.runtime.engines import make_engine
from skpubsub.testing.conformance import compare, engine_factory

WORDS = [f"w{i}" for i in range(7)]


def _stream(rng: random.Random, n_fill: int, n_subs: int, rounds: int, grid: int, kinds: tuple) -> list[dict]:
    """Objects first (on a coarse grid of points: ties of distance and score), then runs of
    subscriptions at the last object's time, objects and unsubscriptions in between."""
    evs: list[dict] = []
    t, o, s = 1, 0, 0
    live: list[str] = []

    def objects(n: int) -> None:
        nonlocal t, o
        for _ in range(n):
            evs.append({"op": "pub", "id": f"o{o}", "t": t, "x": rng.randrange(grid) * 0.5,
                        "y": rng.randrange(grid) * 0.5, "keywords": rng.sample(WORDS, rng.randint(1, 4))})
            o += 1
            t += rng.random() < 0.3

    objects(n_fill)
    for _ in range(rounds):
        for _ in range(n_subs):
            kind = rng.choice(kinds)
            ev = {"op": "sub", "id": f"s{s}", "t": evs[-1]["t"], "kind": kind, "x": rng.uniform(-1, grid / 2 + 1),
                  "y": rng.uniform(-1, grid / 2 + 1), "k": rng.randint(1, 5), "keywords": rng.sample(WORDS, rng.randint(1, 3))}
            if kind == "topk":
                ev["alpha"] = rng.choice((0.0, 0.3, 0.5, 1.0, round(rng.random(), 3)))
                if rng.random() < 0.3:
                    ev["weights"] = [rng.choice((1, 2, 0.5)) for _ in ev["keywords"]]
            else:
                ev["match"] = rng.choice(("all", "any"))
            evs.append(ev)
            live.append(ev["id"])
            s += 1
        for _ in range(rng.randint(0, 3)):
            if live:
                evs.append({"op": "unsub", "id": live.pop(rng.randrange(len(live))), "t": evs[-1]["t"]})
        objects(rng.randint(1, n_fill))
    return evs


@pytest.fixture
def bulk(monkeypatch):
    """Every run of two or more subscriptions against alive objects goes through the tree."""
    monkeypatch.setattr(E, "FEW_SUBS", 1)
    monkeypatch.setattr(E, "TREE_PAIRS", 10**9)


def _counting(index: str):
    made = []
    make = engine_factory(index)

    def factory(window, space):
        made.append(make(window, space))
        return made[-1]

    factory.__name__ = index
    return factory, made


@pytest.mark.parametrize("window", ["count:40", "count:400", "time:30"])
@pytest.mark.parametrize("kinds", [("knn",), ("topk",), ("knn", "topk")])
def test_seeded_streams_against_the_reference(bulk, window, kinds):
    factory, made = _counting("auto")
    for seed in range(6):
        rng = random.Random(seed)
        evs = _stream(rng, rng.randint(20, 150), rng.randint(2, 60), 3, rng.choice((3, 8, 40)), kinds)
        compare(evs, window, None, factory, check_every_event=False, batch_seed=seed)
    assert sum(e.stats["initial"] for e in made) > 300  # the tree found them, in the batched passes


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32), n_fill=st.integers(1, 60), n_subs=st.integers(2, 30), grid=st.sampled_from((1, 2, 5, 30)),
       window=st.sampled_from(("count:10", "count:100", "time:5", "time:50")),
       kinds=st.sampled_from((("knn",), ("topk",), ("knn", "topk"))))
def test_hypothesis_streams_against_the_reference(bulk, seed, n_fill, n_subs, grid, window, kinds):
    rng = random.Random(seed)
    compare(_stream(rng, n_fill, n_subs, 2, grid, kinds), window, None, engine_factory("auto"),
            check_every_event=False, batch_seed=seed)


def _notes(index: str, events: list, window: str) -> tuple[list, dict]:
    w = Window.parse(window)
    eng = make_engine(index, w, Space())
    fill, build = phases(events)
    out = eng.apply(events[:fill]) + eng.apply_columnar(events[fill:build]).to_list()
    for i in range(build, len(events), 500):
        out += eng.apply_columnar(events[i:i + 500]).to_list()
    return out, eng.stats


@pytest.mark.parametrize("kind,match", [("knn", "all"), ("knn", "any"), ("topk", "any")])
def test_geonames_fill_as_one_by_one(monkeypatch, kind, match):
    """The papers' shape on real places: the same notifications as registering one by one."""
    cfg = WorkloadConfig(objects=400, subscriptions=600, fill_window=1500, kind=kind, match=match, sub_rate=0,
                         unsub_rate=0, objects_per_step=10, seed=5, limit=3000)
    gate = Gate(Window.parse("count:1500"))
    events = [gate.admit(r) for r in generate(cfg)]
    bulk, stats = _notes("auto", events, "count:1500")
    assert stats["initial"] == 600
    monkeypatch.setattr(E, "TREE_PAIRS", 0)  # the tree never worth building: one by one
    one, stats = _notes("auto", events, "count:1500")
    assert stats["initial"] == 0
    assert len(bulk) > 500 and repr(bulk) == repr(one)
