"""The reference engine: SPEC.md made executable, brute force and obviously correct.

It is the oracle every index, partitioner and runtime is tested against. Every
published object is checked against every active subscription; a result that
loses a member is recomputed from scratch over all alive objects. Cost per event
is O(S) (pub) plus O(A log A) per refilled subscription (A alive objects).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..core.config import Space, Window
from ..io.events import KNN, RANGE, Event, Pub, Sub, Unsub
from ..io.notifications import Change, Match, Notification
from ..core.scoring import dist2, object_weight, text_sim, topk_key, unit_weights


@dataclass(slots=True)
class _Obj:
    seq: int
    id: Any
    x: float
    y: float
    keywords: frozenset[str]
    expiry: int | float  # exact as SPEC 6 computes it; inf when objects do not expire by time


@dataclass(slots=True)
class _Sub:
    ev: Sub
    ws: tuple[float, ...]
    result: list[_Obj] = field(default_factory=list)  # rank order


class ReferenceEngine:
    """Same interface as :class:`skpubsub.engine.engine.Engine`: ``apply``, ``results``."""

    name = "reference"

    def __init__(self, window: Window | str = "none", space: Space | None = None) -> None:
        self.window = Window.parse(window) if isinstance(window, str) else window
        self.space = space or Space()
        self.maxdist = self.space.maxdist
        self.alive: list[_Obj] = []  # publish order (count and time windows only)
        self.subs: dict[Any, _Sub] = {}  # registration order
        self.stats = {"candidates": 0, "affected": 0, "objects": 0, "expired": 0, "expiry_seconds": 0.0}

    # -- ranking ---------------------------------------------------------------
    def _qualifies(self, s: _Sub, o: _Obj) -> bool:
        kws = s.ev.keywords
        if s.ev.kind == RANGE or s.ev.kind == KNN:
            if s.ev.match_all:
                return all(w in o.keywords for w in kws)
            return any(w in o.keywords for w in kws)
        return any(w in o.keywords for w in kws)  # topk: shares a keyword

    def _key(self, s: _Sub, o: _Obj) -> tuple[float, int]:
        ev = s.ev
        d2 = dist2(ev.x, ev.y, o.x, o.y)
        if ev.kind == KNN:
            return (d2, -o.seq)
        tsim = text_sim(ev.keywords, s.ws, o.keywords, object_weight(len(o.keywords)))
        return (topk_key(ev.alpha, self.maxdist, d2, tsim), -o.seq)

    def _best(self, s: _Sub, objs: Iterable[_Obj]) -> list[_Obj]:
        ranked = sorted((o for o in objs if self._qualifies(s, o)), key=lambda o: self._key(s, o))
        return ranked[: s.ev.k]

    # -- events ----------------------------------------------------------------
    def apply(self, events: Iterable[Event]) -> list[Notification]:
        out: list[Notification] = []
        for ev in events:
            out.extend(self._apply(ev))
        return out

    def _apply(self, ev: Event) -> list[Notification]:
        now = ev.t  # as given: int/float comparisons are exact (SPEC section 6, "Times")
        old: dict[Any, list[_Obj]] = {}  # results before this event, for the net diff
        matches: dict[Any, Any] = {}

        def touch(sid: Any) -> None:
            if sid not in old:
                old[sid] = list(self.subs[sid].result)

        # 1. Expiries due at `now`: subscriptions, then objects (SPEC section 2).
        for sid in [sid for sid, s in self.subs.items() if s.ev.expires is not None and s.ev.expires <= now]:
            del self.subs[sid]
        if self.window.kind == "time":
            gone = [o for o in self.alive if o.expiry <= now]
            if gone:
                self.alive = [o for o in self.alive if o.expiry > now]
                self._refill(gone, touch)

        # 2. The event itself.
        if isinstance(ev, Sub):
            s = _Sub(ev, unit_weights(ev.weights, len(ev.keywords)) if ev.kind != RANGE else ())
            self.subs[ev.id] = s
            if ev.kind != RANGE and self.window.retains:
                touch(ev.id)
                s.result = self._best(s, self.alive)
        elif isinstance(ev, Unsub):
            del self.subs[ev.id]
        else:
            self._publish(ev, touch, matches)

        # 3. Notifications, in subscription registration order.
        out: list[Notification] = []
        for sid, s in self.subs.items():
            if sid in matches:
                out.append(Match(sid, ev.t, matches[sid]))
            elif sid in old:
                before = {id(o) for o in old[sid]}
                after = {id(o) for o in s.result}
                added = tuple(o.id for o in s.result if id(o) not in before)
                removed = tuple(o.id for o in old[sid] if id(o) not in after)
                if added or removed:
                    out.append(Change(sid, ev.t, added, removed))
        return out

    def _publish(self, ev: Pub, touch, matches: dict) -> None:
        self.stats["objects"] += 1
        if self.window.kind == "time":
            expiry = self.window.expiry(ev.t, ev.expires)  # exact for integers (SPEC 6)
        else:
            expiry = math.inf
        o = _Obj(ev.seq, ev.id, ev.x, ev.y, frozenset(ev.keywords), expiry)
        if self.window.kind == "count" and len(self.alive) == self.window.n:
            gone = self.alive.pop(0)  # the oldest leaves as the new one arrives
            self._refill([gone], touch)
        if self.window.retains:
            self.alive.append(o)
        for sid, s in self.subs.items():
            self.stats["candidates"] += 1
            if not self._qualifies(s, o):
                continue
            if s.ev.kind == RANGE:
                x1, y1, x2, y2 = s.ev.rect  # type: ignore[misc]
                if x1 <= o.x <= x2 and y1 <= o.y <= y2:
                    matches[sid] = o.id
                    self.stats["affected"] += 1
                continue
            new = self._best(s, s.result + [o])
            if any(r is o for r in new):
                touch(sid)
                s.result = new
                self.stats["affected"] += 1

    def _refill(self, gone: list[_Obj], touch) -> None:
        start = time.perf_counter()
        self.stats["expired"] += len(gone)
        gone_ids = {id(o) for o in gone}
        for sid, s in self.subs.items():
            if any(id(o) in gone_ids for o in s.result):
                touch(sid)
                s.result = self._best(s, self.alive)
        self.stats["expiry_seconds"] += time.perf_counter() - start

    # -- queries ---------------------------------------------------------------
    def flush(self) -> None:
        """Nothing held (``Engine.flush``): every event is applied at once here."""

    def results(self, sub_id: Any) -> list[Any] | None:
        """Object ids of an active kNN/top-k subscription's result, in rank order."""
        s = self.subs.get(sub_id)
        if s is None or s.ev.kind == RANGE:
            return None
        return [o.id for o in s.result]

    def all_results(self) -> list[tuple[Any, list[Any]]]:
        """(id, result ids) of every active kNN/top-k subscription, in registration order."""
        return [(sid, [o.id for o in s.result]) for sid, s in self.subs.items() if s.ev.kind != RANGE]


def make(window: Window | str = "none", space: Space | None = None, **params: Any) -> "ReferenceEngine":
    """The engine ``--index reference`` names (registered in pyproject.toml's entry points,
    group ``skpubsub.engines``): it takes no parameters."""
    if params:
        raise ValueError(f"index 'reference' takes no parameter {next(iter(params))!r}")
    return ReferenceEngine(window, space)
