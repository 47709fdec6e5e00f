"""The fleet: M worker engines in processes, fed the reader's blocks as they are.

What stays serial, in the parent, is only what must: placing each new subscription
by the plan, the live ids' workers (an ``unsub`` goes where its ``sub`` went) and,
under ``none``, routing each object to the workers holding a subscription it may
match (by keyword masks). Everything else is the workers': a share of a micro-batch
is a list of the reader's ``SubBlock`` / ``PubBlock`` slices and events, applied by
the single engine's columnar path (``Engine.apply_tagged``).

The window, without a sequencer: under ``count``/``time`` every worker gets every
object and keeps the whole window itself, so each worker's own clock expires what the
single engine's would, a new kNN/top-k subscription starts from the alive objects
already there (no backfill), and no message says what leaves. Under ``time`` an
object may leave at another worker's event (a subscription placed elsewhere), so each
worker also gets a ``Tick`` at each such event where something of its window is due
(``Router._ticks``). Replication of objects is the price (runtime/NOTES.md).

Merging: each worker keys its notifications by the ordinal of the event in its share
and its subscription's registration seq; the parent maps ordinals to the batch's
event positions and orders by (position, registration seq), a range match of a
subscription replicated on several workers kept once: the single engine's order.

Batches are pipelined: the parent routes batch b + 1 while the workers apply b.
"""

from __future__ import annotations

import heapq
import multiprocessing as mp
import time
from collections.abc import Sequence
from itertools import chain, count, filterfalse, groupby, repeat
from operator import itemgetter
from typing import Any

import numpy as np

from ..core.clock import WindowClock
from ..core.config import Space, Window
from ..engine.messages import Tick
from ..io.events import Pub, PubBlock, Rects, Sub, SubBlock
from ..io.lexicon import Lexicon, Words
from ..io.notewriter import reorder
from ..io.notifications import NoteLines
from ..partition.base import Plan
from .dispatcher import routing_metrics
from .engines import make_engine
from .fleetworker import Worker, start_deaf, worker_main

BLOCKS = (SubBlock, PubBlock)
FORGET = 1 << 16  # routing words known before those no live subscription holds are forgotten


def take(block, idx: np.ndarray):
    """Records ``idx`` (ascending) of ``block`` as a block of the same class."""
    out = type(block).__new__(type(block))
    get = itemgetter(*idx.tolist()) if len(idx) > 1 else None
    for f in block.FIELDS:
        c = getattr(block, f)
        if c is None:
            v = None
        elif type(c) is Words:
            lens = c.lens()[idx]
            off = np.zeros(len(idx) + 1, dtype=np.int64)
            np.cumsum(lens, out=off[1:])
            starts = c.off[:-1][idx]
            pos = np.repeat(starts - off[:-1], lens) + np.arange(off[-1], dtype=np.int64)
            v = Words(c.codes[pos], off, c.lex)
        elif type(c) is Rects:
            v = Rects(c.array[idx])
        elif isinstance(c, np.ndarray):
            v = c[idx]
        elif get is None:
            v = [c[int(i)] for i in idx]
        else:
            v = list(get(c))
        setattr(out, f, v)
    if type(block) is SubBlock:
        kinds = out.kind
        out.one_kind = kinds[0] if len(kinds) and kinds.count(kinds[0]) == len(kinds) else None
    return out


class Router:
    """The serial step: places subscriptions by ``plan``, keeps the live ids' workers, and
    under ``none`` routes objects by keyword. O(keywords) a subscription, O(keywords) an
    object (one dict lookup each), no Python step per object under a retaining window."""

    def __init__(self, plan: Plan, window: Window, rarity: dict[str, int] | None = None) -> None:
        self.plan, self.m = plan, plan.m
        self.window = window
        self.broadcast = window.retains  # every worker keeps the whole window
        self.ticks = window.kind == "time"  # objects may leave at another worker's event
        self.clock = WindowClock(window)  # (``time``) when objects leave: the same on every worker
        self.rarity = rarity or {}
        self.where: dict[Any, tuple[int, ...]] = {}  # live sub id -> workers
        self._seq: dict[Any, int] = {}  # live sub id -> registration seq
        self._ends: list = []  # (expires, seq, id) of subscriptions with an end of their own
        self.objects = self.object_messages = self.sent = self.replicas = 0
        # Routing (``none``), by the router's own word ids (a word's id never changes):
        self.word_id = _Ids(self.rarity)  # word -> id (a word never seen: -1), and its O_init frequency
        self._keys: dict[Any, tuple[int, ...]] = {}  # live sub id -> its routing word ids
        self.counts = np.zeros((0, self.m), dtype=np.int32)  # word id -> subscriptions posted per worker
        self.masks = np.zeros(1, dtype=np.int64)  # 1 + word id -> bit mask of those workers ([0]: none)
        self._rare = np.zeros(0, dtype=np.int64)  # word id -> its O_init frequency (``word_id.rare``)
        self._lex: tuple[int, int, np.ndarray] = (-1, 0, np.zeros(0, np.int64))  # a lexicon's codes -> ids
        self._pending: list[tuple[tuple[int, ...], tuple[int, ...], int]] = []  # counts not yet applied

    # -- routing words -------------------------------------------------------------------
    def _grow(self) -> None:
        """Room in the tables for every word id, and its rarity as an array."""
        n = len(self.word_id.words)
        if n > len(self._rare):
            self._rare = np.concatenate((self._rare, np.asarray(self.word_id.rare[len(self._rare):n], np.int64)))
        if n > len(self.counts):  # room by doubling
            cap = max(n, 2 * len(self.counts))
            self.counts = np.concatenate((self.counts, np.zeros((cap - len(self.counts), self.m), np.int32)))
            self.masks = np.concatenate((self.masks, np.zeros(cap + 1 - len(self.masks), np.int64)))

    def _translate(self, lex: Lexicon) -> np.ndarray:
        """Code -> word id for the reader's lexicon ``lex`` (extended as it grows)."""
        gen, done, ids = self._lex
        if gen != lex.gen:
            done, ids = 0, np.zeros(0, np.int64)
        if len(lex.words) > done:
            ids = np.concatenate((ids, np.asarray(self.word_id.learn_many(lex.words[done:]), np.int64)))
            self._lex = (lex.gen, len(lex.words), ids)
        self._grow()
        return ids

    def _routing(self, sub: Sub) -> tuple[int, ...]:
        """As the dispatcher's: an ``all`` kNN/range subscription under its rarest keyword
        (ties: the smaller id), the others under each."""
        learn = self.word_id.learn
        ids = tuple(map(learn, sub.keywords))
        if sub.match_all and len(ids) > 1 and sub.kind != "topk":
            rare = self.word_id.rare
            return (min(ids, key=lambda i: (rare[i], i)),)
        return ids

    def _count(self, keys: tuple[int, ...], workers: tuple[int, ...], d: int) -> None:
        """Subscriptions posted under ``keys`` on ``workers`` (``d``: +1 or -1), applied at
        once by ``_settle`` before objects are routed."""
        self._pending.append((keys, workers, d))

    def _settle(self) -> None:
        if not self._pending:
            return
        pend, self._pending = self._pending, []
        self._grow()
        keys = np.fromiter(chain.from_iterable(k for k, ws, _ in pend for _ in ws), np.int64)
        wks = np.fromiter(chain.from_iterable((w,) * len(k) for k, ws, _ in pend for w in ws), np.int64, len(keys))
        ds = np.fromiter(chain.from_iterable((d,) * len(k) for k, ws, d in pend for _ in ws), np.int64, len(keys))
        np.add.at(self.counts, (keys, wks), ds)
        self._remask(keys)
        if len(self.word_id.words) > max(FORGET, 4 * len(self._keys)):
            self._forget()

    def _forget(self) -> None:
        """Renumber the words that live subscriptions are posted under and forget the rest
        (SPEC 6 "Memory": an endless vocabulary in bounded memory). O(live words + subs)."""
        live = np.flatnonzero(self.counts.any(axis=1))
        new = np.full(len(self.counts), -1, dtype=np.int64)
        new[live] = np.arange(len(live))
        old = self.word_id
        self.word_id = ids = _Ids(self.rarity)
        for w in live.tolist():
            ids.learn(old.words[w])
        self.counts = self.counts[live].copy()
        self.masks = np.concatenate(([0], self.masks[live + 1]))
        self._rare = np.asarray(ids.rare, dtype=np.int64)
        remap = new.tolist()
        self._keys = {sid: remap[ks] if type(ks) is int else tuple(remap[w] for w in ks)
                      for sid, ks in self._keys.items()}
        self._lex = (-1, 0, np.zeros(0, np.int64))  # the reader's codes translated again

    def _remask(self, keys: np.ndarray) -> None:
        keys = np.unique(keys)
        self.masks[keys + 1] = (self.counts[keys] > 0) @ (np.int64(1) << np.arange(self.m, dtype=np.int64))

    def place(self, subs: Sequence[Sub]) -> list[tuple[int, ...]]:
        """Workers of each of ``subs`` (in order), registered as live."""
        return self._placed(subs, [s.id for s in subs], [s.seq for s in subs], [s.expires for s in subs], None)

    def place_block(self, b: SubBlock) -> list[tuple[int, ...]]:
        """``place(list(b))`` without a ``Sub`` a record where the plan knows the ids already
        (the head's subscriptions): C passes and array passes."""
        ids = b.id
        known = getattr(self.plan, "known", None)
        placed = known(ids) if known is not None else [None] * len(ids)
        if None in placed:
            fresh = [j for j, ws in enumerate(placed) if ws is None]
            for j, ws in zip(fresh, self._assign([b[j] for j in fresh])):
                placed[j] = ws
        out = self._placed(b, ids, b.seq, b.expires, placed, keys=False)
        if not self.broadcast:
            self._count_codes(b, out)
        return out

    def _assign(self, subs: list) -> list:
        plan = self.plan
        return plan.assign_many(subs) if hasattr(plan, "assign_many") else [plan.assign(s) for s in subs]

    def _placed(self, subs, ids, seqs, expires, placed, keys: bool = True) -> list[tuple[int, ...]]:
        """Register ``ids`` live on ``placed`` (None: ask the plan with ``subs``); under
        ``none`` (``keys``) count each one's routing keywords (one by one)."""
        where = self.where
        if placed is None:
            placed = self._assign(subs)
        if not where.keys().isdisjoint(ids):  # earlier lives, ended by their own time (ids taken again)
            for sid in ids:
                if sid in where:
                    self.end(sid, plan=False)
        m = self.m
        wk = _single(placed)
        if wk is None:  # replicated somewhere: each one's workers sorted, checked one by one
            placed = [ws if len(ws) == 1 else tuple(sorted(set(ws))) for ws in placed]
            for ws in placed:
                if not ws or ws[0] < 0 or ws[-1] >= m:
                    raise AssertionError(f"a plan placed a subscription on {ws} of {m} workers")
        elif len(wk) and (wk.min() < 0 or wk.max() >= m):
            ws = placed[int(np.flatnonzero((wk < 0) | (wk >= m))[0])]
            raise AssertionError(f"a plan placed a subscription on {ws} of {m} workers")
        where.update(zip(ids, placed))
        self._seq.update(zip(ids, seqs))
        self.replicas += len(placed) if wk is not None else sum(map(len, placed))
        if keys and not self.broadcast:
            for sub, ws in zip(subs, placed):
                k = self._keys[sub.id] = self._routing(sub)
                self._count(k, ws, 1)
        if expires is not None:
            for e, q, sid in zip(expires, seqs, ids):
                if e is not None:
                    heapq.heappush(self._ends, (e, q, sid))
        return placed

    def _count_codes(self, b: SubBlock, placed: list) -> None:
        """``_routing`` and ``_count`` of a block by array passes over its keywords' word ids
        (the reader's codes translated, else its words looked up at once)."""
        kws = b.keywords
        if type(kws) is Words:
            flat, lens = self._translate(kws.lex)[kws.flat()], kws.lens()
        else:
            kws = list(kws)
            lens = np.fromiter(map(len, kws), np.int64, len(kws))
            flat = np.array(self.word_id.learn_many(list(chain.from_iterable(kws))), dtype=np.int64)
            self._grow()
        n = len(lens)
        starts = np.concatenate(([0], np.cumsum(lens)[:-1]))
        one = (np.fromiter(b.match_all, np.bool_, n) if b.match_all is not None else np.zeros(n, np.bool_)) & (lens > 1)
        if b.one_kind != "knn" and b.one_kind != "range":
            one &= np.fromiter((k != "topk" for k in b.kind), np.bool_, n)
        owner = np.repeat(np.arange(n), lens)
        keep = ~one[owner]
        if one.any():  # an ``all`` one: its rarest word (then the smaller id), in its first entry
            best = np.minimum.reduceat((self._rare[flat] << 32) | flat, starts)[one] & 0xFFFFFFFF
            flat = flat.copy()
            flat[starts[one]] = best
            keep[starts[one]] = True
        owner, flat = owner[keep], flat[keep]
        per_sub = np.bincount(owner, minlength=n)
        if (per_sub == 1).all():  # one routing word each (an ``all`` one's rarest): kept as an int
            self._keys.update(zip(b.id, flat.tolist()))
        else:
            off = np.zeros(n + 1, dtype=np.int64)
            np.cumsum(per_sub, out=off[1:])
            per = flat.tolist()
            bounds = off.tolist()
            self._keys.update(zip(b.id, (tuple(per[a:c]) for a, c in zip(bounds, bounds[1:]))))
        wk = _single(placed)
        if wk is None:  # replicated somewhere: one by one
            for sid, ws in zip(b.id, placed):
                self._count(_keys_of(self._keys[sid]), ws, 1)
            return
        self._settle()
        np.add.at(self.counts, (flat, wk[owner]), 1)
        self._remask(flat)
        if len(self.word_id.words) > max(FORGET, 4 * len(self._keys)):
            self._forget()

    def end(self, sid: Any, plan: bool = True) -> tuple[int, ...]:
        """``sid`` unsubscribed (or ended by its time): its workers."""
        ws = self.where.pop(sid)
        del self._seq[sid]
        self.replicas -= len(ws)
        keys = self._keys.pop(sid, None)
        if keys is not None:
            self._count(_keys_of(keys), ws, -1)
        if plan:
            self.plan.remove(sid)
        return ws

    def is_live(self, sid: Any, seq: int) -> bool:
        """Is subscription ``sid`` live, registered at ``seq``?"""
        return self._seq.get(sid) == seq

    def ended_by(self, now: Any) -> None:
        """Forget the subscriptions whose own end is ``<= now`` (each worker ends them itself)."""
        ends = self._ends
        while ends and ends[0][0] <= now:
            _, seq, sid = heapq.heappop(ends)
            if self._seq.get(sid) == seq:
                self.end(sid)

    # -- objects -----------------------------------------------------------------------
    def object_masks(self, kws) -> np.ndarray:
        """Per object (its keyword tuples), the bit mask of the workers it goes to: those
        with a subscription posted under one of its words."""
        self._settle()
        lens = np.fromiter(map(len, kws), np.int64, len(kws))
        ids = np.fromiter(map(self.word_id.__getitem__, chain.from_iterable(kws)), np.int64, int(lens.sum()))
        starts = np.concatenate(([0], np.cumsum(lens)[:-1]))
        return np.bitwise_or.reduceat(self.masks[ids + 1], starts) if len(ids) else np.zeros(len(kws), np.int64)

    # -- a micro-batch ------------------------------------------------------------------
    def route(self, items: Sequence[Any]) -> tuple[list[list], list[np.ndarray], int]:
        """Each worker's share of ``items`` (events and blocks in stream order) and, per
        worker, the batch positions of the events in its share (ordinals as the worker
        counts them); and the number of events."""
        m = self.m
        shares: list[list] = [[] for _ in range(m)]
        pos: list[list[np.ndarray]] = [[] for _ in range(m)]
        k = 0
        for it in as_runs(items):
            cls = type(it)
            n = len(it) if cls in BLOCKS else 1
            if n == 0:
                continue
            if self._ends:
                self.ended_by(it.t[0] if cls in BLOCKS else it.t)
            if cls is PubBlock or cls is Pub:
                self._objects(it, cls, k, n, shares, pos)
            elif cls is SubBlock:
                placed = self.place_block(it)
                cuts = self._due_at(it.t) if self.ticks else []
                for a, c in zip([0, *cuts], [*cuts, n]):
                    if a in cuts:
                        self._tick(it.seq[a], it.t[a], placed[a], k + a, shares, pos)
                    if a < c:
                        self._split(it if (a, c) == (0, n) else it[a:c], placed[a:c], k + a, shares, pos)
            else:  # a Sub or an Unsub
                ws = self.place([it])[0] if cls is Sub else self.end(it.id)
                if self.ticks and self._due_at([it.t]):
                    self._tick(it.seq, it.t, ws, k, shares, pos)
                for wk in ws:
                    shares[wk].append(it)
                    pos[wk].append(np.array([k], dtype=np.int64))
                self.sent += len(ws)
            k += n
        return shares, [np.concatenate(p) if p else np.empty(0, np.int64) for p in pos], k

    def _due_at(self, times) -> list[int]:
        """Under ``time``: the indices of ``times`` (a run of subscription events) at which
        objects leave the window, each worker's as the parent's clock says (every worker
        holds every object, so one clock tells them all)."""
        clock, out = self.clock, []
        for j, t in enumerate(times):
            if clock.objects_due(t):
                clock.leaving(t)
                out.append(j)
        return out

    def _tick(self, seq: int, t: Any, ws: tuple[int, ...], k: int, shares: list, pos: list) -> None:
        """Objects leave at the event at position ``k`` (placed on ``ws``): the other workers
        take a ``Tick`` there, so that their refills are notified at that event."""
        for wk in range(self.m):
            if wk not in ws:
                shares[wk].append(Tick(seq, t))
                pos[wk].append(np.array([k], dtype=np.int64))
                self.sent += 1

    def _split(self, b: SubBlock, placed: list, k: int, shares: list, pos: list) -> None:
        wk = _single(placed)
        if wk is not None:
            bits = np.int64(1) << wk
        else:  # replicated somewhere
            bits = np.fromiter((sum(1 << w for w in ws) for ws in placed), np.int64, len(placed))
        self._by_mask(b, bits, k, shares, pos)

    def _by_mask(self, b, bits: np.ndarray, k: int, shares: list, pos: list) -> None:
        """Block ``b`` (at batch position ``k``) to the workers its records' ``bits`` name."""
        for wk in range(self.m):
            idx = np.flatnonzero(bits & (1 << wk))
            if len(idx) == len(bits):
                shares[wk].append(b)
            elif len(idx):
                shares[wk].append(take(b, idx))
            if len(idx):
                pos[wk].append(idx + k)
            self.sent += len(idx)

    def _objects(self, it, cls, k: int, n: int, shares: list, pos: list) -> None:
        self.objects += n
        if self.ticks:  # the parent's copy of the workers' (identical) window clock
            clock = self.clock
            for seq, t, e in zip(it.column("seq"), it.column("t"), it.column("expires")) if cls is PubBlock else (
                    (it.seq, it.t, it.expires),):
                if clock.objects_due(t):
                    clock.leaving(t)
                clock.arrive(seq, seq, clock.expiry(t, e, seq))
        if self.broadcast:
            at = np.arange(k, k + n, dtype=np.int64)
            for wk in range(self.m):
                shares[wk].append(it)
                pos[wk].append(at)
            self.object_messages += n * self.m
            self.sent += n * self.m
            return
        bits = self.object_masks(it.column("keywords") if cls is PubBlock else [it.keywords])
        self.object_messages += int(sum(int(((bits >> wk) & 1).sum()) for wk in range(self.m)))
        if cls is Pub:
            for wk in range(self.m):
                if bits[0] & (1 << wk):
                    shares[wk].append(it)
                    pos[wk].append(np.array([k], dtype=np.int64))
                    self.sent += 1
            return
        self._by_mask(it, bits, k, shares, pos)

    def metrics(self) -> dict:
        return routing_metrics(self)


def merge_lines(texts: list[bytes], ev: list[np.ndarray], reg: list[np.ndarray],
                match: list[np.ndarray]) -> NoteLines:
    """Workers' notification lines as one engine's: by (event position, registration seq),
    ties in worker order, a range match of a subscription replicated on several workers
    kept once. One sort and one compiled copy, no Python step a line: each worker's lines
    are in (position, registration seq) order already, so a stable sort of one int key a
    line (timsort) is a merge of those runs (~15x faster than ``lexsort`` of two keys)."""
    ev_, reg_, match_ = (np.concatenate(c) if c else np.empty(0, np.int64) for c in (ev, reg, match))
    span = int(reg_.max()) + 1 if len(reg_) else 1
    if len(ev_) and int(reg_.min()) >= 0 and int(ev_.max()) < (1 << 62) // span:
        order = np.argsort(ev_ * span + reg_, kind="stable")  # ties in worker order, then each worker's own
    else:
        order = np.lexsort((reg_, ev_))
    e, r, mt = ev_[order], reg_[order], match_[order].astype(np.bool_)
    again = np.zeros(len(order), dtype=np.bool_)
    again[1:] = mt[1:] & (e[1:] == e[:-1]) & (r[1:] == r[:-1])  # one subscription's match twice
    keep = order[~again]
    return NoteLines(reorder(b"".join(texts), keep).tobytes(), len(keep))


class Fleet:
    """Router + M worker processes + merger, micro-batches pipelined: ``exchange(items)``
    hands a batch to the workers and returns the notifications of the one before (None at
    first); ``drain()`` the last. The workers start at once (``Fleet(m, ...)``), the router
    when the plan is made (``start``). ``processes=False`` runs the workers in this process
    (tests), one batch at a time."""

    def __init__(self, m: int, window: Window | str, space: Space, index: str, processes: bool = True,
                 **params: Any) -> None:
        self.m = m
        window = Window.parse(window) if isinstance(window, str) else window
        self.window, self.space = window, space
        self.router: Router | None = None  # ``start``: once the plan is made
        self._procs: list = []
        self._conns: list = []
        self._local: list[Worker] = []
        if processes:
            # forked where the platform can: the engine's modules are loaded here already, so a
            # worker is ready at once (a spawned one imported for ~1 s into the first batch)
            forks = "fork" in mp.get_all_start_methods()
            ctx = mp.get_context("fork" if forks else "spawn")
            for _ in range(m):
                parent, child = ctx.Pipe()
                # a forked worker closes the parent's ends of the pipes before its own: held
                # open there, they would keep a worker waiting once the parent is gone
                held = list(self._conns) + [parent] if forks else []
                p = ctx.Process(target=worker_main, args=(child, window, space, index, params, held), daemon=True)
                start_deaf(p)
                child.close()
                self._procs.append(p)
                self._conns.append(parent)
        else:
            self._local = [Worker(make_engine(index, window, space, **params)) for _ in range(m)]
        self._sent_words: list[tuple[int, int]] = [(-1, 0)] * self.m  # (lexicon gen, words told) per worker
        self._pending: tuple | None = None  # (positions per worker, events, objects, messages, t0)
        self._replies: list = []
        self.batches: list[dict] = []
        self.last: tuple | None = None  # (seq, t) of the last event

    def start(self, plan: Plan, rarity: dict[str, int] | None = None) -> "Fleet":
        """Route by ``plan`` from now on (made from the stream's head)."""
        assert plan.m == self.m, (plan.m, self.m)
        self.router = Router(plan, self.window, rarity)
        return self

    # -- batches -------------------------------------------------------------------------
    def exchange(self, items: Sequence[Any]) -> NoteLines | None:
        shares, pos, n = self.router.route(items)
        if n:
            self.last = _last(items)
        done = self._collect()  # the batch before: its replies, merged after this one is sent,
        if n:  # so that the workers apply this batch while the parent merges that one
            msgs = [("batch", shares[wk], self._news(wk, shares[wk])) for wk in range(self.m)]
            t0 = time.perf_counter()
            if self._local:
                self._replies = [w(msg) for w, msg in zip(self._local, msgs)]
            else:
                for conn, msg in zip(self._conns, msgs):
                    conn.send(msg)
            objects = sum(len(it) if type(it) is PubBlock else 1 for it in items if type(it) in (Pub, PubBlock))
            self._pending = (pos, n, objects, sum(map(len, pos)), t0)
        return self._merged(*done) if done is not None else None

    def drain(self) -> NoteLines | None:
        """The notifications of the batch in flight (None if none)."""
        done = self._collect()
        return self._merged(*done) if done is not None else None

    def _collect(self) -> tuple | None:
        """The batch in flight's bookkeeping and its workers' replies (None if none)."""
        if self._pending is None:
            return None
        pending, self._pending = self._pending, None
        replies = self._replies if self._local else [c.recv() for c in self._conns]
        self._replies = []
        return pending, replies, time.perf_counter() - pending[-1]

    def _merged(self, pending: tuple, replies: list, wall: float) -> NoteLines:
        pos, n, objects, messages, _ = pending
        cpu = [secs for _, secs in replies]
        merged = merge_lines([r[0][0] for r in replies], [p[r[0][1]] for p, r in zip(pos, replies)],
                             [r[0][2] for r in replies], [r[0][3] for r in replies])
        self.batches.append({
            "events": n, "objects": objects, "wall_seconds": round(wall, 6),
            "worker_cpu_seconds": [round(c, 6) for c in cpu],
            "update_seconds": round(max(cpu), 6), "balance_seconds": round(max(cpu) - min(cpu), 6),
            "messages": messages,
        })
        return merged

    def _news(self, wk: int, share: list) -> tuple[int, list[str]] | None:
        """The lexicon words worker ``wk`` has not been told yet, if its share has codes."""
        lex = next((p.keywords.lex for p in share if type(getattr(p, "keywords", None)) is Words), None)
        if lex is None:
            return None
        gen, told = self._sent_words[wk]
        if gen != lex.gen:
            told = 0
        self._sent_words[wk] = (lex.gen, len(lex.words))
        return lex.gen, lex.words[told:]

    def _ask(self, msg: tuple) -> list:
        if self._local:
            return [w(msg) for w in self._local]
        for c in self._conns:
            c.send(msg)
        return [c.recv() for c in self._conns]

    # -- the end -------------------------------------------------------------------------
    def results(self) -> bytes:
        """``results.jsonl``'s bytes: every worker brought to the last event's time, its
        results' lines merged in registration order."""
        self.drain()
        if self.last is None:
            return b""
        got = self._ask(("end", *self.last))
        seqs = np.concatenate([s for _, s in got]) if got else np.empty(0, np.int64)
        return reorder(b"".join(text for text, _ in got), np.argsort(seqs, kind="stable")).tobytes()

    def worker_stats(self) -> list[dict]:
        self.drain()
        return self._ask(("stats",))

    def metrics(self) -> dict:
        return self.router.metrics()

    def close(self) -> None:
        for c in self._conns:
            try:
                c.send(None)
            except (BrokenPipeError, OSError):
                pass
        for p in self._procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()

    def __enter__(self) -> "Fleet":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def as_runs(items: Sequence[Any]) -> list:
    """``items`` with each run of several Sub (or Pub) events made one block (``SubBlock.of``:
    C passes), so that the router and the worker take them by columns."""
    out: list = []
    for cls, run in groupby(items, type):
        if cls is Sub or cls is Pub:
            run = list(run)
            out.append(run[0] if len(run) == 1 else (SubBlock if cls is Sub else PubBlock).of(run))
        else:
            out.extend(run)
    return out


def _last(items: Sequence[Any]) -> tuple:
    it = items[-1]
    if type(it) in BLOCKS:
        return it.seq[-1], it.t[-1]
    return it.seq, it.t


class _Ids(dict):
    """word -> id: ``learn`` numbers a new word (its ``rarity`` kept in ``rare``), ``[w]`` of
    an unknown word is -1."""

    def __init__(self, rarity: dict[str, int]) -> None:
        super().__init__()
        self.words: list[str] = []
        self.rare: list[int] = []
        self._rarity = rarity

    def learn(self, w: str) -> int:
        i = self.get(w)
        if i is None:
            i = self[w] = len(self.words)
            self.words.append(w)
            self.rare.append(self._rarity.get(w, 0))
        return i

    def learn_many(self, words: list[str]) -> list[int]:
        """``[learn(w) for w in words]`` by C passes (the new words numbered in order)."""
        fresh = list(dict.fromkeys(filterfalse(self.__contains__, words)))
        if fresh:
            self.update(zip(fresh, count(len(self.words))))
            self.words.extend(fresh)
            self.rare.extend(map(self._rarity.get, fresh, repeat(0)))
        return list(map(self.__getitem__, words))

    def __missing__(self, w: str) -> int:
        return -1


def _single(placed: list) -> np.ndarray | None:
    """The one worker of each placement, None when some have several (or none)."""
    if not all(map((1).__eq__, map(len, placed))):
        return None
    return np.fromiter(map(itemgetter(0), placed), np.int64, len(placed))


def _keys_of(keys: int | tuple[int, ...]) -> tuple[int, ...]:
    """A live subscription's routing word ids (one kept as an int)."""
    return (keys,) if type(keys) is int else keys
