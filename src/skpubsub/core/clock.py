"""The window clock: when subscriptions and objects leave (SPEC section 2).

One rule, kept in one place and used by the engine (object slots), the publish kernel's
driver (a run of pubs at once), the dispatcher (object seqs across workers) and the
validating gate (subscription ids):

* a subscription with ``expires`` ends before the first event with ``t >= expires``;
* ``count:N``: the oldest object leaves as the (N+1)-th arrives;
* ``time:T``: an object leaves at its expiry (its own ``expires``, else ``t + T``), before
  the first event with ``t >=`` it;
* ``none``: objects never leave.

Items are opaque keys (slots, seqs or ids); ties in time leave in arrival (seq) order.
Times and expiries are kept as given (``int`` or ``float``) and compared by Python, which
compares an int with a float exactly: integer nanosecond stamps above 2**53 expire exactly
(SPEC section 6, "Times"). Nothing here rounds them to float64.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections import deque
from itertools import islice
from typing import Any

import numpy as np

from .config import Window

Time = int | float  # as the event gave it: never rounded here (SPEC section 6)


class WindowClock:
    """Departures of subscriptions and objects under ``window``: O(log n) per item."""

    def __init__(self, window: Window) -> None:
        self.window = window
        self._subs: list[tuple[Time, int, Any]] = []  # (expires, seq, key)
        self._fifo: deque[Any] = deque()  # count window: alive objects, oldest first
        self._heap: list[tuple[Time, int, Any]] = []  # time window: (expiry, seq, key), exact

    # -- subscriptions -----------------------------------------------------------------
    def subscribe(self, expires: Time | None, seq: int, key: Any) -> None:
        if expires is not None:
            heapq.heappush(self._subs, (expires, seq, key))

    def subs_ending(self, now: Time) -> list[tuple[int, Any]]:
        """(seq, key) of the subscriptions whose expiry is due at ``now``, in expiry order;
        the caller skips those already ended otherwise (their seq no longer matches)."""
        h = self._subs
        out = []
        while h and h[0][0] <= now:
            _, seq, key = heapq.heappop(h)
            out.append((seq, key))
        return out

    @property
    def next_sub_end(self) -> Time:
        return self._subs[0][0] if self._subs else math.inf

    @property
    def next_due(self) -> Time:
        """The earliest time anything is due to leave: a subscription's end, or (time
        window) an object's expiry; a count window's objects leave by arrivals instead."""
        return min(self.next_sub_end, self._heap[0][0] if self._heap else math.inf)

    def due_by(self, t: Time) -> bool:
        """``next_due <= t`` for a finite ``t``, without the two properties and their ``min``
        (a lone subscription asks it: ``Engine._subscribe_one``)."""
        s, h = self._subs, self._heap
        return bool(s and s[0][0] <= t or h and h[0][0] <= t)

    def objects_due(self, t: Time) -> bool:
        """Are objects due to leave by ``t`` (time window)?"""
        h = self._heap
        return bool(h and h[0][0] <= t)

    # -- objects -----------------------------------------------------------------------
    def expiry(self, t: Time, expires: Time | None, seq: int) -> Time:
        """What orders an object's departure: its expiry time (time window: ``Window.expiry``,
        exact for integers), its seq (count window: the k-skyband's dominance reads it), or
        never."""
        w = self.window
        if w.kind == "time":
            return w.expiry(t, expires)
        if w.kind == "count":
            return float(seq)
        return math.inf

    def leaving(self, now: Time) -> list[Any]:
        """Objects whose time is up before an event at ``now`` (time window), oldest first."""
        out = []
        h = self._heap
        while h and h[0][0] <= now:
            out.append(heapq.heappop(h)[2])
        return out

    def arrive(self, key: Any, seq: int, expiry: Time) -> list[Any]:
        """An object arrives; returns the objects it pushes out (count window: the oldest,
        once N are alive). Under ``time`` it leaves later through ``leaving``."""
        w = self.window
        if w.kind == "count":
            out = [self._fifo.popleft()] if len(self._fifo) == w.n else []
            self._fifo.append(key)
            return out
        if w.kind == "time":
            heapq.heappush(self._heap, (expiry, seq, key))
        return []

    def plan(self, times: list[Time] | None, seqs: list[int] | None, keys: list[Any],
             expiries: list[Time] | None) -> RunPlan:
        """The departures before each object of a run arriving at ``times`` (nothing else
        happening in between): CSR offsets per object and the keys, oldest first. Nothing
        changes until ``commit``. Only a time window reads ``times``, ``seqs`` and ``expiries``
        (exact values as given, see the module docstring)."""
        m = len(keys)
        w = self.window
        owner: list[int] = []
        objs: list[Any] = []
        taken: list = []  # popped from the time heap; what is not consumed goes back
        if w.kind == "count":
            a = len(self._fifo)
            seq = list(islice(self._fifo, max(0, min(a, a + m - w.n))))  # only the ones that leave
            seq.extend(keys)
            for i in range(m):
                e = a + i - w.n
                if e >= 0:
                    owner.append(i)
                    objs.append(seq[e])
        elif w.kind == "time" and m:
            last = times[-1]
            while self._heap and self._heap[0][0] <= last:
                taken.append(heapq.heappop(self._heap))
            # Each leaves before the first object at or after its expiry (exact), and a run's
            # object never before its own arrival: one whose expiry is at or before its own t
            # (``float(t) + float(T) == t`` at 1e308, SPEC 6 "Times") is kept for its own event
            # and leaves before the next one, as on the plain path (``leaving`` then ``arrive``).
            # Past the run's end it stays in the heap (``commit`` keeps what is not consumed).
            for e in taken:
                owner.append(bisect_left(times, e[0]))
                objs.append(e)
            for i in range(m):
                if expiries[i] <= last:
                    j = max(bisect_left(times, expiries[i]), i + 1)
                    if j < m:
                        owner.append(j)
                        objs.append((expiries[i], seqs[i], keys[i]))
            if objs:  # in leaving order: by owner, then by (expiry, seq) as the heap pops them
                order = sorted(range(len(objs)), key=lambda q: (owner[q], objs[q]))
                owner = [owner[q] for q in order]
                objs = [objs[q][2] for q in order]
        return RunPlan.of(m, owner, objs, taken)

    def commit(self, plan: RunPlan, seqs: list[int] | None, keys: list[Any], expiries: list[Time] | None,
               done: int) -> None:
        """The first ``done`` objects of a planned run arrived (and their departures left);
        only a time window reads ``seqs`` and ``expiries``."""
        w = self.window
        if w.kind == "count":
            for i in range(done):
                if plan.off[i + 1] > plan.off[i]:
                    self._fifo.popleft()
                self._fifo.append(keys[i])
        elif w.kind == "time":
            consumed = set(plan.gone(done))
            for entry in plan.taken:
                if entry[2] not in consumed:
                    heapq.heappush(self._heap, entry)
            for i in range(done):
                if keys[i] not in consumed:
                    heapq.heappush(self._heap, (expiries[i], seqs[i], keys[i]))


class RunPlan:
    """A run's departures: those before object ``i`` are ``keys[off[i]:off[i + 1]]``."""

    def __init__(self, off: np.ndarray, keys: np.ndarray, taken: list) -> None:
        self.off, self.keys, self.taken = off, keys, taken

    @classmethod
    def of(cls, m: int, owner: list[int], objs: list[Any], taken: list = ()) -> RunPlan:
        off = np.zeros(m + 1, dtype=np.int64)
        if owner:
            np.add.at(off, np.array(owner) + 1, 1)
            order = np.argsort(np.array(owner), kind="stable")
            keys = np.array(objs, dtype=np.int64)[order]
        else:
            keys = np.empty(0, dtype=np.int64)
        return cls(np.cumsum(off), keys, list(taken))

    def gone(self, done: int) -> list:
        """Keys that left before the first ``done`` objects."""
        return self.keys[: self.off[done]].tolist()
