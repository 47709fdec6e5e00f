"""What the Spark runtime's pieces do with a micro-batch, in process and without Spark
(the worker tasks and the sink's merge), and the reference engine's files to compare with:
shared by the rebalancing and the changing-workers tests."""

from __future__ import annotations

from skpubsub.io.encode import json_text
from skpubsub.io.events import Rejection
from skpubsub.io.notifications import note_line
from skpubsub.io.sinks import result_record
from skpubsub.io.validate import Gate
from skpubsub.spark.codec import unpack_notes
from skpubsub.spark.sequencer import DRIVER
from skpubsub.spark.sink import merge_notes, note_part, result_part
from skpubsub.testing.reference import ReferenceEngine


def reference_files(s) -> tuple[list[bytes], list[bytes]]:
    """The reference engine's notification and result lines for stream ``s``."""
    g = Gate(s.window, s.space)
    events = [ev for i, r in enumerate(s.events, 1) if not isinstance(ev := g.admit(r, i), Rejection)]
    ref = ReferenceEngine(s.window, s.space)
    notes = [note_line(n).encode() for n in ref.apply(events)]
    return notes, [(json_text(result_record(sid, ids)) + "\n").encode() for sid, ids in ref.all_results()]


def apply_batch(workers, rows, window, space, exports: dict) -> tuple[list[bytes], list[list[bytes]], list[float]]:
    """The sequencer's ``rows`` of one micro-batch through the worker states, as the tasks
    run them: returns the batch's notification lines (merged as the sink merges them), each
    worker's result lines (one part a worker with results) and the workers' loads; exports
    go to ``exports[tag, worker]``."""
    per: dict[int, list] = {}
    for w, part, payload in rows:
        if w != DRIVER:
            assert 0 <= w < len(workers), (w, len(workers))
            per.setdefault(w, []).append((part, payload))
    parts, results, load = [], [], [0.0] * len(workers)
    for w in sorted(per):
        items = [it for _, p in sorted(per[w]) for it in workers[w].decode(p, window, space)]
        out = workers[w].apply(items)
        load[w] = workers[w].cpu_seconds  # "model" measures the cells itself
        mine = []
        for r in out:
            if r[1] == "notes":
                seq, reg, match = unpack_notes(bytes(r[5]), int(r[2]))
                parts.append(bytes(note_part((r[4] + "\n").encode(), seq, reg, match)).splitlines(True))
            elif r[1] == "export":
                exports[int(r[2]), w] = bytes(r[5])
            elif r[1] == "result":
                mine.append((int(r[3]), r[4]))
        if mine:
            regs, lines = zip(*mine)
            results.append(bytes(result_part(list(regs), list(lines))).splitlines(True))
    return (list(merge_notes(parts)) if parts else []), results, load
