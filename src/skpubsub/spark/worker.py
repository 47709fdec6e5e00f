"""One worker's engine as the Spark runtime holds it (no PySpark here).

:class:`WorkerState` wraps an ``Engine`` with external expiry plus what the sink
needs to merge workers: each notification carries the registration position
(``seq`` of the ``sub`` event) of its subscription, so the sink can order one
event's notifications exactly as a single engine would. It pickles whole: that
pickle is the snapshot kept in the state store.
"""

from __future__ import annotations

import pickle
import time
from typing import Any

import numpy as np

from ..core.config import Space, Window
from ..runtime.engines import make_engine
from ..io.encode import json_text
from ..io.events import Sub, Unsub
from ..io.notifications import Match, note_line
from ..io.sinks import rejection_record, result_record
from .sequencer import DRIVER, END

# Output row: (worker, kind, seq, reg, line, blob). kind is "notes" (all of a batch's
# notifications of one worker in one row: ``line`` their JSON lines joined by "\n",
# ``blob`` their (seq, reg, is range match) arrays), "result", "stat", "rejected",
# "meta" or "source". One row for millions of notifications keeps Arrow's per-row
# cost out of the way.
OUTPUT_SCHEMA = "worker int, kind string, seq long, reg long, line string, blob binary"
COLUMNS = [c.split()[0] for c in OUTPUT_SCHEMA.split(", ")]


class WorkerState:
    """The engine of one worker; ``apply`` is the engine's cost plus O(notifications)."""

    def __init__(self, worker: int, window: Window, space: Space, index: str, params: dict) -> None:
        self.worker = worker
        self.engine = make_engine(index, window, space, external_expiry=True, **params)
        self.reg: dict[Any, int] = {}  # active subscription id -> seq of its sub event
        self.cpu_seconds = 0.0

    def apply(self, items: list[tuple[int, Any]]) -> list[tuple]:
        """Apply routed ``(seq, item)`` pairs in order; returns the packed notifications
        row (if any) and result rows."""
        t0 = time.process_time()
        routed = [it for _, it in items if it != END]
        outs = iter(self.engine.apply_routed(routed))
        rows: list[tuple] = []
        lines: list[str] = []
        seqs: list[int] = []
        regs: list[int] = []
        match: list[bool] = []
        for seq, it in items:
            if it == END:
                rows.extend(self._results())
                continue
            ev = it[0]
            if isinstance(ev, Sub):
                self.reg[ev.id] = ev.seq
            for n in next(outs):
                lines.append(note_line(n))
                seqs.append(seq)
                regs.append(self.reg[n.sub])
                match.append(isinstance(n, Match))
            if isinstance(ev, Unsub):
                self.reg.pop(ev.id, None)
        if lines:
            blob = pickle.dumps((np.array(seqs, np.int64), np.array(regs, np.int64), np.array(match, bool)),
                                protocol=5)
            rows.insert(0, (self.worker, "notes", 0, 0, "".join(lines)[:-1], blob))  # the lines, less the last "\n"
        self.cpu_seconds = time.process_time() - t0
        return rows

    def stat_row(self, **extra: Any) -> tuple:
        """The per-batch load record of this worker (after ``apply``)."""
        stat = {"worker": self.worker, "cpu_seconds": round(self.cpu_seconds, 6), **self.engine.stats, **extra}
        return (self.worker, "stat", 0, 0, json_text(stat), None)

    def _results(self) -> list[tuple]:
        return [(self.worker, "result", 0, self.reg[sid], json_text(result_record(sid, ids)), None)
                for sid, ids in self.engine.all_results()]


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
