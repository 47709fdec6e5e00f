"""``skpubsub bench`` and its modes (partition, spark, sequencer, gate): their flags (added to the main
parser by :mod:`skpubsub.cli`) and their runs."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..cli_common import (UsageError, add_spark_args, add_workload_shape_args, check_run_flags, env, need, spark_conf,
                          workload_config)
from ..index.registry import unknown_index
from ..runtime.engines import DEFAULT_INDEX, is_known

MODES = ("partition", "spark", "sequencer", "gate")  # `bench MODE ...` is the subcommand bench-MODE


def as_subcommand(args: list[str]) -> list[str]:
    """``bench MODE ...`` as ``bench-MODE ...``: the planners, Spark against the local runtime, the
    Spark sequencer alone, the Gate alone (an events file of one of these names: ./partition, ./spark,
    ./sequencer, ./gate)."""
    if args[:1] == ["bench"] and args[1:2] and args[1] in MODES:
        return [f"bench-{args[1]}", *args[2:]]
    return args


def add_parsers(sp) -> None:
    """``bench``, ``bench-partition``, ``bench-spark``, ``bench-sequencer``, ``bench-gate``, in this
    order (``--help``)."""
    _add_bench(sp)
    _add_bench_partition(sp)
    _add_bench_spark(sp)
    _add_bench_sequencer(sp)
    _add_bench_gate(sp)


def cmd_bench(a: argparse.Namespace) -> int:
    """The benchmark suite: indexes side by side on an event file or a generated workload."""
    from .compare import main as bench_main

    sep = ";" if ";" in a.indexes or "[" in a.indexes else ","
    names = [ix.strip() for ix in a.indexes.split(sep) if ix.strip()]
    if not names and a.baseline is None:
        raise UsageError("--indexes: give at least one index")
    from .compare import split_spec

    if a.baseline == "none" and not names:
        raise UsageError("--baseline none: name the indexes to run with --indexes")
    for ix in names + ([a.baseline] if a.baseline not in (None, "none") else []):
        if not is_known(split_spec(ix)[0]):
            raise UsageError(unknown_index(split_spec(ix)[0]))
    if a.repeat < 1:
        raise UsageError(f"--repeat must be >= 1, got {a.repeat}")
    if a.max_events is not None and a.max_events < 1:
        raise UsageError(f"--max-events must be >= 1, got {a.max_events}")
    if a.baseline_events is not None and a.baseline_events < 1:
        raise UsageError(f"--baseline-events must be >= 1, got {a.baseline_events}")
    if a.baseline_events is not None and a.baseline == "none":
        raise UsageError("--baseline-events needs a baseline (not --baseline none)")
    if a.warmup_objects < 0:
        raise UsageError(f"--warmup-objects must be >= 0, got {a.warmup_objects}")
    if a.out is not None:
        need("bench --out (its plots)", "plots", " (or --json FILE: the report without plots)")
    workload = _bench_workload(a)
    return bench_main(a.events, names, a.window, a.space,
                      repeat=a.repeat, max_events=a.max_events, out=a.out, json_path=a.json,
                      workload=workload, baseline=a.baseline, warmup=not a.no_warmup,
                      baseline_events=a.baseline_events, warm_objects=a.warmup_objects)


def _bench_workload(a: argparse.Namespace):
    """The generated workload of a bench run, or None when it reads an EVENTS file."""
    if a.events is not None:
        if a.dataset is not None:
            raise UsageError("give an EVENTS file or --dataset, not both")
        if not Path(a.events).is_file():
            raise UsageError(f"no such events file: {a.events}")
        return None
    return workload_config(a, a.dataset or "geonames-cities")


def cmd_bench_partition(a: argparse.Namespace) -> int:
    """Every planner on the same workload and M: update time, balance, messages, exactness."""
    from .partition import DEFAULT_PARTITIONERS, check_partitioners, main as partition_main

    given = ",".join(DEFAULT_PARTITIONERS) if a.partitioners is None else a.partitioners
    names = check_partitioners([n.strip() for n in given.split(",") if n.strip()])
    if not is_known(a.index):
        raise UsageError(unknown_index(a.index))
    for flag, v in (("--workers", a.workers), ("--batch", a.batch), ("--init-objects", a.init_objects)):
        if v < 1:
            raise UsageError(f"{flag} must be >= 1, got {v}")
    if a.max_events is not None and a.max_events < 1:
        raise UsageError(f"--max-events must be >= 1, got {a.max_events}")
    if a.out is not None:
        need("bench partition --out (its plots)", "plots")
    workload = _bench_workload(a)
    return partition_main(a.events, names, a.workers, a.window, a.space, init_objects=a.init_objects,
                          batch=a.batch, processes=a.processes, index=a.index, out=a.out, workload=workload,
                          max_events=a.max_events, warmup=not a.no_warmup)


def cmd_bench_spark(a: argparse.Namespace) -> int:
    """The Spark runtime against the local multi-worker runtime on one event file."""
    from .spark import bench_spark, format_report, format_scaling

    a.engine = "spark"
    check_run_flags(a)
    need("bench spark (its plot)", "plots")
    if not Path(a.events).is_file():
        raise UsageError(f"no such events file: {a.events}")
    if a.cluster is not None and a.master:
        raise UsageError("--cluster starts its own loopback clusters: no --master with it")
    rebalance = {"sigma": a.sigma, "period": a.rebalance_period} if a.rebalance else None
    rep = bench_spark(Path(a.events), Path(a.out), a.window, a.space, a.workers, a.partitioner or "hash",
                      a.index, a.lines_per_batch, a.init_objects, a.master, spark_conf=spark_conf(a),
                      clusters=a.cluster, rebalance=rebalance)
    if a.cluster is not None:
        print(format_scaling(rep))
        print(f"wrote {a.out}/spark.json and {a.out}/spark_scaling.png")
    else:
        print(format_report(rep))
        print(f"wrote {a.out}/spark.json and {a.out}/spark_batches.png")
    return 0 if rep["same_files"] else 1


def cmd_bench_sequencer(a: argparse.Namespace) -> int:
    """The Spark runtime's sequencer alone (no Spark session) on one event file."""
    from .sequencer import bench_sequencer, format_report

    if not Path(a.events).is_file():
        raise UsageError(f"no such events file: {a.events}")
    if a.lines_per_batch < 1 or a.workers < 1 or a.init_objects < 0:
        raise UsageError("--lines-per-batch and --workers must be >= 1, --init-objects >= 0")
    if a.runtime == "fleet":
        from .sequencer import bench_router, format_router_report

        rep = bench_router(Path(a.events), a.window, a.space, a.workers, a.partitioner, a.init_objects,
                           a.lines_per_batch, a.repeat)
        return _report(a, rep, format_router_report)
    rep = bench_sequencer(Path(a.events), a.window, a.space, a.workers, a.partitioner, a.init_objects,
                          a.lines_per_batch, a.repeat)
    return _report(a, rep, format_report)


def cmd_bench_gate(a: argparse.Namespace) -> int:
    """The Gate alone (no engine) on one event file, as ``run`` feeds it."""
    from .gate import bench_gate, format_report

    if not Path(a.events).is_file():
        raise UsageError(f"no such events file: {a.events}")
    if a.repeat < 1:
        raise UsageError(f"--repeat must be >= 1, got {a.repeat}")
    return _report(a, bench_gate(Path(a.events), a.window, a.space, a.repeat), format_report)


def _report(a: argparse.Namespace, rep: dict, format_report) -> int:
    """Print a one-file mode's report; with --json, write it too."""
    import json

    print(format_report(rep))
    if a.json:
        Path(a.json).write_text(json.dumps(rep, indent=1) + "\n")
    return 0


def _add_bench_workload_args(p: argparse.ArgumentParser, kind: str, match: str) -> None:
    """An EVENTS file, or the workload both bench modes generate in memory (no churn by default)."""
    p.add_argument("events", nargs="?", default=None, help="event file (default: generate from --dataset)")
    p.add_argument("--dataset", default=None, choices=["geonames-cities", "geonames-postal"],
                   help="generate the workload from this dataset (default geonames-cities)")
    p.add_argument("--subscriptions", type=int, default=10_000, help="initial subscriptions (at t=0)")
    p.add_argument("--objects", type=int, default=20_000)
    add_workload_shape_args(p, kind, match, churn=0, note=" (churn)")


def _add_bench(sp) -> None:
    b = sp.add_parser("bench", help="benchmark suite: indexes side by side, ratio to a baseline, JSON + plots",
                      description="Benchmark indexes on an event file or a workload generated from a real "
                  "dataset: build time, bytes/subscription, arrivals and expiries objects/s, "
                  "candidates and affected per object, exactness against the baseline. "
                  "`skpubsub bench partition --help`: planners side by side instead.")
    _add_bench_workload_args(b, kind="mix", match="mix")
    b.add_argument("--indexes", default="grid,auto",
                   help="semicolon- or comma-separated; the first is the baseline (grid is added if neither "
                        "reference nor grid is listed); NAME[key=value,...] passes parameters, e.g. "
                        "'dkm;dkm[refresh_from=1e12]'")
    b.add_argument("--baseline", default=None,
                   help="baseline index for the ratios (default: the first); 'none': run only the named "
                        "indexes (no ratios; their results are checked against each other)")
    b.add_argument("--warmup-objects", type=int, default=0, metavar="N",
                   help="apply the first N objects after the subscriptions untimed (the papers' O_init; "
                        "reported apart as the cold fill), then time the rest")
    b.add_argument("--baseline-events", type=int, default=None,
                   help="run the baseline on the first N events only (every index runs them too, for the "
                        "ratio and the exactness check): a slow baseline at a scale it cannot finish")
    b.add_argument("--window", default=env("window", "none"))
    b.add_argument("--space", default=env("space", "-180,-90,180,90"))
    b.add_argument("--repeat", type=int, default=3)
    b.add_argument("--max-events", type=int, default=None, help="only the first N valid events")
    b.add_argument("--out", default=None, help="write DIR/bench.json, DIR/throughput.png, DIR/memory.png")
    b.add_argument("--json", default=None, help="also write the JSON report to this file")
    b.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up run")
    b.set_defaults(func=cmd_bench)


def _add_mode(sp, mode: str, help: str, description: str) -> argparse.ArgumentParser:
    """The parser of ``bench MODE`` (one of MODES), whose name is ``bench-MODE`` (see as_subcommand)."""
    return sp.add_parser(f"bench-{mode}", prog=f"skpubsub bench {mode}", help=f"{help} (same as `bench {mode}`)",
                         description=description)


def _add_bench_partition(sp) -> None:
    q = _add_mode(sp, "partition", "planners side by side on one workload and M",
                  "`skpubsub bench partition` (also `skpubsub bench-partition`): every planner "
                  "on the same validated workload and number of workers: planning time, update "
                  "time (sum of the slowest worker's CPU seconds per batch), balance, max/mean "
                  "worker load, messages per object, replication, objects/s, and exactness "
                  "against the first planner; with --out DIR: partition.json, "
                  "partition_update.png, partition_loads.png, partition_map.png.")
    _add_bench_workload_args(q, kind="knn", match="any")
    q.add_argument("--window", default=env("window", "none"))
    q.add_argument("--space", default=env("space", "-180,-90,180,90"))
    q.add_argument("--workers", type=int, default=8, help="M, the number of workers")
    q.add_argument("--partitioners", default=None,
                   help="comma-separated; the first is the baseline of the exactness check "
                        "(default hash,kop,sop,dkm,location,keyword,prefix,ps2)")
    q.add_argument("--init-objects", type=int, default=5000,
                   help="objects of the stream head used for statistics and planning (O_init)")
    q.add_argument("--batch", type=int, default=2000, help="events per micro-batch")
    q.add_argument("--processes", action=argparse.BooleanOptionalAction, default=True,
                   help="real worker processes (default); --no-processes runs the workers in-process")
    q.add_argument("--index", default=DEFAULT_INDEX, help="index of every worker engine")
    q.add_argument("--max-events", type=int, default=None, help="only the first N valid events")
    q.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-ups")
    q.add_argument("--out", default=None, help="write DIR/partition.json and the three PNGs")
    q.set_defaults(func=cmd_bench_partition)


def _add_bench_spark(sp) -> None:
    q = _add_mode(sp, "spark", "Spark runtime vs the local multi-worker runtime",
                  "Runs EVENTS on the local multi-worker runtime and then on Spark with the "
                  "same M, planner and index; checks the files are equal; reports objects/s, "
                  "each micro-batch split into sequencer, slowest worker, sink and Spark "
                  "overhead, latency, state bytes per subscription, and the driver's and executors' "
                  "peak memory.")
    q.add_argument("events")
    q.add_argument("--out", required=True)
    q.add_argument("--window", default=env("window", "none"))
    q.add_argument("--space", default=env("space", "-180,-90,180,90"))
    q.add_argument("--workers", type=int, default=2)
    q.add_argument("--partitioner", default="dkm")
    q.add_argument("--index", default=DEFAULT_INDEX)
    q.add_argument("--init-objects", type=int, default=1000)
    q.add_argument("--cluster", default=None, metavar="N,N,...",
                   help="scaling: for each executor count N, a loopback standalone cluster of N workers with one "
                        "executor each (--executor-cores cores, default 1), the same EVENTS run on it, the cluster "
                        "stopped; a row per N in spark.json and spark_scaling.png (no --master)")
    q.add_argument("--rebalance", action="store_true", help="dynamic load adjustment on both runtimes (as `run`)")
    q.add_argument("--sigma", type=float, default=1.5, help="--rebalance: allowed L_max / L_min")
    q.add_argument("--rebalance-period", type=int, default=4, help="--rebalance: micro-batches per check")
    add_spark_args(q)
    q.set_defaults(func=cmd_bench_spark)


def _add_bench_sequencer(sp) -> None:
    q = _add_file_mode(sp, "sequencer", "the Spark runtime's sequencer alone, no Spark",
                       "Feeds EVENTS through the Spark runtime's sequencer (Gate, O_init, plan, "
                       "dispatcher, rows) as the streaming source does, in batches of "
                       "--lines-per-batch lines, without Spark; reports the CPU time of the feeds "
                       "per line and a SHA-256 of the rows (equal digests: equal rows).",
                       cmd_bench_sequencer, "fresh runs")
    q.add_argument("--workers", type=int, default=2)
    q.add_argument("--partitioner", default="hash",
                   help="a planner, as `run` takes (default: hash, as `run --engine spark`)")
    q.add_argument("--init-objects", type=int, default=1000)
    q.add_argument("--lines-per-batch", type=int, default=10_000)
    q.add_argument("--runtime", choices=("spark", "fleet"), default="spark",
                   help="whose serial step: the Spark sequencer (default) or the local fleet's router "
                        "(`run --workers`: planning timed apart, then each batch routed)")


def _add_bench_gate(sp) -> None:
    _add_file_mode(sp, "gate", "the Gate alone, no engine",
                   "Reads EVENTS into blocks as `run` does (not timed), then admits them through a "
                   "fresh Gate (validation, the id and keyword checks, columns) --repeat times; "
                   "reports the CPU time per line and the events and rejections by kind "
                   "(equal counts: equal verdicts).", cmd_bench_gate, "fresh Gates")


def _add_file_mode(sp, mode: str, help: str, description: str, func, repeats: str) -> argparse.ArgumentParser:
    """A mode over one EVENTS file: its window and space, --repeat runs (the median), --json."""
    q = _add_mode(sp, mode, help, description)
    q.add_argument("events")
    q.add_argument("--window", default=env("window", "none"))
    q.add_argument("--space", default=env("space", "-180,-90,180,90"))
    q.add_argument("--repeat", type=int, default=3, help=f"{repeats}; the median is reported")
    q.add_argument("--json", default=None, help="also write the report to this file")
    q.set_defaults(func=func)
    return q
