"""The Spark runtime's pieces without Spark: sequencer -> worker states -> part files -> merge.

The same code runs inside the streaming query (``tests/test_spark.py``); here it is
driven by hand over many seeded streams, micro-batch sizes and planners, with every
piece restored between batches as production restores it (a cache miss, a restart):
the workers from their data snapshots, the sequencer by re-feeding the input, the
payloads decoded from their JSON. Nothing is pickled.
"""

from __future__ import annotations

import io
import json
import random

import numpy as np
import pandas as pd
import pytest

from skpubsub.core.config import Window
from skpubsub.io.events import Rejection
from skpubsub.io.validate import Gate
from skpubsub.partition.registry import PLANNERS
from skpubsub.spark.codec import decode_driver, decode_items, pack_notes, unpack_notes
from skpubsub.spark.sequencer import DRIVER, Sequencer
from skpubsub.spark.sink import merge_notes, merge_results, write_parts
from skpubsub.spark.worker import COLUMNS, WorkerState, driver_rows
from skpubsub.testing.reference import ReferenceEngine
from skpubsub.testing.streams import random_stream


def _lines(stream) -> list[tuple[int, bytes]]:
    return [(i, json.dumps(r).encode()) for i, r in enumerate(stream.events, 1)]


def expected(stream) -> dict:
    """What a single reference engine gives: notification lines, results, rejections."""
    window, space = Window.parse(stream.window), stream.space_or_default
    gate, ref = Gate(window, space), ReferenceEngine(window, space)
    notes, rejected = [], []
    for line_no, raw in _lines(stream):
        ev = gate.admit_line(raw, line_no)
        if isinstance(ev, Rejection):
            rejected.append(line_no)
            continue
        notes += [json.dumps(n.to_json(), ensure_ascii=False, separators=(",", ":")) for n in ref.apply([ev])]
    results = [json.dumps({"id": s, "results": ids}, ensure_ascii=False, separators=(",", ":"))
               for s, ids in ref.all_results()]
    return {"notifications": notes, "results": results, "rejected": rejected}


class _MemDir:
    """The part files a task writes, kept in memory (``write_parts`` needs only these)."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}

    def mkdir(self) -> None:
        pass

    def __truediv__(self, name: str):
        files = self.files

        class _File:
            def write_atomic(self, data) -> None:  # as ``Loc.write_atomic``: bytes-like or chunks
                files[name] = bytes(data) if isinstance(data, (bytes, memoryview)) else b"".join(data)
        return _File()


def _assembled(d: _MemDir, meta: list[tuple]) -> dict:
    """One batch's lines as ``assemble`` merges them, from the ``part`` rows' file names."""
    parts = sorted((json.loads(r[4]) for r in meta if r[1] == "part"), key=lambda p: (p["kind"], p["worker"]))

    def its(kind: str) -> list:
        return [iter(io.BytesIO(d.files[p["file"]])) for p in parts if p["kind"] == kind]

    out = {"notifications": [x.decode()[:-1] for x in merge_notes(its("notes"))] if its("notes") else [],
           "rejected": [x.decode()[:-1] for p in its("rejected") for x in p]}
    if its("results"):
        out["results"] = [x.decode()[:-1] for x in merge_results(its("results"))]
    return out


def simulate(stream, workers: int, partitioner: str, batch: int, index: str = "dkm",
             restore: bool = True, init_objects: int = 5) -> dict:
    """Feed the stream through the pieces in micro-batches of ``batch`` lines."""
    window, space = Window.parse(stream.window), stream.space_or_default
    seqr = Sequencer(window, space, workers, partitioner, init_objects=init_objects)
    states = {w: WorkerState(w, window, space, index, {}) for w in range(workers)}
    lines = _lines(stream)
    got = {"notifications": [], "results": None, "rejected": []}
    for i in range(0, max(len(lines), 1), batch):
        if restore:  # as the source and the processor do after a restart or a cache miss
            seqr = Sequencer(window, space, workers, partitioner, init_objects=init_objects)
            seqr.feed(lines[:i])
            states = {w: WorkerState.restore(s.snapshot(), w, window, space, index, {}) for w, s in states.items()}
        rows = seqr.feed(lines[i:i + batch], end=i + batch >= len(lines))
        meta = []
        d = _MemDir()
        by_worker: dict[int, list] = {}
        for wk, part, payload in rows:
            by_worker.setdefault(wk, []).append((part, payload))
        for wk, parts in by_worker.items():  # each task writes its own part files
            if wk == DRIVER:
                out = driver_rows([e for _, p in sorted(parts) for e in decode_driver(p)])
            else:
                out = states[wk].apply([it for _, p in sorted(parts) for it in decode_items(p, window, space)])
            meta += write_parts(d, i, wk, out)
        assert {r[1] for r in meta} <= {"part", "meta", "source"}  # no line goes to the driver
        m = _assembled(d, meta)
        got["notifications"] += m["notifications"]
        got["rejected"] += [json.loads(x)["line"] for x in m["rejected"]]
        if "results" in m:
            got["results"] = m["results"]
    return got


# One worker takes every item whatever the planner: that case once (each planner's M = 1 is in
# test_partition_{dkm,dskype,ps2}); every planner with 2, 3 and 5 workers.
@pytest.mark.parametrize("partitioner,workers", [("hash", 1)] + [(p, m) for p in sorted(PLANNERS) for m in (2, 3, 5)])
def test_pieces_equal_the_reference(partitioner: str, workers: int) -> None:
    for seed in range(8):
        s = random_stream(seed * 11 + workers)
        want = expected(s)
        got = simulate(s, workers, partitioner, batch=1 + seed * 5 % 23)
        assert got["notifications"] == want["notifications"], (s.seed, s.window)
        assert (got["results"] or []) == want["results"], (s.seed, s.window)
        assert got["rejected"] == want["rejected"]


def test_results_come_in_registration_order_once_per_subscription() -> None:
    s = random_stream(4, n_events=120, windows=("none",))
    got = simulate(s, 3, "hash", batch=40)
    ids = [json.loads(x)["id"] for x in got["results"]]
    assert len(ids) == len(set(map(repr, ids)))
    assert got["results"] == expected(s)["results"]


def test_the_source_reads_lines_in_order_across_files_and_skips_over_long_ones(tmp_path) -> None:
    """Offsets resume exactly; a line over 1 MiB comes as None (the Gate rejects it)."""
    from skpubsub.spark.source import _read

    (tmp_path / "a.jsonl").write_bytes(b"1\n" + b"x" * (1 << 21) + b"\n3\n")
    (tmp_path / "b.jsonl").write_bytes(b"4\n5")  # no newline at the end
    (tmp_path / ".c.jsonl.tmp").write_bytes(b"not yet moved in\n")
    start = {"file": "", "pos": 0, "line": 0, "final": False}
    got, off = [], start
    while True:
        lines, off = _read(tmp_path, off, 2)
        if not lines:
            break
        got += lines
    assert got == [(1, b"1"), (2, None), (3, b"3"), (4, b"4"), (5, b"5")]
    assert _read(tmp_path, start, None, stop={"line": 3})[0] == got[:3]


def old_merge(pdf: pd.DataFrame) -> dict:
    """The driver-side merge the sink used before the workers wrote their own parts (kept
    as the oracle of the streaming merge)."""
    out: dict = {}
    lines: list[str] = []
    parts: list[tuple] = []
    notes = pdf[pdf["kind"] == "notes"]
    for n, text, blob in zip(notes["seq"], notes["line"], notes["blob"]):
        lines += text.split("\n")
        parts.append(unpack_notes(bytes(blob), int(n)))
    if parts:
        seq, reg, match = (np.concatenate([p[i] for p in parts]) for i in range(3))
        order = np.lexsort((reg, seq))
        seq, reg, match = seq[order], reg[order], match[order]
        dup = np.zeros(len(order), bool)
        dup[1:] = match[1:] & (seq[1:] == seq[:-1]) & (reg[1:] == reg[:-1])
        out["notifications"] = [lines[i] for i in order[~dup]]
    else:
        out["notifications"] = []
    rej = pdf[pdf["kind"] == "rejected"].sort_values("seq", kind="stable")
    out["rejected"] = rej["line"].tolist()
    res = pdf[pdf["kind"] == "result"]
    if len(res):
        res = res.sort_values("reg", kind="stable").drop_duplicates(["reg"])
        out["results"] = res["line"].tolist()
    return out


def test_streaming_merge_equals_the_old_in_memory_merge_on_random_rows() -> None:
    """Random notification rows (ties on (seq, registration) across and within workers,
    matches and updates, replicated matches, keys up to 2**62, non-ASCII text), results
    held by several workers, rejections out of order: the part files merged as
    ``assemble`` merges them give exactly what the old driver-side merge gave."""
    rnd = random.Random(21)
    for trial in range(300):
        workers = rnd.randint(1, 4)
        span = rnd.choice([3, 10, 1000, 1 << 62])
        rows: list[tuple] = []
        for w in range(workers):  # row order = worker order: the old collect's partition order, the parts' order
            n = rnd.choice([0, 1, 2, 7, 40, 300])
            if n:
                seqs = [rnd.randrange(span) for _ in range(n)]
                regs = [rnd.randrange(min(span, 6)) if rnd.random() < 0.5 else rnd.randrange(span) for _ in range(n)]
                match = [rnd.random() < 0.6 for _ in range(n)]
                lines = [f'{{"sub":"s{r}","t":{q},"object":"ö{rnd.randrange(3) if m else w}"}}'
                         for q, r, m in zip(seqs, regs, match)]
                rows.append((w, "notes", n, 0, "\n".join(lines), pack_notes(seqs, regs, match)))
            for _ in range(rnd.choice([0, 0, 3])):
                r = rnd.randrange(span)
                rows.append((w, "result", 0, r, f'{{"id":"s{r}","results":[{w}]}}', None))
        for _ in range(rnd.choice([0, 2, 9])):
            q = rnd.randrange(50)
            rows.append((DRIVER, "rejected", q, 0, f'{{"line":{q},"x":{rnd.random()}}}', None))
        want = old_merge(pd.DataFrame(rows, columns=COLUMNS))
        d, meta = _MemDir(), []
        for w in dict.fromkeys(r[0] for r in rows):  # each task writes its own parts
            meta += write_parts(d, trial, w, [r for r in rows if r[0] == w])
        got = _assembled(d, meta)
        assert got["notifications"] == want["notifications"], trial
        assert got["rejected"] == want["rejected"], trial
        assert got.get("results") == want.get("results"), trial
