"""The streaming source: event lines in stream order, sequenced into per-worker rows.

A Python Data Source (``format("skpubsub")``) reading either one event file
(replayed at ``linesPerSecond`` if set) or a directory of JSONL files moved in
atomically and taken in name order. Spark's own file source would lose the line
order within and across files that validation and the window depend on, so the
source reads the lines itself and runs them through the :class:`Sequencer`.

Offsets are ``{"file", "pos", "line", "final"}``: the file being read, the byte
position in it, lines read so far, and whether the input is finished (an event
file's end, or an ``availableNow`` run's target). ``final`` lives in the offset so
that a replayed micro-batch repeats its end-of-input rows exactly. The target is found
by counting lines, never by holding them (a 34 MB input once cost 73 MB to find its end).

Nothing is unpickled from the checkpoint (SPEC section 7): the sequencer's state lives
in memory only; a batch whose start state is not there (a restart, a replay) re-feeds
the input from its first line up to the batch's start (feeding is deterministic and
does not depend on batch boundaries). The statistics are a data file
(:mod:`.statefile`). A ``*.pkl`` file in the checkpoint (an older version's snapshots, or a
planted one) is refused, never loaded.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from pathlib import Path

from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from ..core.config import Space, Window
from ..io.lines import read_lines
from ..io.redis_bus import is_redis
from .codec import DRIVER, decode_export, encode_driver
from .fs import Loc
from .redis_stream import as_input
from .statefile import Refused, read_stats

if TYPE_CHECKING:
    from .sequencer import Sequencer

# The sequencer, the fleet's shares and the sink are imported where the reader uses them, not
# here: Spark's Python processes that only look up, create and plan this source (three of
# them on the driver, one after the other, before the first batch) import this module to
# unpickle it, and with them it cost ~1.5 s each (numba, pandas, the engine).

SCHEMA = "worker int, part int, payload binary, ingest double"


def _files(path: Loc) -> list[str]:
    if path.is_file():
        return [path.name]
    return sorted(p.name for p in path.iterdir()
                  if not p.name.startswith((".", "_")) and p.name.endswith(".jsonl") and p.is_file())


def _read(path: Loc | str | Path, start: dict, max_lines: int | None, stop: dict | None = None,
          keep: bool = True) -> tuple[list, dict]:
    """Lines after ``start`` (at most ``max_lines``, never past ``stop``):
    ``([(line number, raw or None), ...], offset after them)``, read by
    :func:`~skpubsub.io.lines.read_lines` (a line over MAX_LINE comes as None and is
    rejected by the Gate). ``keep=False``: only the offset (the lines are counted, not
    kept: O(1) memory). A Redis stream: its entries (``redis_stream.read_entries``)."""
    if is_redis(path):
        from .redis_stream import read_entries

        return read_entries(path, start, max_lines, stop, keep)
    path = Loc(path)
    base = path if path.is_dir() else path.parent
    names = _files(path)
    out: list = []
    file, pos, line = start["file"], start["pos"], start["line"]
    if file and file not in names:
        raise RuntimeError(f"input file {file!r} disappeared from {path}")

    first = line

    def full() -> bool:
        return (max_lines is not None and line - first >= max_lines) or (stop is not None and line >= stop["line"])

    i = names.index(file) if file else 0
    while i < len(names) and not full():
        if names[i] != file:
            file, pos = names[i], 0
        with (base / file).open_read() as f:
            f.seek(pos)
            if not full():
                for _, body in read_lines(f):
                    line += 1
                    if keep:
                        out.append((line, body))
                    if full():
                        break
            pos = f.tell()  # read_lines reads with readline: tell() is just past the last line
            at_end = pos >= f.seek(0, os.SEEK_END)
        if not at_end:
            break
        i += 1
    return out, {"file": file, "pos": pos, "line": line, "final": False}


class EventReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    """A simple stream reader: ``read`` runs on the driver (in Spark's Python source
    process), reads and sequences a batch's lines, and Spark ships the rows to the
    executors from its block manager as Arrow data. No Python task reads them again on an
    executor, so the Python workers only ever run the worker engines (one task less per
    micro-batch, and the engine cache is not displaced by a read task)."""

    def __init__(self, options: dict[str, str]) -> None:
        self.path = as_input(options["path"])  # a Loc, or a Redis stream (redis_stream.RedisInput)
        self.checkpoint = Loc(options["checkpoint"])
        self.config = json.loads(options["config"])
        self.out = Loc(options["out"]) if options.get("out") else None  # rebalancing: loads and exports
        self.lines_per_batch = int(options.get("linesPerBatch", 10_000))
        self.rate = float(options["linesPerSecond"]) if options.get("linesPerSecond") else None
        self.target: dict | None = None  # availableNow: finish at this offset
        self._state: tuple[tuple, Sequencer] | None = None  # ((line offset, switch mark), sequencer there)
        # Generations of workers (another --workers on restart, spark/NOTES.md): each one's
        # workers, first offset and query; this query is generation ``gen``. ``switch``: this run
        # only ends the generation with one batch that reads no line (``Sequencer.switch_rows``).
        self.gens = self.config.get("generations") or [{"workers": self.config["workers"], "offset": None}]
        self.gen = int(self.config.get("gen", len(self.gens) - 1))
        self.switch = bool(self.config.get("switch"))
        self._last_call = time.monotonic()
        self.checkpoint.mkdir()

    # -- offsets ---------------------------------------------------------------------
    def initialOffset(self) -> dict:
        at = self.gens[self.gen].get("offset")
        if at:  # a later generation starts where the one before ended
            return {"file": at["file"], "pos": at["pos"], "line": at["line"], "final": bool(at["final"])}
        return {"file": "", "pos": 0, "line": 0, "final": False}

    def _line_of(self, gen: int) -> int:
        at = self.gens[gen].get("offset")
        return int(at["line"]) if at else 0

    def prepareForTriggerAvailableNow(self) -> None:
        _, self.target = _read(self.path, self.initialOffset(), None, keep=False)

    def read(self, start: dict) -> tuple[Iterator[tuple], dict]:
        """The next batch: at most ``linesPerBatch`` lines after ``start`` (fewer under
        ``linesPerSecond``), sequenced into rows; ``start`` itself when nothing new.
        Switch mode: one batch marked ``switch`` that reads no line, then nothing."""
        if self.switch:
            if start.get("switch") == self.gen:
                return iter(()), start
            end = {**start, "switch": self.gen}
            return iter(self._switch_rows(start, end)), end
        if start["final"] and (self.path.is_file() or (self.target is not None
                                                       and start["line"] >= self.target["line"])):
            return iter(()), start  # the input is finished
        max_lines = self.lines_per_batch
        now = time.monotonic()
        if self.rate is not None:
            max_lines = min(max_lines, max(1, int(self.rate * (now - self._last_call))))
        lines, end = _read(self.path, start, max_lines, self.target)
        self._final(end)
        if not lines and not end["final"]:
            return iter(()), start
        self._last_call = now
        rows = self._rows(start, end, lines)
        # Subscriptions wait in the sequencer until O_init objects are in (the plan needs
        # them): read on in this batch rather than run a micro-batch with no work for each
        # ``linesPerBatch`` of them (each costs Spark's fixed overhead). A replay reads the
        # same lines between the same offsets, fed at once: the same items in the same order.
        while self.rate is None and not end["final"] and self._state[1].head is not None:
            more, after = _read(self.path, end, max_lines, self.target)
            if not more:
                break
            self._final(after)
            rows += [(w, p + len(rows), payload, t) for w, p, payload, t in self._rows(end, after, more)]
            end = after
        return iter(rows), end

    def _final(self, end: dict) -> None:
        """Mark ``end`` final when it is the input's end (a file's, or availableNow's target)."""
        if self.target is not None:
            end["final"] = end["line"] >= self.target["line"]
        elif self.path.is_file():
            end["final"] = _read(self.path, end, 1, keep=False)[1]["line"] == end["line"]

    def readBetweenOffsets(self, start: dict, end: dict) -> Iterator[tuple]:
        """A replayed batch (a restart): its lines read and sequenced again."""
        if "switch" in end:  # a generation's last batch (only its end is marked)
            return iter(self._switch_rows(start, end))
        lines, _ = _read(self.path, {**start, "final": False}, end["line"] - start["line"])
        return iter(self._rows(start, end, lines))

    # -- batches ---------------------------------------------------------------------
    def _fresh(self) -> Sequencer:
        from .sequencer import Sequencer
        from .shares import ShareSequencer

        c = self.config
        pickles = [p.name for p in self.checkpoint.rglob_suffix(".pkl")]
        if pickles:  # an older version's snapshots, or planted: never loaded
            raise Refused(f"checkpoint {self.checkpoint} holds {pickles[0]}: pickles are never loaded "
                          "(SPEC section 7); remove the checkpoint")
        stats = read_stats(Loc(c["stats"])) if c.get("stats") else None
        kind = ShareSequencer if c.get("fleet") else Sequencer  # the fleet's router, or the dispatcher
        seqr = kind(Window.parse(c["window"]), Space.parse(c["space"]), self.gens[0]["workers"],
                    c["partitioner"], c["init_objects"], stats, rebalance=c.get("rebalance"))
        if seqr.rebalance is not None:
            seqr.read_export = self._read_export
        return seqr

    def _sequencer(self, start: dict) -> Sequencer:
        """The sequencer's state at ``start``: in memory, else a fresh one with the lines
        up to ``start`` re-fed (their rows were sent before: dropped). O(start) then.
        Rebalancing: the re-feed follows the recorded batch boundaries with the recorded
        loads, so that every migration is made again where it was (and checked). Generations:
        at each one's first line the sequencer switches to its workers as it did then (the
        seeds kept only if this batch is the generation's first, where they are due)."""
        state, self._state = self._state, None  # feed mutates it: never reuse a half-fed one
        if state is not None and state[0] == (start["line"], start.get("switch")):
            return state[1]
        offset, seqr = {"file": "", "pos": 0, "line": 0, "final": False}, self._fresh()
        for k in range(self.gen + 1):
            lo = self._line_of(k)
            if k:
                seqr.switch_rows(k - 1, keep=False)
                due = k == self.gen and start["line"] == lo and "switch" not in start
                seqr.switch(self.gens[k]["workers"], (lambda g=k - 1: self._read_switch(g)) if due else None)
            hi = self._line_of(k + 1) if k < self.gen else start["line"]
            offset = self._refeed(seqr, offset, lo, hi)
        if "switch" in start:  # after this generation's last batch: its seeds and adoptions were sent
            seqr.switch_rows(self.gen, keep=False)
        return seqr

    def _refeed(self, seqr: Sequencer, offset: dict, lo: int, hi: int) -> dict:
        """Feed lines ``lo`` (where ``offset`` is) up to ``hi``, rows dropped; the offset after."""
        if seqr.rebalance is not None:
            at = lo
            while at < hi:
                rec = self._record(at)
                if rec is None or not at < rec["end"] <= hi:
                    raise Refused(f"checkpoint {self.checkpoint}: no rebalancing record of the batch at line {at}; "
                                  "remove the checkpoint and run again")
                lines, offset = _read(self.path, {**offset, "final": False}, rec["end"] - at)
                seqr.feed(lines, loads=rec["loads"], tag=rec["end"], keep=False)
                if seqr.migrated != rec["migrated"]:
                    raise Refused(f"checkpoint {self.checkpoint}: the rebalancing decisions up to line {rec['end']} "
                                  f"were not made again ({seqr.migrated} migrations, {rec['migrated']} recorded)")
                at = rec["end"]
        elif lo < hi:
            lines, offset = _read(self.path, {**offset, "final": False}, hi - lo)
            seqr.feed(lines)
        return offset

    def _read_switch(self, gen: int) -> dict | list:
        """Generation ``gen``'s exports (``none``): registration position -> result objects."""
        from .sequencer import switch_tag
        from .shares import ShareWorker
        from .sink import batch_dir, export_name

        c = self.config
        fleet = bool(c.get("fleet"))  # the fleet's workers export their events (``ShareWorker.exported``)
        held: Any = [] if fleet else {}
        for w in range(self.gens[gen]["workers"]):
            loc = batch_dir(self.out, c["run"]) / export_name(switch_tag(gen), w)
            if not loc.exists():
                raise Refused(f"another --workers: worker {w}'s export {loc.name} is missing")
            with loc.open_read() as f:
                got = (ShareWorker.exported if fleet else decode_export)(
                    f.read(), Window.parse(c["window"]), Space.parse(c["space"]))
            held.extend(got) if fleet else held.update(got)
        return held

    def _switch_rows(self, start: dict, end: dict) -> list[tuple]:
        """Generation ``gen``'s last batch (see ``Sequencer.switch_rows``); its driver row
        carries ``switch`` and the offset the next generation starts at."""
        t0 = time.perf_counter()
        seqr = self._sequencer(start)
        ingest = time.time()
        t1 = time.perf_counter()
        rows = [(w, p, payload, ingest) for w, p, payload in seqr.switch_rows(self.gen)]
        self._state = ((start["line"], end.get("switch")), seqr)
        at = {k: start[k] for k in ("file", "pos", "line", "final")}
        timing = {"lines": 0, "restore_seconds": round(t1 - t0, 6),
                  "sequence_seconds": round(time.perf_counter() - t1, 6), "snapshot_seconds": 0.0,
                  "snapshot_bytes": 0, "switch": self.gen, "offset": at}
        return self._keyed(rows + [(DRIVER, len(rows), encode_driver([("source", timing)]), ingest)])

    # -- rebalancing records -----------------------------------------------------------
    def _record_loc(self, line: int) -> Loc:
        return self.checkpoint / "rebalance" / f"{line:012d}.json"

    def _record(self, line: int) -> dict | None:
        """The batch that started at input line ``line``: its end and the loads its
        rebalancing step was given (the measured CPU is not reproducible: it is recorded)."""
        loc = self._record_loc(line)
        if not loc.exists():
            return None
        try:
            rec = json.loads(loc.read_text())
        except (ValueError, UnicodeError):
            raise Refused(f"checkpoint {self.checkpoint}: rebalancing record {loc.name} is damaged") from None
        return rec if isinstance(rec, dict) else None

    def _loads(self, line: int) -> list[float] | None:
        """The loads the tasks measured in the batch that ended at ``line`` (None: none yet)."""
        from .sink import batch_dir, loads_name

        if line == 0 or self.out is None:
            return None
        loc = batch_dir(self.out, self.config["run"]) / loads_name(line)
        if not loc.exists():
            return None
        return json.loads(loc.read_text())["loads"]

    def _read_export(self, tag: int, worker: int) -> dict:
        from .sink import batch_dir, export_name

        c = self.config
        loc = batch_dir(self.out, c["run"]) / export_name(tag, worker)
        if not loc.exists():
            raise Refused(f"rebalancing: worker {worker}'s export {loc.name} is missing")
        with loc.open_read() as f:
            return decode_export(f.read(), Window.parse(c["window"]), Space.parse(c["space"]))

    def _rows(self, start: dict, end: dict, lines: list) -> list[tuple]:
        t0 = time.perf_counter()
        seqr = self._sequencer(start)
        ingest = time.time()
        t1 = time.perf_counter()
        extra: dict = {}
        if seqr.rebalance is None:
            fed = seqr.feed(lines, end=end["final"])
        else:  # the loads of the batch before (recorded if this batch was sequenced before)
            rec = self._record(start["line"])
            loads = rec["loads"] if rec is not None and rec["end"] == end["line"] else self._loads(start["line"])
            if self.gen and start["line"] == self._line_of(self.gen):
                loads = None  # a generation's first batch: no loads of its workers yet
            fed = seqr.feed(lines, end=end["final"], loads=loads, tag=end["line"])
            self._record_loc(start["line"]).parent.mkdir()
            self._record_loc(start["line"]).write_atomic(json.dumps(
                {"start": start["line"], "end": end["line"], "loads": loads, "migrated": seqr.migrated}).encode())
            extra = {"end_line": end["line"], "m": seqr.m, "migrated": seqr.migrated}
        rows = [(w, p, payload, ingest) for w, p, payload in fed]
        t2 = time.perf_counter()
        self._state = ((end["line"], None), seqr)
        timing = {"lines": len(lines), "restore_seconds": round(t1 - t0, 6), "sequence_seconds": round(t2 - t1, 6),
                  "snapshot_seconds": 0.0, "snapshot_bytes": 0, **extra}
        rows.append((DRIVER, len(rows), encode_driver([("source", timing)]), ingest))
        return self._keyed(rows)

    def _keyed(self, rows: list[tuple]) -> list[tuple]:
        keys = self.config.get("keys")
        if keys:  # worker ids -> grouping keys that put each worker in its own partition
            rows = [(keys[w] if w != DRIVER else keys[-1], p, payload, t) for w, p, payload, t in rows]
        return rows

    def commit(self, end: dict) -> None:
        """Nothing to keep: the sequencer's state is rebuilt from the input when needed."""


class EventSource(DataSource):
    """``spark.readStream.format("skpubsub").option("path", ...).option("checkpoint", ...)
    .option("config", json).load()``: sequenced event rows (see :mod:`.sequencer`)."""

    @classmethod
    def name(cls) -> str:
        return "skpubsub"

    def schema(self) -> str:
        return SCHEMA

    def simpleStreamReader(self, schema) -> EventReader:
        return EventReader(self.options)
