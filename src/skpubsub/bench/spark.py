"""``skpubsub bench spark``: the Spark runtime against the local multi-worker runtime.

Both run the same event file with the same M, planner and index (local first,
then Spark, so they never share the cores); the four output files must be equal.
Reported: objects/s of each (Spark both over its whole wall time, session start
and statistics job included, and over its micro-batches only), each micro-batch
split into sequencer, slowest worker, sink and the rest (Spark's own overhead:
scheduling, shuffle, state store commits, Arrow transfers), end-to-end latency,
and state bytes per subscription (the workers' engine snapshots and the state
store's files on disk). Writes ``spark.json`` and ``spark_batches.png``.
"""

from __future__ import annotations

import json
import shutil
import statistics as st
import time
from pathlib import Path
from typing import Any

from ..core.config import Space, Window
from ..spark.plots import plot_batches

FILES = ("results.jsonl", "notifications.jsonl", "rejected.jsonl")


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def _med(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return round(st.median(xs), 6) if xs else None


def bench_spark(events: Path, out: Path, window: Window, space: Space, workers: int, partitioner: str,
                index: str, lines_per_batch: int, init_objects: int, master: str | None = None,
                spark_conf: dict[str, str] | None = None) -> dict:
    from ..runtime.runner import run
    from ..spark.pipeline import run_spark

    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    run(events, out / "local", window=window, space=space, index=index, workers=workers,
        partitioner=partitioner, init_objects=init_objects)
    local_wall = time.perf_counter() - t0
    shutil.rmtree(out / "spark", ignore_errors=True)
    spark = run_spark(events, out / "spark", window=window, space=space, index=index, workers=workers,
                      partitioner=partitioner, init_objects=init_objects, lines_per_batch=lines_per_batch,
                      master=master, spark_conf=spark_conf)
    same = all((out / "local" / f).read_text() == (out / "spark" / f).read_text() for f in FILES)
    batches = spark["batches"]
    busy = [b for b in batches if b["worker_seconds"]]  # batches the workers had rows in
    stream_s = sum(b["duration_seconds"] or 0.0 for b in batches)
    n_obj = spark["objects"]
    subs = sum(v for k, v in spark["accepted"].items() if k.startswith("sub:")) - spark["accepted"].get("unsub", 0)
    snaps: dict[int, int] = {}
    for f in sorted((out / "spark" / "batches").glob("*/batch-*.json")):  # batches/<run id>/
        for w in json.loads(f.read_text())["workers"]:
            if w.get("snapshot_bytes"):
                snaps[w["worker"]] = w["snapshot_bytes"]
    state_disk = _du(out / "spark" / "_checkpoint" / "query" / "state")
    rep: dict[str, Any] = {
        "events": str(events), "workers": workers, "partitioner": partitioner, "index": index,
        "window": str(window), "lines_per_batch": lines_per_batch, "objects": n_obj,
        "subscriptions_at_end": subs, "same_files": same,
        "local": {"wall_seconds": round(local_wall, 3), "objects_per_second": round(n_obj / local_wall, 1)},
        "spark": {
            "wall_seconds": spark["wall_seconds"],
            "objects_per_second_wall": spark["objects_per_second"],
            "batches": len(batches),
            "batch_seconds_total": round(stream_s, 3),
            "objects_per_second_batches": round(n_obj / stream_s, 1) if stream_s else None,
            "busy_batches": len(busy),
            "median_busy_batch": {
                "duration_seconds": _med([b["duration_seconds"] for b in busy]),
                "sequencer_seconds": _med([b["sequencer_seconds"] for b in busy]),
                "slowest_worker_seconds": _med([max(b["worker_seconds"]) for b in busy]),
                "sink_seconds": _med([b["sink_seconds"] for b in busy]),
                "spark_overhead_seconds": _med([b["spark_overhead_seconds"] for b in busy]),
                "latency_seconds": _med([b["latency_seconds"] for b in busy]),
            },
            "worker_cache": [c for b in batches for c in b["worker_cache"]],
            "snapshot_bytes_per_subscription": round(sum(snaps.values()) / subs, 1) if snaps and subs else None,
            "state_store_disk_bytes": state_disk,
            "state_store_bytes_per_subscription": round(state_disk / subs, 1) if subs else None,
        },
    }
    rep["spark_vs_local"] = round(rep["spark"]["objects_per_second_wall"] / rep["local"]["objects_per_second"], 3) \
        if rep["spark"]["objects_per_second_wall"] else None
    (out / "spark.json").write_text(json.dumps({**rep, "spark_batches": batches}, indent=2) + "\n")
    plot_batches(batches, out / "spark_batches.png",
                 f"{rep['workers']} workers, {rep['partitioner']}, {rep['lines_per_batch']} lines/batch")
    return rep


def format_report(rep: dict) -> str:
    s, loc, mb = rep["spark"], rep["local"], rep["spark"]["median_busy_batch"]
    return "\n".join([
        f"{rep['objects']} objects, {rep['subscriptions_at_end']} subscriptions, M={rep['workers']} "
        f"{rep['partitioner']}, index {rep['index']}, window {rep['window']}; same files: {rep['same_files']}",
        f"local runtime : {loc['objects_per_second']:>10,.1f} objects/s  ({loc['wall_seconds']:.1f} s)",
        f"spark (wall)  : {s['objects_per_second_wall'] or 0:>10,.1f} objects/s  ({s['wall_seconds']:.1f} s, "
        f"session start and statistics included)  = {rep['spark_vs_local']}x local",
        f"spark batches : {s['objects_per_second_batches'] or 0:>10,.1f} objects/s  ({s['batches']} batches, "
        f"{s['batch_seconds_total']:.1f} s)",
        f"median batch  : {mb['duration_seconds']} s (of {s['busy_batches']} with worker rows) = sequencer {mb['sequencer_seconds']} + slowest worker "
        f"{mb['slowest_worker_seconds']} + sink {mb['sink_seconds']} + Spark {mb['spark_overhead_seconds']}; "
        f"latency {mb['latency_seconds']} s",
        f"state         : engine snapshots {s['snapshot_bytes_per_subscription']} B/subscription, "
        f"state store on disk {s['state_store_bytes_per_subscription']} B/subscription",
    ])
