"""``skpubsub bench``: engines side by side on the same validated events, in one run.

The events are read and validated once; each engine applies them from memory
(notifications are produced but not written), so the figure is the engine's own
throughput. Every index is run ``repeat`` times, alternating, and the median is
reported with its ratio to the baseline (the first index, by default the
reference engine).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

from ..config import Space, Window
from ..engine import make_engine
from ..io.events import Pub, Rejection
from ..io.lines import read_lines
from ..io.validate import Gate


def load_events(path: str | Path, window: Window, space: Space, max_events: int | None = None) -> list:
    gate = Gate(window, space)
    with open(path, "rb") as f:
        admitted = (gate.admit_line(raw, n) for n, raw in read_lines(f))
        events = [ev for ev in admitted if not isinstance(ev, Rejection)]
    return events[:max_events] if max_events else events


def _once(index: str, events: list, window: Window, space: Space) -> dict[str, Any]:
    engine = make_engine(index, window, space)
    start = time.perf_counter()
    n_notes = 0
    for i in range(0, len(events), 2048):
        n_notes += len(engine.apply(events[i:i + 2048]))
    secs = time.perf_counter() - start
    n_obj = engine.stats["objects"]
    return {"seconds": secs, "objects_per_second": n_obj / secs, "notifications": n_notes,
            "candidates_per_object": engine.stats["candidates"] / max(1, n_obj),
            "affected_per_object": engine.stats["affected"] / max(1, n_obj),
            "memory_bytes": getattr(engine, "nbytes", None),
            "results": engine.all_results()}


def compare(events_path: str | Path, indexes: list[str], window: Window, space: Space,
            repeat: int = 3, max_events: int | None = None) -> dict[str, Any]:
    events = load_events(events_path, window, space, max_events)
    n_obj = sum(isinstance(e, Pub) for e in events)
    runs: dict[str, list[dict]] = {ix: [] for ix in indexes}
    for _ in range(repeat):
        for ix in indexes:
            runs[ix].append(_once(ix, events, window, space))
    report: dict[str, Any] = {"events": len(events), "objects": n_obj, "window": str(window),
                              "repeat": repeat, "indexes": {}}
    base = statistics.median(r["objects_per_second"] for r in runs[indexes[0]])
    first_results = runs[indexes[0]][0]["results"]
    for ix, rs in runs.items():
        ops = statistics.median(r["objects_per_second"] for r in rs)
        last = rs[-1]
        report["indexes"][ix] = {
            "objects_per_second_median": round(ops, 1),
            "objects_per_second_runs": [round(r["objects_per_second"], 1) for r in rs],
            "ratio_to_baseline": round(ops / base, 2),
            "notifications": last["notifications"],
            "candidates_per_object": round(last["candidates_per_object"], 3),
            "affected_per_object": round(last["affected_per_object"], 3),
            "memory_bytes": last["memory_bytes"],
            "same_results_as_baseline": last["results"] == first_results,
        }
    return report


def format_report(rep: dict[str, Any]) -> str:
    lines = [f"{rep['events']} events ({rep['objects']} objects), window {rep['window']}, "
             f"median of {rep['repeat']} runs"]
    lines.append(f"{'index':<12}{'objects/s':>12}{'ratio':>9}{'cand/obj':>10}{'aff/obj':>9}  same results")
    for ix, r in rep["indexes"].items():
        lines.append(f"{ix:<12}{r['objects_per_second_median']:>12,.0f}{r['ratio_to_baseline']:>8.1f}x"
                     f"{r['candidates_per_object']:>10.1f}{r['affected_per_object']:>9.2f}  "
                     f"{r['same_results_as_baseline']}")
    return "\n".join(lines)


def main(events: str, indexes: str, window: Window, space: Space, repeat: int, max_events: int | None,
         out: str | None) -> int:
    rep = compare(events, indexes.split(","), window, space, repeat, max_events)
    print(format_report(rep))
    if out:
        Path(out).write_text(json.dumps(rep, indent=2) + "\n")
    return 0


__all__ = ["compare", "format_report", "load_events", "main"]
