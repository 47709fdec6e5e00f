"""``skpubsub bench spark``: the Spark runtime against the local multi-worker runtime.

Both run the same event file with the same M, planner and index (local first,
then Spark, so they never share the cores); the four output files must be equal.
Reported: objects/s of each (Spark both over its whole wall time, session start
and statistics job included, and over its micro-batches only), each micro-batch
split into sequencer, slowest worker, sink and the rest (Spark's own overhead:
scheduling, shuffle, state store commits, Arrow transfers), end-to-end latency,
state bytes per subscription (the workers' engine snapshots and the state
store's files on disk), and peak memory (:class:`PeakMemory`). Writes ``spark.json``
and ``spark_batches.png``.

``clusters`` (``--cluster 1,2``): the scaling mode. For each executor count N a loopback
standalone cluster of N workers with one executor each (``spark/cluster.py``) is started,
the same file run on it, the cluster stopped (also on an error or Ctrl-C); one row per N
in ``spark.json`` and ``spark_scaling.png``. One worker per executor, not one worker with
N executors: a worker stands for a machine (its own JVM, its own Python workers, the
executor's memory its own), which is what the figures are meant to predict.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics as st
import threading
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


MB = 1 << 20


def _proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process in bytes ({} once it is gone)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    out[line[:5]] = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return {}
    return out


def _pss(pid: int) -> int:
    """Proportional set size in bytes (0 once gone): forked Python workers share the daemon's
    pages, which a sum of RSS would count once per process."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children") as f:
                kids += [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        pass
    return kids


def _descendants(pid: int) -> list[int]:
    out, stack = [], _children(pid)
    while stack:
        c = stack.pop()
        out.append(c)
        stack += _children(c)
    return out


def _reset_hwm(pid: int) -> bool:
    """VmHWM back to the current RSS (``clear_refs`` 5, Linux 4.0+): a peak of this run only."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _executor_jvms(app_id: str) -> dict[int, str]:
    """pid -> executor id of this application's executor JVMs on this machine (a loopback or
    local-cluster master; a remote executor is not seen)."""
    found: dict[int, str] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in args and app_id.encode() in args:
            i = args.index(b"--executor-id") if b"--executor-id" in args else -1
            found[int(d)] = args[i + 1].decode() if 0 <= i < len(args) - 1 else d
    # a JVM's child between fork and exec (starting a Python daemon) shows the JVM's command line
    return {pid: eid for pid, eid in found.items() if _ppid(pid) not in found}


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


class PeakMemory:
    """Peak memory of one Spark run, from ``/proc`` (sampled every ``period`` s) and the driver
    JVM's memory pools:

    - ``driver_python_bytes``: this process's VmHWM (the statistics job's driver side, the
      sink's ``foreachBatch`` callbacks, the assembly of the output files), reset when the
      run starts: exact, not sampled;
    - ``driver_jvm_bytes``: the driver JVM's VmHWM, reset likewise (heap, metaspace, threads,
      and under ``local[*]`` the executors' RocksDB state stores, which live off the heap);
    - ``driver_jvm_heap_bytes``: the sum of the JVM's heap pools' peak usage (MemoryPoolMXBean,
      reset likewise; an upper bound of the heap's peak: pools peak at different times);
    - ``driver_python_workers_bytes``: the largest sampled sum of PSS (proportional set
      size: pages shared by forked workers counted once) of the driver JVM's descendant
      processes: the streaming source's Python process (the sequencer reads and routes the
      lines there), the one that plans transformWithState, and under ``local[*]`` the Python
      workers running the engines;
    - per executor (this application's executor JVMs found in ``/proc``, so only on this
      machine): ``jvm_bytes`` (its VmHWM: exact; RocksDB is in it), ``python_bytes`` (the
      largest sampled sum of PSS of its Python daemon and workers: the engines) and
      ``total_bytes`` (the largest sampled sum of the JVM's RSS and that).
    """

    def __init__(self, spark, period: float = 0.25) -> None:
        sc = spark.sparkContext
        self.app_id = sc.applicationId
        self.local = sc.master.startswith("local")
        self.jvm = sc._jvm
        self.jvm_pid = int(self.jvm.java.lang.ProcessHandle.current().pid())
        self.period = period
        self.reset = _reset_hwm(os.getpid()) & _reset_hwm(self.jvm_pid)
        for pool in self._heap_pools():
            pool.resetPeakUsage()
        self.workers_peak = 0
        self.execs: dict[int, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="skpubsub-peak-memory", daemon=True)
        self._thread.start()

    def _heap_pools(self) -> list:
        mf = self.jvm.java.lang.management.ManagementFactory
        heap = self.jvm.java.lang.management.MemoryType.HEAP
        return [p for p in mf.getMemoryPoolMXBeans() if p.getType().equals(heap)]

    def _tree_pss(self, pid: int) -> int:
        return sum(_pss(c) for c in _descendants(pid))

    def sample(self) -> None:
        self.workers_peak = max(self.workers_peak, self._tree_pss(self.jvm_pid))
        if self.local:
            return
        for pid, eid in _executor_jvms(self.app_id).items():
            s = _proc_status(pid)
            if not s:
                continue
            e = self.execs.setdefault(pid, {"executor": eid, "pid": pid, "jvm_bytes": 0, "python_bytes": 0,
                                            "total_bytes": 0})
            py = self._tree_pss(pid)
            e["jvm_bytes"] = max(e["jvm_bytes"], s.get("VmHWM", 0))
            e["python_bytes"] = max(e["python_bytes"], py)
            e["total_bytes"] = max(e["total_bytes"], s.get("VmRSS", 0) + py)

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self.sample()

    def stop(self) -> dict:
        """The figures (bytes); call before the session stops (its executors end with it)."""
        self._stop.set()
        self._thread.join()
        self.sample()
        heap = sum(int(p.getPeakUsage().getUsed()) for p in self._heap_pools())
        execs = sorted(self.execs.values(), key=lambda e: (len(e["executor"]), e["executor"]))
        return {
            "driver_python_bytes": _proc_status(os.getpid()).get("VmHWM"),
            "driver_jvm_bytes": _proc_status(self.jvm_pid).get("VmHWM"),
            "driver_jvm_heap_bytes": heap,
            "driver_python_workers_bytes": self.workers_peak,
            "executors": execs,
            "executor_max_total_bytes": max((e["total_bytes"] for e in execs), default=None),
            "executor_max_jvm_bytes": max((e["jvm_bytes"] for e in execs), default=None),
            "executor_max_python_bytes": max((e["python_bytes"] for e in execs), default=None),
            "peaks_of_this_run": self.reset,  # False: VmHWM since the process started
            "sample_seconds": self.period,
        }


def _run_on_spark(events: Path, out: Path, window: Window, space: Space, workers: int, partitioner: str,
                  index: str, lines_per_batch: int, init_objects: int, rebalance: dict | None, master: str | None,
                  spark_conf: dict[str, str] | None) -> tuple[dict, dict]:
    """One Spark run in a session of its own (stopped after its memory is read): (metrics, memory)."""
    from pyspark import SparkContext

    from ..spark.pipeline import describe_failure, run_spark, spark_errors, start_session
    from ..spark.session import SparkFailure

    shutil.rmtree(out, ignore_errors=True)
    own = SparkContext._active_spark_context is None
    spark = start_session(master, workers, spark_conf, brief=True)
    try:
        mem = PeakMemory(spark)
        try:
            metrics = run_spark(events, out, window=window, space=space, index=index, workers=workers,
                                partitioner=partitioner, init_objects=init_objects,
                                lines_per_batch=lines_per_batch, master=master, spark=spark, spark_conf=spark_conf,
                                rebalance=rebalance)
        finally:
            memory = mem.stop()
    except spark_errors() as exc:
        raise SparkFailure(f"Spark run failed: {describe_failure(exc)}") from None
    finally:
        if own:
            spark.stop()
    return metrics, memory


def _spark_row(spark: dict, out: Path, local: Path) -> dict:
    """A Spark run's figures (``spark``: run_spark's metrics; ``out``: its folder)."""
    batches = spark["batches"]
    busy = [b for b in batches if b["worker_seconds"]]  # batches the workers had rows in
    stream_s = sum(b["duration_seconds"] or 0.0 for b in batches)
    n_obj = spark["objects"]
    subs = sum(v for k, v in spark["accepted"].items() if k.startswith("sub:")) - spark["accepted"].get("unsub", 0)
    snaps: dict[int, int] = {}
    for f in sorted((out / "batches").glob("*/batch-*.json")):  # batches/<run id>/
        for w in json.loads(f.read_text())["workers"]:
            if w.get("snapshot_bytes"):
                snaps[w["worker"]] = w["snapshot_bytes"]
    state_disk = _du(out / "_checkpoint" / "query" / "state")
    return {
        "same_files": all((local / f).read_text() == (out / f).read_text() for f in FILES),
        "objects": n_obj, "subscriptions_at_end": subs,
        "wall_seconds": spark["wall_seconds"],
        "objects_per_second_wall": spark["objects_per_second"],
        "batches": len(batches),
        "batch_seconds_total": round(stream_s, 3),
        "objects_per_second_batches": round(n_obj / stream_s, 1) if stream_s else None,
        "busy_batches": len(busy),
        # the driver's routing of the whole file (wall seconds; the workers wait for it)
        "sequencer_seconds_total": round(sum(b["sequencer_seconds"] or 0.0 for b in batches), 3),
        "median_busy_batch": {
            "duration_seconds": _med([b["duration_seconds"] for b in busy]),
            "sequencer_seconds": _med([b["sequencer_seconds"] for b in busy]),
            "slowest_worker_seconds": _med([max(b["worker_seconds"]) for b in busy]),
            "workers_seconds": _med([b["workers_seconds"] for b in busy]),  # the worker phase's span (pipeline._span)
            "sink_seconds": _med([b["sink_seconds"] for b in busy]),
            "spark_overhead_seconds": _med([b["spark_overhead_seconds"] for b in busy]),
            "latency_seconds": _med([b["latency_seconds"] for b in busy]),
        },
        "worker_cache": [c for b in batches for c in b["worker_cache"]],
        "snapshot_bytes_per_subscription": round(sum(snaps.values()) / subs, 1) if snaps and subs else None,
        "notifications_bytes": (out / "notifications.jsonl").stat().st_size,
        "state_store_disk_bytes": state_disk,
        "state_store_bytes_per_subscription": round(state_disk / subs, 1) if subs else None,
    }


def _counts(clusters: str | list[int]) -> list[int]:
    try:
        ns = [int(x) for x in clusters.split(",")] if isinstance(clusters, str) else list(clusters)
    except ValueError:
        ns = []
    if not ns or any(n < 1 for n in ns):
        raise ValueError(f"--cluster takes executor counts >= 1 separated by commas (e.g. 1,2), got {clusters!r}")
    return ns


def bench_spark(events: Path, out: Path, window: Window, space: Space, workers: int, partitioner: str,
                index: str, lines_per_batch: int, init_objects: int, master: str | None = None,
                spark_conf: dict[str, str] | None = None, clusters: str | list[int] | None = None,
                rebalance: dict | None = None) -> dict:
    from ..runtime.runner import run

    counts = _counts(clusters) if clusters is not None else None
    if counts and master:
        raise ValueError("--cluster starts its own loopback clusters: no --master with it")
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    run(events, out / "local", window=window, space=space, index=index, workers=workers,
        partitioner=partitioner, init_objects=init_objects, rebalance=rebalance)
    local_wall = time.perf_counter() - t0
    args = (window, space, workers, partitioner, index, lines_per_batch, init_objects, rebalance)
    head = {"events": str(events), "workers": workers, "partitioner": partitioner, "index": index,
            "window": str(window), "lines_per_batch": lines_per_batch, "rebalance": rebalance}
    try:
        return _bench(events, out, args, head, counts, master, spark_conf, local_wall)
    finally:
        from ..spark.session import end_jvm

        end_jvm()  # a JVM writing the class archive ends inside the command (session.class_archive)


def _bench(events: Path, out: Path, args: tuple, head: dict, counts: list[int] | None, master: str | None,
           spark_conf: dict[str, str] | None, local_wall: float) -> dict:
    """``bench_spark`` after the local run: one Spark run, or one per executor count."""
    if counts is None:
        metrics, memory = _run_on_spark(events, out / "spark", *args, master, spark_conf)
        row = _spark_row(metrics, out / "spark", out / "local")
        n_obj = row.pop("objects")
        rep: dict[str, Any] = {
            **head, "objects": n_obj, "subscriptions_at_end": row.pop("subscriptions_at_end"),
            "same_files": row.pop("same_files"),
            "local": {"wall_seconds": round(local_wall, 3), "objects_per_second": round(n_obj / local_wall, 1)},
            "spark": row, "memory": memory,
        }
        rep["spark_vs_local"] = round(row["objects_per_second_wall"] / rep["local"]["objects_per_second"], 3) \
            if row["objects_per_second_wall"] else None
        (out / "spark.json").write_text(json.dumps({**rep, "spark_batches": metrics["batches"]}, indent=2) + "\n")
        plot_batches(metrics["batches"], out / "spark_batches.png",
                     f"{head['workers']} workers, {head['partitioner']}, {head['lines_per_batch']} lines/batch")
        return rep
    return _scaling(events, out, args, counts, spark_conf or {}, local_wall, head)


def _scaling(events: Path, out: Path, args: tuple, counts: list[int], conf: dict[str, str], local_wall: float,
             head: dict) -> dict:
    from ..spark import cluster
    from ..spark.plots import plot_scaling

    cores = int(conf.get("spark.executor.cores", "1"))
    conf = {"spark.executor.cores": str(cores), **conf}
    memory = conf.get("spark.executor.memory", "1g")
    rows, batches = [], {}
    for n in counts:
        d = out / "cluster"  # master and worker logs, executors' work folders: kept for a look after
        try:  # start inside: a Ctrl-C while workers register stops what was spawned
            st = cluster.start(d, workers=n, cores=cores, memory=memory)
            # every core of the cluster for this application: N executors of `cores` each
            metrics, mem = _run_on_spark(events, out / f"spark-{n}", *args, st["master"],
                                         {**conf, "spark.cores.max": str(n * cores)})
        finally:
            cluster.stop(d)  # also on an error and Ctrl-C: no JVM left behind
        row = _spark_row(metrics, out / f"spark-{n}", out / "local")
        rows.append({"executors": n, "executor_cores": cores, "executor_memory": memory,
                     "executors_seen": len(mem["executors"]), **row, "memory": mem})
        batches[str(n)] = metrics["batches"]
    n_obj = rows[0]["objects"]
    rep = {**head, "objects": n_obj, "subscriptions_at_end": rows[0]["subscriptions_at_end"],
           "same_files": all(r["same_files"] for r in rows),
           "local": {"wall_seconds": round(local_wall, 3), "objects_per_second": round(n_obj / local_wall, 1)},
           "scaling": rows, "amdahl": amdahl(rows, batches, head["workers"])}
    (out / "spark.json").write_text(json.dumps({**rep, "spark_batches": batches}, indent=2) + "\n")
    plot_scaling(rows, out / "spark_scaling.png",
                 f"{head['workers']} workers, {head['partitioner']}, {head['lines_per_batch']} lines/batch, "
                 f"{n_obj:,} objects", rep["amdahl"])
    return rep


PREDICT = (1, 2, 4, 8, 16)  # executor counts the serial fraction is turned into speed-ups for


def amdahl(rows: list[dict], batches: dict[str, list[dict]], m: int) -> dict:
    """The serial fraction of the busy micro-batches of the row with the fewest executors, and
    the speed-ups it predicts (Amdahl: ``1 / (s + (1 - s) / n)``) against those measured.

    A batch's parallel part is its worker tasks' time summed (what one core does in turn;
    more executors divide it), the serial part the rest of the batch: sequencer, sink and
    Spark's own time, all on the driver or per batch, which more executors do not divide (a
    bound: Spark's per-task share of it would divide). With ``m`` workers at most ``m``
    executors have work: the prediction for ``n`` uses ``min(n, m)``; ``predicted_n_workers``
    is the law's for ``n`` workers on ``n`` executors (the same work split further)."""
    base = min(rows, key=lambda r: r["executors"])
    busy = [b for b in batches[str(base["executors"])] if b["worker_seconds"]]
    total = sum(b["duration_seconds"] or 0.0 for b in busy)
    work = sum(sum(b["worker_seconds"]) for b in busy)
    if total <= 0:
        return {"serial_fraction": None, "from_executors": base["executors"], "predicted": {},
                "predicted_n_workers": {}, "measured": {}}
    s = min(1.0, max(0.0, (total - work) / total))
    # the fewest executors' own speed-up over one, as the law would have it, scales the rest
    ref = 1.0 / (s + (1.0 - s) / min(base["executors"], m))
    rate = base["objects_per_second_batches"] or 0.0
    return {
        "serial_fraction": round(s, 4), "from_executors": base["executors"], "batches": len(busy),
        "predicted": {str(n): round(1.0 / (s + (1.0 - s) / min(n, m)) / ref, 3) for n in PREDICT},
        # the same batches cut for n workers on n executors (more workers, the same serial part)
        "predicted_n_workers": {str(n): round(1.0 / (s + (1.0 - s) / n) / ref, 3) for n in PREDICT},
        "measured": {str(r["executors"]): round((r["objects_per_second_batches"] or 0.0) / rate, 3) if rate else None
                     for r in rows},
    }


def _mb(v: int | None) -> str:
    return "-" if v is None else f"{v / MB:,.0f} MB"


def _memory_line(m: dict) -> str:
    ex = m["executors"]
    execs = ("; executors (JVM + Python workers): " + ", ".join(
        f"#{e['executor']} {_mb(e['total_bytes'])} ({_mb(e['jvm_bytes'])} + {_mb(e['python_bytes'])})" for e in ex)
        if ex else "; no executor JVM on this machine (local mode: the driver JVM holds the executor)")
    return (f"peak memory   : driver Python {_mb(m['driver_python_bytes'])}, driver JVM {_mb(m['driver_jvm_bytes'])} "
            f"(heap {_mb(m['driver_jvm_heap_bytes'])}), driver's Python workers "
            f"{_mb(m['driver_python_workers_bytes'])}{execs}")


def format_scaling(rep: dict) -> str:
    lines = [(f"{rep['objects']} objects, {rep['subscriptions_at_end']} subscriptions, M={rep['workers']} "
              f"{rep['partitioner']}, index {rep['index']}, window {rep['window']}; same files: {rep['same_files']}"),
             f"local runtime: {rep['local']['objects_per_second']:,.1f} objects/s ({rep['local']['wall_seconds']:.1f} s)",
             ("executors  objects/s wall  objects/s batches  median batch = seq + workers + sink + Spark   latency"
              "   driver Py/JVM     executor max (JVM + Py)")]
    for r in rep["scaling"]:
        mb, m = r["median_busy_batch"], r["memory"]
        lines.append(
            f"{r['executors']:>9}  {r['objects_per_second_wall'] or 0:>14,.1f}  {r['objects_per_second_batches'] or 0:>17,.1f}"
            f"  {mb['duration_seconds']} = {mb['sequencer_seconds']} + {mb['workers_seconds']} + "
            f"{mb['sink_seconds']} + {mb['spark_overhead_seconds']}  {mb['latency_seconds']}   "
            f"{_mb(m['driver_python_bytes'])} / {_mb(m['driver_jvm_bytes'])}   "
            f"{_mb(m['executor_max_total_bytes'])} ({_mb(m['executor_max_jvm_bytes'])} + "
            f"{_mb(m['executor_max_python_bytes'])})")
    a = rep.get("amdahl") or {}
    if a.get("serial_fraction") is not None:
        lines.append(f"serial fraction {a['serial_fraction']:.1%} of the busy batches with {a['from_executors']} "
                     f"executor(s); speed-up over them, measured: " +
                     ", ".join(f"{n}: {v}x" for n, v in a["measured"].items()) + "; Amdahl predicts: " +
                     ", ".join(f"{n}: {v}x" for n, v in a["predicted"].items()) + f" ({rep['workers']} workers), " +
                     ", ".join(f"{n}: {v}x" for n, v in a["predicted_n_workers"].items()) + " (as many workers)")
    return "\n".join(lines)


def format_report(rep: dict) -> str:
    s, loc, mb = rep["spark"], rep["local"], rep["spark"]["median_busy_batch"]
    return "\n".join([
        f"{rep['objects']} objects, {rep['subscriptions_at_end']} subscriptions, M={rep['workers']} "
        f"{rep['partitioner']}, index {rep['index']}, window {rep['window']}; same files: {rep['same_files']}",
        f"local runtime : {loc['objects_per_second']:>10,.1f} objects/s  ({loc['wall_seconds']:.1f} s)",
        f"spark (wall)  : {s['objects_per_second_wall'] or 0:>10,.1f} objects/s  ({s['wall_seconds']:.1f} s, "
        f"session start and statistics included)  = {rep['spark_vs_local']}x local",
        f"spark batches : {s['objects_per_second_batches'] or 0:>10,.1f} objects/s  ({s['batches']} batches, "
        f"{s['batch_seconds_total']:.1f} s, of it the sequencer {s['sequencer_seconds_total']:.1f} s)",
        f"median batch  : {mb['duration_seconds']} s (of {s['busy_batches']} with worker rows) = sequencer "
        f"{mb['sequencer_seconds']} + workers {mb['workers_seconds']} (slowest {mb['slowest_worker_seconds']}) + "
        f"sink {mb['sink_seconds']} + Spark {mb['spark_overhead_seconds']}; "
        f"latency {mb['latency_seconds']} s",
        f"state         : engine snapshots {s['snapshot_bytes_per_subscription']} B/subscription, "
        f"state store on disk {s['state_store_bytes_per_subscription']} B/subscription",
        _memory_line(rep["memory"]),
    ])
