"""The dispatcher: places subscriptions by a plan, routes objects, drives expiry.

Exactness across workers rests on three rules:

* an object goes to every worker holding a subscription it could qualify for:
  one that shares a posting keyword with it (an ``all`` subscription is posted
  under one of its keywords, which any matching object carries). A worker
  therefore holds every alive object its subscriptions could ever need;
* under a window, a new kNN/top-k subscription starts from the alive objects:
  those its worker lacks are handed over first (``Backfill``);
* the dispatcher alone knows the global window (the last N objects, or each
  object's expiry time), so it tells each worker which of its objects leave
  before an event; a worker with nothing routed at that event gets a ``Tick``;
* notifications of one event are merged in subscription registration order
  (the order a single engine uses), duplicates of replicated range
  subscriptions removed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from itertools import groupby
from typing import Any

from ..core.config import Window
from ..core.clock import WindowClock
from ..engine.messages import Backfill, Tick
from ..io.events import Event, Pub, Sub, Unsub
from ..partition.base import Plan


def _plain_sub(ev: Any) -> bool:
    """A subscription without expiry: what ``Dispatcher.route_subs`` routes in a run."""
    return type(ev) is Sub and ev.expires is None


Item = tuple[Any, tuple[int, ...]]  # (event or Tick, seqs of objects that leave first)


class Dispatcher:
    """Routes a validated event stream to ``plan.m`` workers; O(keywords + workers) per event."""

    def __init__(self, plan: Plan, window: Window, rarity: dict[str, int] | None = None) -> None:
        self.plan = plan
        self.m = plan.m
        self.window = window
        self.rarity = rarity or {}  # keyword -> O_init frequency, to pick an all-sub's posting keyword
        self.where: dict[Any, tuple[int, ...]] = {}  # active sub id -> workers
        self._keys: dict[Any, tuple[str, ...]] = {}  # active sub id -> routing keywords
        self._seq: dict[Any, int] = {}  # active sub id -> registration position
        self.kw_workers: dict[str, Counter] = {}  # keyword -> Counter(worker -> subs posted)
        self.clock = WindowClock(window)  # subscription ids and object seqs leave by it
        self.alive: dict[int, tuple[Pub, set[int]]] = {}  # seq -> (object, workers holding it)
        self._alive_kw: dict[str, set[int]] = {}  # keyword -> alive seqs
        self.sent = 0  # (event, worker) messages, Ticks included
        self.objects = 0
        self.object_messages = 0
        self.replicas = 0
        self.subs: dict[Any, Sub] = {}  # active sub id -> its event (a migration re-sends it)
        self.old_plan: Plan | None = None  # global repartitioning: the plan old subscriptions follow
        self.old_ids: set[Any] = set()
        self.observer: Any = None  # called with each routed object (the rebalancer's statistics)

    # -- subscriptions -------------------------------------------------------------
    def _routing_keywords(self, sub: Sub) -> tuple[str, ...]:
        if sub.match_all and len(sub.keywords) > 1 and sub.kind != "topk":
            return (min(sub.keywords, key=lambda w: (self.rarity.get(w, 0), w)),)
        return sub.keywords

    def _register(self, sub: Sub, workers: tuple[int, ...]) -> None:
        self.where[sub.id] = workers
        self.subs[sub.id] = sub
        self._seq[sub.id] = sub.seq
        keys = self._routing_keywords(sub)
        self._keys[sub.id] = keys
        kw_workers = self.kw_workers
        for w in keys:
            c = kw_workers.get(w)
            if c is None:  # not setdefault(w, Counter()): a Counter made for every keyword
                c = kw_workers[w] = Counter()
            for wk in workers:
                c[wk] += 1
        self.replicas += len(workers)
        self.clock.subscribe(sub.expires, sub.seq, sub.id)

    def _unregister(self, sub_id: Any) -> tuple[int, ...]:
        workers = self.where.pop(sub_id)
        del self._seq[sub_id]
        del self.subs[sub_id]
        for w in self._keys.pop(sub_id):
            c = self.kw_workers[w]
            for wk in workers:
                c[wk] -= 1
                if not c[wk]:
                    del c[wk]
            if not c:
                del self.kw_workers[w]
        self.replicas -= len(workers)
        self._plan_of(sub_id).remove(sub_id)
        self.old_ids.discard(sub_id)
        return workers

    def _plan_of(self, sub_id: Any) -> Plan:
        return self.old_plan if self.old_plan is not None and sub_id in self.old_ids else self.plan

    # -- migration and repartitioning (runtime/rebalance.py decides) ------------------------
    def move(self, sub_id: Any, dst: int) -> list[Item]:
        """Re-place active ``sub_id`` on worker ``dst`` alone: routing and plan bookkeeping;
        returns the backfill ``dst`` needs first (alive objects it lacks). O(keywords +
        alive objects sharing them)."""
        sub, old = self.subs[sub_id], self.where[sub_id]
        for w in self._keys[sub_id]:
            c = self.kw_workers[w]
            for wk in old:
                c[wk] -= 1
                if not c[wk]:
                    del c[wk]
            c[dst] += 1
        self.where[sub_id] = (dst,)
        self.replicas += 1 - len(old)
        self._plan_of(sub_id).move(sub_id, (dst,))
        if self.window.retains and sub.kind != "range":
            return self._backfill(sub, (dst,)).get(dst, [])
        return []

    def replan(self, plan: Plan) -> None:
        """New subscriptions follow ``plan``; the active ones stay under the old plan."""
        self.old_plan, self.plan = self.plan, plan
        self.old_ids = set(self.where)

    def finish_replan(self) -> None:
        """The old subscriptions have drained (or moved): forget the old plan."""
        for sid in self.old_ids:
            if sid in self.where:
                self.plan.move(sid, self.where[sid])
        self.old_plan, self.old_ids = None, set()

    def seq_of(self, sub_id: Any) -> int | None:
        return self._seq.get(sub_id)

    # -- the window ------------------------------------------------------------------
    def _leave(self, seq: int, leave: dict[int, list[int]]) -> None:
        pub, workers = self.alive.pop(seq)
        for w in pub.keywords:
            p = self._alive_kw[w]
            p.discard(seq)
            if not p:
                del self._alive_kw[w]
        for wk in workers:
            leave.setdefault(wk, []).append(seq)

    def _backfill(self, sub: Sub, workers: tuple[int, ...]) -> dict[int, list]:
        """Alive objects sharing a routing keyword with ``sub`` that its workers lack."""
        seqs: set[int] = set()
        for w in self._routing_keywords(sub):
            seqs.update(self._alive_kw.get(w, ()))
        out: dict[int, list] = {}
        for seq in sorted(seqs):
            pub, have = self.alive[seq]
            for wk in workers:
                if wk not in have:
                    have.add(wk)
                    out.setdefault(wk, []).append((Backfill(pub), ()))
        return out

    # -- routing ---------------------------------------------------------------------
    def route(self, ev: Event) -> dict[int, list[Item]]:
        """Worker -> the items it must apply for this event, in order."""
        now = ev.t  # as given: exact comparisons (SPEC section 6, "Times")
        for seq, sid in self.clock.subs_ending(now):
            if self._seq.get(sid) == seq:
                self._unregister(sid)  # the workers end it themselves at this time
        leave: dict[int, list[int]] = {}
        gone = self.clock.leaving(now)
        if isinstance(ev, Pub):  # under a count window the oldest leaves as this one arrives
            gone += self.clock.arrive(ev.seq, ev.seq, self.clock.expiry(now, ev.expires, ev.seq))
        for seq in gone:
            self._leave(seq, leave)
        before: dict[int, list] = {}
        if isinstance(ev, Sub):
            targets = tuple(sorted(set(self.plan.assign(ev))))
            assert targets and all(0 <= w < self.m for w in targets), (ev.id, targets)
            self._register(ev, targets)
            if self.window.retains and ev.kind != "range":
                before = self._backfill(ev, targets)
        elif isinstance(ev, Unsub):
            targets = self._unregister(ev.id)
        else:
            found: set[int] = set()
            for w in ev.keywords:
                c = self.kw_workers.get(w)
                if c:
                    found.update(c)
            targets = tuple(sorted(found))
            if self.observer is not None:
                self.observer(ev)
            self.objects += 1
            self.object_messages += len(targets)
            if self.window.retains:
                self.alive[ev.seq] = (ev, set(targets))
                for w in ev.keywords:
                    self._alive_kw.setdefault(w, set()).add(ev.seq)
        out: dict[int, list[Item]] = {}
        for wk in targets:
            out[wk] = before.pop(wk, []) + [(ev, tuple(leave.pop(wk, ())))]
        for wk, seqs in leave.items():
            out[wk] = [(Tick(ev.seq, ev.t), tuple(seqs))]
        self.sent += sum(len(v) for v in out.values())
        return out

    def route_many(self, events: Sequence[Event]) -> list[dict[int, list[Item]]]:
        """``[route(ev) for ev in events]``: the plan's new-subscription rule prepared in bulk
        for the run's subscriptions first (``AssignedPlan.prepare``: its state-free part, one
        vectorised pass); placement then goes in event order, as one by one."""
        prepare = getattr(self.plan, "prepare", None)
        if prepare is not None:
            prepare([ev for ev in events if isinstance(ev, Sub)])
        try:
            return [self.route(ev) for ev in events]
        finally:
            if prepare is not None:
                prepare(())

    def route_run(self, events: Sequence[Event]) -> list[dict[int, list[Item]]]:
        """``route_many(events)``, each run of subscriptions without expiry by ``route_subs``
        where it qualifies (nothing due within it). The same items, placement and loads."""
        out: list[dict[int, list[Item]]] = []
        pending: list = []
        for plain, grp in groupby(events, _plain_sub):
            part = list(grp)
            if plain:
                if pending:  # routed first: route_subs reads the window as they leave it
                    out += self.route_many(pending)
                    pending = []
                routed = self.route_subs(part)
                if routed is not None:
                    out += routed
                    continue
            pending.extend(part)
        if pending:
            out += self.route_many(pending)
        return out

    def route_subs(self, subs: Sequence[Sub]) -> list[dict[int, list[Item]]] | None:
        """``route_many(subs)`` for a run of subscriptions without expiry (a ``SubBlock``'s
        events) when nothing is due up to the last one's time: no subscription ends and no
        object leaves before any of them (``clock.next_due``), none is an object, so each is
        only placed, registered and backfilled; the per-event window steps are skipped. None,
        and nothing done, when the run does not qualify (then ``route_many``)."""
        if not subs or not self.clock.next_due > subs[-1].t or any(s.expires is not None for s in subs):
            return None
        prepare = getattr(self.plan, "prepare", None)
        if prepare is not None:
            prepare(subs)
        try:
            assign, register, m = self.plan.assign, self._register, self.m
            backfill = self._backfill if self.window.retains else None
            out, sent = [], 0
            for sub in subs:
                targets = tuple(sorted(set(assign(sub))))
                assert targets and all(0 <= w < m for w in targets), (sub.id, targets)
                register(sub, targets)
                if backfill is not None and sub.kind != "range":
                    before = backfill(sub, targets)
                    sent += sum(map(len, before.values()))
                    out.append({wk: before.pop(wk, []) + [(sub, ())] for wk in targets})
                else:
                    out.append({wk: [(sub, ())] for wk in targets})
                sent += len(targets)
            self.sent += sent  # items, Backfills included, as route counts them
            return out
        finally:
            if prepare is not None:
                prepare(())

    def metrics(self) -> dict:
        return routing_metrics(self)


def routing_metrics(d: Any) -> dict:
    """What ``metrics.json`` says of a dispatcher's (or the fleet's router's) routing: messages
    sent, per object, the replication of subscriptions and the plan's estimated loads."""
    subs = len(d.where)
    return {
        "messages": d.sent,
        "messages_per_object": round(d.object_messages / d.objects, 4) if d.objects else 0.0,
        "replication_ratio": round(d.replicas / subs, 4) if subs else 1.0,
        "estimated_loads": [round(x, 4) for x in d.plan.loads()],
    }
