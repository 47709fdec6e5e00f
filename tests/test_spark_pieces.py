"""The Spark runtime's pieces without Spark: sequencer -> worker states -> sink merge.

The same code runs inside the streaming query (``tests/test_spark.py``); here it is
driven by hand over many seeded streams, micro-batch sizes and planners, with every
piece restored between batches as production restores it (a cache miss, a restart):
the workers from their data snapshots, the sequencer by re-feeding the input, the
payloads decoded from their JSON. Nothing is pickled.
"""

from __future__ import annotations

import json
import pandas as pd
import pytest

from skpubsub.core.config import Window
from skpubsub.io.events import Rejection
from skpubsub.io.validate import Gate
from skpubsub.partition.registry import PLANNERS
from skpubsub.spark.codec import decode_driver, decode_items
from skpubsub.spark.sequencer import DRIVER, Sequencer
from skpubsub.spark.sink import merge
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
        out = []
        by_worker: dict[int, list] = {}
        for wk, part, payload in rows:
            by_worker.setdefault(wk, []).append((part, payload))
        for wk, parts in by_worker.items():
            if wk == DRIVER:
                out += driver_rows([e for _, p in sorted(parts) for e in decode_driver(p)])
            else:
                out += states[wk].apply([it for _, p in sorted(parts) for it in decode_items(p, window, space)])
        m = merge(pd.DataFrame(out, columns=COLUMNS))
        got["notifications"] += m["notifications"]
        got["rejected"] += [json.loads(x)["line"] for x in m["rejected"]]
        if "results" in m:
            got["results"] = m["results"]
    return got


@pytest.mark.parametrize("partitioner", sorted(PLANNERS))
@pytest.mark.parametrize("workers", [1, 2, 3, 5])
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
