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

Rebalancing (``rebalance``: :class:`~skpubsub.runtime.rebalance.Rebalancer` parameters,
``spark/NOTES.md``): at the end of a batch's feed the rebalancer is given the workers' loads
of the batch before (measured by the tasks, recorded by the source) and may migrate; the
dispatcher's routing changes there, so the next batch's events follow it. Under a retaining
window the whole migration rides at the end of this batch's rows (``Drop`` at the source
worker; the backfill and ``Adopt`` at the destination: the dispatcher has the alive objects).
Under ``none`` the results are only in the source worker: it ``Export``s them as a file at the
end of this batch, then drops them, and the destination adopts them at the start of the next
batch (before any of its events), the file read by ``read_export``. Migration items travel in
rows of their own, before and after the batch's event rows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from itertools import groupby
from operator import itemgetter
from typing import Any

from ..core.config import Space, Window
from ..engine.messages import Adopt, Drop, Export, Tick
from ..io.events import Pub, Rejection, Sub, events_of
from ..io.validate import Gate
from ..partition.registry import PLANNERS
from ..partition.stats import Statistics
from ..runtime.runner import active_subs, fewer_collections
from ..runtime.dispatcher import Dispatcher
from .codec import DRIVER, END, encode_driver, encode_items

CHUNK = 4096  # routed items per row: rows stay small, calls stay coarse
# Lines a ``Gate.admit_block`` call at most: a block with anything unusual in it (a rejection,
# two ops or kinds, an expiry inside) is judged event by event, so small blocks keep most lines
# on the column path; below ~1000 the call's own cost shows (gate alone, range_100k: 2.0 us a
# line in blocks of 10,000, 1.6 in 1024, 1.56 in 256; admit_line 2.7; spark/NOTES.md).
BLOCK = 1024
RUN = 16  # a run of lines with one opening shorter than this joins its neighbours' block
_LINE, _RAW = itemgetter(0), itemgetter(1)


def _opening(raw: bytes | None) -> bytes:
    """What tells a line's op (and often kind) cheaply: its first bytes (``{"op":"sub",``)."""
    return b"" if raw is None else raw[:12]


def _blocks(lines: list[tuple[int, bytes | None]]) -> Iterator[tuple[int, list]]:
    """``(first line number, [raw, ...])``: the lines cut into blocks for ``Gate.admit_block``,
    each of consecutive numbers (what it numbers them by: a block is cut where the numbers are
    not consecutive, so any numbering is admitted as ``admit_line`` would number it), at most
    BLOCK lines, and cut where the lines' opening bytes change after a run of RUN or more, so
    that a run of one op is a block of its own (judged by columns) and a stretch of short
    runs one mixed block (judged event by event, after one decoding pass). Where blocks are
    cut changes no event: only which path the Gate takes."""
    nums, raws = list(map(_LINE, lines)), list(map(_RAW, lines))
    n, i = len(nums), 0
    whole = not n or nums == list(range(nums[0], nums[0] + n))  # the source's case: one C comparison
    while i < n:  # runs of consecutive line numbers
        j = n
        if not whole:  # rare: a line at a time to the next break
            j = i + 1
            while j < n and nums[j] == nums[j - 1] + 1:
                j += 1
        cuts, s, pend = [i], i, i  # s: where this group starts; pend: where the mixed stretch does
        for _, g in groupby(map(_opening, raws[i:j])):
            e = s + sum(1 for _ in g)
            if e - s >= RUN:
                if pend < s:
                    cuts.append(s)
                cuts.append(e)
                pend = e
            elif e - pend >= BLOCK:
                cuts.append(e)
                pend = e
            s = e
        if cuts[-1] != j:
            cuts.append(j)
        for a, b in zip(cuts, cuts[1:]):
            for c in range(a, b, BLOCK):
                yield nums[c], raws[c:min(b, c + BLOCK)]
        i = j


def totals(accepted: Counter, rejected: Counter, lines: int) -> dict:
    """What a sequencer's metadata row says of the input: events accepted and rejected by
    label, their totals, objects, lines read."""
    return {"accepted": dict(sorted(accepted.items())), "rejected": dict(sorted(rejected.items())),
            "accepted_total": sum(accepted.values()), "rejected_total": sum(rejected.values()),
            "objects": accepted["pub"], "lines": lines}


def head_part(pubs: int, need: int, label: str, n: int) -> int:
    """How many of a block of ``n`` events of kind ``label`` go to the O_init head, ``pubs``
    objects accepted before it: all of them until the ``need``-th object, which ends the
    head (a block of objects is cut right after it); one when the head is complete already
    (a head of ``need`` = 0 objects ends at the first event)."""
    return 1 if pubs >= need else min(n, need - pubs) if label == "pub" else n


def switch_tag(gen: int) -> int:
    """The ``Export`` tag of generation ``gen``'s last batch (negative: never an input line)."""
    return -1 - gen


def _rows(groups: tuple[dict[int, list], ...]) -> list[tuple[int, int, bytes]]:
    """Per worker, each group's items in rows of their own, chunked."""
    rows: list[tuple[int, int, bytes]] = []
    for wk in sorted(set().union(*groups)):
        for g in groups:
            items = g.get(wk, [])
            for i in range(0, len(items), CHUNK):
                rows.append((wk, len(rows), encode_items(items[i:i + CHUNK])))
    return rows


class Sequencer:
    """Gate + O_init buffer + plan + :class:`Dispatcher`; ``feed`` is O(lines + routed items)."""

    def __init__(self, window: Window, space: Space, workers: int, partitioner: str,
                 init_objects: int = 1000, stats: Statistics | None = None,
                 rebalance: dict | None = None) -> None:
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
        self.rebalance = dict(rebalance) if rebalance is not None else None
        self.rebalancer: Any = None
        self.migrated = 0
        # ``none``: adoptions due at the start of the next feed: (tag, source, destination, sub, now)
        self.awaiting: list[tuple[int, int, int, Sub, Any]] = []
        self.read_export: Callable[[int, int], dict[int, tuple]] | None = None  # (tag, worker) -> seq -> held
        self._tail: dict[int, list] = {}
        self._tag = 0
        self._seeds: dict[int, list] = {}  # another --workers: the new workers' first items (``switch``)
        self._stats: Statistics | None = None  # the statistics the plan was made from

    def _plan(self) -> list:
        """Make the plan from the buffered head; returns the head, now to be routed."""
        head, self.head = self.head or [], None
        stats = self.stats
        if stats is None:  # no statistics file: O_init is the buffered head itself
            stats = Statistics.from_objects((ev for ev in head if isinstance(ev, Pub)), self.space)
        self._stats = stats
        plan = PLANNERS[self.partitioner](active_subs(head), stats, self.m)
        self.dispatcher = Dispatcher(plan, self.window, rarity=dict(stats.keyword_freq))
        if self.rebalance is not None:
            from ..runtime.rebalance import Rebalancer

            self.rebalancer = Rebalancer(self.space, planner=PLANNERS[self.partitioner], **self.rebalance)
            self.dispatcher.observer = self.rebalancer.observe
        return head

    @fewer_collections()  # the cyclic collector's passes over the dispatcher's state were ~40% of a feed
    def feed(self, lines: list[tuple[int, bytes | None]], end: bool = False, loads: list[float] | None = None,
             tag: int = 0, keep: bool = True) -> list[tuple[int, int, bytes]]:
        """Gate and route ``(line number, raw)`` lines; with ``end``, finish the input:
        plan if still buffering and ask every worker for its results. Rebalancing: the
        adoptions left from the last boundary come first; then, unless ``end``, the
        rebalancer sees ``loads`` (the previous batch's, per worker; None: no check) and its
        migrations, tagged ``tag``, end this batch. ``keep=False``: a re-feed whose rows are
        dropped (the exports are not read)."""
        per: dict[int, list] = {}
        driver: list = []
        head = self._adoptions(keep)
        seeds, self._seeds = self._seeds, {}
        for wk, items in seeds.items() if keep else ():  # a new number of workers: placed first
            head[wk] = items + head.get(wk, [])
        self._tail = {}
        run: list = []  # admitted events (and blocks) after the plan, routed at once (Dispatcher.route_many)
        gate = self.gate
        for first, raws in _blocks(lines):
            self.lines = max(self.lines, first + len(raws) - 1)
            out = gate.admit_block(first, raws)
            label = gate.block_label
            if label is not None:  # a SubBlock or PubBlock: one label, no rejection
                self._take_block(out, label, run, per)
                continue
            for ev in out:
                if type(ev) is Rejection:
                    self.rejected[ev.label] += 1
                    driver.append(("rejected", ev.line, ev.error, ev.raw))
                    continue
                self.accepted[ev.label] += 1
                self.last = (ev.seq, ev.t)
                if self.head is not None:
                    self.head.append(ev)
                    if self.accepted["pub"] >= self.init_objects:
                        self._route_run(self._plan(), per)
                    continue
                run.append(ev)
        if run:  # before the end's Ticks and the rebalancer, which reads where subscriptions are
            self._route_run(run, per)
        if end:
            if self.head is not None:
                self._route_run(self._plan(), per)
            if self.last is not None:
                seq, t = self.last
                for wk in range(self.m):  # subscription expiries up to the end time, then results
                    per.setdefault(wk, []).extend([(seq, (Tick(seq, t), ())), (seq, END)])
            driver.append(("meta", self.metadata()))
        elif self.rebalancer is not None and loads is not None:
            if len(loads) != self.m:
                raise ValueError(f"rebalancing: {len(loads)} worker loads for {self.m} workers")
            self._tag = tag
            self.rebalancer.after_batch([float(x) for x in loads], self)  # may call migrate
        rows = _rows((head, per, self._tail))  # migrations in rows of their own
        if driver:
            rows.append((DRIVER, len(rows), encode_driver(driver)))
        return rows

    def _take_block(self, block: Any, label: str, run: list, per: dict[int, list]) -> None:
        """Count, buffer or queue the events of a block the Gate judged by columns, as the
        loop does event by event: while buffering O_init the plan is made right after the
        event at which ``init_objects`` objects are accepted, so the block is cut there
        (its head part buffered, the rest queued as a block)."""
        n = len(block)
        if self.head is not None:
            need = self.init_objects
            k = head_part(self.accepted["pub"], need, label, n)
            self.head.extend(block[:k])
            self.accepted[label] += k
            self.last = (block.seq[k - 1], block.t[k - 1])
            if self.accepted["pub"] < need:
                return
            self._route_run(self._plan(), per)
            if k == n:
                return
            block = block[k:]
            n -= k
        self.accepted[label] += n
        self.last = (block.seq[n - 1], block.t[n - 1])
        run.append(block)

    def _route_run(self, run: list, per: dict[int, list]) -> None:
        """Route admitted events (and blocks, as their events) in order (``Dispatcher.route_run``)."""
        d = self.dispatcher
        assert d is not None
        events = events_of(run)
        for ev, out in zip(events, d.route_run(events)):
            for wk, items in out.items():
                per.setdefault(wk, []).extend((ev.seq, it) for it in items)

    # -- rebalancing: the cluster side of runtime/rebalance.py's Rebalancer ----------------
    def migrate(self, ids: list, dst: int) -> None:
        """Move active subscriptions to worker ``dst`` at the end of this batch (see the
        module docstring); routing follows from the next event on. Exact: no notification."""
        d = self.dispatcher
        assert d is not None and self.last is not None
        by_src: dict[int, list] = {}
        for sid in ids:
            ws = d.where[sid]
            if len(ws) == 1 and ws[0] != dst:
                by_src.setdefault(ws[0], []).append(sid)
        seq, t = self.last
        retains = self.window.retains
        tail = self._tail
        for src, lst in sorted(by_src.items()):
            out = tail.setdefault(src, [])
            if not retains:  # one Export per worker and batch (the rebalancer may call twice): before the Drops
                if out and isinstance(out[0][1][0], Export):
                    out[0] = (seq, (Export(out[0][1][0].ids + tuple(lst), self._tag), ()))
                else:
                    out.insert(0, (seq, (Export(tuple(lst), self._tag), ())))
            out.extend((seq, (Drop(sid), ())) for sid in lst)
            for sid in lst:
                back = d.move(sid, dst)
                if retains:
                    tail.setdefault(dst, []).extend((seq, it) for it in back)
                    tail[dst].append((seq, (Adopt(d.subs[sid], (), t), ())))
                else:
                    self.awaiting.append((self._tag, src, dst, d.subs[sid], t))
            self.migrated += len(lst)

    def _adoptions(self, keep: bool) -> dict[int, list]:
        """The ``none`` adoptions due now, each with the result objects its source exported."""
        head: dict[int, list] = {}
        awaiting, self.awaiting = self.awaiting, []
        if not keep or not awaiting:
            return head
        assert self.read_export is not None and self.last is not None
        exports: dict[tuple[int, int], dict] = {}
        seq = self.last[0]
        for tag, src, dst, sub, now in awaiting:
            if (tag, src) not in exports:
                exports[tag, src] = self.read_export(tag, src)
            held = exports[tag, src].get(sub.seq)
            if held is None:
                raise ValueError(f"rebalancing: worker {src}'s export {tag} lacks subscription {sub.id!r}")
            head.setdefault(dst, []).append((seq, (Adopt(sub, held, now), ())))
        return head

    # -- another number of workers on restart (spark/NOTES.md, "M on restart") -------------
    def switch_rows(self, gen: int, keep: bool = True) -> list[tuple[int, int, bytes]]:
        """The last micro-batch of generation ``gen`` of workers (no input line): the seeds and
        ``none`` adoptions still due, then, under ``none``, an ``Export`` to every worker of the
        results of its live kNN/top-k subscriptions (file ``switch-<gen>-<worker>.json``, data).
        Under a retaining window the new workers' state comes from the dispatcher alone.
        ``keep=False``: a re-feed (the seeds and adoptions were applied before)."""
        head = self._adoptions(keep)
        seeds, self._seeds = self._seeds, {}
        if not keep:
            return []
        for wk, items in seeds.items():
            head[wk] = items + head.get(wk, [])
        d, tail = self.dispatcher, {}
        if d is not None and not self.window.retains and self.last is not None:
            ids: dict[int, list] = {wk: [] for wk in range(self.m)}
            for sub in sorted(d.subs.values(), key=lambda s: s.seq):
                if sub.kind != "range":  # a range subscription holds no result
                    ids[d.where[sub.id][0]].append(sub.id)  # kNN/top-k are never replicated
            tail = {wk: [(self.last[0], (Export(tuple(ids[wk]), switch_tag(gen)), ()))] for wk in range(self.m)}
        return _rows((head, tail))

    def switch(self, workers: int, held: Callable[[], dict[int, tuple]] | None = None) -> None:
        """Go on with ``workers`` workers, after :meth:`switch_rows`: a plan for them is made
        from the live subscriptions (registration order) and the O_init statistics, and each
        subscription is seeded where it now lives as a migration is (the alive objects it needs
        as ``Backfill``, then ``Adopt``), all at the head of the next feed. ``held()`` reads the
        old workers' exports under ``none`` (registration position -> result objects); None: a
        re-feed, whose seeds are never sent. Deterministic given the same input, so a restart
        re-makes the same placement."""
        self.m, self._seeds = workers, {}
        d = self.dispatcher
        if d is None:  # still buffering O_init: the plan will be made for ``workers``
            return
        assert self.last is not None and not self.awaiting
        subs = sorted(d.subs.values(), key=lambda s: s.seq)
        plan = PLANNERS[self.partitioner](subs, self._stats, workers)
        d.plan, d.m, d.old_plan, d.old_ids = plan, workers, None, set()
        d.where, d.kw_workers, d.replicas = {}, {}, 0
        for _, have in d.alive.values():  # no new worker holds anything yet
            have.clear()
        got = held() if held is not None and not self.window.retains else None
        seq, t = self.last
        seeds: dict[int, list] = {}
        for sub in subs:
            targets = tuple(sorted(set(plan.assign(sub))))
            d.where[sub.id] = targets
            for w in d._keys[sub.id]:  # the dispatcher's routing bookkeeping, as _register keeps it
                c = d.kw_workers.setdefault(w, Counter())
                for wk in targets:
                    c[wk] += 1
            d.replicas += len(targets)
            back = d._backfill(sub, targets) if self.window.retains and sub.kind != "range" else {}
            held_objs: tuple = ()
            if got is not None and sub.kind != "range":
                if sub.seq not in got:
                    raise ValueError(f"another --workers: the old workers' exports lack subscription {sub.id!r}")
                held_objs = got[sub.seq]
            for wk in targets:
                items = seeds.setdefault(wk, [])
                items.extend((seq, it) for it in back.get(wk, []))
                items.append((seq, (Adopt(sub, held_objs, t), ())))
        if held is not None:
            self._seeds = seeds
        if self.rebalancer is not None:  # a fresh one for the new workers (its loads are per worker)
            from ..runtime.rebalance import Rebalancer

            log = self.rebalancer.log
            self.rebalancer = Rebalancer(self.space, planner=PLANNERS[self.partitioner], **self.rebalance)
            self.rebalancer.log = log
            d.observer = self.rebalancer.observe

    def metadata(self) -> dict:
        m = totals(self.accepted, self.rejected, self.lines)
        if self.dispatcher is not None:
            m.update(self.dispatcher.metrics())
            m["plan"] = self.dispatcher.plan.describe()
        if self.rebalancer is not None:
            m["migrated_subscriptions"] = self.migrated
            m["adjustments"] = self.rebalancer.log
        return m
