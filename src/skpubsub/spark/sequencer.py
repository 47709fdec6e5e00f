"""The sequencer: the one sequential step of the Spark runtime (no PySpark here).

Validation (the Gate: time order, active ids) and dispatch (the global window,
where each subscription lives, backfills) depend on every earlier event, so they
run in stream order in one place: the streaming source (``spark/source.py``) feeds
each micro-batch's lines through a :class:`Sequencer`, which turns them into
per-worker rows. Everything after it (the worker engines, the sink) is
partitioned by worker. Its state is never saved: a replayed micro-batch re-feeds the
input up to its start (``spark/source.py``).

Row layout (one row per worker per chunk of at most ``CHUNK`` items), payloads as data
(:mod:`.codec`: JSON of the events' SPEC records, validated again when read)::

    (worker, part, payload)   payload = encode_items([(seq, (event | Tick | Backfill, leave)), ...])
    (-1, part, payload)       payload = encode_driver([("rejected" | "meta", ...), ...])  driver rows

``part`` numbers the rows of one micro-batch so a worker applies them in order.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..core.config import Space, Window
from ..engine.messages import Tick
from ..io.events import Pub, Rejection
from ..io.validate import Gate
from ..partition.registry import PLANNERS
from ..partition.stats import Statistics
from ..runtime.runner import active_subs
from ..runtime.dispatcher import Dispatcher
from .codec import END, encode_driver, encode_items

CHUNK = 4096  # routed items per row: rows stay small, calls stay coarse
DRIVER = -1  # the pseudo-worker carrying rejections and run metadata to the sink


class Sequencer:
    """Gate + O_init buffer + plan + :class:`Dispatcher`; ``feed`` is O(lines + routed items)."""

    def __init__(self, window: Window, space: Space, workers: int, partitioner: str,
                 init_objects: int = 1000, stats: Statistics | None = None) -> None:
        if partitioner not in PLANNERS:
            raise ValueError(f"unknown partitioner {partitioner!r}; known: {', '.join(PLANNERS)}")
        self.window, self.space, self.m = window, space, workers
        self.partitioner, self.init_objects, self.stats = partitioner, init_objects, stats
        self.gate = Gate(window, space)
        self.head: list | None = []  # events waiting for the plan (None once planned)
        self.dispatcher: Dispatcher | None = None
        self.accepted: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()
        self.last: tuple[int, Any] | None = None  # (seq, t) of the last accepted event
        self.lines = 0

    def _plan(self) -> list:
        """Make the plan from the buffered head; returns the head, now to be routed."""
        head, self.head = self.head or [], None
        stats = self.stats
        if stats is None:  # no statistics file: O_init is the buffered head itself
            stats = Statistics.from_objects((ev for ev in head if isinstance(ev, Pub)), self.space)
        plan = PLANNERS[self.partitioner](active_subs(head), stats, self.m)
        self.dispatcher = Dispatcher(plan, self.window, rarity=dict(stats.keyword_freq))
        return head

    def feed(self, lines: list[tuple[int, bytes | None]], end: bool = False) -> list[tuple[int, int, bytes]]:
        """Gate and route ``(line number, raw)`` lines; with ``end``, finish the input:
        plan if still buffering and ask every worker for its results."""
        per: dict[int, list] = {}
        driver: list = []
        for line_no, raw in lines:
            self.lines = max(self.lines, line_no)
            ev = self.gate.admit_line(raw, line_no)
            if isinstance(ev, Rejection):
                self.rejected[ev.label] += 1
                driver.append(("rejected", ev.line, ev.error, ev.raw))
                continue
            self.accepted[ev.label] += 1
            self.last = (ev.seq, ev.t)
            if self.head is not None:
                self.head.append(ev)
                if self.accepted["pub"] >= self.init_objects:
                    self._route(self._plan(), per)
                continue
            self._route([ev], per)
        if end:
            if self.head is not None:
                self._route(self._plan(), per)
            if self.last is not None:
                seq, t = self.last
                for wk in range(self.m):  # subscription expiries up to the end time, then results
                    per.setdefault(wk, []).extend([(seq, (Tick(seq, t), ())), (seq, END)])
            driver.append(("meta", self.metadata()))
        rows: list[tuple[int, int, bytes]] = []
        for wk in sorted(per):
            items = per[wk]
            for i in range(0, len(items), CHUNK):
                rows.append((wk, len(rows), encode_items(items[i:i + CHUNK])))
        if driver:
            rows.append((DRIVER, len(rows), encode_driver(driver)))
        return rows

    def _route(self, events: list, per: dict[int, list]) -> None:
        d = self.dispatcher
        assert d is not None
        for ev in events:
            for wk, items in d.route(ev).items():
                per.setdefault(wk, []).extend((ev.seq, it) for it in items)

    def metadata(self) -> dict:
        m = {
            "accepted": dict(sorted(self.accepted.items())),
            "rejected": dict(sorted(self.rejected.items())),
            "accepted_total": sum(self.accepted.values()),
            "rejected_total": sum(self.rejected.values()),
            "objects": self.accepted["pub"],
            "lines": self.lines,
        }
        if self.dispatcher is not None:
            m.update(self.dispatcher.metrics())
            m["plan"] = self.dispatcher.plan.describe()
        return m
