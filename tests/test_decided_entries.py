"""A range subscription's entry decides its match alone (``probe.decided``: its float32 box
a step inside, its keywords in the filter; live, since a slot's deciding entries are made
undecided before they die, ``placing.undecide``): the engines give the reference engine's
results where the decision is closest to wrong: objects on a rectangle's edges, a float64
step either side of them and on the float32 values around them; one to four keywords
(four: the records decide), all or any; ids unsubscribed and taken again (a slot reused);
a slot posted again, then ended."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skpubsub.core.config import Space, Window
from skpubsub.io.notifications import Match
from skpubsub.io.validate import Gate
from skpubsub.runtime.engines import make_engine
from skpubsub.testing.conformance import compare, engine_factory

EDGES = [0.1, 1 / 3, -52.52437, 7.0, 2.0 ** -30, -0.0, 13.000001]  # most not float32 values
WORDS = ["a", "b", "c", "d"]


def _near(v: float) -> list[float]:
    """``v``, a float64 step either side, and the float32 values around it."""
    f = float(np.float32(v))
    out = [v, math.nextafter(v, math.inf), math.nextafter(v, -math.inf), f]
    out += [float(np.nextafter(np.float32(f), np.float32(d))) for d in (math.inf, -math.inf)]
    return out


def _points(rect: list[float]) -> list[tuple[float, float]]:
    x1, y1, x2, y2 = rect
    mid_x, mid_y = (x1 + x2) / 2, (y1 + y2) / 2
    return ([(x, mid_y) for v in (x1, x2) for x in _near(v)] + [(mid_x, y) for v in (y1, y2) for y in _near(v)]
            + [(x, y) for x in _near(x1) for y in _near(y2)][:8])


@st.composite
def streams(draw):
    n = draw(st.integers(1, 6))
    # objects first, away from every rectangle (the words held by a subscription there, so
    # that they are counted): their keywords make some other than a subscription's first the
    # least frequent, the one it is posted under (``placing.rarest``)
    far = [{"op": "sub", "id": "far", "t": 0, "kind": "range", "rect": [90.0, 70.0, 91.0, 71.0],
            "keywords": WORDS, "match": "any"}]
    far += [{"op": "pub", "id": f"f{i}", "t": 0, "x": 100.0, "y": 80.0, "keywords": kws}
            for i, kws in enumerate(draw(st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=3,
                                                           unique=True), max_size=4)))]
    subs = []
    for i in range(n):
        x1, y1 = draw(st.sampled_from(EDGES)), draw(st.sampled_from(EDGES))
        w, h = draw(st.sampled_from([0.0, 1e-7, 0.5, 3.0])), draw(st.sampled_from([0.0, 1e-7, 0.5, 3.0]))
        kws = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4, unique=True))
        subs.append({"op": "sub", "id": f"s{i}", "t": 0, "kind": "range", "rect": [x1, y1, x1 + w, y1 + h],
                     "keywords": kws, "match": draw(st.sampled_from(["all", "any"]))})
    events, t = far + subs, 1
    for j in range(draw(st.integers(1, 4))):
        s = draw(st.sampled_from(subs))
        for k, (x, y) in enumerate(_points(s["rect"])):
            kws = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=4, unique=True))
            events.append({"op": "pub", "id": f"o{j}_{k}", "t": t, "x": x, "y": y, "keywords": kws})
        if draw(st.booleans()):  # the id unsubscribed and registered again, elsewhere: a slot reused
            other = draw(st.sampled_from(subs))
            events += [{"op": "unsub", "id": s["id"], "t": t},
                       dict(other, id=s["id"], t=t, match=draw(st.sampled_from(["all", "any"])))]
        t += 1
    return events


@pytest.mark.parametrize("index", ["auto", "aoiq", "gi2"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=streams())
def test_entries_decide_as_the_records_do(index, events):
    compare(events, "none", Space(), engine_factory(index), batch_seed=len(events), check_every_event=False)


@pytest.mark.parametrize("index", ["auto", "aoiq", "gi2"])
@pytest.mark.parametrize("kws", [["a"], ["a", "b"], ["a", "b", "c"]])
def test_a_slot_taken_again_leaves_no_deciding_entry(index, kws):
    """A subscription ends and its slot is taken again (its id, then another) elsewhere: an
    object in the old rectangle, with the old keywords, notifies nobody (the old entries,
    made undecided at ``delete``, are dropped by the scan, not taken)."""
    old, new = [0.1, 0.1, 0.2, 0.2], [5.1, 5.1, 5.2, 5.2]
    sub = {"op": "sub", "id": "a", "t": 0, "kind": "range", "rect": old, "keywords": kws, "match": "all"}
    pubs = [{"op": "pub", "id": f"o{i}", "t": i // 2, "x": 0.15, "y": 0.15, "keywords": kws + ["z"]} for i in range(6)]
    events = [sub, *pubs[:2], {"op": "unsub", "id": "a", "t": 1}, dict(sub, t=1, rect=new), *pubs[2:4],
              {"op": "unsub", "id": "a", "t": 2}, dict(sub, id="b", t=2, rect=new), *pubs[4:]]
    for seed in range(3):
        compare(events, "none", Space(), engine_factory(index), batch_seed=seed)
    eng = make_engine(index, Window.parse("none"), Space())
    gate = Gate()
    notes = eng.apply([gate.admit(r) for r in events])
    assert notes == [Match("a", 0, "o0"), Match("a", 0, "o1")]


@pytest.mark.parametrize("index", ["auto", "gi2"])
@pytest.mark.parametrize("again", ["place", "place_many"])
def test_a_slot_posted_again_leaves_no_deciding_entry(index, again):
    """A range subscription posted again (``place``: ``placing.place_slot``; ``place_many``:
    ``regions``, as a review of its postings would), then ended: an object in its rectangle
    with its keywords notifies nobody (the first posting's entries were made undecided when
    it was posted again: ``delete`` walks only the current epoch's)."""
    gate = Gate()
    eng = make_engine(index, Window.parse("none"), Space())
    sub = {"op": "sub", "id": "x", "t": 0, "kind": "range", "rect": [0.1, 0.1, 0.2, 0.2],
           "keywords": ["a", "b"], "match": "all"}
    pub = {"op": "pub", "id": "o", "t": 1, "x": 0.15, "y": 0.15, "keywords": ["a", "b"]}
    eng.apply([gate.admit(sub), gate.admit(pub)])
    ix, s = eng.index.kernel_grid, eng.subs.slot_of["x"]
    ix.place(s) if again == "place" else ix.place_many(np.array([s]))
    notes = eng.apply([gate.admit(dict(pub, id=f"p{i}", t=2)) for i in range(3)])
    assert notes == [Match("x", 2, f"p{i}") for i in range(3)]  # posted again: found once each
    eng.apply([gate.admit({"op": "unsub", "id": "x", "t": 3})])
    assert eng.apply([gate.admit(dict(pub, id=f"q{i}", t=4)) for i in range(3)]) == []


@pytest.mark.parametrize("index", ["auto", "gi2"])
@pytest.mark.parametrize("kws", [["a", "b"], ["a", "b", "c", "d"]])
def test_an_entry_checks_all_but_the_keyword_it_is_posted_under(index, kws):
    """Objects carrying ``a`` come first, so a subscription to ``kws`` goes under ``b``
    (``placing.rarest``) and its entries check the others, ``a`` among them: an object
    in its rectangle that lacks only ``a`` is no match, one with all of them is."""
    gate = Gate()
    eng = make_engine(index, Window.parse("none"), Space())
    first = [{"op": "sub", "id": "y", "t": 0, "kind": "range", "rect": [9, 9, 9.5, 9.5], "keywords": ["a"],
              "match": "all"}]  # (a word nobody holds is not counted: ``Vocabulary.known``)
    first += [{"op": "pub", "id": f"f{i}", "t": 0, "x": 50.0, "y": 50.0, "keywords": ["a"]} for i in range(3)]
    sub = {"op": "sub", "id": "x", "t": 0, "kind": "range", "rect": [0.1, 0.1, 0.2, 0.2], "keywords": kws,
           "match": "all"}
    eng.apply([gate.admit(r) for r in first + [sub]])
    ix = eng.index.kernel_grid
    assert eng.vocab.words[int(ix.kw0[eng.subs.slot_of["x"]])] == "b"
    many = [f"z{i}" for i in range(96)]  # (their signature has every bit: only the entry's keywords rule out)
    pubs = [{"op": "pub", "id": "lacks_a", "t": 1, "x": 0.15, "y": 0.15, "keywords": kws[1:] + many},
            {"op": "pub", "id": "all", "t": 1, "x": 0.15, "y": 0.15, "keywords": many + kws}]
    assert eng.apply([gate.admit(r) for r in pubs]) == [Match("x", 1, "all")]
    assert eng.stats["decided"] == 1  # the match decided by the entry, the other ruled out by it
    compare(first + [sub] + pubs, "none", Space(), engine_factory(index), batch_seed=1)


def test_entries_decide_most_range_candidates():
    """The decision is taken (not every candidate left to the records): an object inside
    the rectangles of subscriptions with one to four keywords it carries (all but the one
    each is posted under checked by its entry)."""
    eng = make_engine("auto", Window.parse("none"), Space())
    subs = [{"op": "sub", "id": i, "t": 0, "kind": "range", "rect": [0.1, 0.1, 0.9, 0.9],
             "keywords": WORDS[: 1 + i % 4], "match": "all"} for i in range(60)]
    gate = Gate()
    evs = [gate.admit(r) for r in subs + [{"op": "pub", "id": "o", "t": 1, "x": 0.5, "y": 0.5, "keywords": WORDS}]]
    eng.apply(evs)
    assert eng.stats["decided"] == 60 == eng.stats["affected"]
