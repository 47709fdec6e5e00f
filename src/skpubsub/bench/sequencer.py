"""``skpubsub bench sequencer``: a runtime's one sequential step alone: the Spark runtime's
sequencer (no Spark session), or with ``--runtime fleet`` the local fleet's router
(``bench_router``).

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


def bench_router(events: Path, window: Window, space: Space, workers: int, partitioner: str,
                 init_objects: int, lines_per_batch: int, repeat: int = 3) -> dict:
    """The fleet's serial step (runtime/fleet.py) on EVENTS as ``run --workers`` feeds it: the
    Gate's blocks (read and judged first, not timed), the head up to ``init_objects``
    objects planned (timed apart: ``plan_s``), then every batch of ``lines_per_batch``
    events routed (``route_s``: placement, live ids, object masks, the shares' slices);
    CPU seconds, median and minimum over ``repeat`` fresh routers, and a SHA-256 of the
    shares (worker, positions, event seqs) so that two versions can be compared."""
    from ..io.events import BLOCKS, Pub, PubBlock, events_of
    from ..partition.registry import PLANNERS
    from ..runtime.feeder import judged
    from ..runtime.fleet import Router
    from ..runtime.runner import chunks, plan_head

    items: list = []
    for out, label, _ in judged(events, window, space, apart=False):
        items.extend(out if label is None else (out,))
    items = [it for it in items if type(it) in BLOCKS or type(it).__name__ in ("Pub", "Sub", "Unsub")]
    n_obj, cut = 0, len(items)
    for i, it in enumerate(items):
        n_obj += len(it) if type(it) is PubBlock else type(it) is Pub
        if n_obj >= init_objects:
            cut = i + 1
            break
    head = items[:cut]
    n = sum(len(it) if type(it) in BLOCKS else 1 for it in items)
    plans, routes, digest = [], [], None
    for _ in range(max(1, repeat)):
        t0 = time.process_time()
        plan, stats = plan_head(head, space, PLANNERS[partitioner], workers)  # as ``run`` plans
        router = Router(plan, window, dict(stats.keyword_freq))
        t1 = time.process_time()
        routed = [router.route(part) for part in chunks(items, lines_per_batch)]
        t2 = time.process_time()
        h = hashlib.sha256()
        for shares, pos, _ in routed:
            for wk, (share, p) in enumerate(zip(shares, pos)):
                h.update(b"%d:" % wk + p.tobytes())
                h.update(repr([ev.seq for ev in events_of([x for x in share if type(x).__name__ != "Tick"])]).encode())
        if digest is not None and h.hexdigest() != digest:
            raise RuntimeError("bench sequencer: two runs routed differently")
        digest = h.hexdigest()
        plans.append(t1 - t0)
        routes.append(t2 - t1)
    n = max(n, 1)
    return {"events": str(events), "runtime": "fleet", "lines": n, "window": str(window), "workers": workers,
            "partitioner": partitioner, "init_objects": init_objects, "lines_per_batch": lines_per_batch,
            "plan_s": [round(x, 4) for x in plans], "route_s": [round(x, 4) for x in routes],
            "median_plan_s": round(st.median(plans), 4), "median_route_s": round(st.median(routes), 4),
            "median_us_per_line": round(st.median(routes) / n * 1e6, 3),
            "min_us_per_line": round(min(routes) / n * 1e6, 3), "rows_sha256": digest}


def format_router_report(rep: dict) -> str:
    return (f"{Path(rep['events']).name}: {rep['lines']} events, M={rep['workers']} {rep['partitioner']}, "
            f"{rep['lines_per_batch']} events a batch: route {rep['median_us_per_line']} us/event CPU "
            f"(median of {len(rep['route_s'])}; min {rep['min_us_per_line']}), plan {rep['median_plan_s']} s, "
            f"shares sha256 {rep['rows_sha256'][:16]}")
