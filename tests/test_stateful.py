"""Hypothesis state machines: the reference and every indexed engine in lockstep.

Each rule builds one record in the SPEC JSON format, passes it through one Gate,
and applies the accepted event to the reference engine and to an ``Engine`` for
every index configuration (every registered index; some with a few parameter sets). After every step the notifications,
``results(id)`` of every id ever used, ``all_results()`` and each engine's
``_check()`` must agree with the reference. One machine per window kind; the
window's parameter (N or T) and the space are drawn when a run starts.
``SKPUBSUB_CONFORMANCE_SCALE=10`` runs ten times as many examples.

Coordinates come from a tiny lattice (plus the space's borders) and keywords
from three letters, so equal distances/scores (ties), expiries at exactly the
event time, evictions and refills happen within a few steps.
"""

from __future__ import annotations

import math
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from skpubsub.core.config import Space
from skpubsub.engine.engine import Engine
from skpubsub.io.events import Rejection
from skpubsub.io.validate import Gate
from skpubsub.testing.conformance import describe, index_configs
from skpubsub.testing.reference import ReferenceEngine

# Every registered index (unlisted ones with their defaults), a few parameter sets
# each: every engine steps on every rule, so the list is kept short here and the
# wider parameter sweep lives in test_conformance.py.
CONFIGS = index_configs({
    "grid": [{"grid": 1, "kmax": 1.0}, {"grid": 8}, {"grid": 64, "max_cells": 2, "shrink": 1000},
             {"grid": 8, "buffer": "skyband", "kmax": 1.0}],
    "dkm": [{}, {"grid": 4, "max_cells": 1, "kmax": 1.0}, {"buffer": "cskyband"}],
    "aoiq": [{"warm_n": 0}, {"batch": True}],  # warm_n 0: the cost model's levels from the first object
    "igpt": [{"grid": 2, "group": 2, "buffer": "cskyband"}],
})

SUB_IDS = ["s1", "s2", "s3", 1, "1"]
OBJ_IDS = ["o1", "o2", 1]
OFFSETS = st.sampled_from([0, 1, -1, 0.5, 2, -2, 3, 10**6])  # lattice steps from the centre (10**6: the border)
KEYWORDS = st.lists(st.sampled_from(["a", "b", "c", "A", " b "]), min_size=1, max_size=3)
MATCH = st.sampled_from(["any", "all", None])  # None: the field is left out (kind's default)
K = st.integers(1, 4) | st.integers(5, 12)
ALPHA = st.sampled_from([0, 1, 0.5]) | st.floats(0, 1)
WEIGHTS = st.none() | st.dictionaries(st.sampled_from(["a", "b", "c", "z", "B"]),
                                      st.sampled_from([1, 2, 0.5, 4]), max_size=3)
SUB_LIFE = st.none() | st.sampled_from([1, 0.5, 2, 3, 6])
OBJ_LIFE = st.none() | st.sampled_from([1, 0.5, 2, 5, 10])
SPACES = st.sampled_from([None, None, Space(-4.0, -2.0, 4.0, 2.0), Space(0.0, 0.0, 8.0, 8.0)])


def _num(v: float) -> int | float:
    return int(v) if float(v).is_integer() else v


pytestmark = pytest.mark.soak  # every test here is a Hypothesis lockstep run (~50 s each on 2 cores)


class LockstepMachine(RuleBasedStateMachine):
    """Drives the reference and the engines with the same accepted events."""

    def windows(self) -> st.SearchStrategy[str]:
        return st.just("none")

    @initialize(data=st.data())
    def start(self, data: st.DataObject) -> None:
        self.window = data.draw(self.windows(), label="window")
        self.space = data.draw(SPACES, label="space")
        sp = self.space or Space()
        # the lattice: a step that divides the space evenly, centred in it or at a corner
        self.step = (sp.x2 - sp.x1) / data.draw(st.sampled_from([16, 8, 64, 720]), label="cells")
        self.cx, self.cy = data.draw(st.sampled_from([((sp.x1 + sp.x2) / 2, (sp.y1 + sp.y2) / 2),
                                                      (sp.x1, sp.y1), (sp.x2, sp.y2)]), label="centre")
        self.gate = Gate(self.window, self.space)
        self.ref = ReferenceEngine(self.window, self.space)
        self.engines = [(describe(n, p), Engine(self.window, self.space, index=n, **p)) for n, p in CONFIGS]
        self.now: Any = data.draw(st.sampled_from([0, -3, 0.5, 100]), label="t0")
        self.pos = 0
        self.active: dict[Any, float] = {}  # sub id -> expires, as of the last accepted event
        self.used: dict[tuple[str, Any], Any] = {}  # every sub id accepted so far

    # -- helpers ----------------------------------------------------------------------------
    def point(self, i: float, j: float) -> tuple[int | float, int | float]:
        sp = self.space or Space()
        x = min(sp.x2, max(sp.x1, self.cx + i * self.step))
        y = min(sp.y2, max(sp.y1, self.cy + j * self.step))
        return _num(x), _num(y)

    def active_ids(self) -> list[Any]:
        return [i for i, e in self.active.items() if e > self.now]

    def feed(self, rec: dict, accept: bool = True) -> None:
        self.feed_many([rec], accept)

    def feed_many(self, recs: list[dict], accept: bool = True) -> None:
        """Admit the records, then apply the accepted ones as one batch to every engine."""
        events = []
        for rec in recs:
            self.pos += 1
            ev = self.gate.admit(rec, self.pos)
            if isinstance(ev, Rejection):
                assert not accept, f"the Gate rejected a valid record: {rec} ({ev.error})"
                continue
            assert accept, f"the Gate accepted an invalid record: {rec}"
            self.active = {i: e for i, e in self.active.items() if e > float(rec["t"])}
            if rec["op"] == "sub":
                self.active[rec["id"]] = rec.get("expires", math.inf)
                self.used.setdefault((type(rec["id"]).__name__, rec["id"]), rec["id"])
            elif rec["op"] == "unsub":
                del self.active[rec["id"]]
            events.append(ev)
        if not events:
            return
        expected = self.ref.apply(events)
        for label, engine in self.engines:
            got = engine.apply(events)
            assert got == expected, (f"{label}, window {self.window}, space {self.space}: notifications differ "
                                     f"at {recs}\n  expected {expected}\n  actual   {got}")

    def free_sub_id(self, ident: Any) -> Any:
        busy = self.active_ids()
        if any(type(b) is type(ident) and b == ident for b in busy):
            return f"n{self.pos}"  # an active id would be rejected; see `rejected` for that case
        return ident

    # -- rules ------------------------------------------------------------------------------
    @rule(ident=st.sampled_from(SUB_IDS), kind=st.sampled_from(["knn", "topk", "range"]), kws=KEYWORDS,
          match=MATCH, i=OFFSETS, j=OFFSETS, w=OFFSETS, h=OFFSETS, k=K, alpha=ALPHA, weights=WEIGHTS,
          life=SUB_LIFE)
    def subscribe(self, ident: Any, kind: str, kws: list[str], match: str | None, i: float, j: float,
                  w: float, h: float, k: int, alpha: float, weights: dict | None, life: float | None) -> None:
        rec: dict[str, Any] = {"op": "sub", "id": self.free_sub_id(ident), "t": self.now, "kind": kind,
                               "keywords": kws}
        if kind == "range":
            (x1, y1), (x2, y2) = self.point(i, j), self.point(i + abs(w), j + abs(h))
            rec["rect"] = [x1, y1, x2, y2]
        else:
            rec["x"], rec["y"] = self.point(i, j)
            rec["k"] = k
        if kind == "topk":
            rec["alpha"] = alpha
            if weights is not None:
                rec["weights"] = weights
        elif match is not None:
            rec["match"] = match
        if life is not None:
            rec["expires"] = _num(self.now + life)
        self.feed(rec)

    @precondition(lambda self: bool(self.active_ids()))
    @rule(data=st.data())
    def unsubscribe(self, data: st.DataObject) -> None:
        ident = data.draw(st.sampled_from(self.active_ids()), label="unsub id")
        self.feed({"op": "unsub", "id": ident, "t": self.now})

    @rule(ident=st.sampled_from(OBJ_IDS), i=OFFSETS, j=OFFSETS, kws=KEYWORDS, life=OBJ_LIFE)
    def publish(self, ident: Any, i: float, j: float, kws: list[str], life: float | None) -> None:
        x, y = self.point(i, j)
        rec: dict[str, Any] = {"op": "pub", "id": ident, "t": self.now, "x": x, "y": y, "keywords": kws}
        if life is not None and self.window.startswith("time"):
            rec["expires"] = _num(self.now + life)
        self.feed(rec)

    @rule(pubs=st.lists(st.tuples(st.sampled_from([0, 0, 0.5, 1]), st.sampled_from(OBJ_IDS), OFFSETS, OFFSETS,
                                  KEYWORDS, OBJ_LIFE), min_size=2, max_size=6))
    def publish_burst(self, pubs: list) -> None:
        """Several publications (times equal or a little apart) in one ``apply`` call:
        engines may run them through a batch path (a compiled kernel for runs of pubs)."""
        recs = []
        for dt, ident, i, j, kws, life in pubs:
            self.now = _num(self.now + dt)
            x, y = self.point(i, j)
            rec: dict[str, Any] = {"op": "pub", "id": ident, "t": self.now, "x": x, "y": y, "keywords": kws}
            if life is not None and self.window.startswith("time"):
                rec["expires"] = _num(self.now + life)
            recs.append(rec)
        self.feed_many(recs)

    @rule(dt=st.sampled_from([1, 0.5, 2, 3, 10]))
    def advance_time(self, dt: float) -> None:
        """Later events start by expiring what is due at their time (maybe many at once)."""
        self.now = _num(self.now + dt)

    @rule(how=st.sampled_from(["duplicate", "unknown", "backwards", "bad k"]), data=st.data())
    def rejected(self, how: str, data: st.DataObject) -> None:
        """A record the Gate must reject; it must change nothing anywhere."""
        busy = self.active_ids()
        if how == "duplicate" and busy:
            ident = data.draw(st.sampled_from(busy), label="duplicate id")
            rec = {"op": "sub", "id": ident, "t": self.now, "kind": "knn", "x": 0, "y": 0, "k": 1,
                   "keywords": ["a"]}
        elif how == "backwards" and self.gate.last_t is not None:
            rec = {"op": "pub", "id": "late", "t": _num(self.gate.last_t - 0.5), "x": 0, "y": 0,
                   "keywords": ["a"]}
        elif how == "bad k":
            rec = {"op": "sub", "id": "bad", "t": self.now, "kind": "topk", "x": 0, "y": 0, "k": 0,
                   "alpha": 0.5, "keywords": ["a"]}
        else:  # never used, or the string twin of an active integer id
            int_one = any(type(b) is int and b == 1 for b in busy)
            str_one = any(type(b) is str and b == "1" for b in busy)
            rec = {"op": "unsub", "id": "1" if int_one and not str_one else "never", "t": self.now}
        self.feed(rec, accept=False)

    # -- invariants -------------------------------------------------------------------------
    @invariant()
    def same_results(self) -> None:
        if not hasattr(self, "ref"):
            return
        want = self.ref.all_results()
        for label, engine in self.engines:
            assert engine.all_results() == want, (f"{label}, window {self.window}: all_results differ\n"
                                                  f"  expected {want}\n  actual   {engine.all_results()}")
            for ident in self.used.values():
                assert engine.results(ident) == self.ref.results(ident), (label, ident)

    @invariant()
    def engines_consistent(self) -> None:
        for label, engine in getattr(self, "engines", ()):
            try:
                engine._check()
            except AssertionError as exc:
                raise AssertionError(f"{label}, window {self.window}: _check() failed: {exc!r}") from exc


SCALE = float(os.environ.get("SKPUBSUB_CONFORMANCE_SCALE", "1"))  # e.g. 10 for a soak run
# 15 machines of 60 steps each per window: 80 took 95-150 s per window in a full -n 2 run on a
# slow machine, 40 took 62-71, 25 took 32-45 (CI must stay under 20 minutes); a soak run scales
# it (SKPUBSUB_CONFORMANCE_SCALE).
SETTINGS = settings(max_examples=int(15 * SCALE), stateful_step_count=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


class NoWindow(LockstepMachine):
    def windows(self) -> st.SearchStrategy[str]:
        return st.just("none")


class TinyCountWindow(LockstepMachine):
    """count:1 and count:2: every publication evicts, results refill constantly."""

    def windows(self) -> st.SearchStrategy[str]:
        return st.sampled_from(["count:1", "count:2"])


class CountWindow(LockstepMachine):
    def windows(self) -> st.SearchStrategy[str]:
        return st.integers(3, 6).map(lambda n: f"count:{n}")


class TimeWindow(LockstepMachine):
    def windows(self) -> st.SearchStrategy[str]:
        return st.sampled_from(["time:1", "time:2", "time:3.5", "time:10"])


TestNoWindow = NoWindow.TestCase
TestNoWindow.settings = SETTINGS
TestTinyCountWindow = TinyCountWindow.TestCase
TestTinyCountWindow.settings = SETTINGS
TestCountWindow = CountWindow.TestCase
TestCountWindow.settings = SETTINGS
TestTimeWindow = TimeWindow.TestCase
TestTimeWindow.settings = SETTINGS
