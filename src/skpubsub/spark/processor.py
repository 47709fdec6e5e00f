"""A worker engine inside ``transformWithStateInPandas``, its state event-sourced.

State per worker (RocksDB state store, checkpointed with the query):

* ``meta``  (token, version, logged, snap_version): a random token naming this
  state's lineage, a version bumped by every micro-batch, the number of log
  entries, and the version the snapshot was taken at;
* ``snap``  the :class:`WorkerState` snapshot (data: framed JSON, see
  :mod:`skpubsub.engine.snapshot`) in chunks (absent until the first compaction: then
  the state is a fresh engine);
* ``log``   (version, payload): the routed rows (JSON, :mod:`.codec`) applied since the
  snapshot.

Nothing read back is unpickled (SPEC section 7): payloads and snapshots are validated as
they are decoded, and a damaged one fails the batch with the reason.

A batch makes three coarse state calls (read meta, append the batch's payloads,
write meta), plus a snapshot every ``snapshot_every`` log entries. The live
engine stays in the module-level ``_CACHE`` under (token, worker, attempt) with its
version; ``attempt`` names this start of the query (a copy made before a restart is not
trusted: batches replayed after it may be routed differently, rebalancing decides from
measured loads, so a copy at the same version can hold another history). Spark hands a partition to whichever Python worker process is idle, so
a process may find its copy some batches behind: it catches up by applying the
log entries since its version (the log is the exact input of those batches). A
copy older than the snapshot, or none (new process, restart), is rebuilt from
snapshot + log, so the cache only ever saves time. An entry is taken out before
the engine is mutated: a failed attempt never leaves a half-applied engine.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from ..core.config import Space, Window
from .codec import DRIVER, decode_driver
from .fs import Loc

if TYPE_CHECKING:
    from .shares import ShareWorker
    from .worker import WorkerState

# The engine's modules are imported by the tasks that run a worker (``_engines``), not with
# this module: the Python process Spark starts on the driver to plan the query imports it
# too, before the first batch (~1.5 s of imports it never used).

SNAP_CHUNK = 8 << 20  # bytes per snapshot entry

_CACHE: dict[tuple[str, int, str], tuple[int, WorkerState | ShareWorker]] = {}


def _batch_id() -> int:
    """The micro-batch this task belongs to: Spark sets it as a local property of every
    streaming job (PySpark's own ``foreach`` writer reads it the same way); a replay has
    the same id, so its part files get the same names."""
    from pyspark import TaskContext

    tc = TaskContext.get()
    v = tc.getLocalProperty("streaming.sql.batchId") if tc is not None else None
    if v is None:
        raise RuntimeError("the Spark task does not know its micro-batch id (streaming.sql.batchId)")
    return int(v)


class WorkerProcessor(StatefulProcessor):
    def __init__(self, window: str, space: str, index: str, params: dict | None = None,
                 snapshot_every: int = 16, keys: list[int] | None = None, out: str = "", run: str = "run",
                 attempt: str = "", base: int = 0, fleet: bool = False) -> None:
        self.window, self.space, self.index = window, space, index
        self.base = base  # the run's batch number of this query's batch 0 (another --workers: a new query)
        self.attempt = attempt or uuid.uuid4().hex  # made on the driver, once per start of the query
        self.out, self.run = out, run  # where the tasks write their part files (a URL: any file system)
        # grouping key -> worker id (the last key carries the driver rows)
        self.worker_of = {k: w for w, k in enumerate(keys[:-1])} if keys else {}
        if keys:
            self.worker_of[keys[-1]] = DRIVER
        self.params = params or {}
        self.snapshot_every = snapshot_every
        self.fleet = fleet  # the fleet's workers (spark/shares.py: blocks in, their own window) or the dispatcher's

    @property
    def state(self) -> type:
        if self.fleet:
            from .shares import ShareWorker

            return ShareWorker
        from .worker import WorkerState

        return WorkerState

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.meta = handle.getValueState("meta", StructType([
            StructField("token", StringType()), StructField("version", LongType()),
            StructField("logged", LongType()), StructField("snap_version", LongType())]))
        self.snap = handle.getListState("snap", StructType([StructField("chunk", BinaryType())]))
        self.log = handle.getListState("log", StructType([
            StructField("version", LongType()), StructField("payload", BinaryType())]))

    def _fresh(self, worker: int) -> WorkerState | ShareWorker:
        return self.state(worker, Window.parse(self.window), Space.parse(self.space), self.index, self.params)

    def _items(self, payload: bytes) -> list:
        return self.state.decode(payload, Window.parse(self.window), Space.parse(self.space))

    def _load(self, worker: int) -> tuple[tuple, WorkerState | ShareWorker, str]:
        """(meta, engine at meta's version, how it was found: hit, catch-up, rebuild or new)."""
        m = self.meta.get()
        if m is None:
            return (uuid.uuid4().hex, 0, 0, 0), self._fresh(worker), "new"
        meta = (m[0], int(m[1]), int(m[2]), int(m[3]))
        token, version, _, snap_version = meta
        cached = _CACHE.pop((token, worker, self.attempt), None)
        if cached is not None and cached[0] == version:
            return meta, cached[1], "hit"
        if cached is not None and snap_version <= cached[0] < version:
            ws, since, how = cached[1], cached[0], "catch-up"
        else:
            since, how = snap_version, "rebuild"
            if self.snap.exists():
                ws = self.state.restore(b"".join(bytes(c[0]) for c in self.snap.get()), worker,
                                         Window.parse(self.window), Space.parse(self.space), self.index, self.params)
            else:
                ws = self._fresh(worker)
        for v, payload in self.log.get():  # replay what this copy has not seen
            if v >= since:
                ws.apply(self._items(bytes(payload)))
        return meta, ws, how

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues) -> Iterator[pd.DataFrame]:
        from .sink import batch_dir, write_parts
        from .worker import COLUMNS, driver_rows

        worker = self.worker_of.get(int(key[0]), int(key[0]))
        pdf = pd.concat(list(rows), ignore_index=True).sort_values("part", kind="stable")
        payloads = [bytes(p) for p in pdf["payload"]]
        batch = _batch_id() + self.base
        parts = batch_dir(Loc(self.out), self.run)
        if worker == DRIVER:
            out = [r for p in payloads for r in driver_rows(decode_driver(p))]
            yield pd.DataFrame(write_parts(parts, batch, DRIVER, out), columns=COLUMNS)
            return
        began = time.time()  # wall clock, comparable between the batch's tasks: its workers' span
        t0 = time.perf_counter()
        (token, version, logged, snap_version), ws, how = self._load(worker)
        t1 = time.perf_counter()
        items = [it for p in payloads for it in self._items(p)]
        out = ws.apply(items)
        t2 = time.perf_counter()
        if logged + len(payloads) > self.snapshot_every:  # compact: snapshot, empty log
            blob = ws.snapshot()
            self.snap.put([(blob[i:i + SNAP_CHUNK],) for i in range(0, len(blob), SNAP_CHUNK)])
            self.log.clear()
            logged, snap_version, snap_bytes = 0, version + 1, len(blob)
        else:
            self.log.appendList([(version, p) for p in payloads])
            logged, snap_bytes = logged + len(payloads), None
        self.meta.update((token, version + 1, logged, snap_version))
        _CACHE[(token, worker, self.attempt)] = (version + 1, ws)
        t3 = time.perf_counter()
        out = write_parts(parts, batch, worker, out)  # the lines go to files here, not to the driver
        t4 = time.perf_counter()
        out.append(ws.stat_row(
            items=len(items), cache=how, load_seconds=round(t1 - t0, 6),
            apply_seconds=round(t2 - t1, 6), state_seconds=round(t3 - t2, 6), write_seconds=round(t4 - t3, 6),
            ingest=float(pdf["ingest"].min()), log_entries=logged, snapshot_bytes=snap_bytes,
            routed_bytes=sum(len(p) for p in payloads), began=began, ended=time.time()))
        yield pd.DataFrame(out, columns=COLUMNS)

    def close(self) -> None:
        pass

