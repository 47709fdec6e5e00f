"""``skpubsub run``: stream an event file through validation and an engine into files."""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from .config import Space, Window
from .engine import make_engine
from .io.events import Pub, Rejection, Sub
from .io.lines import read_lines
from .io.sinks import RunWriter
from .io.validate import Gate

BATCH = 2048  # events per engine call


def _kind_of(ev: Any) -> str:
    if isinstance(ev, Sub):
        return f"sub:{ev.kind}"
    return "pub" if isinstance(ev, Pub) else "unsub"


def _rejected_kind(raw: str) -> str:
    """op (and kind) of a rejected line when it is readable, else 'unreadable'."""
    try:
        rec = json.loads(raw)
    except (ValueError, RecursionError):
        return "unreadable"
    if not isinstance(rec, dict) or not isinstance(rec.get("op"), str):
        return "unreadable"
    if rec["op"] == "sub" and isinstance(rec.get("kind"), str):
        return f"sub:{rec['kind']}"
    return rec["op"]


def run(events: str | Path, out: str | Path, window: str | Window = "none", space: Space | None = None,
        index: str = "grid", progress: bool | None = None, **index_params: Any) -> dict:
    """Run one event file; returns the metrics also written to ``metrics.json``.

    Streams the input: memory is O(batch + engine state), never the whole file.
    """
    window = Window.parse(window) if isinstance(window, str) else window
    space = space or Space()
    engine = make_engine(index, window, space, **index_params)
    gate = Gate(window, space)
    writer = RunWriter(Path(out))
    accepted: Counter[str] = Counter()
    rejected: Counter[str] = Counter()
    path = Path(events)
    size = path.stat().st_size
    if progress is None:
        progress = sys.stderr.isatty() and not os.environ.get("CI")
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=size, unit="B", unit_scale=True, desc="events", file=sys.stderr)
    start = time.perf_counter()
    apply_s = 0.0
    with open(path, "rb") as f:
        batch: list = []
        done = 0

        def flush() -> None:
            nonlocal apply_s
            t0 = time.perf_counter()
            notes = engine.apply(batch)
            apply_s += time.perf_counter() - t0
            writer.notifications(notes)
            batch.clear()

        for line_no, raw in read_lines(f):
            ev = gate.admit_line(raw, line_no)
            if isinstance(ev, Rejection):
                flush()  # keep rejected.jsonl and notifications in stream order
                writer.rejection(ev)
                rejected[_rejected_kind(ev.raw)] += 1
                continue
            accepted[_kind_of(ev)] += 1
            batch.append(ev)
            if len(batch) >= BATCH:
                flush()
                if bar is not None:
                    bar.update(f.tell() - done)
                    done = f.tell()
        flush()
        if bar is not None:
            bar.update(size - done)
            bar.close()
    wall = time.perf_counter() - start
    st = engine.stats
    n_obj = st["objects"]
    metrics = {
        "engine": "local",
        "index": index,
        "window": str(window),
        "space": str(space),
        "accepted": dict(sorted(accepted.items())),
        "rejected": dict(sorted(rejected.items())),
        "accepted_total": sum(accepted.values()),
        "rejected_total": sum(rejected.values()),
        "notifications": writer.n_notifications,
        "wall_seconds": round(wall, 6),
        "engine_seconds": round(apply_s, 6),
        "objects": n_obj,
        "objects_per_second": round(n_obj / wall, 2) if wall > 0 else None,
        "candidates_per_object": round(st["candidates"] / n_obj, 4) if n_obj else 0.0,
        "affected_per_object": round(st["affected"] / n_obj, 4) if n_obj else 0.0,
    }
    if hasattr(engine, "nbytes"):
        metrics["memory_bytes"] = int(engine.nbytes)
    writer.finish(engine.all_results(), metrics)
    return metrics
