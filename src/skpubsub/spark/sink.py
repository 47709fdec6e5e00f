"""The outputs: worker tasks write their own part files, the driver keeps per-batch metadata.

Each task of micro-batch ``B`` writes what it produced through :class:`~.fs.Loc` to the
output location, in ``OUT/batches/<run id>/`` (the id the checkpoint was created with,
``run.json``)::

    notes-<B>-<worker>.part      the worker's notifications, sorted by (event seq, registration order)
    results-<B>-<worker>.part    its final results (the last batch only), sorted by registration order
    rejected-<B>-driver.part     the sequencer's rejections (the task of the driver rows), in line order

each atomically (a temporary name, then a rename) and named by (run, batch, worker) alone,
so a batch Spark replays after a failure rewrites the same names with the same bytes: no
notification is lost or doubled. A part line is a key, then the output line: 16 hex digits
of the event's seq and 16 of the subscription's registration position (the seq of its
``sub``), then ``m`` for a range match or ``-`` (``results``: 16 hex digits of the
registration position). Fixed-width hex compares as bytes in numeric order, so the merge
compares slices, never parses.

The driver's ``foreachBatch`` receives only a few rows per task (the part files' names and
counts, each worker's load record, the sequencer's metadata) and writes ``batch-<B>.json``.
``assemble`` builds the four outputs of SPEC section 4: per batch in batch order, a
streaming k-way merge (``heapq.merge`` over the parts' line iterators) of the parts that
batch recorded. Memory is one line per part whatever the output volume; the order is
the one a single engine gives (what :func:`merge_notes` documents).

Only this run's folder is joined: an output folder that still holds another
checkpoint's batches (``_checkpoint`` removed, as the refusal message says) never mixes
them into the new outputs; ``clear_other_runs`` removes them.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import os
import time
from collections.abc import Iterable, Iterator
from itertools import islice
from operator import itemgetter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..engine.snapshot import Refused
from ..io.encode import json_text
from ..io.notewriter import reorder
from .codec import unpack_notes
from .fs import Loc

BATCH_DIR = "batches"
NOTE_KEY = 32  # hex seq + hex registration position; then the match flag
MATCH, OTHER = ord("m"), ord("-")
_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)
_CHUNK = 4096  # lines per write of the assembly: a few hundred kB


def _hex16(v: np.ndarray) -> np.ndarray:
    """(n, 16) ASCII hex digits of non-negative integers (seqs and positions are)."""
    v = np.asarray(v, np.int64)
    if len(v) and int(v.min()) < 0:
        raise Refused(f"part key: negative position {int(v.min())}")
    out = np.empty((len(v), 16), np.uint8)
    u = v.astype(np.uint64)
    for i in range(16):  # a nibble at a time: no (n, 16) temporary of 64-bit words
        out[:, i] = _HEX[((u >> np.uint64(60 - 4 * i)) & np.uint64(15)).astype(np.intp)]
    return out


def note_part(text: bytes, seq: np.ndarray, reg: np.ndarray, match: np.ndarray) -> memoryview:
    """One worker's notifications of a batch (``text``: their lines, each ending in a
    newline) and their order columns as a part file's bytes, sorted by (seq, registration
    position); stable, so one event's notifications of one subscription keep the worker's
    order. No Python step a line (``notewriter.reorder``): such a step cost ~1 us, most of
    a high fan-out batch's writing."""
    n = len(seq)
    lines = text.count(b"\n")
    if not len(reg) == len(match) == lines == n or (n and not text.endswith(b"\n")):
        raise Refused(f"notification rows: {lines} lines for {n} notifications")
    seq, reg = np.asarray(seq, np.int64), np.asarray(reg, np.int64)
    step = (seq[1:] > seq[:-1]) | ((seq[1:] == seq[:-1]) & (reg[1:] >= reg[:-1]))
    order = np.arange(n) if step.all() else np.lexsort((reg, seq))  # a worker's are in order, mostly
    keys = np.empty((n, NOTE_KEY + 1), np.uint8)
    keys[:, :16] = _hex16(seq[order])
    keys[:, 16:32] = _hex16(reg[order])
    keys[:, 32] = np.where(np.asarray(match, np.bool_)[order], MATCH, OTHER)
    return memoryview(reorder(text, order, keys))


def result_part(regs: list[int], lines: list[str]) -> memoryview:
    """Result lines keyed and sorted (stably) by registration position."""
    reg = np.asarray(regs, np.int64)
    order = np.argsort(reg, kind="stable")
    return memoryview(reorder("".join(x + "\n" for x in lines).encode("utf-8"), order, _hex16(reg[order])))


def _part_name(kind: str, batch: int, worker: int) -> str:
    return f"{kind}-{batch:010d}-{'driver' if worker < 0 else f'{worker:04d}'}.part"


def export_name(tag: int, worker: int) -> str:
    """The file of worker ``worker``'s export for the migration tagged ``tag`` (the line
    offset of the batch boundary it happens at), in the run's batch folder; a negative tag
    (``sequencer.switch_tag``) is the last batch of a generation of workers, before a restart
    with another ``--workers``: ``switch-<generation>-<worker>.json``."""
    if tag < 0:
        return f"switch-{-1 - tag:04d}-{worker:04d}.json"
    return f"export-{tag:012d}-{worker:04d}.json"


def loads_name(line: int) -> str:
    """The workers' measured loads of the micro-batch that ends at input line ``line``."""
    return f"loads-{line:012d}.json"


def write_parts(d: Loc, batch: int, worker: int, rows: list[tuple]) -> list[tuple]:
    """Inside a worker task: write the task's notifications, results and rejections of
    micro-batch ``batch`` as part files in ``d``; returns the other rows plus one small
    ``part`` row per file written (what the driver receives instead of the lines)."""
    keep: list[tuple] = []
    notes: list[tuple] = []
    results: list[tuple] = []
    rejected: list[tuple] = []
    exports: list[tuple] = []
    for r in rows:
        {"notes": notes, "result": results, "rejected": rejected, "export": exports}.get(r[1], keep).append(r)
    files: list[tuple[str, int, Iterable[bytes]]] = []
    for r in exports:  # a migration's held objects, named by its tag: the sequencer reads them next batch
        d.mkdir()
        (d / export_name(int(r[2]), worker)).write_atomic(bytes(r[5]))
    if notes:  # a worker's rows of the batch, in row order (one row in practice)
        text = "".join(r[4] + "\n" for r in notes).encode("utf-8")
        cols = [unpack_notes(bytes(r[5]), int(r[2])) for r in notes]
        seq, reg, match = (np.concatenate([c[i] for c in cols]) for i in range(3))
        files.append(("notes", len(seq), note_part(text, seq, reg, match)))
    if results:
        files.append(("results", len(results), result_part([int(r[3]) for r in results], [r[4] for r in results])))
    if rejected:
        rejected.sort(key=lambda r: int(r[2]))  # stable: line order
        files.append(("rejected", len(rejected), [("".join(r[4] + "\n" for r in rejected)).encode("utf-8")]))
    if files:
        d.mkdir()
    for kind, count, chunks in files:
        name = _part_name(kind, batch, worker)
        (d / name).write_atomic(chunks)
        keep.append((worker, "part", count, 0, json_text({"batch": batch, "kind": kind, "worker": worker,
                                                          "file": name, "count": count}), None))
    return keep


def merge_notes(parts: list[Iterable[bytes]], keyed: bool = False) -> Iterator[bytes]:
    """The output lines of one batch from its notes parts (each sorted by key), in order:
    by (event seq, registration position), ties in part order then within-part order
    (``heapq.merge`` is stable), which is a single engine's order; a range match of a
    subscription replicated on several workers is kept once (a match whose key equals
    the previous line's). Streams: one line per part in memory. ``keyed``: (key, line)
    pairs (the Redis sink makes entry ids of the keys)."""
    lines = parts[0] if len(parts) == 1 else heapq.merge(*parts, key=itemgetter(slice(0, NOTE_KEY)))
    prev = None
    for line in lines:
        k = line[:NOTE_KEY]
        if line[NOTE_KEY] == MATCH and k == prev:
            continue
        prev = k
        yield (k, line[NOTE_KEY + 1:]) if keyed else line[NOTE_KEY + 1:]


def merge_results(parts: list[Iterable[bytes]]) -> Iterator[bytes]:
    """The result lines from the results parts: by registration position, the first of a
    subscription held by several workers kept."""
    lines = parts[0] if len(parts) == 1 else heapq.merge(*parts, key=itemgetter(slice(0, 16)))
    prev = None
    for line in lines:
        k = line[:16]
        if k == prev:
            continue
        prev = k
        yield line[16:]


def batch_dir(out: Path | Loc, run: str) -> Loc:
    return Loc(out) / BATCH_DIR / run


def clear_other_runs(out: Path | Loc, run: str) -> None:
    """Remove batch files that belong to no run or to another run (another checkpoint)."""
    top = Loc(out) / BATCH_DIR
    if top.is_symlink() or (top.exists() and not top.is_dir()):
        top.unlink()
    if not top.is_dir():
        return
    for p in top.iterdir():
        if p.name == run and p.is_dir() and not p.is_symlink():
            continue
        if p.is_dir() and not p.is_symlink():
            p.rmtree()
        else:
            p.unlink()


def record_batch(out: Path | Loc, batch_id: int, pdf: pd.DataFrame, extra: dict | None = None,
                 run: str = "run", started: float | None = None) -> dict:
    """On the driver: micro-batch ``batch_id``'s metadata rows (a few per task) ->
    ``batch-<B>.json`` (idempotent per ``batch_id``): the part files, the workers' load
    records, the sequencer's timing and, at the end, the run's totals."""
    def of(kind: str) -> list:
        return [json.loads(x) for x in pdf.loc[pdf["kind"] == kind, "line"]]

    parts = sorted(of("part"), key=lambda p: (p["kind"], p["worker"]))
    for p in parts:
        if p["batch"] != batch_id:  # the task's batch id and the sink's must agree
            raise Refused(f"micro-batch {batch_id}: a task wrote its parts as batch {p['batch']}")
    info = {"batch": batch_id, "parts": parts, "written": sum(p["count"] for p in parts if p["kind"] == "notes"),
            "workers": of("stat"), "source": of("source"), **(extra or {})}
    meta = of("meta")
    if meta:
        info["meta"] = meta[-1]
    if started is not None:  # the sink's own time (the collect before it excluded)
        info["sink_seconds"] = round(time.perf_counter() - started, 6)
    d = batch_dir(out, run)
    d.mkdir()
    for x in info["source"]:  # rebalancing: the loads the sequencer reads before the next boundary
        if "end_line" in x and "m" in x:
            loads = [0.0] * int(x["m"])
            for w in info["workers"]:
                loads[int(w["worker"])] += float(w["cpu_seconds"])
            (d / loads_name(int(x["end_line"]))).write_atomic(
                json.dumps({"batch": batch_id, "end_line": x["end_line"], "loads": loads}).encode("utf-8"))
    (d / f"batch-{batch_id:010d}.json").write_atomic(json.dumps(info).encode("utf-8"))
    return info


def _batch_files(d: Loc, prefix: str, suffix: str) -> list[Loc]:
    if not d.is_dir():
        return []
    return [p for p in d.iterdir() if p.name.startswith(prefix + "-") and p.name.endswith(suffix)]  # by name


def _lines_of(loc: Loc, stack: contextlib.ExitStack) -> Iterator[bytes]:
    try:
        return iter(stack.enter_context(loc.open_read()))
    except FileNotFoundError:
        raise Refused(f"{loc}: a part file the batch recorded is missing") from None


class _Out:
    """An output file written under a temporary name and renamed at the end: the file is
    whole or absent. ``put`` takes line iterators and writes them in chunks."""

    def __init__(self, dst: Loc) -> None:
        self.dst, self.tmp = dst, dst.parent / f".{dst.name}.tmp{os.getpid()}"

    def __enter__(self) -> "_Out":
        self.f = self.tmp.open_write()
        return self

    def put(self, lines: Iterator[bytes]) -> int:
        n = 0
        while chunk := list(islice(lines, _CHUNK)):
            self.f.write(b"".join(chunk))
            n += len(chunk)
        return n

    def copy(self, src: Loc) -> None:
        with src.open_read() as f:
            while block := f.read(1 << 20):
                self.f.write(block)

    def __exit__(self, kind, *_: Any) -> None:
        self.f.close()
        if kind is None:
            self.dst.replace_with(self.tmp)
        elif self.tmp.local:
            with contextlib.suppress(OSError):
                os.unlink(self.tmp.path)


def assemble(out: Path | Loc, run: str = "run") -> dict:
    """Join run ``run``'s part files into ``notifications.jsonl``, ``rejected.jsonl`` and
    ``results.jsonl``; returns the per-batch info records in batch order, each with the
    number of notification lines it contributed (``notifications``)."""
    out = Loc(out)
    d = batch_dir(out, run)
    batches = [json.loads(p.read_text()) for p in _batch_files(d, "batch", ".json")]
    for b in batches:
        if not isinstance(b.get("parts"), list):  # the driver-side sink's batches (before part files)
            raise Refused(f"{d}: batch {b.get('batch')} was written by an older version of the Spark sink; "
                          "remove the checkpoint and OUT/batches and run again")

    def files(b: dict, kind: str) -> list[Loc]:
        return [d / p["file"] for p in b["parts"] if p["kind"] == kind]  # in worker order

    with _Out(out / "notifications.jsonl") as o:
        for b in batches:
            with contextlib.ExitStack() as stack:
                parts = [_lines_of(p, stack) for p in files(b, "notes")]
                b["notifications"] = o.put(merge_notes(parts)) if parts else 0
    with _Out(out / "rejected.jsonl") as o:
        for b in batches:
            for p in files(b, "rejected"):
                o.copy(p)
    last = next((b for b in reversed(batches) if files(b, "results")), None)
    with _Out(out / "results.jsonl") as o:
        if last is not None:
            with contextlib.ExitStack() as stack:
                o.put(merge_results([_lines_of(p, stack) for p in files(last, "results")]))
    return {"batches": batches}
