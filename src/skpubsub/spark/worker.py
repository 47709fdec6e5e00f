"""One worker's engine as the Spark runtime holds it (no PySpark here).

:class:`WorkerState` wraps an ``Engine`` with external expiry plus what the sink
needs to merge workers: each notification carries the registration position
(``seq`` of the ``sub`` event) of its subscription, so the sink can order one
event's notifications exactly as a single engine would. Its snapshot (kept in the
state store) is data: the live subscriptions and alive objects the engine is a
function of, as records (:mod:`skpubsub.engine.snapshot`), never a pickle.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from ..core.config import Space, Window
from ..runtime.engines import make_engine
from ..io.encode import json_text
from ..engine import snapshot
from ..engine.messages import Adopt, Backfill, Drop, Export
from ..io.events import Pub, Sub, Unsub
from ..io.notewriter import results_block
from ..io.sinks import rejection_record, result_record
from .codec import END, decode_items, encode_export, pack_notes
from .sequencer import DRIVER

FORMAT = "skpubsub-spark-worker"
VERSION = 1

# Output row: (worker, kind, seq, reg, line, blob). What ``apply`` returns: "notes" (all
# of a batch's notifications of one worker in one row: ``line`` their JSON lines joined by
# "\n", ``blob`` their (seq, reg, is range match) columns, ``seq`` their number), "result",
# "stat", "rejected", "meta" or "source". The task turns notes, results and rejections into
# part files (``sink.write_parts``) and sends only "part" rows (file name and count), the
# "stat" row and the driver rows' "meta"/"source" on to the driver.
OUTPUT_SCHEMA = "worker int, kind string, seq long, reg long, line string, blob binary"
COLUMNS = [c.split()[0] for c in OUTPUT_SCHEMA.split(", ")]


class WorkerState:
    """The engine of one worker; ``apply`` is the engine's cost plus O(notifications)."""

    def __init__(self, worker: int, window: Window, space: Space, index: str, params: dict) -> None:
        self.worker = worker
        self.config = {"worker": worker, "window": str(window), "space": str(space), "index": index,
                       "params": params}
        self.engine = make_engine(index, window, space, external_expiry=True, **params)
        self.retains = self.engine.window.retains
        # What the engine is a function of (its snapshot): subscription id -> its sub event
        # (ended ones pruned at each snapshot), and the alive objects by seq.
        self.subs: dict[Any, Sub] = {}
        self.alive: dict[int, Pub] = {}
        self.cpu_seconds = 0.0

    decode = staticmethod(decode_items)  # a routed row's payload -> the items ``apply`` takes

    def apply(self, items: list[tuple[int, Any]]) -> list[tuple]:
        """Apply routed ``(seq, item)`` pairs in order; returns the packed notifications
        row (if any), result rows and, for an ``Export`` (a migration under ``none``), an
        ``export`` row (``seq`` its tag, ``blob`` the result objects as data)."""
        t0 = time.process_time()
        rows: list[tuple] = []
        text: list[str] = []
        cols: tuple[list, list, list] = ([], [], [])
        run: list[tuple[int, Any]] = []
        for seq, it in items:
            if it != END and isinstance(it[0], Export):
                self._run(run, rows, text, cols)
                run = []
                ev = it[0]
                held = {self.subs[i].seq: self.engine.export(i) for i in ev.ids}
                rows.append((self.worker, "export", ev.tag, 0, "", encode_export(held)))
            else:
                run.append((seq, it))
        self._run(run, rows, text, cols)
        if cols[0]:  # the lines, less the last "\n"
            seqs, regs, match = (np.concatenate(c) for c in cols)
            rows.insert(0, (self.worker, "notes", len(seqs), 0, "".join(text)[:-1], pack_notes(seqs, regs, match)))
        self.cpu_seconds = time.process_time() - t0
        return rows

    def _run(self, items: list[tuple[int, Any]], rows: list, text: list, cols: tuple[list, list, list]) -> None:
        """Apply a run of items (no export among them); notifications as columns (the
        engine's keys: each one's item, its subscription's registration seq)."""
        if not items:
            return
        routed = [it for _, it in items if it != END]
        out = self.engine.apply_routed(routed, columns=True)
        if len(out.notes):
            text.append(out.notes.json_block())
            cols[0].append(np.array([seq for seq, it in items if it != END], dtype=np.int64)[out.item])
            cols[1].append(out.reg)
            cols[2].append(out.notes.matches())
        for seq, it in items:
            if it == END:
                rows.extend(self._results())
                continue
            ev, leave = it
            if self.retains:
                for q in leave:
                    self.alive.pop(q, None)
                if isinstance(ev, Pub):
                    self.alive[ev.seq] = ev
                elif isinstance(ev, Backfill):
                    self.alive[ev.pub.seq] = ev.pub
            if isinstance(ev, Sub):
                self.subs[ev.id] = ev
            elif isinstance(ev, Adopt):  # a migrated subscription (rebalancing)
                self.subs[ev.sub.id] = ev.sub
            elif isinstance(ev, (Unsub, Drop)):
                self.subs.pop(ev.id, None)

    def snapshot(self) -> bytes:
        """The state as data (framed JSON); prunes the subscriptions that ended. O(state)."""
        slot_of, seq_col = self.engine.subs.slot_of, self.engine.subs.cols.seq
        self.subs = {i: ev for i, ev in self.subs.items() if slot_of.get(i) is not None
                     and int(seq_col[slot_of[i]]) == ev.seq}
        return snapshot.frame(FORMAT, VERSION, snapshot.capture(self.engine, self.subs.values(), self.alive.values()),
                              **self.config)

    @classmethod
    def restore(cls, raw: bytes, worker: int, window: Window, space: Space, index: str,
                params: dict) -> "WorkerState":
        """A state from :meth:`snapshot`; ``snapshot.Refused`` if damaged or another run's."""
        ws = cls(worker, window, space, index, params)
        head, body = snapshot.unframe(raw, FORMAT, VERSION, f"worker {worker} snapshot")
        if {k: head.get(k) for k in ws.config} != ws.config:
            raise snapshot.Refused(f"worker {worker} snapshot: written for another configuration")
        subs, alive = snapshot.restore(ws.engine, body)
        ws.subs, ws.alive = {s.id: s for s in subs}, alive
        return ws

    def stat_row(self, **extra: Any) -> tuple:
        """The per-batch load record of this worker (after ``apply``)."""
        stat = {"worker": self.worker, "cpu_seconds": round(self.cpu_seconds, 6), **self.engine.stats, **extra}
        return (self.worker, "stat", 0, 0, json_text(stat), None)

    def _results(self) -> list[tuple]:
        columns = getattr(self.engine, "result_columns", None)  # a compiled engine: its lines in one pass
        if columns is None:
            return [(self.worker, "result", 0, self.subs[sid].seq, json_text(result_record(sid, ids)), None)
                    for sid, ids in self.engine.all_results()]
        res = columns()
        lines = bytes(results_block(res)).decode("utf-8").split("\n")  # (``result_line``'s, each)
        return [(self.worker, "result", 0, self.subs[sid].seq, line, None) for sid, line in zip(res.sids, lines)]


def driver_rows(entries: list[tuple]) -> list[tuple]:
    """The sequencer's rejections and metadata as output rows (worker ``DRIVER``)."""
    rows: list[tuple] = []
    for e in entries:
        if e[0] == "rejected":
            _, line, error, raw = e
            rows.append((DRIVER, "rejected", line, 0, json_text(rejection_record(line, error, raw)), None))
        else:  # "meta" (run totals at the end) or "source" (the sequencer's own timing)
            rows.append((DRIVER, e[0], 0, 0, json_text(e[1]), None))
    return rows
