"""The multi-worker local runtime: M worker engines in separate processes.

Per micro-batch the dispatcher routes each event to its workers (plus ``Tick``s
for expiries), every worker applies its share in parallel, and the merger puts
each event's notifications back in registration order. Results equal the
single engine's for every plan (tested against the reference engine).
"""

from __future__ import annotations

import multiprocessing as mp
import signal
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..core.config import Space, Window
from .engines import DEFAULT_INDEX, make_engine
from ..engine.engine import Routed
from ..engine.messages import Adopt, Drop, Tick
from ..io.events import Pub
from ..io.notifications import Notification, NoteLines
from ..partition.base import Plan
from .dispatcher import Dispatcher
from .fleet import merge_lines
from .fleetworker import start_deaf


def _export(engine, ids: list) -> dict:
    """Hand subscriptions over: their result objects, then drop them here (silently)."""
    held = {sid: engine.export(sid) for sid in ids}
    engine.apply_routed([(Drop(sid), ()) for sid in ids])
    return held


def _lines(r: Routed) -> tuple:
    """A worker's answer to a batch: its notifications' lines (UTF-8) and, per line, the
    item it came of, its subscription's registration seq and whether it is a range match."""
    return r.notes.json_bytes(), r.item, r.reg, r.notes.matches()


def _query(engine, ids: list) -> dict:
    """(result ids, result object seqs) of the kNN/top-k subscriptions among ``ids`` held here
    (a live service reads one subscription's result, and a snapshot needs the seqs)."""
    out = {}
    for sid in ids:
        s = engine.subs.slot_of.get(sid)
        if s is not None and engine.results(sid) is not None:
            out[sid] = (engine.results(sid), engine.objs.cols.seq[engine.subs.result(s)].tolist())
    return out


def _worker_main(conn, window: Window, space: Space, index: str, params: dict) -> None:
    """A worker process: one engine, driven over a pipe. Ctrl-C is the parent's to handle (one
    line, exit 130; SPEC 7): the worker ignores SIGINT and ends when its pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    engine = make_engine(index, window, space, external_expiry=True, **params)
    try:
        _serve(conn, engine)
    except (EOFError, ConnectionError):  # the parent is gone (killed, or ended with answers unread: a reset)
        return


def _serve(conn, engine: Any) -> None:
    """``_worker_main``'s loop: answer the parent's messages until it says stop."""
    while True:
        msg = conn.recv()
        if msg[0] == "batch":
            t0 = time.process_time()
            out = _lines(engine.apply_routed(msg[1], columns=True))
            conn.send((out, time.process_time() - t0))
        elif msg[0] == "export":
            conn.send(_export(engine, msg[1]))
        elif msg[0] == "results":
            conn.send(engine.all_results())
        elif msg[0] == "query":
            conn.send(_query(engine, msg[1]))
        elif msg[0] == "stats":
            conn.send(dict(engine.stats))
        else:
            conn.close()
            return


class _InProcess:
    """The same protocol without processes (tests, M = 1)."""

    def __init__(self, window: Window, space: Space, index: str, params: dict) -> None:
        self.engine = make_engine(index, window, space, external_expiry=True, **params)
        self._reply: Any = None

    def send(self, msg) -> None:
        if msg[0] == "batch":
            t0 = time.process_time()
            out = _lines(self.engine.apply_routed(msg[1], columns=True))
            self._reply = (out, time.process_time() - t0)
        elif msg[0] == "export":
            self._reply = _export(self.engine, msg[1])
        elif msg[0] == "results":
            self._reply = self.engine.all_results()
        elif msg[0] == "query":
            self._reply = _query(self.engine, msg[1])
        elif msg[0] == "stats":
            self._reply = dict(self.engine.stats)

    def recv(self):
        return self._reply

    def worker_stats(self) -> list[dict]:
        for c in self._conns:
            c.send(("stats",))
        return [c.recv() for c in self._conns]

    def close(self) -> None:
        pass


class LocalCluster:
    """Dispatcher + M workers + merger. ``apply(events)`` mirrors ``Engine.apply``."""

    def __init__(self, plan: Plan, window: Window | str = "none", space: Space | None = None,
                 index: str = DEFAULT_INDEX, processes: bool = True, rarity: dict[str, int] | None = None,
                 rebalancer: Any = None, **params: Any) -> None:
        self.window = Window.parse(window) if isinstance(window, str) else window
        self.space = space or Space()
        self.dispatcher = Dispatcher(plan, self.window, rarity)
        self.m = plan.m
        self._procs: list = []
        self._conns: list = []
        if processes:
            ctx = mp.get_context("spawn")
            for _ in range(self.m):
                parent, child = ctx.Pipe()
                p = ctx.Process(target=_worker_main, args=(child, self.window, self.space, index, params),
                                daemon=True)
                start_deaf(p)
                self._procs.append(p)
                self._conns.append(parent)
        else:
            self._conns = [_InProcess(self.window, self.space, index, params) for _ in range(self.m)]
        self.batches: list[dict] = []  # per micro-batch load metrics
        self.last_t: Any = None
        self.last_seq = 0
        self.rebalancer = rebalancer  # runtime/rebalance.py: dynamic load adjustment
        self.migrated = 0
        if rebalancer is not None:
            self.dispatcher.observer = rebalancer.observe

    def apply(self, events: Sequence[Any]) -> list[Notification]:
        """One micro-batch: route, apply on all workers in parallel, merge."""
        return self.apply_columnar(events).to_list()

    def apply_columnar(self, events: Sequence[Any]) -> NoteLines:
        """``apply``, the notifications as their lines: each event's in registration order
        (the order of a single engine: by the seq of the subscription's ``sub``, which each
        worker reads as it notifies), ties in worker order, a range match of a subscription
        replicated on several workers kept once. No Python step a notification."""
        events = list(events)
        shares: list[list] = [[] for _ in range(self.m)]
        where: list[list[int]] = [[] for _ in range(self.m)]  # item -> event index
        for e, out in enumerate(self.dispatcher.route_run(events)):  # runs of subscriptions at once
            for wk, items in out.items():
                shares[wk].extend(items)
                where[wk].extend([e] * len(items))
        t0 = time.perf_counter()
        for wk in range(self.m):
            self._conns[wk].send(("batch", shares[wk]))
        cpu, texts, ev, reg, match = [], [], [], [], []
        for wk in range(self.m):
            (text, item, r, m), secs = self._conns[wk].recv()
            cpu.append(secs)
            texts.append(text)
            ev.append(np.asarray(where[wk], dtype=np.int64)[item])
            reg.append(r)
            match.append(m)
        wall = time.perf_counter() - t0
        merged = merge_lines(texts, ev, reg, match)
        if events:
            self.last_t, self.last_seq = events[-1].t, events[-1].seq
        self.batches.append({
            "events": len(events),
            "objects": sum(isinstance(ev, Pub) for ev in events),
            "wall_seconds": round(wall, 6),
            "worker_cpu_seconds": [round(c, 6) for c in cpu],
            "update_seconds": round(max(cpu), 6) if cpu else 0.0,
            "balance_seconds": round(max(cpu) - min(cpu), 6) if cpu else 0.0,
            "messages": sum(len(s) for s in shares),
        })
        if self.rebalancer is not None:
            self.batches[-1]["adjustments"] = self.rebalancer.after_batch(cpu, self)
        return merged

    def migrate(self, ids: Sequence[Any], dst: int) -> None:
        """Move active subscriptions to worker ``dst``, results and all (between batches):
        each source exports and drops them, the dispatcher re-routes, ``dst`` gets the
        alive objects it lacks and adopts them. Exact: no notification is sent."""
        d = self.dispatcher
        by_src: dict[int, list] = {}
        for sid in ids:
            ws = d.where[sid]
            if len(ws) == 1 and ws[0] != dst:
                by_src.setdefault(ws[0], []).append(sid)
        if not by_src:
            return
        for src, lst in by_src.items():
            self._conns[src].send(("export", lst))
        held: dict = {}
        for src in by_src:
            held.update(self._conns[src].recv())
        items: list = []
        for lst in by_src.values():
            for sid in lst:
                items += d.move(sid, dst)
                items.append((Adopt(d.subs[sid], () if self.window.retains else held[sid], self.last_t), ()))
        self._conns[dst].send(("batch", items))
        self._conns[dst].recv()
        self.migrated += sum(len(v) for v in by_src.values())

    def results(self) -> list[tuple[Any, list[Any]]]:
        """Final results of every active kNN/top-k subscription, in registration order."""
        if self.last_t is not None:  # bring every worker to the end time (subscription expiries)
            for c in self._conns:
                c.send(("batch", [(Tick(self.last_seq, self.last_t), ())]))
            for c in self._conns:
                c.recv()
        seen: dict[Any, tuple[int, list[Any]]] = {}
        for c in self._conns:
            c.send(("results",))
        for c in self._conns:
            for sid, ids in c.recv():
                seq = self.dispatcher.seq_of(sid)
                if seq is not None:
                    seen.setdefault(sid, (seq, ids))
        return [(sid, ids) for sid, (seq, ids) in sorted(seen.items(), key=lambda kv: kv[1][0])]

    def query(self, ids: Sequence[Any]) -> dict[Any, tuple[list[Any], list[int]]]:
        """Active kNN/top-k subscription id -> (result ids, their object seqs), from the
        worker(s) the dispatcher placed each on (a worker may still hold an older life of
        the id that ended by ``expires``; the placed one is the current life)."""
        d, by_worker = self.dispatcher, [[] for _ in range(self.m)]
        for sid in ids:
            if sid in d.where:
                by_worker[d.where[sid][0]].append(sid)
        out: dict = {}
        for wk, lst in enumerate(by_worker):
            if lst:
                self._conns[wk].send(("query", lst))
                out.update(self._conns[wk].recv())
        return out

    def worker_stats(self) -> list[dict]:
        for c in self._conns:
            c.send(("stats",))
        return [c.recv() for c in self._conns]

    def close(self) -> None:
        for c in self._conns:
            try:
                c.send(("stop",))
            except (BrokenPipeError, OSError):
                pass
        for p in self._procs:
            p.join(timeout=5)

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
