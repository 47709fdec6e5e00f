"""The compiled publish path: :class:`Publisher`, the publish kernel's driver for one engine.

An :class:`~.engine.Engine` over a compiled index builds one (``Engine.path``) and calls it
for a run of consecutive ``pub`` events (``publish``), for the objects due before another
event (``leave``) and for the holders of one object (``holders``, the plain path's expiry).
Per run, Python adds the objects to the table, plans the window's departures before each of
them (:class:`WindowClock`), reserves posting room, bundles the tables into the kernel's
layouts (:mod:`skpubsub.core.layouts`) and calls :func:`kernel.publish_run` until the run
is done: the kernel stops before an event that might not fit, and Python drains its rows
into notifications (one net change per pub and subscription, :mod:`.netting`), re-posts
queued slots, reserves more and resumes. A segment ends before a subscription's expiry
(the engine ends the subscription, then the kernel goes on); a run is cut into segments of
``SEGMENT`` pubs (``SEGMENT_PRECOMPUTED`` for an index that precomputes candidates).
``leave`` makes the same calls for a step with no arrival.
"""

from __future__ import annotations

import math
import time
from typing import NamedTuple

import numpy as np

from ..core import layouts as L
from ..core.clock import RunPlan
from ..core.columns import segment_items
from ..index.aoiq import probe_room
from ..index.prefix import NC
from ..index.probe import probe_scratch
from ..io.events import Pub, PubBlock, Sub, SubBlock, Unsub
from ..io.notifications import NoteBatch, Notes
from ..results.initial import initial as initial_results
from ..store.objects import pub_columns
from ..store.subscriptions import K_RANGE, K_TOPK
from .kernel import (BUDGET, C_AFFECTED, C_BUDGET, C_CAND, C_DEAD, C_DECIDED, C_EVICT, C_LIVE_ADD, C_LIVE_DROP,
                     C_MISS, C_NEED, C_NEED_ROWS, C_OUT, C_QUEUE, C_READS, C_REFILLS, C_REMOVED, N_COUNTERS,
                     STOP_EXPIRY, STOP_FULL, holding, publish_run)
from .messages import Tick
from .netting import group_rows, net_changes

# Pubs per kernel call at most (a segment also ends before a subscription expires). Each
# call pays a fixed cost in Python (``_scratch``, ``_precomputed``, ``_drain``): at 512,
# range_100k's object phase took 0.32 s against 0.24 at 4,096 (engine/NOTES.md). An index that precomputes candidates (igpt, aoiq's batch) keeps
# 512: its candidates of every pub of the call are held at once.
SEGMENT = 8192
SEGMENT_PRECOMPUTED = 512


class Seg(NamedTuple):
    """A segment of a run of pubs: their times and seqs, object slots and keyword ids (CSR)."""

    times: tuple
    seqs: tuple
    exps: list | None  # exact expiries (time window, own clock), else None
    slots: list  # object slots (codes into ``transient``'s columns when given)
    kwoff: np.ndarray
    kw: np.ndarray
    transient: Transient | None = None


class Transient(NamedTuple):
    """A run's objects kept out of the object table: under window ``none`` with no kNN or
    top-k subscription live, nothing can hold an object past its own arrival, so storing and
    freeing each (~23% of range_10k's object phase) buys nothing. The kernel's object codes
    are then positions in the run, and these columns (by position) stand for the table's
    (engine/NOTES.md, "Objects nobody can hold are not stored")."""

    x: np.ndarray
    y: np.ndarray
    wo: np.ndarray
    seq: np.ndarray
    ids: np.ndarray  # (objects: the notifications' ids)

    @classmethod
    def of(cls, cols, lens: np.ndarray) -> "Transient":
        n = len(lens)
        ids = np.empty(n, dtype=object)
        ids[:] = cols.id
        return cls(np.fromiter(cols.x, np.float64, n), np.fromiter(cols.y, np.float64, n),
                   1.0 / np.sqrt(lens), np.fromiter(cols.seq, np.int64, n), ids)  # scoring.object_weight


class Tags:
    """A worker's keys of its notifications (``Engine.apply_routed``): for each, the index of
    the item it came of (``at`` is the run's first) and the registration seq of its
    subscription, read while the subscription holds its slot. Arrays, a run or event each."""

    def __init__(self, subs) -> None:
        self.subs = subs
        self.at = 0
        self.items: list[np.ndarray] = []
        self.regs: list[np.ndarray] = []

    def plain(self, notes: list, item: int) -> None:
        """Item ``item``'s notifications from the plain path, right after it: each one's
        subscription is live (an event notifies only the subscriptions it leaves active)."""
        seq, slot_of = self.subs.cols.seq, self.subs.slot_of
        self.items.append(np.full(len(notes), item, dtype=np.int64))
        self.regs.append(np.array([seq[slot_of[n.sub]] for n in notes], dtype=np.int64))

    def columns(self, notes: Notes, base: int) -> None:
        self.items.append(notes.pub + (self.at + base))
        self.regs.append(self.subs.cols.seq[notes.codes[0]])

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(item index, registration seq) of every notification, in order."""
        if not self.items:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        return (np.concatenate(self.items).astype(np.int64, copy=False),
                np.concatenate(self.regs).astype(np.int64, copy=False))


class Publisher:
    """The compiled publish path of one engine. It owns what the kernel needs beyond the
    engine's tables: the output rows and the work arrays (kept between calls, grown when a
    call needs more), the kernel's ``kbest`` switch, and the window's bookkeeping around a
    kernel call (the departures planned before each pub; the clock, the seq -> slot map of a
    worker and the alive postings brought up to the pubs applied). It reaches the engine
    only through the engine's public methods: ``add_run``, ``end_subs``, ``apply_one``,
    ``expire_objects``, ``forget``, ``free_unreferenced`` and ``heap``."""

    def __init__(self, eng) -> None:
        self.eng = eng
        self.subs, self.objs, self.alive, self.index = eng.subs, eng.objs, eng.alive, eng.index
        self.window, self.clock, self.vocab, self.stats = eng.window, eng.clock, eng.vocab, eng.stats
        self.external, self.maxdist = eng.external, eng.maxdist
        self.alive_by_seq = eng.alive_by_seq  # external expiry: object seq -> slot (the engine's too)
        self._kbest = False  # ``kbest``: a kNN or top-k subscription was taken
        self._kbest_top = 0  # ... the slots below this were looked at
        self._rows = L.rows(0)
        self._work: dict[str, np.ndarray] = {}  # the scratch arrays, by name (``_room``)

    # -- what the engine calls ---------------------------------------------------------
    def publish(self, run: list, out: NoteBatch, tags: Tags | None = None, expire: list | None = None) -> None:
        """Apply a run of objects (Pub events and PubBlocks, in order), appending
        notifications to ``out`` in stream order (and, with ``tags``, their keys). ``expire``:
        under external expiry, the seqs of the objects that leave before each pub."""
        pubs = _joined(run)
        cols = pub_columns(pubs)
        times, seqs = cols.t, cols.seq
        tr = None
        if self.transient():
            exps = None
            self.stats["objects"] += len(pubs)
            kw, kwoff, lens = self.vocab.of_run(cols.keywords, False)
            tr = Transient.of(cols, lens)
            slots = list(range(len(pubs)))  # codes: positions in the run
        else:
            exps = self._expiries(cols)
            slots, kwoff, kw = self.eng.add_run(pubs, cols, exps)
        index, clock = self.index, self.clock
        index.refresh(self.stats["objects"])  # the run's keywords are counted: review `all` postings
        i = 0
        while i < len(pubs):
            limit = clock.next_sub_end
            if limit <= times[i]:  # subscriptions end first, silently (times exact, SPEC 6); the kernel goes on
                self.eng.end_subs(times[i])
                limit = clock.next_sub_end
            end = min(len(pubs), i + (SEGMENT_PRECOMPUTED if index.precomputes else SEGMENT))
            j = i + 1 if limit < math.inf else end  # times are finite: none reaches an infinite limit
            while j < end and times[j] < limit:
                j += 1
            seg = Seg(times[i:j], seqs[i:j], exps[i:j] if exps is not None else None, slots[i:j],
                      kwoff[i:j + 1] - kwoff[i], kw[kwoff[i]:kwoff[j]], tr)
            done = self._segment(seg, expire[i:j] if expire else None, out, tags, i)
            i += done
            if done < j - i + done:  # stopped: a holder not found through the index (never expected)
                assert tr is None, "a transient run has no expiries"
                _extend(out, tags, self.eng.apply_one(pubs[i], slots[i], expire[i] if expire else ()), i)
                i += 1

    def leave(self, ev: Sub | Unsub | Tick, out: NoteBatch, expire: tuple[int, ...] = (),
              tags: Tags | None = None) -> bool:
        """Before a subscription, an unsubscription or (a worker's) tick: the objects due by
        its time (own clock, time window; or ``expire``, the seqs a worker is told) leave in
        one kernel step with no arrival, before the event's own work, their notifications
        (time ``ev.t``) as columns, as a pub's expiries give them, instead of the plain path's
        per-object Python (``Engine.expire_objects``: ~12 us a notification on a churning
        stream, engine/NOTES.md "Objects due before a subscription"). The subscriptions
        ending by then end first, silently, as on the plain path; an unsubscribed slot's
        notifications are dropped. ``tags``: a worker's keys, the event's item at
        ``tags.at``. Returns whether objects left."""
        t = ev.t
        if not (expire if self.external else self.clock.objects_due(t)):
            return False
        self.eng.end_subs(t)
        gone = [self.alive_by_seq.pop(q) for q in expire] if self.external else self.clock.leaving(t)
        skip = self.subs.slot_of.get(ev.id, -1) if type(ev) is Unsub else -1
        start = time.perf_counter()
        oc = self.objs.cols
        at = np.full(1, gone[0], dtype=np.int64)  # the probe of no object: a valid position, no keywords
        plan = RunPlan.of(1, [0] * len(gone), gone)
        run = L.Run(np.full(1, -1, dtype=np.int64), oc.x[at], oc.y[at], np.zeros(2, dtype=np.int64),
                    np.empty(0, dtype=np.int32), oc.wo[at], plan.off, plan.keys, False)
        done, _, dead = self._kernel(run, (t,), out, tags, 0, skip)
        if done:
            self.stats["leave_steps"] += 1
            self._left(dead)
        self.stats["expiry_seconds"] += time.perf_counter() - start
        if not done:  # a holder not found through the index (never expected): the plain path
            self.eng.expire_objects(gone)
        return True

    def initial(self, b: SubBlock, slots: np.ndarray) -> Notes | None:
        """The results of a run of new kNN/top-k ``slots`` (``b``: their events) from the
        alive objects, found best-first in one compiled call (``results.initial``;
        ``refill``'s buffers under ``kmax``), before they are indexed; the non-empty ones
        notified as the plain path's ``_subscribe`` and ``_notifications`` do, as columns
        (``_drain``'s), a subscription's index in the run for its pub."""
        subs, stats = self.subs, self.stats
        c = subs.cols
        ranked = slots[c.kind[slots] != K_RANGE]
        if not len(ranked):
            return None
        tree = self.alive.tree(bool(np.any(c.kind[ranked] == K_TOPK)))
        ranked = ranked[np.argsort(subs.kw.id[c.kw_off[ranked]], kind="stable")]  # by keyword: the trees' nodes reused hot
        stats["refill_reads"] += initial_results(ranked, subs.layout, self.objs.layout, tree.keys, tree.objs,
                                                 tree.sigs, tree.geo, tree.nodes, self.maxdist)
        stats["refills"] += len(ranked)
        stats["initial"] += len(ranked)
        at = np.flatnonzero(c.res_n[slots] > 0)
        if not len(at):
            return None
        ns = slots[at]
        n = np.minimum(c.res_n[ns], c.k[ns]).astype(np.int64)
        add_off = np.zeros(len(ns) + 1, dtype=np.int64)
        np.cumsum(n, out=add_off[1:])
        added = subs.res.obj[segment_items(c.res_off[ns], n)[0]].astype(np.int64)
        none = np.zeros(0, dtype=np.int64)
        return Notes(at, None, None, np.zeros(len(ns), dtype=np.bool_), add_off, self.objs.ids[added],
                     np.zeros(len(ns) + 1, dtype=np.int64), self.objs.ids[none], codes=(ns, added, none),
                     times=b.t, table=subs.ids)

    def holders(self, o: int) -> list[int]:
        """Slots whose buffer holds object ``o``, found through the index (the plain path's
        expiry on a compiled index): each holder's region covers ``o``."""
        oc = self.objs.cols
        cands = self.index.candidates(oc.x[o], oc.y[o], self.objs.keywords(o))
        return holding(cands, o, self.subs.layout).tolist()

    # -- the run -------------------------------------------------------------------------
    def transient(self) -> bool:
        """Can no object of the next run be held (``Transient``)? Window ``none`` (no object
        stays alive), no kNN or top-k subscription live, the engine's own clock (a worker's
        expiry lists name objects by slot), candidates found by the scan alone."""
        return not (self.window.retains or self.subs.holders or self.external or self.index.precomputes)

    def kbest(self) -> bool | None:
        """``publish_run``'s ``kbest``: None while no kNN or top-k subscription was ever taken
        (a range-only stream: the kernel's specialisation without their code, never compiled
        for it), True from the first one on, for good. Amortised O(1): the slots above the
        last look's top are looked at; a slot below it reused by one counts in ``holders``
        while active (one that ended released what it held, and no scan finds an inactive
        slot)."""
        if not self._kbest:
            sc = self.subs.cols
            self._kbest = self.subs.holders > 0 or bool(np.any(sc.kind[self._kbest_top:sc.top] != K_RANGE))
            self._kbest_top = sc.top
        return True if self._kbest else None

    def _expiries(self, cols) -> list | None:
        """The run's exact expiries (time window, own clock), as the clock orders them
        (``cols``: the run's ``pub_columns``)."""
        if self.external or self.window.kind != "time":
            return None
        expiry = self.clock.expiry
        return [expiry(t, e, q) for t, e, q in zip(cols.t, cols.expires, cols.seq)]

    def _plan(self, seg: Seg, expire: list | None) -> RunPlan:
        """The objects that leave the window before each pub of the segment."""
        slots = seg.slots
        if not self.external:
            if self.window.kind != "time":  # departures follow arrival order (count) or never happen
                return self.clock.plan(None, None, slots, None)
            return self.clock.plan(list(seg.times), list(seg.seqs), slots, seg.exps)
        owner: list[int] = []
        objs: list[int] = []
        if expire:
            alive = self.alive_by_seq
            here = dict(zip(seg.seqs, slots))  # may leave within the run
            for i, seqs in enumerate(expire):
                for q in seqs:
                    owner.append(i)
                    objs.append(alive[q] if q in alive else here[q])
        return RunPlan.of(len(slots), owner, objs)

    def _segment(self, seg: Seg, expire: list | None, out: NoteBatch, tags: Tags | None, base: int) -> int:
        """Run the kernel over the pubs of ``seg``; returns how many it applied (all but on a
        missing holder)."""
        tr = seg.transient
        oc = self.objs.cols if tr is None else tr
        plan = self._plan(seg, expire)
        b_obj = np.array(seg.slots, dtype=np.int64)
        run = L.Run(b_obj, oc.x[b_obj], oc.y[b_obj], seg.kwoff, seg.kw, oc.wo[b_obj], plan.off, plan.keys,
                    self.window.retains)
        done, status, dead = self._kernel(run, seg.times, out, tags, base,
                                          names=None if tr is None else (tr.ids, tr.seq))
        self.index.kernel_grid.count(run.x[:done], run.y[:done])  # after the fact: a level choice is cost, never results
        if tr is None:
            self._sync(seg, plan, dead, done)
        return done

    def _sync(self, seg: Seg, plan: RunPlan, dead: list[int], done: int) -> None:
        """Bring the window bookkeeping up to the ``done`` pubs the kernel applied."""
        slots = seg.slots
        w = self.window
        if self.external:
            if w.retains:
                for i in range(done):
                    self.alive_by_seq[seg.seqs[i]] = slots[i]
            seq = self.objs.cols.seq
            for o in plan.gone(done):
                self.alive_by_seq.pop(int(seq[o]), None)
        elif w.kind == "time":
            self.clock.commit(plan, list(seg.seqs), slots, seg.exps, done)
        elif w.retains:
            self.clock.commit(plan, None, slots, None, done)
        self._left(dead)
        self.eng.forget(slots[:done])
        self.eng.free_unreferenced()

    def _left(self, dead: list[int]) -> None:
        """Objects the kernel took out of the window: out of the alive postings (where the
        kernel posted them, under a window that retains objects), and forgotten."""
        if self.window.retains:
            for o in dead:
                self.alive.remove(o, self.objs.keywords(o).tolist())
        self.eng.forget(dead)

    # -- the kernel calls ----------------------------------------------------------------
    def _room(self, name: str, n: int, dtype=np.int64) -> np.ndarray:
        """The work array ``name`` with room for ``n`` (kept, grown to ``n`` when shorter)."""
        a = self._work.get(name)
        if a is None or len(a) < n:
            a = self._work[name] = np.empty(n, dtype=dtype)
        return a

    def _precomputed(self, run: L.Run, scanned: bool) -> L.Pre:
        """Candidates found before the kernel runs (``kernel.publish_run``): igpt's top-k slots
        (held by another index than the grid the kernel scans), or every candidate of aoiq's
        Algorithm 2 (the grid not scanned per object). None needed: empty."""
        top, sc, oc = self.index, self.subs.cols, self.objs.cols
        rf = self._room("rf", sc.capacity)
        rf_n = np.zeros(1, dtype=np.int64)
        if not top.precomputes:
            none = np.zeros(1, dtype=np.int64)
            return L.Pre(np.zeros(sc.capacity, dtype=np.int8), none, none[:0], none, none[:0], rf, rf_n, scanned)
        # Only an object held now or arriving in the run can be held when it leaves, unless a
        # refill takes it, and a refilled slot is in rf: the others need no candidates.
        exp_obj, objs = run.exp_obj, self.objs
        may_hold = (oc.refs[exp_obj] > 0) | np.isin(exp_obj, run.obj)
        e_off, e_kw = _csr([objs.keywords(o) if h else objs.keywords(o)[:0]
                            for o, h in zip(exp_obj.tolist(), may_hold)])
        foreign, pc_off, pc, pe_off, pe = top.precompute(L.Probes(run.x, run.y, run.kwoff, run.kw),
                                                         L.Probes(oc.x[exp_obj], oc.y[exp_obj], e_off, e_kw))
        return L.Pre(foreign, pc_off, pc, pe_off, pe, rf, rf_n, scanned)

    def _scratch(self, run: L.Run, cap: int) -> L.Scratch:
        """The kernel's work arrays for ``run`` (``cap``: output rows; the holders' arrays
        follow it)."""
        sc, oc, subs = self.subs.cols, self.objs.cols, self.subs
        ix = self.index.kernel_grid
        exp_obj = run.exp_obj
        m_kw = int(max(np.diff(run.kwoff).max(), oc.kw_len[exp_obj].max() if len(exp_obj) else 0))
        n_toks = probe_room(m_kw, ix.directory) + NC * m_kw
        room = self._room
        return L.Scratch(
            toks=room("toks", n_toks), probe=probe_scratch(n_toks, ix.lmax),
            srt=room("srt", m_kw), cands=room("cands", sc.capacity),
            hold_s=room("hold_s", cap), hold_p=room("hold_p", cap), hold_j=room("hold_j", cap),
            old_o=room("old_o", subs.max_k), old_k=room("old_k", subs.max_k, np.float64),
            heap=self.eng.heap(subs.max_kb), queue=room("queue", sc.capacity),
            dead=room("dead", max(1, len(exp_obj))), ptok=room("ptok", subs.max_kw),
            cell=room("cell", 4, np.int32), ext=room("ext", 4, np.float64))

    def _rows_for(self, cap: int) -> L.Rows:
        """The output rows, room for ``cap`` at least (kept, grown when shorter)."""
        if len(self._rows.i) < cap:
            self._rows = L.rows(cap)
        return self._rows

    def _kernel(self, run: L.Run, times, out: NoteBatch, tags: Tags | None, base: int, skip: int = -1,
                names: tuple | None = None) -> tuple[int, int, list[int]]:
        """Kernel calls over ``run`` until it is done or stops on a missing holder, each call's
        rows drained into ``out``; returns (pubs applied, status, objects that left).
        ``names``: the objects' (ids, seqs) by code, when not the table's (``Transient``)."""
        sc, top, stats = self.subs.cols, self.index, self.stats
        ix = top.kernel_grid  # the compiled grid the kernel scans (igpt keeps range and knn in one)
        ix.fit(sc.capacity - 1)
        ix.store.track_levels(ix.lmax)  # scan skips the levels where a token has no list
        scanned = top.scans  # aoiq[batch=true]: every candidate comes precomputed
        pre = self._precomputed(run, scanned)
        if top.precomputes and not scanned:
            stats["candidates"] += top.rejected
        cap = max(65536, 2 * sc.count + 16)
        rows = self._rows_for(cap)
        scratch = self._scratch(run, cap)
        subs, objs, directory = self.subs.layout, self.objs.layout, ix.directory
        changed = [pre.rf[:0]]
        dead: list[int] = []
        start = 0
        budget = BUDGET
        kbest = self.kbest()
        retains = self.window.retains
        while True:
            counters = np.zeros(N_COUNTERS, dtype=np.int64)
            counters[C_BUDGET] = budget
            ix.store.reserve(budget, budget)
            if retains:
                self.alive.store.reserve(len(run.kw), len(run.kw))
                scratch = scratch._replace(heap=self.eng.heap(self.subs.max_kb))  # room for the grown lists
            nxt, status = publish_run(start, sc.count, run, L.Tables(subs, objs, self.alive.store.arrays), ix.layout,
                                      directory, L.Work(pre, scratch, rows, counters), kbest)
            if top.tracks_scores:
                changed.append(np.unique(rows.s[: counters[C_OUT]]))
            self._drain(times, counters, rows, scratch, dead, out, tags, base, skip, names)
            if run.retains:
                self.alive.added(nxt - start, int(run.kwoff[nxt] - run.kwoff[start]))
            if status != STOP_FULL:
                break
            start = nxt
            budget = max(BUDGET, 2 * int(counters[C_NEED]))
            if counters[C_NEED_ROWS] > len(scratch.hold_s):
                cap = 2 * int(counters[C_NEED_ROWS])
                rows = self._rows_for(cap)
                scratch = scratch._replace(hold_s=self._room("hold_s", cap), hold_p=self._room("hold_p", cap),
                                           hold_j=self._room("hold_j", cap))
        if top.tracks_scores:  # scores that rose (results changed) or may have dropped (refills)
            top.touched(np.concatenate([*changed, pre.rf[: pre.rf_n[0]]]))
        if status == STOP_EXPIRY:
            stats["expiry_stops"] += 1
        return nxt, status, dead

    def _drain(self, times, counters, rows: L.Rows, scratch: L.Scratch, dead: list, out: NoteBatch,
               tags: Tags | None, base: int, skip: int = -1, names: tuple | None = None) -> None:
        """Turn one kernel call's rows into notifications, one net change per (pub,
        subscription) (SPEC section 6), appended to ``out`` as columns (none for slot
        ``skip``); re-post queued slots; collect the objects that left."""
        subs, stats = self.subs, self.stats
        sc = subs.cols
        ix = self.index.kernel_grid
        n = int(counters[C_OUT])
        stats["candidates"] += int(counters[C_CAND])
        stats["affected"] += int(counters[C_AFFECTED])
        ix.live_entries += int(counters[C_LIVE_ADD]) - int(counters[C_LIVE_DROP])
        if n:
            d_all = rows.d[:n]
            left = d_all[(rows.r[:n] == 0) & (d_all >= 0)]  # pushed past k: out of a buffer of k
            if len(left):
                self.eng.forget(left.tolist())
            keep = rows.s[:n] != skip if skip >= 0 else None  # its event unsubscribes ``skip``: no notification
            if keep is not None and not keep.all():
                rows = L.Rows(*(col[:n][keep] for col in rows))
                n = len(rows.s)
        if n:
            order = np.empty(n, dtype=np.int64)
            if not group_rows(rows, n, sc.seq, subs.in_order, order):  # never expected
                order = np.lexsort((sc.seq[rows.s[:n]], rows.i[:n]))  # stable: a pair's rows stay in order
            nc = L.note_cols(n)
            oids, oseq = (self.objs.ids, self.objs.cols.seq) if names is None else names
            c = net_changes(rows, order, oseq, nc, np.empty(2 * n))
            notes = Notes(nc.i[:c], None, None, nc.match[:c], nc.add_off[: c + 1],
                          oids[nc.add_obj[: nc.add_off[c]]], nc.rem_off[: c + 1], oids[nc.rem_obj[: nc.rem_off[c]]],
                          codes=(nc.s[:c], nc.add_obj[: nc.add_off[c]], nc.rem_obj[: nc.rem_off[c]]), times=times,
                          table=subs.ids)
            subs.lend(notes)  # the ids stay codes into ``subs.ids`` while the slots keep them
            out.add(notes)
            if tags is not None:
                tags.columns(notes, base)
        for s in scratch.queue[: int(counters[C_QUEUE])].tolist():
            if sc.active[s] and ix.pending[s]:
                ix.place(s)
        ix.maybe_compact()
        dead.extend(scratch.dead[: int(counters[C_DEAD])].tolist())
        for key, c in (("expired", C_DEAD), ("expiry_misses", C_MISS), ("expiry_removals", C_REMOVED),
                       ("refills", C_REFILLS), ("refill_reads", C_READS), ("evictions", C_EVICT),
                       ("decided", C_DECIDED)):
            stats[key] += int(counters[c])


def _joined(run: list) -> list[Pub] | PubBlock:
    """A run of objects (Pub events and PubBlocks, in order) as one: the one block as it is,
    events as they are, else joined into one block."""
    if len(run) == 1 and type(run[0]) is PubBlock:
        return run[0]
    if PubBlock not in map(type, run):
        return run
    return PubBlock.join(run)


def _extend(out: NoteBatch, tags: Tags | None, notes: list, i: int) -> None:
    out.extend(notes)
    if tags is not None and notes:
        tags.plain(notes, tags.at + i)


def _csr(kws: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Keyword id lists as CSR (offsets, int32 ids)."""
    off = np.zeros(len(kws) + 1, dtype=np.int64)
    off[1:] = np.cumsum([len(k) for k in kws])
    return off, (np.concatenate(kws).astype(np.int32) if kws else np.empty(0, dtype=np.int32))
