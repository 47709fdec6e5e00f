"""The ``skpubsub`` command line (SPEC section 4).

Flags fall back to ``SKPUBSUB_*`` environment variables (e.g. ``SKPUBSUB_WINDOW``).
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import re
import sys
import threading
from pathlib import Path

from . import _exit_at_start
from .cli_common import (OPTIONAL, PARTITIONERS, MissingExtra, UsageError, add_spark_args, add_workload_shape_args,
                         check_run_flags, env, missing_extra, need, need_dataset, spark_conf, workload_config)
from .core.config import Space, Window
from .runtime.engines import DEFAULT_INDEX
from .runtime.failure import RunFailure
from .store.subscriptions import BUFFERS


def cmd_run(a: argparse.Namespace) -> int:
    from .runtime.runner import run

    check_run_flags(a)
    from .spark.formats import is_tabular

    redis = a.events.split(":", 1)[0].lower() in ("redis", "rediss")  # a Redis stream (SPEC 9)
    if getattr(a, "sink", None) is not None and a.engine != "spark":
        raise UsageError("--sink needs --engine spark")
    if redis and a.engine != "spark":
        raise UsageError("a Redis stream is read by --engine spark")
    if a.engine == "spark":  # any Hadoop file system URL (file:, hdfs:, s3a:, ...)
        from .spark.fs import Loc

        ev = None if redis else Loc(a.events)
        found = redis or ev.is_file() or (is_tabular(a.events) and ev.is_dir())
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
                      master=a.master, checkpoint=a.checkpoint, spark_conf=spark_conf(a), rebalance=rebalance,
                      sink=getattr(a, "sink", None), **params)
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
    check_run_flags(a)
    from .spark.pipeline import stream

    if a.generate is not None:  # a generated real-data workload, written once, replayed at the rate
        from .bench.workload import generate, write_jsonl

        a.dataset = a.generate
        if a.source is not None:
            raise UsageError("give --source or --generate, not both")
        need_dataset(a.dataset)
        a.source = str(Path(a.checkpoint) / "workload.jsonl")
        if not Path(a.source).exists():
            Path(a.checkpoint).mkdir(parents=True, exist_ok=True)
            tmp = Path(a.source + ".tmp")
            n = write_jsonl(generate(workload_config(a, a.dataset)), tmp)
            tmp.replace(a.source)
            print(f"generated {n} events from {a.dataset} into {a.source}", flush=True)
    if a.source is None:
        raise UsageError("give --source DIR (or an event file), or --generate DATASET")
    from .spark.fs import Loc

    if a.source.split(":", 1)[0].lower() not in ("redis", "rediss") and not Loc(a.source).exists():
        raise UsageError(f"no such source: {a.source}")
    params = {"grid": a.grid} if a.index != "reference" and a.grid else {}
    m = stream(a.source, a.out, a.checkpoint, window=a.window, space=a.space, index=a.index, workers=a.workers,
               partitioner=a.partitioner, init_objects=a.init_objects, lines_per_batch=a.lines_per_batch,
               master=a.master, lines_per_second=a.lines_per_second, once=a.once, timeout=a.timeout,
               trigger_seconds=a.trigger_seconds, spark_conf=spark_conf(a), sink=a.sink, **params)
    print(_summary(m, a.out))
    return 0


def cmd_cluster(a: argparse.Namespace) -> int:
    """A Spark standalone master and workers from the pyspark install, on 127.0.0.1."""
    need("cluster", "spark")
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


def cmd_workload(a: argparse.Namespace) -> int:
    from .bench.workload import generate, write_jsonl

    cfg = workload_config(a, a.dataset)
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
        need("--engine spark", "spark")
    cfg = workload_config(a, a.dataset)
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
                      master=a.master, lines_per_batch=a.lines_per_batch, spark_conf=spark_conf(a))
    else:
        m = run(events, out, window=a.window, index=a.index, workers=a.workers,
                partitioner=a.partitioner if a.workers > 1 else None)
    print(_summary(m, str(out)))
    return 0


def _add_serve(sp) -> None:
    """``skpubsub serve`` (SPEC section 8): flags and work live in :mod:`skpubsub.service`."""
    from .service.command import DESCRIPTION, add_arguments, serve

    p = sp.add_parser("serve", help=LAZY["serve"], description=DESCRIPTION)
    add_arguments(p, env)
    p.set_defaults(func=serve)


def _add_loadgen(sp) -> None:
    """``skpubsub loadgen``: a benchmark of a local ``serve``; flags and work in :mod:`skpubsub.service.loadgen`."""
    from .service.loadgen import DESCRIPTION, add_arguments, main

    p = sp.add_parser("loadgen", help=LAZY["loadgen"], description=DESCRIPTION)
    add_arguments(p)
    p.set_defaults(func=main)


# Commands whose flags come from modules that another command never needs (the service's,
# the load generator's: asyncio, sockets; ~30 ms of every ``run``'s start): their parsers are
# built only when the command line names them, else listed by their help alone.
LAZY = {"serve": "run the HTTP service (SPEC section 8)",
        "loadgen": "load-test a local `skpubsub serve` (loopback only)"}
_ADD_LAZY = {"serve": _add_serve, "loadgen": _add_loadgen}


def _add_workload_args(p: argparse.ArgumentParser, objects: int, subscriptions: int, kind: str) -> None:
    p.add_argument("--objects", type=int, default=objects)
    p.add_argument("--subscriptions", type=int, default=subscriptions)
    add_workload_shape_args(p, kind, match="mix", churn=2)


def parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; given the ``command`` about to be parsed, the ``LAZY``
    commands but that one are listed without their flags (every command's flags otherwise)."""
    from .bench.command import add_parsers as add_bench  # bench and its modes: flags and work in skpubsub.bench

    p = argparse.ArgumentParser(prog="skpubsub", description="Spatial-keyword publish/subscribe engine")
    sp = p.add_subparsers(dest="command", required=True)

    r = sp.add_parser("run", help="run an event file (SPEC section 4)")
    r.add_argument("events")
    r.add_argument("--out", required=True)
    r.add_argument("--window", default=env("window", "none"))
    r.add_argument("--space", default=env("space", "-180,-90,180,90"))
    r.add_argument("--engine", default=env("engine", "local"))
    r.add_argument("--workers", type=int, default=int(env("workers", "1") or 1))
    r.add_argument("--partitioner", default=env("partitioner", None))
    r.add_argument("--index", default=env("index", DEFAULT_INDEX),
                   help=f"the subscription index (default {DEFAULT_INDEX}; grid and reference are the baselines)")
    r.add_argument("--grid", type=int, default=None, help="grid cells per side (grid index)")
    r.add_argument("--buffer", default=env("buffer", None), choices=list(BUFFERS),
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
    add_spark_args(r)
    r.add_argument("--sink", default=None, metavar="redis://HOST:PORT/KEY",
                   help="--engine spark: also append each notification to this Redis stream (SPEC 9)")
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
    s.add_argument("--source", default=None,
                   help="directory of *.jsonl files (or one event file), or a Redis stream redis://HOST:PORT/KEY")
    s.add_argument("--sink", default=None, metavar="redis://HOST:PORT/KEY",
                   help="also append each notification to this Redis stream (SPEC 9)")
    s.add_argument("--generate", default=None, choices=["geonames-cities", "geonames-postal"], metavar="DATASET",
                   help="instead of --source: generate a workload from DATASET (workload flags) into "
                        "CHECKPOINT/workload.jsonl once and replay it (at --lines-per-second)")
    s.add_argument("--checkpoint", required=True)
    s.add_argument("--out", required=True)
    s.add_argument("--window", default=env("window", "none"))
    s.add_argument("--space", default=env("space", "-180,-90,180,90"))
    s.add_argument("--workers", type=int, default=int(env("workers", "2") or 2))
    s.add_argument("--partitioner", default=env("partitioner", "hash"))
    s.add_argument("--index", default=env("index", DEFAULT_INDEX))
    s.add_argument("--grid", type=int, default=None, help=argparse.SUPPRESS)
    s.add_argument("--init-objects", type=int, default=1000)
    add_spark_args(s)
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

    add_bench(sp)

    d = sp.add_parser("demo", help="generate a GeoNames workload and run it (make demo)")
    d.add_argument("--out", default="demo-out")
    d.add_argument("--dataset", default="geonames-cities")
    d.add_argument("--window", default="count:20000")
    d.add_argument("--index", default=DEFAULT_INDEX)
    d.add_argument("--engine", default=env("engine", "spark"), choices=["local", "spark"])
    d.add_argument("--workers", type=int, default=2)
    d.add_argument("--partitioner", default="dkm", choices=PARTITIONERS)
    add_spark_args(d)
    _add_workload_args(d, objects=30_000, subscriptions=10_000, kind="mix")
    d.set_defaults(func=cmd_demo)
    for name, add in _ADD_LAZY.items():
        if command is None or command == name:
            add(sp)
        else:
            sp.add_parser(name, help=LAZY[name])
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


_SIGINT_SEEN: list[bool] = []


def _on_sigint(signum: int, frame: object) -> None:
    """Python's own behaviour, remembered: a terminal's Ctrl-C also reaches the Spark JVM and its
    Python workers, and what the run's main thread then raises first may be their failure
    (a lost Py4J connection, a failed query) rather than the KeyboardInterrupt (SPEC 7)."""
    _SIGINT_SEEN.append(True)
    raise KeyboardInterrupt


@contextlib.contextmanager
def signals_not_swallowed():
    """A signal whose exception (``_on_sigint``'s KeyboardInterrupt, ``_on_sigterm``'s
    Signalled) is raised inside a callback that C code calls is printed as "Exception
    ignored" and lost: a Ctrl-C while Numba compiled a kernel (llvmlite's object-cache
    callback) let the run go on to exit 0. Such an exception is raised again a millisecond
    later from SIGALRM, whose handler runs back in the main thread's own code (or on leaving
    the block), and the run unwinds as for the signal itself (SPEC 7); swallowed again, it
    is armed again. (Raising the signal from the hook would run its handler inside the hook,
    and lose it there.)"""
    import signal

    pending: list[type[BaseException]] = []
    old_hook = sys.unraisablehook

    def hook(unraisable) -> None:
        if type(unraisable.exc_value) not in (KeyboardInterrupt, Signalled):
            old_hook(unraisable)
            return
        pending[:] = [type(unraisable.exc_value)]
        signal.setitimer(signal.ITIMER_REAL, 0.001)

    def again(signum: int, frame: object) -> None:
        if pending:
            raise pending.pop()()

    try:
        old_alarm = signal.signal(signal.SIGALRM, again)
    except (ValueError, AttributeError):  # not the main thread (an embedding), or no SIGALRM (Windows)
        yield
        return
    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = old_hook
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_alarm)
        if pending:  # swallowed in the command's last millisecond: raised here
            raise pending.pop()()


def _dispatch(a: argparse.Namespace) -> int:
    """Run the command; any error raised once SIGINT has arrived is the interrupt's doing."""
    try:
        return a.func(a)
    except Exception:
        if _SIGINT_SEEN:
            raise KeyboardInterrupt from None
        raise


def _os_error(exc: OSError) -> str:
    """One line for an error of a file or the operating system (no traceback)."""
    what = exc.strerror or str(exc) or type(exc).__name__
    where = [str(f) for f in (exc.filename, exc.filename2) if f is not None]
    return f"{what}: {' -> '.join(where)}" if where else what


def main(argv: list[str] | None = None) -> int:
    """The command line. Every error is one line ``skpubsub: error: ...`` and a non-zero exit;
    SIGINT exits 130, SIGTERM 143, after removing the run's unfinished outputs (SPEC 7)."""
    import signal

    from .bench.command import as_subcommand
    from .io.sinks import abort_open

    args = _join_negative_values(as_subcommand(sys.argv[1:] if argv is None else list(argv)))
    a = parser(args[0] if args and not args[0].startswith("-") else None).parse_args(args)
    old_term = old_int = None
    _SIGINT_SEEN.clear()
    try:
        try:  # inside the outer try: a SIGTERM pending as its handler is installed is caught there
            old_term = signal.signal(signal.SIGTERM, _on_sigterm)
            # not ignored (nohup, &); the package's start-up handler (skpubsub/__init__.py) is replaced
            if signal.getsignal(signal.SIGINT) in (signal.default_int_handler, _exit_at_start):
                old_int = signal.signal(signal.SIGINT, _on_sigint)
        except ValueError:  # not the main thread (an embedding): its own handlers stay
            pass
        if hasattr(a, "window"):
            a.window = Window.parse(a.window)
        if hasattr(a, "space"):
            a.space = Space.parse(a.space)
        with signals_not_swallowed():
            return _dispatch(a)
    except (UsageError, ValueError) as exc:
        abort_open()
        print(f"skpubsub: {'' if isinstance(exc, MissingExtra) else 'error: '}{exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:  # an optional package imported deeper than the checks above
        abort_open()
        if (exc.name or "").split(".")[0] not in OPTIONAL:
            raise
        print(f"skpubsub: {missing_extra(a.command, exc.name)}", file=sys.stderr)
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
        with contextlib.suppress(ValueError):
            if old_term is not None:
                signal.signal(signal.SIGTERM, old_term)
            if old_int is not None:
                signal.signal(signal.SIGINT, old_int)


def command() -> None:
    """The console script and ``python -m skpubsub``: ``main``, then out of the process
    without the interpreter's teardown, which frees every object, module and compiled
    kernel one by one: 0.13-0.18 s a run, 11% of ``run`` on a 120,000-line file (io/NOTES.md,
    "The run's start and end"). What a normal exit does besides is done first: the standard
    streams flushed and the ``atexit`` functions run (multiprocessing's joins the children).
    A thread still alive that is not a daemon would keep Python waiting: then it exits as
    usual."""
    code = main() or 0
    _flush_streams()
    others = [t for t in threading.enumerate() if t is not threading.main_thread()]
    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
    if run_exitfuncs is None or any(t.is_alive() and not t.daemon for t in others):
        sys.exit(code)
    run_exitfuncs()
    _flush_streams()  # what the exit functions wrote
    os._exit(code)


def _flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing more can be said
            stream.flush()


if __name__ == "__main__":
    command()
