"""``skpubsub bench partition``: every planner on the same workload and M, side by side.

The workload (an event file, or one generated in memory from a real dataset,
:mod:`skpubsub.bench.workload`) is validated once by the
:class:`~skpubsub.io.validate.Gate` and held in memory.  Its head — the events up
to and including the ``init_objects``-th object (O_init), as ``skpubsub run``
does — gives the :class:`~skpubsub.partition.stats.Statistics` (computed once)
and the subscriptions to plan.  Then, per planner:

1. **plan** — ``PLANNERS[name](active_subs(head), stats, m)``, timed;
2. **run** — every event (the head included) through a fresh
   :class:`~skpubsub.runtime.local.LocalCluster` in micro-batches of ``batch``
   events, with real worker processes (``processes=True``) or in-process workers;
3. **collect** — from ``cluster.batches``: the *update time* (sum over batches of
   the slowest worker's CPU seconds, the papers' measure), the *balance* (sum of
   slowest − fastest), each worker's CPU seconds over the whole run and their
   max ÷ mean; from the dispatcher: messages per object, the replication ratio
   and the planner's estimated loads; wall seconds of the ``apply`` calls and
   objects/s; and digests of the notification stream and of the final
   ``results()`` — every planner must equal the first one (``same_results``).

Untimed warm-ups: each planner runs once on a few head subscriptions (loads its
compiled kernels), and without worker processes one throwaway cluster runs a
short prefix in this process (compiles the engine's kernels); with processes,
every worker has started before the timing begins.  Worker processes are fresh
per planner, so each loads its cached compiled kernels the first time it inserts
a subscription and publishes an object (a few tenths of a CPU second per worker,
inside the timed batches; every planner pays it alike).  The first objects also
fill the initially empty kNN/top-k results, a transient that touches almost
every subscription.  The ``steady_*`` figures therefore repeat update time,
balance and max/mean over the batches *after* the first one holding an object.

CPU seconds are per worker (``time.process_time`` inside each worker), so they
measure each worker's own work even when the workers share fewer cores than
there are of them; wall seconds then are not a parallel speed-up.
"""

from __future__ import annotations

import gc
import hashlib
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..core.config import Space, Window
from ..io.events import Pub, Sub
from ..runtime.engines import DEFAULT_INDEX
from .compare import machine_info
from .inputs import Workload, load_workload, warmup_events

DEFAULT_PARTITIONERS = ("hash", "kop", "sop", "dkm", "location", "keyword", "prefix", "ps2")
PLANNER_WARMUP_SUBS = 100  # head subscriptions each planner is warmed up on (untimed)


def known_partitioners() -> list[str]:
    from ..partition.registry import PLANNERS

    return list(PLANNERS)


def check_partitioners(names: list[str]) -> list[str]:
    """The names deduplicated, in order; ``ValueError`` naming the first unknown one."""
    known = known_partitioners()
    out: list[str] = []
    for n in names:
        if n not in known:
            raise ValueError(f"unknown partitioner {n!r}; known: {', '.join(known)}")
        if n not in out:
            out.append(n)
    if not out:
        raise ValueError("--partitioners: give at least one partitioner")
    return out


def head_length(events: list, init_objects: int) -> int:
    """Events up to and including the ``init_objects``-th object (all of them if fewer)."""
    seen = 0
    for i, ev in enumerate(events):
        if isinstance(ev, Pub):
            seen += 1
            if seen >= init_objects:
                return i + 1
    return len(events)


def sub_locations(events: list, space: Space) -> dict[Any, tuple[float, float]]:
    """Location of each subscription id (its latest ``sub``): knn/topk point or range centre."""
    from ..partition.dskype import sub_point

    return {ev.id: sub_point(ev, space) for ev in events if isinstance(ev, Sub)}


def _ratio(a: float, b: float) -> float | None:
    return a / b if b > 0 else None


def _r(x: float | None, nd: int = 6) -> float | None:
    return None if x is None else round(float(x), nd)


def _max_over_mean(loads: np.ndarray) -> float | None:
    if not len(loads):
        return None
    return _r(_ratio(float(loads.max()), float(loads.mean())), 4)


def _warm_in_process(events: list, build: int, window: Window, space: Space, index: str, m: int) -> None:
    """Compile the engine's kernels in this process on a short prefix (throwaway cluster)."""
    from ..partition.common import AssignedPlan
    from ..runtime.local import LocalCluster

    wev = warmup_events(events, build)
    if not wev:
        return
    plan = AssignedPlan(m, "warmup", {}, {}, new_rule=lambda sub, p: ((p.least_loaded(),), 1.0))
    with LocalCluster(plan, window, space, index=index, processes=False) as cl:
        for i in range(0, len(wev), 500):
            cl.apply_columnar(wev[i:i + 500])
        cl.results()


def run_planner(name: str, events: list, head: int, stats: Any, window: Window, space: Space, m: int,
                batch: int, processes: bool, index: str, locations: dict) -> tuple[dict, dict]:
    """Plan with ``name`` and run every event through a fresh cluster.

    Returns (the planner's report row, plot data: per-batch worker CPU seconds and
    each active subscription's location and workers at the end)."""
    from ..partition.registry import PLANNERS
    from ..runtime.runner import active_subs
    from ..runtime.local import LocalCluster

    gc.collect()
    subs = active_subs(events[:head])
    t0 = time.perf_counter()
    plan = PLANNERS[name](subs, stats, m)
    plan_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    cluster = LocalCluster(plan, window, space, index=index, processes=processes,
                           rarity=dict(stats.keyword_freq))
    cluster.worker_stats()  # every worker has started (imports done) before anything is timed
    start_s = time.perf_counter() - t0
    notes_hash = hashlib.blake2b(digest_size=16)
    n_notes = 0
    apply_s = 0.0
    try:
        for i in range(0, len(events), batch):
            t0 = time.perf_counter()
            notes = cluster.apply_columnar(events[i:i + batch])
            apply_s += time.perf_counter() - t0
            n_notes += len(notes)  # hashed outside the timed region
            notes_hash.update(notes.json_bytes())
        t0 = time.perf_counter()
        results = cluster.results()
        results_s = time.perf_counter() - t0
        d = cluster.dispatcher
        dm = d.metrics()
        describe = plan.describe()
        where = dict(d.where)
        objects = d.objects
    finally:
        cluster.close()
    results_digest = hashlib.blake2b(repr(results).encode(), digest_size=16).hexdigest()

    batches = cluster.batches
    per_batch = np.array([b["worker_cpu_seconds"] for b in batches], dtype=np.float64).reshape(-1, m)
    per_worker = per_batch.sum(axis=0)
    update = math.fsum(b["update_seconds"] for b in batches)
    balance = math.fsum(b["balance_seconds"] for b in batches)
    worker_phase = math.fsum(b["wall_seconds"] for b in batches)
    # steady state: the batches after the first one holding an object (by then every worker has
    # inserted subscriptions and published objects once, and the empty kNN results have filled)
    first_pub = next((j for j, b in enumerate(batches) if b["objects"]), len(batches))
    steady = batches[first_pub + 1:]
    steady_worker = per_batch[first_pub + 1:].sum(axis=0)
    est = dm["estimated_loads"]
    est_mean = sum(est) / len(est) if est else 0.0
    row = {
        "planning_seconds": _r(plan_s),
        "update_seconds": _r(update),
        "balance_seconds": _r(balance),
        "worker_cpu_seconds": [_r(x) for x in per_worker.tolist()],
        "worker_load_max_over_mean": _max_over_mean(per_worker),
        "steady_from_batch": first_pub + 1,
        "steady_objects": sum(b["objects"] for b in steady),
        "steady_update_seconds": _r(math.fsum(b["update_seconds"] for b in steady)),
        "steady_balance_seconds": _r(math.fsum(b["balance_seconds"] for b in steady)),
        "steady_worker_cpu_seconds": [_r(x) for x in steady_worker.tolist()],
        "steady_worker_load_max_over_mean": _max_over_mean(steady_worker),
        "estimated_loads": est,
        "estimated_load_max_over_mean": _r(_ratio(max(est), est_mean), 4) if est else None,
        "messages": dm["messages"],
        "messages_per_object": dm["messages_per_object"],
        "replication_ratio": dm["replication_ratio"],
        "objects": objects,
        "wall_seconds": _r(apply_s),
        "objects_per_second": _r(_ratio(objects, apply_s), 1),
        "worker_phase_wall_seconds": _r(worker_phase),
        "dispatch_merge_seconds": _r(apply_s - worker_phase),
        "startup_seconds": _r(start_s),
        "results_seconds": _r(results_s),
        "batches": len(batches),
        "batch_worker_cpu_seconds": [[_r(x) for x in row_] for row_ in per_batch.tolist()],
        "notifications": n_notes,
        "notifications_digest": notes_hash.hexdigest(),
        "results_digest": results_digest,
        "plan": describe,
    }
    xs = np.empty(len(where))
    ys = np.empty(len(where))
    ws = np.empty(len(where), dtype=np.int64)
    rep = np.zeros(len(where), dtype=bool)
    for j, (sid, wk) in enumerate(where.items()):
        xs[j], ys[j] = locations.get(sid, (np.nan, np.nan))
        ws[j] = wk[0]
        rep[j] = len(wk) > 1
    plot = {"cumulative": np.cumsum(per_batch, axis=0), "steady_from": first_pub + 1, "x": xs, "y": ys, "worker": ws, "replicated": rep}
    return row, plot


def bench_partition(work: Workload, partitioners: list[str], m: int, window: Window, space: Space,
                    init_objects: int = 5000, batch: int = 2000, processes: bool = True, index: str = DEFAULT_INDEX,
                    warmup: bool = True, progress: Any = None) -> tuple[dict, dict]:
    """Every planner over ``work``; (the report, plot data per planner)."""
    from ..partition.registry import PLANNERS
    from ..partition.stats import Statistics
    from ..runtime.runner import active_subs

    say = progress or (lambda _msg: None)
    events = work.events
    head = head_length(events, init_objects)
    t0 = time.perf_counter()
    stats = Statistics.from_objects((ev for ev in events[:head] if isinstance(ev, Pub)), space)
    stats_s = time.perf_counter() - t0
    head_subs = active_subs(events[:head])
    say(f"head: {head:,} events ({stats.n:,} objects = O_init, {len(head_subs):,} active subscriptions); "
        f"statistics in {stats_s:.2f} s")
    notes: list[str] = []
    if stats.n < init_objects:
        notes.append(f"the stream has only {stats.n} objects: O_init is all of them (--init-objects {init_objects})")
    if processes:
        notes.append(f"{m} worker processes on {machine_info()['cpu_count']} CPU(s): wall seconds are not a "
                     "parallel speed-up; worker CPU seconds are each worker's own work")
    else:
        notes.append("--no-processes: workers run in this process one after the other; "
                     "CPU seconds are still per worker")
    if warmup:
        for name in partitioners:
            PLANNERS[name](head_subs[:PLANNER_WARMUP_SUBS], stats, m)
        if not processes:
            _warm_in_process(events, work.build, window, space, index, m)
        say("warm-up done (untimed)")

    locations = sub_locations(events, space)
    rows: dict[str, dict] = {}
    plots: dict[str, dict] = {}
    for name in partitioners:
        say(f"{name}: planning {len(head_subs):,} subscriptions on {m} workers ...")
        row, plot = run_planner(name, events, head, stats, window, space, m, batch, processes, index, locations)
        rows[name] = row
        plots[name] = plot
        say(f"{name}: plan {row['planning_seconds']:.2f} s, update {row['update_seconds']:.2f} s, "
            f"max/mean {row['worker_load_max_over_mean']}, msgs/obj {row['messages_per_object']}, "
            f"wall {row['wall_seconds']:.1f} s")

    base = partitioners[0]
    for name, row in rows.items():
        row["same_results"] = (row["results_digest"] == rows[base]["results_digest"]
                               and row["notifications_digest"] == rows[base]["notifications_digest"])
        if not row["same_results"]:
            notes.append(f"{name}: results or notifications differ from {base}!")
    counts = work.counts()
    report = {
        "suite": "skpubsub bench partition",
        "workload": work.describe,
        **counts,
        "config": {
            "workers": m, "partitioners": list(partitioners), "init_objects": init_objects,
            "head_events": head, "o_init_objects": stats.n, "planned_subscriptions": len(head_subs),
            "batch": batch, "processes": processes, "index": index, "window": str(window),
            "space": [space.x1, space.y1, space.x2, space.y2], "warmup": warmup,
        },
        "statistics_seconds": _r(stats_s),
        "baseline": base,
        "machine": machine_info(),
        "notes": notes,
        "partitioners": rows,
    }
    return report, plots


# -- output -----------------------------------------------------------------------------------
def _fmt(x: float | None, spec: str, width: int) -> str:
    return f"{'n/a':>{width}}" if x is None else f"{x:>{width}{spec}}"


def format_report(rep: dict) -> str:
    c = rep["config"]
    w = rep["workload"]
    if "events_file" in w:
        src = f"events file {w['events_file']}"
    else:
        src = f"{w['dataset']} workload ({w['kind']}, match {w['match']}, kmax {w['kmax']}, seed {w['seed']})"
    lines = [f"{src}: {rep['events']:,} events, {rep['objects']:,} objects; {c['planned_subscriptions']:,} "
             f"subscriptions planned from O_init = {c['o_init_objects']:,} objects; M = {c['workers']} "
             f"({'processes' if c['processes'] else 'in-process'}), batch {c['batch']}, window {c['window']}, "
             f"index {c['index']}"]
    head = (f"{'planner':<10}{'plan s':>8}{'update s':>10}{'balance s':>11}{'max/mean':>10}"
            f"{'update* s':>11}{'max/mean*':>11}{'est m/m':>9}"
            f"{'msgs/obj':>10}{'repl':>6}{'wall s':>9}{'obj/s':>10}  same results")
    lines.append(head)
    lines.append("-" * len(head))
    for name, r in rep["partitioners"].items():
        same = "yes (baseline)" if name == rep["baseline"] else ("yes" if r["same_results"] else "NO")
        lines.append(
            f"{name:<10}{_fmt(r['planning_seconds'], '.2f', 8)}{_fmt(r['update_seconds'], '.2f', 10)}"
            f"{_fmt(r['balance_seconds'], '.2f', 11)}{_fmt(r['worker_load_max_over_mean'], '.3f', 10)}"
            f"{_fmt(r['steady_update_seconds'], '.2f', 11)}{_fmt(r['steady_worker_load_max_over_mean'], '.3f', 11)}"
            f"{_fmt(r['estimated_load_max_over_mean'], '.3f', 9)}"
            f"{_fmt(r['messages_per_object'], '.3f', 10)}{_fmt(r['replication_ratio'], '.2f', 6)}"
            f"{_fmt(r['wall_seconds'], '.1f', 9)}{_fmt(r['objects_per_second'], ',.0f', 10)}  {same}")
    first = next(iter(rep["partitioners"].values()), None)
    lines.append("update s = sum over batches of the slowest worker's CPU seconds; balance s = sum of "
                 "slowest - fastest; max/mean = max / mean of the workers' CPU seconds over the run; "
                 "* = the same over the batches after the first one holding objects (from batch "
                 f"{first['steady_from_batch'] + 1 if first else '?'} on, {first['steady_objects'] if first else 0:,} "
                 "objects: no kernel loading, no filling of empty results); est m/m = the planner's own cost model; msgs/obj = workers each object is sent to")
    for note in rep["notes"]:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def _json_default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return repr(o)


def write_outputs(rep: dict, plots: dict, out: str | Path) -> list[Path]:
    """``out/partition.json`` and the three PNGs."""
    d = Path(out)
    d.mkdir(parents=True, exist_ok=True)
    p = d / "partition.json"
    p.write_text(json.dumps(rep, indent=1, default=_json_default) + "\n")
    from .plots import write_partition_plots  # matplotlib only here

    return [p, *write_partition_plots(rep, plots, d)]


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(events: str | None, partitioners: list[str], workers: int, window: Window, space: Space,
         init_objects: int = 5000, batch: int = 2000, processes: bool = True, index: str = DEFAULT_INDEX,
         out: str | None = None, workload: Any = None, max_events: int | None = None,
         warmup: bool = True) -> int:
    """``skpubsub bench partition``: ``events`` (a file) or ``workload`` (a WorkloadConfig)."""
    partitioners = check_partitioners(partitioners)
    work = load_workload(events, workload, window, space, max_events)
    evs, cut = work.events, work.cut
    _progress(f"{len(evs):,} valid events in memory ({work.rejected} rejected); partitioners "
              f"{', '.join(partitioners)}; M = {workers}")
    rep, plots = bench_partition(work, partitioners, workers, window, space, init_objects=init_objects,
                                 batch=batch, processes=processes, index=index, warmup=warmup,
                                 progress=_progress)
    if cut:
        rep["notes"].append(f"stream cut to its first {len(evs)} valid events by --max-events")
    print(format_report(rep))
    if out is not None:
        for p in write_outputs(rep, plots, out):
            print(f"wrote {p}")
    return 0


__all__ = ["DEFAULT_PARTITIONERS", "bench_partition", "check_partitioners", "format_report", "head_length",
           "known_partitioners", "main", "run_planner", "sub_locations", "write_outputs"]
