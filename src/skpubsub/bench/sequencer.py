"""``skpubsub bench sequencer``: the Spark runtime's one sequential step alone, no Spark session.

A :class:`~skpubsub.spark.sequencer.Sequencer` made as the streaming source makes it
(``spark/source.py``: window, space, M, planner, ``init_objects``; the O_init statistics
from the buffered head, which are the statistics file's objects) is fed EVENTS as the
source reads them (``read_lines``: numbered lines, an over-long one as None) in batches
of ``--lines-per-batch`` lines, the last with ``end``. Reported: the CPU time of the
``feed`` calls alone (``time.process_time``; reading the file is not timed), per line,
the median and minimum over ``--repeat`` fresh runs, and a SHA-256 of every row fed out
(worker, part, payload), so that two versions can be compared: the same digest, the same rows.
"""

from __future__ import annotations

import hashlib
import statistics as st
import time
from pathlib import Path

from ..core.config import Space, Window
from ..io.lines import read_lines


def bench_sequencer(events: Path, window: Window, space: Space, workers: int, partitioner: str,
                    init_objects: int, lines_per_batch: int, repeat: int = 3) -> dict:
    from ..spark.sequencer import Sequencer

    with open(events, "rb") as f:
        lines = list(read_lines(f))
    runs, digest = [], None
    for _ in range(max(1, repeat)):
        seqr = Sequencer(window, space, workers, partitioner, init_objects)
        h = hashlib.sha256()
        cpu = 0.0
        for i in range(0, max(len(lines), 1), lines_per_batch):
            t0 = time.process_time()
            rows = seqr.feed(lines[i:i + lines_per_batch], end=i + lines_per_batch >= len(lines))
            cpu += time.process_time() - t0
            for wk, part, payload in rows:
                h.update(b"%d %d %d\n" % (wk, part, len(payload)))
                h.update(payload)
        if digest is not None and h.hexdigest() != digest:
            raise RuntimeError("bench sequencer: two runs fed out different rows")
        digest = h.hexdigest()
        runs.append(cpu)
    n = max(len(lines), 1)
    return {"events": str(events), "lines": len(lines), "window": str(window), "workers": workers,
            "partitioner": partitioner, "init_objects": init_objects, "lines_per_batch": lines_per_batch,
            "cpu_s": [round(x, 4) for x in runs], "median_cpu_s": round(st.median(runs), 4),
            "median_us_per_line": round(st.median(runs) / n * 1e6, 3),
            "min_us_per_line": round(min(runs) / n * 1e6, 3), "rows_sha256": digest,
            "accepted": seqr.metadata()["accepted"], "rejected": seqr.metadata()["rejected"]}


def format_report(rep: dict) -> str:
    return (f"{Path(rep['events']).name}: {rep['lines']} lines, M={rep['workers']} {rep['partitioner']}, "
            f"{rep['lines_per_batch']} lines a batch: feed {rep['median_us_per_line']} us/line CPU "
            f"(median of {len(rep['cpu_s'])}; min {rep['min_us_per_line']}), rows sha256 {rep['rows_sha256'][:16]}")
