"""Objects nobody can hold are not stored (``driver.Transient``): under window ``none`` with
no kNN or top-k subscription live, a run's objects stay out of the object table, and every
index still gives the reference's notifications and results, as kNN and top-k
subscriptions come (the table is used again) and go (it is not)."""

from __future__ import annotations

import random

import pytest

from skpubsub.engine import driver
from skpubsub.runtime.engines import make_engine
from skpubsub.testing.conformance import compare, engine_factory


def _stream(seed: int, n: int = 160) -> list[dict]:
    """Range subscriptions (all/any, some expiring) and objects on a small lattice (ties); now
    and then a kNN or top-k subscription that a later event ends, so runs with holders and
    runs without alternate."""
    rng = random.Random(f"transient-{seed}")
    words = ["a", "b", "c", "d"]
    evs: list[dict] = []
    holders: list[str] = []
    t = 0
    for i in range(n):
        t += rng.choice((0, 0, 1))
        r = rng.random()
        if r < 0.62:
            evs.append({"op": "pub", "t": t, "id": f"o{i % 11}", "x": rng.randint(-3, 3), "y": rng.randint(-3, 3),
                        "keywords": rng.sample(words + [f"w{i}"], rng.randint(0, 3))})
        elif r < 0.85:
            x, y = rng.randint(-3, 2), rng.randint(-3, 2)
            ev = {"op": "sub", "t": t, "id": f"r{i}", "kind": "range", "keywords": rng.sample(words, rng.randint(1, 2)),
                  "rect": [x, y, x + rng.randint(0, 3), y + rng.randint(0, 3)], "match": rng.choice(("all", "any"))}
            if rng.random() < 0.2:
                ev["expires"] = t + rng.randint(0, 5)
            evs.append(ev)
        elif r < 0.93 and not holders:
            sid = f"k{i}"
            kind = rng.choice(("knn", "topk"))
            ev = {"op": "sub", "t": t, "id": sid, "kind": kind, "keywords": rng.sample(words, 1),
                  "x": rng.randint(-3, 3), "y": rng.randint(-3, 3), "k": rng.randint(1, 3)}
            if kind == "topk":
                ev["alpha"] = 0.5
            if rng.random() < 0.5:
                ev["expires"] = t + rng.randint(1, 4)  # ends by itself
            else:
                holders.append(sid)
            evs.append(ev)
        elif holders:
            evs.append({"op": "unsub", "t": t, "id": holders.pop()})
    return evs


@pytest.fixture
def runs(monkeypatch) -> list[bool]:
    """Whether each publish run went transient, in order."""
    seen: list[bool] = []
    real = driver.Publisher.transient

    def counted(path) -> bool:
        got = real(path)
        seen.append(got)
        return got

    monkeypatch.setattr(driver.Publisher, "transient", counted)
    return seen


@pytest.mark.parametrize("index", ["auto", "dkm", "gi2", "aoiq"])
def test_transient_runs_stay_exact(index: str, runs: list[bool]) -> None:
    for seed in range(3):
        compare(_stream(seed), "none", None, engine_factory(index))
    assert sum(runs) >= 20 and len(runs) - sum(runs) >= 5  # both kinds of run were exercised


def test_no_object_is_stored_while_nothing_can_hold_one(runs: list[bool]) -> None:
    eng = make_engine("auto", "none")
    from skpubsub.io.validate import Gate

    g = Gate("none")
    recs = [{"op": "sub", "t": 0, "id": "r", "kind": "range", "rect": [0, 0, 5, 5], "keywords": ["a"]}]
    recs += [{"op": "pub", "t": 1, "id": f"o{i}", "x": i, "y": 1, "keywords": ["a", f"z{i}"]} for i in range(8)]
    evs = [g.admit(r, i) for i, r in enumerate(recs, 1)]
    notes = eng.apply(evs)
    assert [n.object for n in notes] == [f"o{i}" for i in range(6)] and runs == [True]
    assert eng.objs.cols.count == 0 and eng.stats["objects"] == 8
    eng._check()
    g2 = [g.admit({"op": "sub", "t": 2, "id": "k", "kind": "knn", "x": 0, "y": 0, "k": 1, "keywords": ["a"]}, 20),
          g.admit({"op": "pub", "t": 3, "id": "p", "x": 1, "y": 1, "keywords": ["a"]}, 21)]
    eng.apply(g2)
    assert runs == [True, False] and eng.results("k") == ["p"] and eng.objs.cols.count == 1
