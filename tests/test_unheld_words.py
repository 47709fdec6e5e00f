"""Object words nobody holds (``Engine.add_run`` under a window that retains no object):
not learnt, each standing in as a placeholder id, yet every result stays the reference's:
a word first met on an object and subscribed to later, top-k weights (1/sqrt of *all* of
an object's words), snapshots, pickles and migrations between workers in between."""

from __future__ import annotations

import pickle
import random

import pytest

from skpubsub.core.vocab import Vocabulary
from skpubsub.engine.engine import Engine
from skpubsub.engine.snapshot import capture, restore
from skpubsub.io.events import Pub, Rejection, Sub
from skpubsub.io.validate import Gate
from skpubsub.runtime.engines import make_engine
from skpubsub.testing.reference import ReferenceEngine


def test_known_learns_nothing_and_placeholders_are_held_for_good() -> None:
    v = Vocabulary()
    a = v.acquire(("a",))[0]
    assert v.known(["x", "a", "y"]).tolist() == [-1, a, -1] and v.live == 1  # nothing learnt
    ph = v.placeholders(3)
    assert len(ph) == 3 and len(set(ph.tolist())) == 3 and a not in ph.tolist()
    assert v.placeholders(2) is ph and len(v.placeholders(4)) == 4  # learnt once, on demand
    v.slack = None  # forget at once: a placeholder is held for good, never forgotten
    v.hold(ph[:2])
    v.release(ph[:2])
    v.release([a])
    assert v.released() == [a] and all(v.words[i] is not None for i in ph.tolist())
    assert all(v.words[i].startswith(" ") for i in ph.tolist())  # no keyword can be one (they are stripped)
    v._check()


def _stream(seed: int, n: int = 150) -> list[dict]:
    """Objects carry mostly words no subscription holds (fresh ones, 1-4 of them, some with
    no held word at all); subscriptions take a few common words and, now and then, a word
    an earlier object carried; subscriptions come, go and expire; positions on a small
    lattice (ties)."""
    rng = random.Random(f"unheld-{seed}")
    evs: list[dict] = []
    active: list[str] = []
    seen: list[str] = []
    t = 0
    for i in range(n):
        t += rng.choice((0, 1, 1, 2))
        r = rng.random()
        if r < 0.6:
            kws = [f"u{i}_{j}" for j in range(rng.randint(0, 4))]
            kws += rng.sample(["a", "b", "c"] + seen[-4:], rng.randint(0 if kws else 1, 2))
            rng.shuffle(kws)
            seen.extend(k for k in kws if k.startswith("u"))
            evs.append({"op": "pub", "t": t, "id": f"o{i % 9}", "x": rng.randint(-3, 3), "y": rng.randint(-3, 3),
                        "keywords": kws})
        elif r < 0.88 or not active:
            sid = f"s{i}"
            kws = rng.sample(["a", "b", "c"] + seen[-6:], rng.randint(1, 2))
            kind = rng.choice(("knn", "topk", "topk", "range"))
            ev = {"op": "sub", "t": t, "id": sid, "kind": kind, "keywords": kws}
            if kind == "range":
                x, y = rng.randint(-3, 2), rng.randint(-3, 2)
                ev.update(rect=[x, y, x + rng.randint(0, 4), y + rng.randint(0, 4)], match=rng.choice(("all", "any")))
            else:
                ev.update(x=rng.randint(-3, 3), y=rng.randint(-3, 3), k=rng.randint(1, 3))
                if kind == "topk":
                    ev["alpha"] = rng.choice((0.0, 0.3, 1.0))
                    if rng.random() < 0.4:
                        ev["weights"] = {kws[0]: rng.choice((0.5, 2.0))}
                else:
                    ev["match"] = rng.choice(("all", "any"))
            if rng.random() < 0.25:
                ev["expires"] = t + rng.randint(1, 8)
            active.append(sid)
            evs.append(ev)
        else:
            evs.append({"op": "unsub", "t": t, "id": active.pop(rng.randrange(len(active)))})
    return evs


def _events(records: list[dict], window: str) -> list:
    g = Gate(window)
    return [ev for i, r in enumerate(records, 1) if not isinstance(ev := g.admit(r, i), Rejection)]


@pytest.mark.parametrize("window", ["none", "count:5", "time:4"])
def test_unheld_object_words_stay_exact_in_every_index(window: str) -> None:
    """Every index class against the reference, one event at a time and in runs (``compare``
    checks ``Engine._check`` too: an id per word, references exactly the holders)."""
    from skpubsub.testing.conformance import compare, engine_factory

    for seed in range(3):
        records = _stream(seed)
        for index in ("dkm", "aoiq", "igpt", "auto"):
            compare(records, window, None, engine_factory(index))


def test_a_word_first_unheld_then_subscribed() -> None:
    """Under ``none`` a subscription on a word an earlier object carried starts empty and
    finds the objects after it; under a count window it finds the object still alive."""
    recs = [{"op": "sub", "t": 0, "id": "s0", "kind": "range", "rect": [-9, -9, 9, 9], "keywords": ["a"]},
            {"op": "pub", "t": 1, "id": "o1", "x": 0, "y": 0, "keywords": ["a", "zz", "yy"]},
            {"op": "pub", "t": 1, "id": "o2", "x": 1, "y": 0, "keywords": ["zz"]},
            {"op": "sub", "t": 2, "id": "k", "kind": "knn", "x": 0, "y": 0, "k": 2, "keywords": ["zz"]},
            {"op": "sub", "t": 2, "id": "q", "kind": "topk", "x": 0, "y": 0, "k": 2, "alpha": 0.0,
             "keywords": ["zz", "yy"]},
            {"op": "pub", "t": 3, "id": "o3", "x": 2, "y": 0, "keywords": ["yy", "zz", "xx"]}]
    for window, first in (("none", []), ("count:5", ["o1", "o2"])):
        evs = _events(recs, window)
        eng, ref = make_engine("auto", window), ReferenceEngine(window)
        assert eng.apply(evs[:3]) == ref.apply(evs[:3])
        if window == "none":  # nothing learnt for words no subscription holds
            assert "zz" not in eng.vocab._ids and "yy" not in eng.vocab._ids
        assert eng.apply(evs[3:5]) == ref.apply(evs[3:5])
        assert sorted(eng.results("k")) == first
        assert eng.apply(evs[5:]) == ref.apply(evs[5:])
        assert eng.all_results() == ref.all_results()
        eng._check()


def test_topk_weights_count_every_word_of_an_object() -> None:
    """Text-only top-k on one held word: the rank is 1/sqrt(number of words), unheld
    words included (a placeholder per word keeps the count)."""
    recs = [{"op": "sub", "t": 0, "id": "q", "kind": "topk", "x": 0, "y": 0, "k": 2, "alpha": 0.0, "keywords": ["a"]}]
    words = [["a", "p", "q", "r"], ["a", "s"], ["a", "t", "u"], ["a", "v", "w", "x", "y"]]
    recs += [{"op": "pub", "t": i + 1, "id": f"o{i}", "x": i, "y": 0, "keywords": kw} for i, kw in enumerate(words)]
    evs = _events(recs, "none")
    for index in ("grid", "igpt", "aoiq"):
        eng, ref = make_engine(index), ReferenceEngine("none")
        assert eng.apply(evs) == ref.apply(evs)
        assert eng.results("q") == ref.results("q") == ["o1", "o2"]


def test_snapshot_pickle_and_migration_keep_the_words() -> None:
    """A worker under ``none`` captured (its held objects exported by their words, never a
    placeholder's), restored, pickled, and goes on like the reference; a skewed cluster
    rebalanced after every batch too."""
    from skpubsub.core.config import Space
    from skpubsub.runtime.local import LocalCluster
    from skpubsub.runtime.rebalance import Rebalancer
    from test_rebalance import skewed_plan

    for seed in range(4):
        evs = _events(_stream(seed + 10, n=200), "none")
        ref = ReferenceEngine("none")
        eng = Engine("none", index="auto", external_expiry=True)
        half = len(evs) // 2
        got = [n for ns in eng.apply_routed([(ev, ()) for ev in evs[:half]]) for n in ns]
        assert got == ref.apply(evs[:half]), seed
        subs = {ev.id: ev for ev in evs[:half] if isinstance(ev, Sub)}
        live = [s for sid, s in subs.items() if sid in eng.subs.slot_of]
        body = capture(eng, live, ())
        for s in live:
            for p in eng.export(s.id):
                assert not any(w.startswith(" ") for w in p.keywords), p
        back = Engine("none", index="auto", external_expiry=True)
        restore(back, body)
        back = pickle.loads(pickle.dumps(back))
        back._check()
        got = [n for ns in back.apply_routed([(ev, ()) for ev in evs[half:]]) for n in ns]
        assert got == ref.apply(evs[half:]), seed
        assert back.all_results() == ref.all_results(), seed

        ref = ReferenceEngine("none")
        rb = Rebalancer(Space(), sigma=1.1, period=1, p=3, grid=4, algorithm="gr", measure="model")
        with LocalCluster(skewed_plan(3), "none", None, processes=False, rebalancer=rb) as cl:
            for i in range(0, len(evs), 7):
                assert cl.apply(evs[i:i + 7]) == ref.apply(evs[i:i + 7]), (seed, i)
            assert cl.results() == ref.all_results(), seed
            assert cl.migrated, seed
