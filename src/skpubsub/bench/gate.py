"""``skpubsub bench gate``: the Gate alone, as ``run`` feeds it, no engine.

EVENTS is read into blocks first (``stream_blocks``, as ``run`` reads it; not timed), then
a fresh :class:`~skpubsub.io.validate.Gate` admits them block by block (``admit_block``).
Reported: the CPU time of the ``admit_block`` calls (``time.process_time``) per line, the
median and minimum over ``--repeat`` fresh Gates, and what came out (accepted events by
kind, rejections by what they meant to be, and how many blocks came as columns), so that two versions can
be compared: the same counts, the same verdicts. ``run`` spends this time before its engine
sees an event (io/NOTES.md).
"""

from __future__ import annotations

import statistics as st
import time
from collections import Counter
from pathlib import Path

from ..core.config import Space, Window
from ..io.events import Rejection
from ..io.lines import stream_blocks
from ..io.validate import Gate


def bench_gate(events: Path, window: Window, space: Space, repeat: int = 3) -> dict:
    with open(events, "rb") as f:
        blocks = list(stream_blocks(f))
    lines = sum(n for _, n, _ in blocks)
    runs, seen = [], None
    for _ in range(max(1, repeat)):
        gate = Gate(window, space)
        out = []
        t0 = time.process_time()
        for first, n, data in blocks:
            out.append((gate.admit_block(first, data, n), gate.block_label))
        runs.append(time.process_time() - t0)
        counts: Counter[str] = Counter()
        for evs, label in out:
            if label is not None:
                counts[label] += len(evs)
                counts["blocks as columns"] += 1
            else:
                counts.update(f"rejected {ev.label}" if type(ev) is Rejection else ev.label for ev in evs)
        if seen is not None and counts != seen:
            raise RuntimeError("bench gate: two runs admitted different events")
        seen = counts
    n = max(lines, 1)
    return {"events": str(events), "lines": lines, "window": str(window), "blocks": len(blocks),
            "cpu_s": [round(x, 4) for x in runs], "median_cpu_s": round(st.median(runs), 4),
            "median_us_per_line": round(st.median(runs) / n * 1e6, 3),
            "min_us_per_line": round(min(runs) / n * 1e6, 3), "counts": dict(sorted(seen.items()))}


def format_report(rep: dict) -> str:
    counts = ", ".join(f"{k} {v}" for k, v in rep["counts"].items())
    return (f"{Path(rep['events']).name}: {rep['lines']} lines in {rep['blocks']} blocks: Gate "
            f"{rep['median_us_per_line']} us/line CPU (median of {len(rep['cpu_s'])}; min "
            f"{rep['min_us_per_line']}); {counts}")
