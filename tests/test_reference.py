"""The reference engine against SPEC sections 1, 2 and 6, on hand-worked scenarios.

Expected results and scores are worked out by hand here (never with the engine's
own scoring helpers). Events go through the validation ``Gate`` first, so the
records below are exactly what a user would write in events.jsonl.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from skpubsub.core.config import Space
from skpubsub.io.events import Rejection
from skpubsub.io.validate import Gate
from skpubsub.testing.reference import ReferenceEngine


class Run:
    """A gate and a reference engine fed one event at a time; each call returns that event's notifications."""

    def __init__(self, window: str = "none", space: Space | None = None) -> None:
        self.gate = Gate(window, space)
        self.engine = ReferenceEngine(window, space)
        self.line = 0

    def event(self, rec: dict) -> list[dict]:
        self.line += 1
        ev = self.gate.admit(rec, self.line)
        assert not isinstance(ev, Rejection), ev
        return [n.to_json() for n in self.engine.apply([ev])]

    def pub(self, id: Any, t: float, x: float, y: float, *kw: str, **extra: Any) -> list[dict]:
        return self.event({"op": "pub", "id": id, "t": t, "x": x, "y": y, "keywords": list(kw), **extra})

    def knn(self, id: Any, t: float, x: float, y: float, k: int, *kw: str, **extra: Any) -> list[dict]:
        return self.event({"op": "sub", "kind": "knn", "id": id, "t": t, "x": x, "y": y, "k": k,
                           "keywords": list(kw), **extra})

    def topk(self, id: Any, t: float, x: float, y: float, k: int, alpha: float, *kw: str,
             **extra: Any) -> list[dict]:
        return self.event({"op": "sub", "kind": "topk", "id": id, "t": t, "x": x, "y": y, "k": k,
                           "alpha": alpha, "keywords": list(kw), **extra})

    def range(self, id: Any, t: float, rect: list, *kw: str, **extra: Any) -> list[dict]:
        return self.event({"op": "sub", "kind": "range", "id": id, "t": t, "rect": rect,
                           "keywords": list(kw), **extra})

    def unsub(self, id: Any, t: float) -> list[dict]:
        return self.event({"op": "unsub", "id": id, "t": t})

    def results(self, sub: Any) -> list | None:
        return self.engine.results(sub)

    def all_results(self) -> dict:
        return dict(self.engine.all_results())


def ch(sub: Any, t: float, added: list = (), removed: list = ()) -> dict:
    return {"sub": sub, "t": t, "added": list(added), "removed": list(removed)}


def m(sub: Any, t: float, obj: Any) -> dict:
    return {"sub": sub, "t": t, "object": obj}


WINDOWS = ["none", "count:100", "time:1000"]

# --------------------------------------------------------------------------- kNN


@pytest.mark.parametrize("window", WINDOWS)
def test_knn_any_and_all(window: str) -> None:
    r = Run(window)
    assert r.knn("any", 0, 0, 0, 10, "a", "b") == []
    assert r.knn("all", 0, 0, 0, 10, "a", "b", match="all") == []
    assert r.knn("dflt", 0, 0, 0, 10, "a", "b") == []  # default match for knn is any
    assert r.pub("oa", 1, 1, 0, "a") == [ch("any", 1, ["oa"]), ch("dflt", 1, ["oa"])]
    assert r.pub("ob", 1, 2, 0, "b", "x") == [ch("any", 1, ["ob"]), ch("dflt", 1, ["ob"])]
    assert r.pub("oab", 1, 3, 0, "x", "b", "a") == [ch("any", 1, ["oab"]), ch("all", 1, ["oab"]),
                                                      ch("dflt", 1, ["oab"])]
    assert r.pub("oc", 1, 0, 0, "c") == []
    assert r.pub("oA", 1, 0, 0, "A") == [ch("any", 1, ["oA"]), ch("dflt", 1, ["oA"])]  # normalised to "a"
    assert r.results("any") == ["oA", "oa", "ob", "oab"]
    assert r.results("all") == ["oab"]


def test_knn_keeps_k_nearest() -> None:
    r = Run()
    r.knn("s", 0, 10, 10, 3, "a")
    # distances from (10, 10): d1=5, d2=13, d3=1, d4=sqrt(2), d5=10
    assert r.pub("o1", 1, 13, 14, "a") == [ch("s", 1, ["o1"])]
    assert r.pub("o2", 2, 15, -2, "a") == [ch("s", 2, ["o2"])]  # 5^2 + 12^2 = 13^2
    assert r.pub("o3", 3, 10, 11, "a") == [ch("s", 3, ["o3"])]
    assert r.results("s") == ["o3", "o1", "o2"]
    assert r.pub("o4", 4, 11, 9, "a") == [ch("s", 4, ["o4"], ["o2"])]
    assert r.pub("o5", 5, 4, 18, "a") == []  # 6^2 + 8^2 = 10^2: farther than all three
    assert r.results("s") == ["o3", "o4", "o1"]


def test_knn_ties_later_published_first() -> None:
    r = Run()
    r.knn("s", 0, 0, 0, 3, "a")
    # all at squared distance exactly 1 from the subscription
    assert r.pub("e", 1, 1, 0, "a") == [ch("s", 1, ["e"])]
    assert r.pub("n", 1, 0, 1, "a") == [ch("s", 1, ["n"])]
    assert r.pub("w", 1, -1, 0, "a") == [ch("s", 1, ["w"])]
    assert r.results("s") == ["w", "n", "e"]
    # a fourth at the same distance ranks first and pushes out the earliest
    assert r.pub("south", 1, 0, -1, "a") == [ch("s", 1, ["south"], ["e"])]
    assert r.results("s") == ["south", "w", "n"]
    # one strictly closer still beats them all
    assert r.pub("c", 2, 0, 0.5, "a") == [ch("s", 2, ["c"], ["n"])]
    assert r.results("s") == ["c", "south", "w"]


def test_added_in_new_rank_order_removed_in_old_rank_order() -> None:
    r = Run("time:10")
    r.pub("far", 0, 3, 0, "a")
    r.pub("near", 0, 1, 0, "a")
    r.pub("mid", 1, 2, 0, "a")
    r.pub("late", 5, 4, 0, "a")
    # registered over the alive objects: added in rank order, not publication order
    assert r.knn("s", 5, 0, 0, 3, "a") == [ch("s", 5, ["near", "mid", "far"])]
    # at t=10 "far" and "near" expire together; removed in the old rank order
    assert r.pub("x", 10, 50, 50, "zzz") == [ch("s", 10, ["late"], ["near", "far"])]
    assert r.results("s") == ["mid", "late"]


# --------------------------------------------------------------------------- range


@pytest.mark.parametrize("window", WINDOWS)
def test_range_closed_boundaries_all_and_any(window: str) -> None:
    r = Run(window)
    r.range("all", 0, [0, 0, 2, 2], "a", "b")  # default match for range is all
    r.range("any", 0, [0, 0, 2, 2], "a", "b", match="any")
    inside = [(0, 0), (2, 2), (2, 0), (0, 2), (1, 1), (0, 1.5), (2, 0.5)]
    for i, (x, y) in enumerate(inside):
        assert r.pub(f"in{i}", 1, x, y, "b", "a") == [m("all", 1, f"in{i}"), m("any", 1, f"in{i}")]
        assert r.pub(f"in-any{i}", 1, x, y, "b") == [m("any", 1, f"in-any{i}")]
        assert r.pub(f"in-none{i}", 1, x, y, "c") == []
    for i, (x, y) in enumerate([(2.000001, 1), (-0.000001, 1), (1, 2.000001), (1, -1e-9), (3, 3)]):
        assert r.pub(f"out{i}", 1, x, y, "a", "b") == []
    assert r.all_results() == {}  # range subscriptions have no result list
    assert r.results("all") is None


def test_range_rect_reaching_outside_space() -> None:
    r = Run()
    r.range("s", 0, [-500, -500, -170, -80], "a")
    assert r.pub("corner", 1, -180, -90, "a") == [m("s", 1, "corner")]
    assert r.pub("edge", 1, -170, -80, "a") == [m("s", 1, "edge")]
    assert r.pub("no", 1, -169, -80, "a") == []


@pytest.mark.parametrize("window", ["none", "count:5", "count:1", "time:100"])
def test_range_delivers_only_objects_published_after_it(window: str) -> None:
    r = Run(window)
    r.pub("before", 0, 1, 1, "a")
    assert r.range("rng", 1, [0, 0, 2, 2], "a") == []  # no initial delivery of alive objects
    assert r.knn("nn", 1, 1, 1, 5, "a") == ([] if window == "none" else [ch("nn", 1, ["before"])])
    assert r.pub("after", 2, 1, 1, "a") == [m("rng", 2, "after"), ch("nn", 2, ["after"],
                                             ["before"] if window == "count:1" else [])]
    assert r.pub("after2", 3, 1.5, 1.5, "a")[0] == m("rng", 3, "after2")


# --------------------------------------------------------------------------- top-k

# Space [0, 0, 30, 40]: MaxDist = sqrt(30^2 + 40^2) = 50.
SPACE = Space(0, 0, 30, 40)
R2 = math.sqrt(2)

# The subscription sits at (0, 0) with keywords a, b. Objects (x, y, keywords):
OBJS = [
    ("p1", 30, 40, ("a",)),  # dist 50 -> SSim 0
    ("p2", 3, 4, ("b", "c")),  # dist 5 -> SSim 0.9
    ("p3", 0, 0, ("c",)),  # shares no keyword: never qualifies
    ("p4", 6, 8, ("a", "b")),  # dist 10 -> SSim 0.8
    ("p5", 18, 24, ("b",)),  # dist 30 -> SSim 0.4
]


def hand_score(alpha: float, ws: dict, x: float, y: float, kws: tuple) -> float:
    """SPEC section 1, written out independently of the engine."""
    norm = math.sqrt(sum(v * v for v in ws.values()))
    ssim = max(0.0, 1 - math.hypot(x, y) / 50)
    wo = 1 / math.sqrt(len(kws))
    tsim = sum(v / norm * wo for w, v in ws.items() if w in kws)
    return alpha * ssim + (1 - alpha) * tsim


# alpha, weights as given in the event, the normalised ws, expected scores by hand, expected rank
TOPK_CASES = [
    # ws = (3, 4)/5 = (0.6, 0.8)
    # p1: 0.5*0 + 0.5*0.6 = 0.3;  p2: 0.5*0.9 + 0.5*0.8/sqrt2;  p4: 0.5*0.8 + 0.5*1.4/sqrt2;  p5: 0.5*0.4 + 0.5*0.8
    (0.5, {"a": 3, "b": 4}, {"a": 3, "b": 4},
     {"p1": 0.3, "p2": 0.45 + 0.4 / R2, "p4": 0.4 + 0.7 / R2, "p5": 0.6},
     ["p4", "p2", "p5", "p1"]),
    # alpha 1: pure distance
    (1.0, {"a": 3, "b": 4}, {"a": 3, "b": 4},
     {"p1": 0.0, "p2": 0.9, "p4": 0.8, "p5": 0.4},
     ["p2", "p4", "p5", "p1"]),
    # alpha 0: pure text, p1 (0.6) now beats p2 (0.8/sqrt2 = 0.566)
    (0.0, {"a": 3, "b": 4}, {"a": 3, "b": 4},
     {"p1": 0.6, "p2": 0.8 / R2, "p4": 1.4 / R2, "p5": 0.8},
     ["p4", "p5", "p1", "p2"]),
    # weights keys are normalised and unknown keys ignored: same as (3, 4)
    (0.0, {"A": 3, "Ｂ": 4, "zzz": 100}, {"a": 3, "b": 4},
     {"p1": 0.6, "p2": 0.8 / R2, "p4": 1.4 / R2, "p5": 0.8},
     ["p4", "p5", "p1", "p2"]),
    # a missing weight is 1: ws = (1, 7)/sqrt50
    (0.25, {"b": 7}, {"a": 1, "b": 7},
     {"p1": 0.75 / math.sqrt(50), "p2": 0.225 + 0.75 * 7 / math.sqrt(50) / R2,
      "p4": 0.2 + 0.75 * 8 / math.sqrt(50) / R2, "p5": 0.1 + 0.75 * 7 / math.sqrt(50)},
     ["p5", "p4", "p2", "p1"]),
    # no weights, alpha 0: p1 and p5 tie exactly at 1/sqrt2 -> the later-published p5 first
    (0.0, None, {"a": 1, "b": 1},
     {"p1": 1 / R2, "p2": 0.5, "p4": 1.0, "p5": 1 / R2},
     ["p4", "p5", "p1", "p2"]),
]


@pytest.mark.parametrize("alpha,weights,ws,scores,rank", TOPK_CASES)
@pytest.mark.parametrize("k", [1, 2, 3, 4, 10])
def test_topk_scores_by_hand(alpha, weights, ws, scores, rank, k) -> None:
    # the literal scores above agree with the SPEC formula written out
    for oid, x, y, kws in OBJS:
        if oid in scores:
            assert hand_score(alpha, ws, x, y, kws) == pytest.approx(scores[oid], abs=1e-12)
    r = Run("none", SPACE)
    extra = {} if weights is None else {"weights": weights}
    r.topk("s", 0, 0, 0, k, alpha, "a", "b", **extra)
    for oid, x, y, kws in OBJS:
        r.pub(oid, 1, x, y, *kws)
    assert r.results("s") == rank[:k]


@pytest.mark.parametrize("window", ["count:10", "time:10"])
def test_topk_registration_over_alive_objects(window: str) -> None:
    r = Run(window, SPACE)
    for oid, x, y, kws in OBJS:
        r.pub(oid, 1, x, y, *kws)
    assert r.topk("s", 2, 0, 0, 3, 0.5, "a", "b", weights={"a": 3, "b": 4}) == [ch("s", 2, ["p4", "p2", "p5"])]


def test_topk_incremental_notifications() -> None:
    r = Run("none", SPACE)
    r.topk("s", 0, 0, 0, 2, 0.5, "a", "b", weights={"a": 3, "b": 4})
    assert r.pub("p1", 1, 30, 40, "a") == [ch("s", 1, ["p1"])]  # 0.3
    assert r.pub("p3", 1, 0, 0, "c") == []  # no shared keyword, even at distance 0
    assert r.pub("p5", 1, 18, 24, "b") == [ch("s", 1, ["p5"])]  # 0.6
    assert r.pub("p2", 1, 3, 4, "b", "c") == [ch("s", 1, ["p2"], ["p1"])]  # 0.733
    assert r.pub("p4", 1, 6, 8, "a", "b") == [ch("s", 1, ["p4"], ["p5"])]  # 0.895
    assert r.results("s") == ["p4", "p2"]


def test_topk_equal_scores_later_first() -> None:
    r = Run("none", SPACE)
    r.topk("s", 0, 0, 0, 2, 0.7, "a")
    assert r.pub("q1", 1, 3, 4, "a") == [ch("s", 1, ["q1"])]
    assert r.pub("q2", 1, 3, 4, "a") == [ch("s", 1, ["q2"])]
    assert r.results("s") == ["q2", "q1"]
    # a third identical object enters first and pushes out the earliest
    assert r.pub("q3", 2, 3, 4, "a") == [ch("s", 2, ["q3"], ["q1"])]
    assert r.results("s") == ["q3", "q2"]


def test_topk_match_field_is_irrelevant() -> None:
    """Top-k qualifies on any shared keyword; a ``match`` field on a topk sub is an ignored extra."""
    r = Run("none", SPACE)
    r.topk("s", 0, 0, 0, 5, 0.5, "a", "b", match="all")
    assert r.pub("only-b", 1, 1, 1, "b") == [ch("s", 1, ["only-b"])]


# --------------------------------------------------------------------------- window: none


def test_window_none_new_sub_starts_empty_and_only_improves() -> None:
    r = Run("none")
    r.pub("o0", 0, 0, 0, "a")  # before the subscription: never seen
    assert r.knn("s", 1, 0, 0, 2, "a") == []
    assert r.results("s") == []
    assert r.pub("o1", 2, 5, 0, "a") == [ch("s", 2, ["o1"])]
    assert r.pub("o2", 3, 3, 0, "a") == [ch("s", 3, ["o2"])]
    assert r.pub("o3", 4, 4, 0, "a") == [ch("s", 4, ["o3"], ["o1"])]
    assert r.pub("o4", 5, 10, 0, "a") == []
    assert r.pub("o5", 1000, 4, 0, "b") == []
    assert r.results("s") == ["o2", "o3"]  # o0 would be nearest but was published before s
    # nothing ever expires under none, whatever the clock does
    assert r.pub("o6", 1e9, 100, 0, "a") == []
    assert r.results("s") == ["o2", "o3"]


# --------------------------------------------------------------------------- window: count


def test_count_window_eviction_and_refill() -> None:
    r = Run("count:3")
    r.pub("o1", 1, 1, 0, "a")
    r.pub("o2", 2, 5, 0, "a")
    r.pub("o3", 3, 3, 0, "a")
    # evaluated over the alive objects o1..o3: initial results as added, rank order
    assert r.knn("s", 3, 0, 0, 2, "a") == [ch("s", 3, ["o1", "o3"])]
    # o4 evicts o1 (a member); the result is refilled from o2, o3 (o4 does not qualify)
    assert r.pub("o4", 4, 9, 0, "b") == [ch("s", 4, ["o2"], ["o1"])]
    assert r.results("s") == ["o3", "o2"]
    # o5 evicts o2 (a member) and qualifies itself
    assert r.pub("o5", 5, 9, 0, "a") == [ch("s", 5, ["o5"], ["o2"])]
    assert r.results("s") == ["o3", "o5"]
    # o6 evicts o3; alive o4 (b), o5 (a), o6 (b): only o5 qualifies
    assert r.pub("o6", 6, 0, 0, "b") == [ch("s", 6, [], ["o3"])]
    assert r.results("s") == ["o5"]
    # evicting a non-member changes nothing
    assert r.pub("o7", 7, 50, 0, "b") == []
    # a sub registered now sees only the alive objects o5..o7
    assert r.knn("t", 7, 0, 0, 5, "a", "b") == [ch("t", 7, ["o6", "o5", "o7"])]


def test_count_one_net_change_in_one_notification() -> None:
    r = Run("count:1")
    r.knn("s", 0, 0, 0, 1, "a")
    assert r.pub("o1", 1, 1, 0, "a") == [ch("s", 1, ["o1"])]
    # o2 evicts o1 and takes its place, even though it is farther: one Change with both
    assert r.pub("o2", 2, 50, 0, "a") == [ch("s", 2, ["o2"], ["o1"])]
    # a non-qualifying object evicts o2: the result empties
    assert r.pub("o3", 3, 0, 0, "b") == [ch("s", 3, [], ["o2"])]
    assert r.results("s") == []


def test_object_entering_and_leaving_within_one_event_is_not_reported() -> None:
    r = Run("count:2")
    r.knn("s", 0, 0, 0, 1, "a")
    assert r.pub("o1", 1, 0, 0, "a") == [ch("s", 1, ["o1"])]
    assert r.pub("o2", 2, 5, 0, "a") == []
    # o3 evicts o1: the refill brings in o2, which o3 then beats; o2 is mentioned nowhere
    assert r.pub("o3", 3, 1, 0, "a") == [ch("s", 3, ["o3"], ["o1"])]
    assert r.results("s") == ["o3"]


def test_time_window_net_changes_and_silence() -> None:
    r = Run("time:10")
    r.knn("s", 0, 0, 0, 2, "a")
    assert r.pub("keep", 0, 1, 0, "a", expires=100) == [ch("s", 0, ["keep"])]
    assert r.pub("gone", 1, 2, 0, "a") == [ch("s", 1, ["gone"])]  # alive while now < 11
    # at t=11 "gone" expires (refill finds nothing) and "new" arrives at the same place: one Change
    assert r.pub("new", 11, 2, 0, "a") == [ch("s", 11, ["new"], ["gone"])]
    # at t=25 "new" (alive while now < 21) has left; the pub itself does not qualify
    assert r.pub("x", 25, 0, 0, "b") == [ch("s", 25, [], ["new"])]
    # events that change nothing for s produce nothing
    assert r.pub("y", 26, 9, 9, "b") == []
    assert r.pub("z", 27, 9, 9, "a") == [ch("s", 27, ["z"])]
    assert r.results("s") == ["keep", "z"]
    # a new subscription with no qualifying alive object: nothing to send (no empty "added")
    assert r.knn("e", 27, 0, 0, 1, "nothing") == []
    assert r.results("e") == []


# --------------------------------------------------------------------------- window: time


def test_time_window_expiry_object_expires_and_refill() -> None:
    r = Run("time:10")
    assert r.knn("s", 0, 0, 0, 2, "a") == []
    assert r.pub("o1", 0, 1, 0, "a") == [ch("s", 0, ["o1"])]  # alive while now < 10
    assert r.pub("o2", 2, 2, 0, "a", expires=5) == [ch("s", 2, ["o2"])]  # own, shorter expiry
    assert r.pub("o3", 3, 3, 0, "a", expires=30) == []  # own, longer expiry (instead of 13)
    assert r.pub("o4", 4, 4, 0, "a") == []  # alive while now < 14
    # t=4.999: nothing has expired yet
    assert r.pub("c1", 4.999, 25, 0, "z") == []
    # t=5: o2 leaves exactly at its own expires; refill from o1, o3, o4
    assert r.pub("c2", 5, 25, 0, "z") == [ch("s", 5, ["o3"], ["o2"])]
    assert r.results("s") == ["o1", "o3"]
    assert r.pub("c3", 9.999, 25, 0, "z") == []
    # t=10: o1 leaves exactly at o.t + T
    assert r.pub("c4", 10, 25, 0, "z") == [ch("s", 10, ["o4"], ["o1"])]
    assert r.results("s") == ["o3", "o4"]
    # t=14: o4 leaves; nothing to refill with (o3 is the only qualifying alive object)
    assert r.pub("c5", 14, 25, 0, "z") == [ch("s", 14, [], ["o4"])]
    # a new sub at t=14 starts from the alive objects: o3 (until 30); o4 is already gone
    assert r.knn("s2", 14, 4, 0, 5, "a") == [ch("s2", 14, ["o3"])]
    # t=30: o3 leaves both results; notifications in registration order
    assert r.pub("c6", 30, 25, 0, "z") == [ch("s", 30, [], ["o3"]), ch("s2", 30, [], ["o3"])]
    assert r.all_results() == {"s": [], "s2": []}


def test_time_window_sub_registered_at_expiry_does_not_see_object() -> None:
    r = Run("time:5")
    r.pub("o1", 0, 0, 0, "a")
    r.pub("o2", 1, 1, 1, "a")
    assert r.knn("s", 5, 0, 0, 3, "a") == [ch("s", 5, ["o2"])]  # o1 expired at exactly 0 + 5
    # at t=6 o2 expires too: s loses it, and t starts (and stays) empty
    assert r.topk("t", 6, 0, 0, 3, 0.5, "a") == [ch("s", 6, [], ["o2"])]
    assert r.all_results() == {"s": [], "t": []}


def test_time_window_negative_times() -> None:
    r = Run("time:2")
    r.knn("s", -10, 0, 0, 2, "a")
    assert r.pub("o1", -10, 1, 0, "a") == [ch("s", -10, ["o1"])]
    assert r.pub("c", -8.5, 0, 0, "b") == []
    assert r.pub("d", -8, 0, 0, "b") == [ch("s", -8, [], ["o1"])]


# --------------------------------------------------------------------------- subscriptions ending


@pytest.mark.parametrize("window", WINDOWS)
def test_sub_expires_ends_it(window: str) -> None:
    r = Run(window)
    r.knn("k", 0, 0, 0, 5, "a", expires=5)
    r.range("r", 0, [-1, -1, 1, 1], "a", expires=5)
    r.topk("t", 0, 0, 0, 5, 0.5, "a", expires=5)
    r.knn("keep", 0, 0, 0, 5, "a")
    assert r.pub("o1", 4.5, 0, 0, "a") == [ch("k", 4.5, ["o1"]), m("r", 4.5, "o1"), ch("t", 4.5, ["o1"]),
                                           ch("keep", 4.5, ["o1"])]
    assert list(r.all_results()) == ["k", "t", "keep"]
    # at t=5 they have ended before the event is applied
    assert r.pub("o2", 5, 0, 0, "a") == [ch("keep", 5, ["o2"])]
    assert r.all_results() == {"keep": ["o2", "o1"]}
    assert r.results("k") is None and r.results("t") is None


def test_sub_ends_at_expires_even_when_an_object_leaves_at_the_same_time() -> None:
    r = Run("time:5")
    r.knn("k", 0, 0, 0, 5, "a", expires=5)
    r.pub("o1", 0, 0, 0, "a")
    assert r.pub("o2", 5, 0, 0, "b") == []  # o1 leaves at 5, but k has ended: no removal reported
    assert r.all_results() == {}


def test_unsub_ends_it() -> None:
    r = Run("count:5")
    r.knn("a", 0, 0, 0, 5, "x")
    r.range("b", 0, [0, 0, 1, 1], "x")
    r.topk("c", 0, 0, 0, 5, 1, "x")
    r.pub("o1", 1, 0, 0, "x")
    assert r.unsub("a", 2) == []  # ending a subscription notifies nobody
    assert r.unsub("b", 2) == []
    assert r.pub("o2", 3, 0, 0, "x") == [ch("c", 3, ["o2"])]
    assert r.all_results() == {"c": ["o2", "o1"]}
    assert r.results("a") is None


def test_resubscribe_after_unsub_starts_fresh() -> None:
    r = Run("count:5")
    r.pub("o1", 0, 1, 0, "x")
    r.knn("s", 0, 0, 0, 1, "x")
    r.unsub("s", 1)
    r.pub("o2", 1, 2, 0, "x")
    assert r.knn("s", 2, 5, 0, 1, "x") == [ch("s", 2, ["o2"])]  # a new subscription, new definition


# --------------------------------------------------------------------------- ordering and ids


def test_notifications_in_registration_order() -> None:
    r = Run("none")
    r.knn("zeta", 0, 0, 0, 5, "a")
    r.range(3, 0, [-1, -1, 1, 1], "a")
    r.topk("alpha", 0, 0, 0, 5, 0.5, "a")
    r.range("1", 0, [-1, -1, 1, 1], "a")
    r.knn(1, 0, 0, 0, 5, "a")
    assert r.pub("o", 1, 0, 0, "a") == [ch("zeta", 1, ["o"]), m(3, 1, "o"), ch("alpha", 1, ["o"]),
                                        m("1", 1, "o"), ch(1, 1, ["o"])]
    assert list(r.all_results()) == ["zeta", "alpha", 1]


def test_int_and_string_sub_ids_are_distinct() -> None:
    r = Run()
    r.knn(1, 0, 0, 0, 5, "a")
    r.knn("1", 0, 0, 0, 5, "b")
    r.pub("o", 1, 0, 0, "a")
    assert r.results(1) == ["o"] and r.results("1") == []
    r.unsub("1", 2)
    assert r.all_results() == {1: ["o"]}


def test_object_and_subscription_ids_separate() -> None:
    r = Run()
    r.knn("x", 0, 0, 0, 5, "a")
    assert r.pub("x", 1, 0, 0, "a") == [ch("x", 1, ["x"])]


def test_duplicate_object_ids_are_separate_objects() -> None:
    r = Run()
    r.knn("s", 0, 0, 0, 2, "a")
    assert r.pub("o", 1, 1, 0, "a") == [ch("s", 1, ["o"])]
    assert r.pub("o", 2, 2, 0, "a") == [ch("s", 2, ["o"])]
    assert r.results("s") == ["o", "o"]
    # a nearer object pushes out the farther "o" only
    assert r.pub("p", 3, 0.5, 0, "a") == [ch("s", 3, ["p"], ["o"])]
    assert r.results("s") == ["p", "o"]


def test_duplicate_object_id_evicting_its_namesake() -> None:
    r = Run("count:1")
    r.knn("s", 0, 0, 0, 1, "a")
    r.range("g", 0, [0, 0, 10, 10], "a")
    assert r.pub("o", 1, 1, 0, "a") == [ch("s", 1, ["o"]), m("g", 1, "o")]
    # the second "o" evicts the first: a different object with the same id
    assert r.pub("o", 2, 2, 0, "a") == [ch("s", 2, ["o"], ["o"]), m("g", 2, "o")]
    assert r.results("s") == ["o"]


def test_duplicate_object_ids_expire_separately() -> None:
    r = Run("time:10")
    r.knn("s", 0, 0, 0, 5, "a")
    r.pub("o", 0, 1, 0, "a")
    r.pub("o", 5, 2, 0, "a")
    assert r.results("s") == ["o", "o"]
    assert r.pub("c", 10, 50, 0, "b") == [ch("s", 10, [], ["o"])]
    assert r.results("s") == ["o"]
    assert r.pub("d", 15, 50, 0, "b") == [ch("s", 15, [], ["o"])]
