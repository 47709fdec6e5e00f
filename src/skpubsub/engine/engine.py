"""The indexed engine: applies validated events, owns the window, emits notifications.

Per event (SPEC section 2): subscriptions and objects whose expiry is due leave
first; then the event is applied; then one net notification per subscription
whose result changed (or one match per range subscription), in registration
order. Subscriptions and results live in columnar tables; the subscription
index only filters, and candidates are verified here, vectorised per object.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from itertools import chain
from typing import Any, NamedTuple

import numpy as np

from ..core.clock import WindowClock
from ..core.config import Space, Window
from ..core.layouts import Heap, heap
from ..core.columns import segment_items
from ..core.vocab import Vocabulary
from ..index.registry import check_parameters, make_index
from ..io.events import RANGE, Event, Pub, PubBlock, Sub, SubBlock, Unsub
from ..io.lexicon import Words
from ..io.notewriter import Results
from ..io.notifications import Change, Match, NoteBatch, Notification
from ..results.kbest import remove
from ..results.refill import POOL, refill_of
from ..store.objects import AliveStore, ObjectTable, PubColumns
from ..store.subscriptions import B_KMAX, K_RANGE, SubTable, any_given
from .driver import Publisher, Tags
from .messages import Adopt, Backfill, Drop, Tick
from .verify import verify


# Unheld keywords kept known before they are forgotten at once (Vocabulary ``slack``): a
# stream without a window meets the same unheld words run after run; forgetting them each
# time cost ~15% of a run (relearned through the slow path). Memory: ~100 bytes a word.
KEYWORD_SLACK = 65_536
# Lone subscriptions held at most before they are registered as a run (``Engine._hold``):
# runs of 4,096 cost 2.8-3.0 us a subscription against 2.5-2.7 for one run of 300,000
# (range_1m), and the event that registers them waits ~12 ms at most; the held events are kept alive.
LONE = 4096
FEW_SUBS = 40  # Sub events up to which a run goes one by one (engine/NOTES.md, "Streams that interleave")
# A run of subscriptions against alive objects is registered at once (``Publisher.initial``) when the
# alive objects' tree is built already or the run has at least one subscription a TREE_PAIRS
# (keyword, alive object) pairs: the build costs ~0.1 us a pair, one by one ~0.3-2 ms a
# subscription (engine/NOTES.md, "Registration against a full window").
TREE_PAIRS = 1000


class Routed(NamedTuple):
    """``Engine.apply_routed(columns=True)``: a worker's notifications in order and, for
    each, the index of its item and the registration seq of its subscription."""

    notes: NoteBatch
    item: np.ndarray
    reg: np.ndarray


class Engine:
    """A single-node engine over one subscription index.

    ``Engine(window="count:1000", space=Space(...), index="grid", grid=64)``;
    extra keyword arguments go to the index. ``apply(events)`` returns the
    notifications; ``results(id)`` / ``all_results()`` read current results.
    ``buffer``: under a window, how kNN/top-k results are buffered so that most expiries
    need no re-evaluation — ``kmax``, ``skyband``, ``cskyband`` or ``ckskyband`` (see ``SubTable``);
    ``kmax``: each buffer holds up to ``ceil(kmax*k)`` objects (at most 4k; default 2 for
    ``kmax``, 3 for the k-skyband policies).
    ``external_expiry``: objects leave the window only when told (``apply_routed``),
    as a worker among several is: it sees a part of the stream, the dispatcher knows
    the whole window.
    """

    def __init__(self, window: Window | str = "none", space: Space | None = None,
                 index: str = "grid", kmax: float | None = None, buffer: str = "kmax",
                 external_expiry: bool = False,
                 **index_params: Any) -> None:
        check_parameters(index, index_params)
        self.window = Window.parse(window) if isinstance(window, str) else window
        self.space = space or Space()
        self.maxdist = self.space.maxdist
        self.vocab = Vocabulary(slack=KEYWORD_SLACK)
        if kmax is None:
            kmax = 2.0 if buffer == "kmax" else 3.0
        retains = self.window.retains
        self.subs = SubTable(kmax if retains else 1.0, buffer if retains else "kmax")
        self.buffer = buffer
        self.objs = ObjectTable(keep_words=not retains)  # ``add_run``: unheld words not learnt
        self.alive = AliveStore(self.objs)
        self.index = make_index(index, self.subs, self.vocab, self.space, **index_params)
        self.name = index
        self.compiled = self.index.compiled
        self.clock = WindowClock(self.window)  # subscription slots and object slots leave by it
        self._holders: dict[int, list[int]] = {}  # object slot -> sub slots that took it (lazy; plain index)
        # expired: objects that left the window; expiry_seconds: time the plain path spent on
        # those that some result held, and the kernel's leave-only steps (leave_steps: the
        # objects due before a subscription or unsubscription, ``Publisher.leave``). A
        # compiled index's kernel removes held objects from buffers (expiry_removals) and
        # refills short ones itself, timed with the arrivals; refills counts both paths
        # (refill_reads: alive entries they read; initial: the results of new subscriptions
        # found through the alive objects' tree, ``Publisher.initial``, counted in both); evictions:
        # objects a k-skyband buffer let go as dominated, or did not take; decided: range
        # matches their entries decided (probe.decided: no record read). expiry_stops: runs the kernel handed to the plain
        # path, only when it cannot find a holder through the index (expiry_misses; never
        # expected).
        self.stats = {"candidates": 0, "affected": 0, "objects": 0, "expired": 0, "expiry_seconds": 0.0,
                      "expiry_removals": 0, "expiry_stops": 0, "expiry_misses": 0, "refills": 0, "initial": 0,
                      "refill_reads": 0, "evictions": 0, "leave_steps": 0, "decided": 0}
        # Per-event scratch.
        self._old: dict[int, list[int]] = {}
        self._matches: list[tuple[int, int]] = []
        self._unref: set[int] = set()
        self._mark = np.zeros(0, dtype=np.bool_)  # keyword id -> carried by the object being verified
        self._heap = heap(0, 0)  # refill scratch
        self.external = external_expiry
        self.alive_by_seq: dict[int, int] = {}  # external expiry: object seq -> slot
        self._unheld: list[np.ndarray] = []  # keyword ids of freed objects and ended subs, not yet released
        self._held: list = []  # keyword ids of runs of new objects, not yet counted (a run of subs: at once)
        self._refreshed = -1  # objects seen at the index's last ``refresh`` (``_settle``)
        self._lone: list[Sub] = []  # lone subscriptions not yet registered (``_hold``)
        self.path = Publisher(self) if self.compiled else None  # the compiled publish path (``driver``)

    # -- driving -------------------------------------------------------------------
    def apply(self, events: Iterable[Event]) -> list[Notification]:
        if self.compiled and type(events) is list and len(events) == 1:  # a stream's run of one
            ev = events[0]
            if type(ev) is Sub and self._hold(ev):
                return []
            self.flush()
            if (self._subscribe_one(ev) if type(ev) is Sub else
                    type(ev) is Unsub and self._unsubscribe_one(ev)):
                self._settle()
                return []
        return self.apply_columnar(events).to_list()

    def _hold(self, ev: Sub) -> bool:
        """Hold a lone subscription, to be registered with the ones after it as a run
        (``flush``), when registering it would change nothing else (``_lean``) and it has no
        end of its own (the clock, which the next ones' terms read, stays as it is).
        Registered alone, a subscription costs ~3x its share of a run (engine/NOTES.md,
        "Lone subscriptions"). Returns whether it was held."""
        if ev.expires is not None or not self._lean(ev):
            return False
        held = self._lone
        held.append(ev)
        if len(held) >= LONE:
            self.flush()
        return True

    def flush(self) -> None:
        """Register the lone subscriptions held by ``apply`` (as a run: the same state as one
        by one, and no notification). Every method of the engine does it first; code that
        reads its tables (``subs``, ``objs``, ``index``) directly calls it before."""
        if self._lone:
            held, self._lone = self._lone, []
            out = NoteBatch()
            self._subscribe_many(held, out)
            assert not len(out), "a held subscription notified"
            self._settle()

    def apply_columnar(self, events: Iterable[Event | SubBlock | PubBlock]) -> NoteBatch:
        """``apply``, with the compiled path's notifications kept as columns (``to_list()``
        makes the objects). ``events`` may hold :class:`SubBlock` s and :class:`PubBlock` s
        (runs of subscriptions or objects as columns, from ``Gate.admit_block``), each as
        the events it holds."""
        return self._apply(events, None)

    def apply_tagged(self, items: list) -> Routed:
        """A worker's share of a micro-batch as ``apply_columnar`` takes it (events,
        ``SubBlock`` s and ``PubBlock`` s in stream order; ``Tick`` s bring the clock to
        another worker's event), each notification keyed by the ordinal of the event it came
        of (a block counts its events) and its subscription's registration seq: what the
        fleet's merger orders by (``runtime/fleet.py``). Under ``none`` the share's objects
        are those the worker's subscriptions may take; under a retaining window every object
        (each worker keeps the whole window, so its own clock expires them)."""
        tags = Tags(self.subs)
        out = self._apply(items, tags)
        item, reg = tags.arrays()
        return Routed(out, item, reg)

    def _apply(self, items: Iterable, tags) -> NoteBatch:
        """``apply_columnar``'s loop: on a compiled index, runs of objects through the publish
        kernel and runs of subscriptions at once, anything else an event at a time (the plain
        path); ``tags``: a worker's keys (``apply_tagged``), else None."""
        self.flush()
        out = NoteBatch()
        compiled = self.compiled
        run: list = []  # a run of objects (Pub events and PubBlocks), its first at ordinal ``run_at``
        subs: list = []  # a run of subscriptions (Sub events and SubBlocks), from ordinal ``subs_at``
        run_at = subs_at = k = 0
        for ev in items:
            cls = type(ev)
            n = len(ev) if cls is PubBlock or cls is SubBlock else 1
            if compiled and (cls is Pub or cls is PubBlock):
                if subs:
                    self._subscribe_many(subs, out, tags, subs_at)
                    subs = []
                if not run:
                    run_at = k
                run.append(ev)
                k += n
                continue
            if run:
                if tags is not None:
                    tags.at = run_at
                self.path.publish(run, out, tags)
                run = []
            if compiled and (cls is Sub or cls is SubBlock):
                if not subs:
                    subs_at = k
                subs.append(ev)
                k += n
                continue
            if subs:
                self._subscribe_many(subs, out, tags, subs_at)
                subs = []
            for j, one in enumerate(ev if cls is PubBlock or cls is SubBlock else (ev,), k):
                if tags is not None:
                    tags.at = j
                if compiled and type(one) in (Unsub, Tick):
                    self.path.leave(one, out, tags=tags)
                if not (compiled and type(one) is Unsub and self._unsubscribe_one(one)):
                    notes = self.apply_one(one)
                    if notes:
                        out.extend(notes)
                        if tags is not None:
                            tags.plain(notes, j)
            k += n
        if run:
            if tags is not None:
                tags.at = run_at
            self.path.publish(run, out, tags)
        if subs:
            self._subscribe_many(subs, out, tags, subs_at)
        if compiled:
            self._refreshed = self.stats["objects"]
            self.index.refresh(self._refreshed)
        self._recycle_keywords()
        return out

    def _settle(self) -> None:
        """``apply_columnar``'s ending for a lone subscribe or unsubscribe: the index reviews
        its postings only if the objects seen moved since it last did (else ``refresh`` is a
        no-op), keywords recycled only if some were freed."""
        if self.stats["objects"] != self._refreshed:
            self._refreshed = self.stats["objects"]
            self.index.refresh(self._refreshed)
        if self._held or self._unheld or self.vocab.busy:
            self._recycle_keywords()

    def _lean(self, ev: Sub | Unsub) -> bool:
        """Would applying ``ev`` alone do nothing but (un)register it? Nothing due to leave by
        its time, no notification pending, no dispatcher expiring for this engine, and for a
        subscription no result to compute (a range one, or no window: a kNN/top-k one starts
        empty). The terms of ``_subscribe_one``, ``_unsubscribe_one`` and ``_hold``."""
        if self._old or self._matches or self.external or self.clock.due_by(ev.t):
            return False
        return type(ev) is not Sub or ev.kind == RANGE or not self.window.retains

    def _subscribe_one(self, ev: Sub) -> bool:
        """``apply_one`` of a subscription without its per-event machinery, when that would
        have done nothing else (``_lean``). Returns False, having done nothing, otherwise.
        O(keywords + cells)."""
        if not self._lean(ev):
            return False
        reg = getattr(self.index, "register", None)  # acquire, add and insert in one compiled call
        s = reg(ev) if reg is not None else -1
        if s < 0:
            s = self.subs.add(ev, self.vocab.acquire(ev.keywords))
            self.index.insert(s)
        if ev.expires is not None:
            self.clock.subscribe(ev.expires, ev.seq, s)
        if self._unref:
            self.free_unreferenced()
        return True

    def _unsubscribe_one(self, ev: Unsub) -> bool:
        """``apply_one`` of an unsubscription, on the same terms as ``_subscribe_one`` (``_lean``)."""
        if not self._lean(ev):
            return False
        self._drop(self.subs.slot_of[ev.id])
        self.free_unreferenced()
        return True

    def _subscribe_many(self, parts: list, out: NoteBatch, tags=None, base: int = 0) -> None:
        """A run of subscriptions (``parts``: Sub events and SubBlocks, in order): at once
        when ``_at_once`` allows, else one by one; a few events (``FEW_SUBS``) one by one.
        ``tags``: a worker's keys (``apply_tagged``), the run's first event at ordinal ``base``."""
        few = len(parts) <= FEW_SUBS and all(type(p) is Sub for p in parts)  # cheaper than their columns
        b = parts if few else SubBlock.join(parts)  # (one SubBlock: itself)
        if few or self.external or not self._at_once(b):
            for k, ev in enumerate(b, base):
                if tags is not None:
                    tags.at = k
                if self.path is not None:
                    self.path.leave(ev, out, tags=tags)
                if not self._subscribe_one(ev):
                    notes = self.apply_one(ev)
                    out.extend(notes)
                    if tags is not None and notes:
                        tags.plain(notes, k)
            return
        if tags is not None:
            tags.at = base
        self._register_run(b, out, tags)

    def _at_once(self, b: SubBlock) -> bool:
        """May the run ``b`` be registered at once? When nothing is due to leave before the
        last of them and none starts from alive objects (no window, or none alive) or their
        results can be found at once (``_bulk_initial``): then each would have changed
        nothing but its own registration and result."""
        exps = b.expires
        last = b.t[-1]  # times as given: exact comparisons (SPEC 6)
        return not (len(b) < 2 or (self.window.retains and self.alive.count and not self._bulk_initial(b))
                    or self.clock.due_by(last) or (exps is not None and any(e is not None and e <= last for e in exps)))

    def _bulk_initial(self, b: SubBlock) -> bool:
        """Can the run's initial results be found at once (``results.initial``)? On a compiled
        index with its own clock, the ``kmax`` policy, and the alive objects' tree built
        already or worth building for the run (``TREE_PAIRS``)."""
        if not self.compiled or self.external or self.subs.policy != B_KMAX:
            return False
        return self.alive.has_tree or len(b) * TREE_PAIRS >= self.alive.live

    def _register_run(self, b: SubBlock, out: NoteBatch | None = None, tags=None) -> None:
        """Register ``b`` by columns, without a Python step a subscription (``_at_once``);
        kNN/top-k ones against alive objects get their results and notifications (``out``;
        ``tags``: a worker's keys, the run's first at ``tags.at``)."""
        exps = b.expires
        if exps is not None and not any_given(exps):
            exps = None
        kws = b.keywords  # one lookup pass for the run (codes: an array pass, ``Vocabulary.ids_of``)
        kw_ids = self.vocab.ids_of(kws) if type(kws) is Words else self.vocab.ids(list(chain.from_iterable(kws)))
        self.vocab.hold(kw_ids)  # counted before they are placed: ``placing.rarest`` reads the holders
        slots = self.subs.add_many(b, kw_ids)
        notes = self.path.initial(b, slots) if self.window.retains and self.alive.count else None
        self.index.insert_many(slots)
        if exps is not None:
            for e, q, s in zip(exps, b.seq, slots.tolist()):
                if e is not None:
                    self.clock.subscribe(e, q, s)
        if notes is not None:
            assert out is not None, "a run with results registered without notifications"
            self.subs.lend(notes)  # the ids stay codes into ``subs.ids`` while the slots keep them
            out.add(notes)
            if tags is not None:
                tags.columns(notes, 0)

    def apply_routed(self, items: list[tuple[Event | Tick, tuple[int, ...]]],
                     columns: bool = False) -> list[list[Notification]] | Routed:
        """A worker's share of a micro-batch: ``(event or Tick, seqs of objects that leave
        the window first)`` in stream order; returns each item's notifications, or with
        ``columns`` all of them as columns with their keys (:class:`Routed`)."""
        assert self.external, "apply_routed needs Engine(external_expiry=True)"  # never holds (``_hold``)
        out = NoteBatch()
        tags = Tags(self.subs)
        compiled = self.compiled
        n = len(items)
        i = 0
        while i < n:
            ev, expire = items[i]
            j = i + 1
            if compiled and type(ev) is Pub:
                while j < n and type(items[j][0]) is Pub:
                    j += 1
                tags.at = i
                self.path.publish([it[0] for it in items[i:j]], out, tags, [it[1] for it in items[i:j]])
                i = j
                continue
            if compiled and type(ev) is Sub and not expire:  # a run that no object leaves during
                while j < n and type(items[j][0]) is Sub and not items[j][1]:
                    j += 1
                if j - i > 1 and self._at_once(b := SubBlock.join([it[0] for it in items[i:j]])):
                    self._register_run(b)
                    i = j
                    continue
            for k in range(i, j):
                self._routed_one(items[k], k, out, tags)
            i = j
        if compiled:
            self._refreshed = self.stats["objects"]
            self.index.refresh(self._refreshed)
        self._recycle_keywords()
        item, reg = tags.arrays()
        if columns:
            return Routed(out, item, reg)
        per: list[list[Notification]] = [[] for _ in items]
        for note, k in zip(out.to_list(), item.tolist()):
            per[k].append(note)
        return per

    def _routed_one(self, item: tuple[Event | Tick, tuple[int, ...]], k: int, out: NoteBatch, tags) -> None:
        """``apply_routed`` of one item off the runs: the engine's messages, or the plain path."""
        ev, expire = item
        if isinstance(ev, Backfill):
            o = self.add_object(ev.pub)
            self.stats["objects"] -= 1  # not a publication here
            self.alive.add(o, self.objs.keywords(o).tolist())
            self.alive_by_seq[ev.pub.seq] = o
        elif isinstance(ev, Drop):
            self._drop(self.subs.slot_of[ev.id])
            self.free_unreferenced()
        elif isinstance(ev, Adopt):
            self._adopt(ev)
        else:
            tags.at = k
            if type(ev) in (Sub, Unsub, Tick) and self.path is not None and self.path.leave(ev, out, expire, tags):
                expire = ()
            notes = self.apply_one(ev, expire=expire)
            if notes:
                out.extend(notes)
                tags.plain(notes, k)

    def apply_one(self, ev: Event | Tick, slot: int | None = None, expire: tuple[int, ...] = ()) -> list[Notification]:
        """One event on the plain path (``slot``: the pub's object, if already added;
        ``expire``: under external expiry, the seqs of the objects that leave first)."""
        self.flush()
        now = ev.t  # as given: int/float comparisons are exact (SPEC section 6, "Times")
        self.end_subs(now)
        gone = [self.alive_by_seq.pop(q) for q in expire] if self.external else self.clock.leaving(now)
        if gone:
            self.expire_objects(gone)
        if isinstance(ev, Pub):
            self._publish(ev, self.add_object(ev) if slot is None else slot)
        elif isinstance(ev, Sub):
            self._subscribe(ev)
        elif isinstance(ev, Unsub):
            self._drop(self.subs.slot_of[ev.id])
        out = self._notifications(ev.t)
        self.free_unreferenced()
        return out

    def forget(self, objs: Iterable[int]) -> None:
        """Objects that may have lost their last reference: freed by ``free_unreferenced``."""
        self._unref.update(objs)

    def free_unreferenced(self) -> None:
        """Free the forgotten objects that are neither alive nor held by a result."""
        if not self._unref:
            return
        c = self.objs.cols
        u = np.fromiter(self._unref, np.int64, len(self._unref))  # in the set's order, as a loop over it
        gone = u[(c.refs[u] == 0) & ~c.alive[u]]
        if len(gone):  # their keywords are released once per apply (``_recycle_keywords``)
            self._unheld.append(self.objs.keywords_csr(gone)[1])
            self.objs.free_many(gone.tolist())
        self._unref.clear()

    def _recycle_keywords(self) -> None:
        """Keyword ids nobody holds any more go back to the vocabulary (SPEC section 6,
        "Memory"). The per-keyword structures need no purge first: index postings tell live
        entries by the slot's epoch, alive postings by the object's seq, so an entry left
        under a forgotten id is dead for whatever keyword gets the id next. O(freed)."""
        if self._held:  # runs of new holders, counted at once (per-run calls cost ~15%) ...
            held, self._held = self._held, []
            self.vocab.hold(np.concatenate([np.asarray(h, dtype=np.int64) for h in held]))
        if self._unheld:  # ... before the holders that left: nothing is forgotten in between
            unheld, self._unheld = self._unheld, []
            self.vocab.release(unheld[0] if len(unheld) == 1 else np.concatenate([u.astype(np.int64) for u in unheld]))
        if self.vocab.busy:  # else both are no-ops
            self.vocab.released()
            self.vocab.recycle()

    # -- migration (the rebalancer moves subscriptions between workers) -----------------
    def export(self, sub_id: Any) -> tuple[Pub, ...]:
        """The objects of ``sub_id``'s result, as events another engine can adopt. O(k)."""
        self.flush()
        s = self.subs.slot_of[sub_id]
        if self.subs.cols.kind[s] == K_RANGE:
            return ()
        oc, words = self.objs.cols, self.vocab.words
        kept = self.objs.words if self.objs.keep_words else None  # an id may be a placeholder (add_run)
        return tuple(Pub(int(oc.seq[o]), self.objs.ids[o], 0, float(oc.x[o]), float(oc.y[o]),
                         kept[o] if kept is not None else tuple(words[w] for w in self.objs.keywords(o).tolist()))
                     for o in self.subs.result(s).tolist())

    def _adopt(self, ev: Adopt) -> None:
        """Install a migrated subscription with its results; no notification. Under a
        retaining window the result is a function of the alive objects (recomputed);
        under ``none`` the result objects come along (``held``), offered oldest first."""
        sub = ev.sub
        if ev.now is not None:
            self.end_subs(ev.now)  # an expired one may still hold the id here
        s = self.subs.add(sub, self.vocab.acquire(sub.keywords))
        if sub.kind != RANGE and self.window.retains:
            self._refill(s)  # as a new subscription does, before it is indexed
        self.index.insert(s)
        if sub.kind != RANGE and not self.window.retains:  # offered like new objects: the index follows
            one = np.array([s], dtype=np.int64)
            for pub in sorted(ev.held, key=lambda p: p.seq):
                o = self.add_object(pub)
                self.stats["objects"] -= 1  # not a publication here
                verify(self, o, pub.x, pub.y, self.objs.keywords(o), one)
                self._unref.add(o)
        self.clock.subscribe(sub.expires, sub.seq, s)
        self._old.clear()  # silent: its subscriber saw these results already
        self._matches.clear()
        self.free_unreferenced()

    def _touch(self, s: int) -> None:
        """Remember a result before its first change in this event (for the net diff)."""
        if s not in self._old:
            self._old[s] = self.subs.result(s).tolist()

    def _notifications(self, t: Any) -> list[Notification]:
        c, ids, oids = self.subs.cols, self.subs.ids, self.objs.ids
        items: list[tuple[int, Notification]] = []
        for s, o in self._matches:
            items.append((int(c.seq[s]), Match(ids[s], t, oids[o])))
        for s, old in self._old.items():
            if not c.active[s]:
                continue  # ended during the event
            new = self.subs.result(s).tolist()
            before, after = set(old), set(new)
            added = tuple(oids[o] for o in new if o not in before)
            removed = tuple(oids[o] for o in old if o not in after)
            if added or removed:
                items.append((int(c.seq[s]), Change(ids[s], t, added, removed)))
        self._old.clear()
        self._matches.clear()
        items.sort(key=lambda it: it[0])
        return [n for _, n in items]

    # -- subscriptions ---------------------------------------------------------------
    def _subscribe(self, ev: Sub) -> None:
        s = self.subs.add(ev, self.vocab.acquire(ev.keywords))
        if ev.kind != RANGE and self.window.retains:
            self._touch(s)
            self._refill(s)
        self.index.insert(s)
        self.clock.subscribe(ev.expires, ev.seq, s)

    def end_subs(self, now: int | float) -> None:
        """End, silently, the subscriptions due to end by ``now`` (their ``expires`` <= it)."""
        c = self.subs.cols
        for seq, s in self.clock.subs_ending(now):
            if c.seq[s] == seq:  # not already unsubscribed
                self._drop(s)

    def _drop(self, s: int) -> None:
        """End a subscription: O(k + postings)."""
        self.index.delete(s)
        if self.subs.cols.kind[s] != K_RANGE:
            for o in self.subs.buffer(s).tolist():
                self._release(o)
        self._old.pop(s, None)
        c = self.subs.cols
        off = int(c.kw_off[s])
        self._unheld.append(self.subs.kw.id[off:off + int(c.kw_len[s])].copy())  # SPEC 6, "Memory"
        self.subs.remove(s)

    def _release(self, o: int) -> None:
        self.objs.cols.refs[o] -= 1
        self._unref.add(o)

    def _take(self, s: int, o: int) -> None:
        """Remember that ``s`` may hold ``o`` (the plain index's expiry reads it)."""
        if self.window.retains and not self.compiled:  # a compiled index finds holders itself
            self._holders.setdefault(o, []).append(s)

    # -- objects -----------------------------------------------------------------------
    def add_object(self, ev: Pub) -> int:
        """The object's slot in the table (alive under a retaining window); O(keywords)."""
        self.stats["objects"] += 1
        kw = self.vocab.acquire(ev.keywords)  # held until the slot is freed (SPEC 6, "Memory")
        self.vocab.count(kw)
        hi, lo = self._lives([self.clock.expiry(ev.t, ev.expires, ev.seq)])
        return self.objs.add(ev, kw, hi[0], alive=self.window.retains, expiry_lo=lo[0])

    def add_run(self, evs: list[Pub], cols: PubColumns, exps: list | None = None) -> tuple[list[int], np.ndarray,
                                                                                           np.ndarray]:
        """``add_object`` of each event of a run of pubs, the table written at once, given the
        run's ``pub_columns`` (and, under a time window, its exact expiries ``exps`` if the
        caller has them); returns the slots and the run's keyword ids as CSR (int64 offsets,
        int32 ids: what ``ObjectTable.keywords_csr`` of the slots gives). Under a window that
        retains no object a word the vocabulary does not know is not learnt: no subscription
        holds it, and none registered later can find the object through it. Such a word takes a
        placeholder id (``Vocabulary.known_runs``), so the object keeps an id per word, all
        distinct, as every reader expects (NOTES)."""
        n = len(evs)
        self.stats["objects"] += n
        kw, off, lens = self.vocab.of_run(cols.keywords, self.window.retains)
        self._held.append(kw)  # held until the slots are freed
        kind = self.window.kind
        if kind == "none":  # never leave: clock.expiry is inf for all
            hi, lo = np.full(n, math.inf), np.zeros(n, dtype=np.int32)
        elif kind == "count":  # float(seq): a float, so no remainder (_lives)
            hi, lo = np.fromiter(cols.seq, np.float64, n), np.zeros(n, dtype=np.int32)
        else:
            if exps is None:
                expiry = self.clock.expiry
                exps = [expiry(t, e, q) for t, e, q in zip(cols.t, cols.expires, cols.seq)]
            hi, lo = self._lives(exps)
        slots = self.objs.add_many(evs, kw, hi, alive=self.window.retains, expiry_lo=lo, cols=cols, lens=lens)
        return slots.tolist(), off, kw

    def _lives(self, exps: list) -> tuple[np.ndarray, np.ndarray]:
        """The object table's ``expiry`` and ``expiry_lo`` columns (what the k-skyband's
        dominance and the refill compare, order only: ``kbest.later``) from the clock's exact
        expiries, as exact pairs (SPEC 6 "Times"): hi = float(e) and, for an integer e, lo =
        e - int(hi) (int32: exact for |e| < 2**84, beyond clamped, still in order; 0 for a
        float). Rounding is monotone, so (hi, lo) compared lexicographically orders as e does,
        an integer beside a float included. O(len(exps)); vectorised while |e| <= 2**53."""
        try:
            hi = np.array(exps, dtype=np.float64)
        except OverflowError:  # an integer past float64 (t + T near 1.8e308): +-inf, then lo
            hi = np.array([_float(e) for e in exps], dtype=np.float64)
        lo = np.zeros(len(exps), dtype=np.int32)
        for i in np.flatnonzero((np.abs(hi) > 2.0 ** 53) & (np.abs(hi) < math.inf)).tolist():
            e = exps[i]  # only there can an integer have rounded
            if type(e) is int:
                lo[i] = min(max(e - int(hi[i]), -LO_MAX), LO_MAX)
        return hi, lo

    def _publish(self, ev: Pub, o: int) -> None:
        w = self.window
        if self.external:
            if w.retains:
                self.alive_by_seq[ev.seq] = o
        else:
            gone = self.clock.arrive(o, ev.seq, self.clock.expiry(ev.t, ev.expires, ev.seq))
            if gone:  # the oldest leaves as this one arrives (count window)
                self.expire_objects(gone)
        kw_arr = self.objs.keywords(o)
        if w.retains:
            self.alive.add(o, kw_arr.tolist())
        cand = self.index.candidates(ev.x, ev.y, kw_arr)
        self.stats["candidates"] += len(cand)
        if len(cand):
            verify(self, o, ev.x, ev.y, kw_arr, cand)
        self._unref.add(o)

    def expire_objects(self, gone: list[int]) -> None:
        """Objects leave the window and the buffers that held them; a buffer left with
        fewer than k objects (and not holding every qualifying one) is recomputed."""
        start = time.perf_counter()
        oc, c = self.objs.cols, self.subs.cols
        changed: set[int] = set()
        self.stats["expired"] += len(gone)
        for o in gone:
            oc.alive[o] = False
            self.alive.remove(o, self.objs.keywords(o).tolist())
            self._unref.add(o)
            if self.compiled:  # the slots whose buffer holds ``o`` (``kernel.holding``), each once
                holders = np.unique(self.path.holders(o)).tolist()
            else:
                holders = self._holders.pop(o, ())
            for s in holders:  # (a buffer searched only on the plain index: ~10% of a churning run)
                if c.active[s] and (self.compiled or o in self.subs.buffer(s)):
                    self._touch(s)
                    remove(self.subs, s, o)
                    self._release(o)
                    changed.add(s)
        for s in sorted(changed):
            if c.res_n[s] < c.k[s] and not c.complete[s]:
                self._refill(s)
            self.index.update(s)
        self.stats["expiry_seconds"] += time.perf_counter() - start

    def _refill(self, s: int) -> None:
        """Recompute a k-best buffer from the alive objects (:mod:`..results.refill`)."""
        self.objs.stamp_next[0] += 1
        self.stats["refill_reads"] += refill_of(s, self.subs.plain, self.objs.plain, self.alive.store.plain,
                                                self.vocab.freq, self.maxdist, tuple(self.heap(int(self.subs.cols.kb[s]))))
        self.stats["refills"] += 1
        if self.window.retains and not self.compiled:
            for o in self.subs.buffer(s).tolist():
                self._holders.setdefault(o, []).append(s)

    def heap(self, kb: int) -> Heap:
        """The refill's candidate heap, for buffers of up to ``kb`` entries and lists as long
        as the alive store holds now (callers reserve its room first)."""
        h, entries = self._heap, len(self.alive.store.blk_data)
        if len(h.key) < kb * POOL or len(h.ids) < entries:
            self._heap = heap(max(kb * POOL, len(h.key)), max(entries, len(h.ids)))
        return self._heap

    # -- queries -------------------------------------------------------------------------
    def results(self, sub_id: Any) -> list[Any] | None:
        """Object ids of an active kNN/top-k subscription's result, in rank order."""
        self.flush()
        s = self.subs.slot_of.get(sub_id)
        if s is None or self.subs.cols.kind[s] == K_RANGE:
            return None
        return [self.objs.ids[o] for o in self.subs.result(s).tolist()]

    def all_results(self) -> list[tuple[Any, list[Any]]]:
        """(id, result ids) of every active kNN/top-k subscription, in registration order."""
        return self.result_columns().pairs()

    def result_columns(self) -> Results:
        """``all_results`` as columns (``notewriter.Results``: each object id once)."""
        self.flush()
        c = self.subs.cols
        slots = np.flatnonzero(c.active[: c.top] & (c.kind[: c.top] != K_RANGE))
        slots = slots[np.argsort(c.seq[slots])]
        n = np.minimum(c.res_n[slots], c.k[slots]).astype(np.int64)  # ``subs.result`` of each, at once
        obj = self.subs.res.obj[segment_items(c.res_off[slots], n)[0]]
        held = np.zeros(len(self.objs.ids), dtype=np.bool_)  # the objects held, by slot (no sort)
        held[obj] = True
        code = np.cumsum(held) - 1
        return Results(self.subs.ids[slots].tolist(), n, code[obj], self.objs.ids[np.flatnonzero(held)].tolist())

    @property
    def nbytes(self) -> int:
        """Index + subscription/result + object memory (bytes, approximate for Python sets)."""
        self.flush()
        return self.index.nbytes + self.subs.nbytes + self.objs.nbytes

    def _check(self) -> None:
        """The engine's invariants (:mod:`.invariants`); the tests' structural oracle."""
        from .invariants import check

        self.flush()
        check(self)


LO_MAX = 2 ** 31 - 1  # the int32 ``expiry_lo`` column's range (``Engine._lives``)


def _float(e: int | float) -> float:
    """float(e), an integer past float64's range as +-inf (order kept)."""
    try:
        return float(e)
    except OverflowError:
        return math.inf if e > 0 else -math.inf
