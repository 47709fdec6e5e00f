"""Issue 18, class 5 (SPEC section 6, "Memory"): the vocabulary forgets keywords nobody
holds and recycles their ids, so an endless vocabulary under a window stays bounded.
(The engine's wiring of acquire/release is reported separately; this holds the rules.)"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skpubsub.core.vocab import Vocabulary


def test_old_interface_unchanged() -> None:
    v = Vocabulary()
    assert v.ids(("a", "b", "a")) == [0, 1, 0] and v.id("c") == 2 and len(v) == 3
    v.count([0, 2])
    assert v.freq[:3].tolist() == [1, 0, 1]


def test_endless_vocabulary_under_a_window_stays_bounded() -> None:
    """A count window of 50 objects, 3 new keywords each, 20,000 objects: ids stay within
    what the window holds (plus one quarantine round), words and frequencies are dropped."""
    v = Vocabulary()
    alive: list[list[int]] = []
    for n in range(20_000):
        ids = v.acquire((f"w{n}a", f"w{n}b", "common"))
        v.count(ids)
        alive.append(ids)
        if len(alive) > 50:
            v.release(alive.pop(0))
        if n % 10 == 0:  # an owner drops the keys' postings, then lets the ids go back
            v.released()
            v.recycle()
    v._check()
    assert v.live == 2 * 50 + 1
    assert len(v) <= 2 * 50 + 1 + 2 * 11 + 2, len(v)  # the id space, hence freq/postings rows
    assert v.freq[v.id("common")] == 20_000  # a keyword still held keeps its statistic
    assert sum(w is not None for w in v.words) == v.live


def test_released_ids_wait_for_recycle_and_come_back_clean() -> None:
    v = Vocabulary()
    sub = v.acquire(("x", "y"))
    obj = v.acquire(("y", "z"))
    v.count(obj)
    v.release(obj)  # z forgotten, y still held by the subscription
    assert v.released() == [2] and v.words[2] is None and v.freq[2] == 0
    assert v.id("new") == 3  # quarantined: not reused before recycle
    v.recycle()
    assert v.id("newer") == 2 and v.freq[2] == 0
    assert v.id("y") == sub[1]
    v._check()
    with pytest.raises(ValueError, match="released more often"):
        v.release([2])
    assert np.all(v.refs >= 0)


_WORD = st.sampled_from([f"w{i}" for i in range(12)])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("ids"), st.lists(_WORD, max_size=10)),
                          st.tuples(st.just("hold"), st.lists(_WORD, min_size=1, max_size=4, unique=True)),
                          st.tuples(st.just("drop"), st.integers(0, 50)),
                          st.tuples(st.just("recycle"), st.none())), max_size=40))
def test_a_run_of_ids_equals_id_word_by_word(ops) -> None:
    """``ids`` of a run (new words learnt at once, freed ids reused last-freed first) gives
    and leaves what ``id`` of each word in turn does, through forgetting and recycling."""
    run, one = Vocabulary(), Vocabulary()
    held: list[tuple[list[int], list[int]]] = []
    for op, arg in ops:
        if op == "ids":
            assert run.ids(tuple(arg)) == [one.id(w) for w in arg]
        elif op == "hold":
            held.append((run.acquire(tuple(arg)), one.acquire(tuple(arg))))
        elif op == "drop" and held:
            a, b = held.pop(arg % len(held))
            run.release(a)
            one.release(b)
        elif op == "recycle":
            assert run.released() == one.released()
            run.recycle()
            one.recycle()
        assert run.words == one.words and run._ids == one._ids and run._free == one._free
        run._check()
        if op == "recycle":  # a snapshot keeps the words as a plain dict; ``ids`` learns again
            run = pickle.loads(pickle.dumps(run))
            assert type(run._ids) is dict


def test_ids_learns_a_word_once_in_order_of_first_use() -> None:
    v = Vocabulary()
    assert v.ids(("b", "a", "b", "c", "a")) == [0, 1, 0, 2, 1] and v.words == ["b", "a", "c"]
    assert v._ids.get("zz") is None and "zz" not in v._ids and len(v) == 3  # ``get`` does not learn
    w = pickle.loads(pickle.dumps(v))
    assert w.ids(("c", "zz")) == [2, 3] and w.words == ["b", "a", "c", "zz"] and w.live == 4
    w._check()


# -- the engine's wiring: ids recycled under a window, results exact -------------------------
def _endless(seed: int, n: int = 160, window: str = "count:4") -> list[dict]:
    """A stream whose vocabulary never ends: objects and subscriptions take mostly new words
    (some shared with recent ones, some common), subscriptions come and go, so keyword ids
    are forgotten and handed to new words all the time; positions on a small lattice (ties)."""
    import random

    rng = random.Random(f"endless-{seed}")
    evs: list[dict] = []
    active: list[str] = []
    t = 0
    for i in range(n):
        t += rng.choice((0, 1, 1, 2))
        fresh = [f"w{i}", f"w{max(0, i - rng.randint(0, 6))}"]
        kws = rng.sample(fresh + ["a", "b"], rng.randint(1, 3))
        r = rng.random()
        if r < 0.55:
            ev = {"op": "pub", "t": t, "id": f"o{i % 7}", "x": rng.randint(-4, 4), "y": rng.randint(-4, 4),
                  "keywords": kws}
        elif r < 0.85 or not active:
            sid = f"s{i}"
            kind = rng.choice(("knn", "topk", "range"))
            ev = {"op": "sub", "t": t, "id": sid, "kind": kind, "keywords": kws}
            if kind == "range":
                x, y = rng.randint(-4, 3), rng.randint(-4, 3)
                ev.update(rect=[x, y, x + rng.randint(0, 4), y + rng.randint(0, 4)], match=rng.choice(("all", "any")))
            else:
                ev.update(x=rng.randint(-4, 4), y=rng.randint(-4, 4), k=rng.randint(1, 3))
                ev.update(alpha=rng.choice((0.0, 0.5, 1.0))) if kind == "topk" else ev.update(
                    match=rng.choice(("all", "any")))
            if rng.random() < 0.3:
                ev["expires"] = t + rng.randint(1, 6)
            active.append(sid)
        else:
            ev = {"op": "unsub", "t": t, "id": active.pop(rng.randrange(len(active)))}
        evs.append(ev)
    return evs


@pytest.mark.parametrize("window", ["count:4", "time:5", "none"])
def test_recycled_keyword_ids_stay_exact_in_every_index(window: str) -> None:
    """Every index configuration against the reference on streams that forget and recycle
    keyword ids constantly (``Engine._check`` after every event also checks that each id's
    references are exactly its holders: object slots in use and active subscriptions)."""
    from skpubsub.testing.conformance import compare, engine_factory, index_configs

    configs = [(n, p) for n, p in index_configs() if not p or p.get("buffer") == "cskyband"]
    configs += [("grid", {"grid": 4, "buffer": "cskyband", "kmax": 1.0})]  # the plain path
    evs = _endless(0, n=120, window=window)
    for index, params in configs:
        base = engine_factory(index, **params)

        def make(w, sp, base=base):  # forget at once (no slack): ids recycled all the time
            eng = base(w, sp)
            eng.vocab.slack = None
            return eng

        make.__name__ = base.__name__
        compare(evs, window, None, make)


@pytest.mark.parametrize("index", ["dkm", "grid", "aoiq", "igpt"])
def test_engine_vocabulary_bounded_under_a_window(index: str) -> None:
    """20,000 objects with new keywords each under count:50, with subscriptions coming and
    going: the id space stays near what the window and the live subscriptions hold (before:
    one id per keyword ever seen, 40,000+)."""
    from skpubsub.core.config import Space, Window
    from skpubsub.io.validate import Gate
    from skpubsub.runtime.engines import make_engine

    w = Window.parse("count:50")
    eng = make_engine(index, w, Space())
    eng.vocab.slack = 64  # unheld words kept before a purge (the engine's default is larger)
    gate = Gate(w, Space())
    batch: list = []
    for n in range(20_000):
        rec = {"op": "pub", "t": n, "id": n, "x": n % 360 - 180, "y": n % 180 - 90, "keywords": [f"w{n}", f"v{n}", "c"]}
        if n % 100 == 0:
            rec = {"op": "sub", "t": n, "id": f"s{n}", "kind": "knn", "x": 0, "y": 0, "k": 2, "keywords": [f"q{n}", "c"]}
        elif n % 100 == 50:
            rec = {"op": "unsub", "t": n, "id": f"s{n - 50}"}
        batch.append(gate.admit(rec))
        if len(batch) == 500:
            eng.apply(batch)
            batch = []
    eng.apply(batch)
    eng._check()
    v = eng.vocab
    held = 2 * 50 + 1 + 2 * 2  # the window's words, live subscriptions', "c"
    assert v.live <= 64 + 2 * held, v.live  # plus at most slack + held unheld ones
    assert len(v) < 2_000, len(v)  # ids in use plus what one batch of 500 may free
    assert v.freq[v.id("c")] > 0


# -- the multi-worker runtime: the dispatcher's per-keyword maps --------------------------------
def _endless_file(path, n: int) -> None:
    """``n`` events under an endless vocabulary: objects with two new words and a common one,
    subscriptions of every kind with a new word (half expire, half are unsubscribed later)."""
    import json
    import random

    rng = random.Random("endless-dispatch")
    active: list[str] = []
    with open(path, "w") as f:
        for i in range(n):
            r = rng.random()
            if r < 0.8:
                rec = {"op": "pub", "t": i, "id": i, "x": rng.uniform(-180, 180), "y": rng.uniform(-90, 90),
                       "keywords": [f"w{i}", f"v{i}", "c"]}
            elif r < 0.9 or not active:
                kind = rng.choice(("knn", "range", "topk"))
                rec = {"op": "sub", "t": i, "id": f"s{i}", "kind": kind, "keywords": [f"q{i}", f"w{i - 1}", "c"]}
                if kind == "range":
                    rec.update(rect=[-20, -20, 20, 20], match=rng.choice(("all", "any")))
                else:
                    rec.update(x=0, y=0, k=2)
                    rec.update(alpha=0.5) if kind == "topk" else rec.update(match=rng.choice(("all", "any")))
                if rng.random() < 0.5:
                    rec["expires"] = i + 300
                else:
                    active.append(rec["id"])
            else:
                rec = {"op": "unsub", "t": i, "id": active.pop(rng.randrange(len(active)))}
            f.write(json.dumps(rec) + "\n")


@pytest.mark.parametrize("partitioner", ["dkm", "prefix"])
def test_dispatcher_maps_level_off_on_an_endless_vocabulary(tmp_path, monkeypatch, partitioner: str) -> None:
    """``run --workers 2 --partitioner P`` (the runtime in one process) over 6,000 events under
    ``time:40`` whose words never come back: the dispatcher's maps (keyword -> workers of the
    subscriptions posted under it, keyword -> alive objects, alive objects, subscriptions) and
    each worker engine's vocabulary stay at what the window and the live subscriptions hold,
    from the first quarter of the run to its end."""
    from skpubsub.runtime import local, runner

    sizes: list[tuple[int, ...]] = []

    class Watched(local.LocalCluster):
        def __init__(self, *a, **k) -> None:
            super().__init__(*a, **k)
            for c in self._conns:  # unheld words kept before a purge (the engine's default is larger)
                c.engine.vocab.slack = 64

        def apply_columnar(self, events):
            out = super().apply_columnar(events)
            d = self.dispatcher
            vocab = max(c.engine.vocab.live for c in self._conns)
            sizes.append((len(d.kw_workers), len(d._alive_kw), len(d.alive), len(d.where), len(d._keys),
                          len(d.subs), len(d.clock._subs), vocab))
            return out

    monkeypatch.setattr(local, "LocalCluster", Watched)
    monkeypatch.setattr(runner, "fleet_applies", lambda index, rebalance: False)  # the dispatcher's runtime
    src = tmp_path / "events.jsonl"
    _endless_file(src, 6_000)
    runner.run(src, tmp_path / "out", window="time:40", workers=2, partitioner=partitioner, processes=False,
               batch_size=250, init_objects=200, progress=False)
    assert len(sizes) >= 20
    first = [max(col) for col in zip(*sizes[: len(sizes) // 4])]
    last = [max(col) for col in zip(*sizes[len(sizes) // 2:])]
    # 40 time units hold ~32 objects (3 words each) and ~300 units of subscriptions ~60 of them
    bounds = (3 * 80, 3 * 40 + 1, 40, 80, 80, 80, 80, 64 + 2 * 3 * 120)
    for name, a, b, bound in zip(("kw_workers", "_alive_kw", "alive", "where", "_keys", "subs", "clock", "vocab"),
                                 first, last, bounds):
        assert b <= bound and b <= 2 * a + 8, (name, a, b, bound)


@pytest.mark.parametrize("window", ["time:40", "none"])
def test_fleet_maps_level_off_on_an_endless_vocabulary(tmp_path, monkeypatch, window: str) -> None:
    """The same stream through the fleet (runtime/fleet.py): the router's maps (live ids'
    workers and seqs, routing words under ``none`` with the words it numbered, ends due, the
    window clock) and each worker engine's vocabulary stay at what the window and the live
    subscriptions hold."""
    from skpubsub.runtime import fleet, runner

    monkeypatch.setattr(fleet, "FORGET", 64)  # words known before a purge (the default is larger)
    sizes: list[tuple[int, ...]] = []
    exchange = fleet.Fleet.exchange

    def watched(self, items):
        out = exchange(self, items)
        r = self.router
        for w in self._local:
            w.engine.vocab.slack = 64
        sizes.append((len(r.where), len(r._seq), len(r._keys), len(r._ends), len(r.clock._heap),
                      len(r.word_id.words), len(r.counts), max(w.engine.vocab.live for w in self._local)))
        return out

    monkeypatch.setattr(fleet.Fleet, "exchange", watched)
    src = tmp_path / "events.jsonl"
    _endless_file(src, 6_000)
    runner.run(src, tmp_path / "out", window=window, workers=2, partitioner="dkm", processes=False,
               batch_size=250, init_objects=200, progress=False)
    assert len(sizes) >= 20
    first = [max(col) for col in zip(*sizes[: len(sizes) // 4])]
    last = [max(col) for col in zip(*sizes[len(sizes) // 2:])]
    # ~60 live subscriptions (3 words each), ~32 objects alive under time:40
    bounds = (80, 80, 80, 80, 40, 64 + 4 * 3 * 80, 2 * (64 + 4 * 3 * 80), 64 + 2 * 3 * 120)
    for name, a, b, bound in zip(("where", "seq", "keys", "ends", "clock", "words", "counts", "vocab"),
                                 first, last, bounds):
        assert b <= bound and b <= 2 * a + 8 + 2 * 64, (name, a, b, bound)


def test_prefix_plan_groups_level_off_on_an_endless_vocabulary(tmp_path, monkeypatch) -> None:
    """``run --workers 2 --partitioner prefix`` over the endless vocabulary above: the prefix
    plan's groups (``PrefixPlan._units``, one per loose prefix met) stay at what the live
    subscriptions hold (a group is dropped with its last subscription), from the first quarter
    of the run to its end; the groups' member counts match the placed subscriptions. Before
    the fix a group was kept for every prefix ever met (~600 here; 3,448 at 25k events)."""
    from collections import Counter

    from skpubsub.runtime import local, runner

    sizes: list[int] = []

    class Watched(local.LocalCluster):
        def apply_columnar(self, events):
            out = super().apply_columnar(events)
            plan = self.dispatcher.plan
            members = getattr(plan, "_members", None)  # (absent before the fix: only the size fails)
            if members is not None:
                assert members == dict(Counter(plan._key(p) for p in plan._prefix.values()))
                assert set(members) <= set(plan._units)
            sizes.append(len(plan._units))
            return out

    monkeypatch.setattr(local, "LocalCluster", Watched)
    monkeypatch.setattr(runner, "fleet_applies", lambda index, rebalance: False)  # the dispatcher's runtime
    src = tmp_path / "events.jsonl"
    _endless_file(src, 6_000)
    runner.run(src, tmp_path / "out", window="time:40", workers=2, partitioner="prefix", processes=False,
               batch_size=250, init_objects=200, progress=False)
    assert len(sizes) >= 20
    first = max(sizes[: len(sizes) // 4])
    last = max(sizes[len(sizes) // 2:])
    assert last <= 80 and last <= 2 * first + 8, (first, last)  # ~60 live subscriptions
