"""Spark jobs: statistics (batch) and the streaming run (``run --engine spark``, ``stream``).

The streaming query is::

    readStream.format("skpubsub")                         # lines -> sequencer -> per-worker rows
      .groupBy("worker").transformWithStateInPandas(...)  # one worker engine per key, RocksDB state
      .writeStream.foreachBatch(sink)                     # per-batch metadata (the tasks wrote the lines)

and is restartable from its checkpoint directory: the sequencer's snapshots, the
query's offsets and state, the tasks' part files and the sink's batch records all key
on offsets or batch ids, so a replayed batch reproduces the same rows and overwrites the
same files.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

from ..core.config import Space, Window
from ..io.redis_bus import RedisURL, is_redis
from ..runtime.engines import DEFAULT_INDEX
from .formats import is_tabular, to_jsonl
from .fs import Loc
from .redis_stream import as_input
from .session import SparkFailure, jvm_said
from .sink import assemble, batch_dir, clear_other_runs, record_batch
from .statefile import read_stats
from .worker import OUTPUT_SCHEMA


# -- batch: statistics ---------------------------------------------------------------
# -- streaming -------------------------------------------------------------------------
def spark_hash(k: int, seed: int = 42) -> int:
    """Spark SQL's ``hash`` of an int (Murmur3 x86 32-bit of its 4 bytes, seed 42): what
    hash partitioning computes for a grouping key of type int."""
    def rotl(x: int, r: int) -> int:
        return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF

    k1 = rotl((k & 0xFFFFFFFF) * 0xCC9E2D51 & 0xFFFFFFFF, 15) * 0x1B873593 & 0xFFFFFFFF
    h = (rotl(seed ^ k1, 13) * 5 + 0xE6546B64) & 0xFFFFFFFF
    h ^= 4  # the length in bytes
    h = ((h ^ (h >> 16)) * 0x85EBCA6B) & 0xFFFFFFFF
    h = ((h ^ (h >> 13)) * 0xC2B2AE35) & 0xFFFFFFFF
    h ^= h >> 16
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_keys(spark, workers: int) -> list[int]:
    """Grouping keys, one per worker and one for the driver rows (last), such that
    worker ``w`` lands in shuffle partition ``w``: Spark partitions a group by
    ``pmod(hash(key), partitions)``, and plain ids 0..M-1 can collide (two workers
    in one task, run one after the other). Computed here (``spark_hash``), not by a job."""
    keys: list[int] = []
    for w in range(workers):
        keys.append(next(k for k in range(64 * workers + 64) if spark_hash(k) % workers == w and k not in keys))
    keys.append(next(k for k in range(64 * workers + 64) if k not in keys))
    return keys



class _Progress:
    """Each micro-batch's progress, read from the query on the driver (``recentProgress``):
    no StreamingQueryListener, whose events the JVM delivers to Python asynchronously through
    Py4J's callback server, so that one still queued when the run ended printed a Py4J error
    trace after a successful run (issue 18 class 6)."""

    def __init__(self, bar: _Bar | None = None) -> None:
        self.batches: list[dict] = []
        self._seen: set[tuple[str, int]] = set()
        self._absorbed = -1
        self.bar = bar
        self.base = 0  # the run's number of the running query's batch 0 (a generation of workers)

    def absorb(self, query) -> None:
        """The progress records not kept yet (the query holds its last 100)."""
        for p in query.recentProgress:
            key = (str(p.runId), p.batchId)
            if key not in self._seen:
                self._seen.add(key)
                self.batches.append(_progress_record(p, self.base))
                self._absorbed = max(self._absorbed, p.batchId)

    def tick(self, query) -> None:
        """While the query runs: the bar, and the records before the query forgets them."""
        p = query.lastProgress
        if p is None:
            return
        if p.batchId - self._absorbed >= 50:
            self.absorb(query)
        if self.bar is not None:
            self.bar.show(p)


class _Bar:
    """``[#####.....]  45%  4,500/10,000 lines, batch 12`` on stderr, rewritten in place."""

    def __init__(self, total: int | None, stream=None) -> None:
        import sys

        self.total, self.out, self.shown = total, stream or sys.stderr, False

    @staticmethod
    def wanted() -> bool:
        import sys

        v = os.environ.get("SKPUBSUB_PROGRESS", "")
        return v not in ("", "0") if v else sys.stderr.isatty()

    def show(self, p) -> None:
        try:
            line = int(json.loads(p.sources[0].endOffset)["line"])
        except (IndexError, KeyError, TypeError, ValueError):
            return
        if self.total:
            frac = min(1.0, line / self.total)
            text = f"[{'#' * int(30 * frac):.<30}] {100 * frac:3.0f}%  {line:,}/{self.total:,} lines, batch {p.batchId}"
        else:
            text = f"{line:,} lines, batch {p.batchId}"
        self.out.write("\r" + text)
        self.out.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            self.out.write("\n")
            self.out.flush()


def _progress_record(p, base: int = 0) -> dict:
    ops = p.stateOperators or []
    return {
        "run": str(p.runId),
        "batch": base + p.batchId,
        "input_rows": p.numInputRows,
        "duration_ms": dict(p.durationMs),
        "state_rows": sum(o.numRowsTotal for o in ops),
        "state_memory_bytes": sum(o.memoryUsedBytes for o in ops),
        "state_custom": {k: v for o in ops for k, v in (o.customMetrics or {}).items()
                         if "rocksdb" in k.lower() and ("bytes" in k.lower() or "size" in k.lower())},
    }


def _fingerprint(path: Loc, config: dict) -> dict:
    if path.local:
        real = os.path.realpath(path.path)
        return {"input": real, "size": os.path.getsize(real) if os.path.isfile(real) else None, **config}
    return {"input": path.uri, "size": path.size() if path.is_file() else None, **config}


def start_query(spark, source: Loc, out: Loc, checkpoint: Loc, config: dict, index: str, params: dict,
                lines_per_batch: int, lines_per_second: float | None = None, once: bool = True,
                trigger_seconds: float = 1.0, snapshot_every: int = 16):
    """Start the streaming query of generation ``config["gen"]`` of workers (``config["switch"]``:
    only its last batch, see ``source.EventReader``); returns it (the caller waits or stops it)."""
    from .processor import WorkerProcessor

    out.mkdir()
    gen = config["generations"][config["gen"]]
    base = gen["batch"]
    opts = {"path": source.uri, "checkpoint": (checkpoint / "sequencer").uri, "config": json.dumps(config),
            "linesPerBatch": str(lines_per_batch), "out": out.uri}
    if lines_per_second:
        opts["linesPerSecond"] = str(lines_per_second)
    routed = spark.readStream.format("skpubsub").options(**opts).load()
    outputs = routed.groupBy("worker").transformWithStateInPandas(
        WorkerProcessor(config["window"], config["space"], index, params, snapshot_every, config["keys"],
                        out.uri, config["run"], base=base, fleet=bool(config.get("fleet"))),
        OUTPUT_SCHEMA, "Append", "None")

    run = config["run"]
    batch_dir(out, run).mkdir()

    def sink(df, batch_id: int) -> None:
        """The workers wrote their lines as part files; only their metadata rows come here."""
        t0 = time.perf_counter()
        with warnings.catch_warnings():  # a query stopped mid-batch (stream's timeout, Ctrl-C): the job is
            warnings.simplefilter("ignore", UserWarning)  # cancelled, Spark replays the batch; no trace printed
            pdf = df.toPandas()  # runs the batch: the workers' tasks end here
        t1 = time.perf_counter()
        info = record_batch(out, base + batch_id, pdf, {"sink_time": time.time(), "collect_seconds": round(t1 - t0, 6),
                                                 "collected_rows": len(pdf)}, run, started=t1)
        if config.get("sink"):  # --sink redis://...: the batch's notifications appended, exactly once
            from .redis_stream import publish_batch

            publish_batch(out, run, info, config["sink"])

    w = outputs.writeStream.foreachBatch(sink).option("checkpointLocation", (checkpoint / gen["query"]).uri)
    w = w.trigger(availableNow=True) if once else w.trigger(processingTime=f"{trigger_seconds} seconds")
    return w.start()


def _span(workers: list[dict], work: list[float]) -> float:
    """A batch's worker phase as it ran: from the first worker task's start to the last one's
    end (wall clocks; tasks that shared an executor core ran one after another, so the
    slowest one alone would leave the others' time in the Spark overhead). Records without
    the times (older checkpoints): the slowest worker."""
    if workers and all("began" in w and "ended" in w for w in workers):
        return max(w["ended"] for w in workers) - min(w["began"] for w in workers)
    return max(work, default=0.0)


def _metrics(out: Loc, progress: list[dict], wall: float, config: dict, index: str) -> dict:
    info = assemble(out, config["run"])
    batches = info["batches"]
    meta = next((b["meta"] for b in reversed(batches) if "meta" in b), {})
    by_id = {p["batch"]: p for p in progress}
    per_batch = []
    for b in batches:
        workers = [w for w in b["workers"] if "apply_seconds" in w]
        work = [w["load_seconds"] + w["apply_seconds"] + w["state_seconds"] + w.get("write_seconds", 0.0)
                for w in workers]  # writing the part files is the worker's own work
        src = b.get("source") or [{}]
        seq_s = sum(x.get("restore_seconds", 0.0) + x.get("sequence_seconds", 0.0) + x.get("snapshot_seconds", 0.0)
                    for x in src)
        p = by_id.get(b["batch"], {})
        total_ms = p.get("duration_ms", {}).get("triggerExecution")
        span = _span(workers, work)
        ours = seq_s + span + b.get("sink_seconds", 0.0)
        rec = {
            "batch": b["batch"],
            "lines": sum(x.get("lines", 0) for x in src),
            "notifications": b["notifications"],
            "input_rows": p.get("input_rows"),
            "duration_seconds": total_ms / 1000 if total_ms is not None else None,
            "sequencer_seconds": round(seq_s, 6),
            "worker_seconds": [round(x, 6) for x in work],
            "workers_seconds": round(span, 6),
            "worker_cpu_seconds": [w["cpu_seconds"] for w in workers],
            "worker_cache": [w["cache"] for w in workers],
            "sink_seconds": b.get("sink_seconds"),
            "spark_overhead_seconds": round(total_ms / 1000 - ours, 6) if total_ms is not None else None,
            "spark_ms": p.get("duration_ms"),  # Spark's own split: latestOffset, walCommit, addBatch, commitOffsets
            "latency_seconds": round(b["sink_time"] - min(w["ingest"] for w in workers), 6) if workers else None,
            "state_rows": p.get("state_rows"),
            "state_memory_bytes": p.get("state_memory_bytes"),
            "state_store": p.get("state_custom"),
            "worker_snapshot_bytes": sum(w["snapshot_bytes"] or 0 for w in workers),
            "sequencer_snapshot_bytes": sum(x.get("snapshot_bytes", 0) for x in src),
        }
        per_batch.append(rec)
    n_obj = meta.get("objects", 0)
    n_notes = sum(b["notifications"] for b in batches)
    return {
        "engine": "spark",
        "workers": config["workers"],
        "partitioner": config["partitioner"],
        "index": index,
        "window": config["window"],
        "space": config["space"],
        **{k: meta.get(k) for k in ("accepted", "rejected", "accepted_total", "rejected_total")},
        "notifications": n_notes,
        "wall_seconds": round(wall, 6),
        "objects": n_obj,
        "objects_per_second": round(n_obj / wall, 2) if wall > 0 and n_obj else None,
        **{k: meta[k] for k in ("messages", "messages_per_object", "replication_ratio", "plan",
                                  "migrated_subscriptions", "adjustments") if k in meta},
        "batches": per_batch,
    }


def _prepare(spark, source: Loc, checkpoint: Loc, config: dict, index: str, params: dict,
             window: Window, space: Space) -> tuple[dict, Loc]:
    """Guard the checkpoint against another run's flags; convert a CSV/Parquet input
    to JSON lines and compute the statistics, once (kept for restarts, as data: a
    ``*.pkl`` file in the checkpoint is refused, never loaded). A new checkpoint gets a
    new run id (``run.json``), which the outputs' batch files are kept under.
    Returns the source config (with ``run``) and the path the stream reads."""
    source, checkpoint = as_input(source), Loc(checkpoint)
    fp = _fingerprint(source, {**config, "index": index, "params": params})
    checkpoint.mkdir()
    for p in checkpoint.rglob_suffix(".pkl"):
        raise ValueError(f"checkpoint {checkpoint} holds {str(p)[len(str(checkpoint)) + 1:]}: pickles are never "
                         "loaded (SPEC section 7); remove the checkpoint or pick another --checkpoint")
    fp_file = checkpoint / "run.json"
    run_id = None
    if fp_file.exists():
        try:
            saved = json.loads(fp_file.read_text())
        except (ValueError, UnicodeError):
            saved = None
        if not isinstance(saved, dict):
            raise ValueError(f"checkpoint {checkpoint}: run.json is damaged; remove the checkpoint")
        run_id = saved.pop("run", None)
        first = saved.pop("workers", None)  # M may change on restart: a new generation of workers
        if ({k: v for k, v in fp.items() if k != "workers"} != saved or not isinstance(first, int)
                or not (isinstance(run_id, str) and run_id.isalnum())):
            raise ValueError(f"checkpoint {checkpoint} belongs to another run; remove it or pick another --checkpoint")
        gens = _generations(checkpoint, first)
    else:
        run_id = uuid.uuid4().hex
        _write_text(fp_file, json.dumps({**fp, "run": run_id}))
        gens = _generations(checkpoint, config["workers"])
    if is_tabular(source.path):  # converted once, in order, to the JSON lines the source reads
        converted = checkpoint / "input.jsonl"
        if not converted.exists():
            to_jsonl(spark, source, converted)
        source = converted
    config = {**config, "run": run_id, "generations": gens, "gen": len(gens) - 1}
    stats_file = checkpoint / "stats.json"
    if stats_file.exists():  # an earlier version's checkpoint: its plan came from these, and still does
        read_stats(stats_file)  # refused now, with its reason, rather than inside a batch
        config["stats"] = stats_file.uri
    # else the sequencer plans from the O_init objects of the head it buffers (as ``run`` does; a
    # restart re-feeds the same head): no Spark job reads the whole input first (~6 s on knn_100k)
    return config, source


GENERATIONS = "generations.json"


def _generations(checkpoint: Loc, first: int) -> list[dict]:
    """The checkpoint's generations of workers (spark/NOTES.md, "M on restart"): each one's
    ``workers``, the input ``offset`` it starts at (None: the start), the run's number of its
    query's batch 0 (``batch``) and its query folder (``query``: the first is ``query``)."""
    loc = checkpoint / GENERATIONS
    gens = [{"workers": first, "offset": None, "batch": 0, "query": "query"}]
    if not loc.exists():
        return gens
    try:
        saved = json.loads(loc.read_text())
    except (ValueError, UnicodeError):
        saved = None
    ok = isinstance(saved, list) and saved and saved[0] == gens[0] and all(
        isinstance(g, dict) and set(g) == set(gens[0]) and isinstance(g["workers"], int) and g["workers"] >= 1
        and isinstance(g["batch"], int) and g["query"] == f"query-{i}" and isinstance(g["offset"], dict)
        and all(isinstance(g["offset"].get(k), t) for k, t in (("file", str), ("pos", int), ("line", int),
                                                              ("final", bool)))
        for i, g in enumerate(saved[1:], 1))
    if not ok:
        raise ValueError(f"checkpoint {checkpoint}: {GENERATIONS} is damaged; remove the checkpoint")
    return saved


def _switch(spark, source: Loc, out: Loc, checkpoint: Loc, config: dict, index: str, params: dict,
            lines_per_batch: int, snapshot_every: int, progress: _Progress, workers: int) -> dict:
    """Another ``--workers`` than the checkpoint's last generation: run that generation's
    query once more, for one batch that reads no line and ends it (its pending batch, if
    any, is replayed first; under ``none`` its workers export their results as data), then
    record the new generation, which starts where that batch ended with a query of its own
    (Spark keeps a query's number of state partitions). Returns the config for it. A kill
    anywhere in between: the next run with the new ``--workers`` does the missing steps
    (the last batch, once committed, is not run again)."""
    gens, g = config["generations"], config["gen"]
    old = {**config, "keys": partition_keys(spark, gens[g]["workers"]), "switch": True}
    spark.conf.set("spark.sql.shuffle.partitions", str(gens[g]["workers"]))  # a generation never started
    progress.base = gens[g]["batch"]
    q = start_query(spark, source, out, checkpoint, old, index, params, lines_per_batch, once=True,
                    snapshot_every=snapshot_every)
    _await(spark, q, None, progress)
    progress.absorb(q)
    d = batch_dir(out, config["run"])
    last = None
    for p in d.iterdir() if d.is_dir() else ():
        if p.name.startswith("batch-") and p.name.endswith(".json"):
            info = json.loads(p.read_text())
            if info["batch"] >= gens[g]["batch"] and any(x.get("switch") == g for x in info.get("source", ())):
                last = info if last is None or info["batch"] > last["batch"] else last
    if last is None:
        raise ValueError(f"checkpoint {checkpoint}: the last batch of its {gens[g]['workers']} workers was not "
                         "recorded; run the same command again")
    at = next(x["offset"] for x in last["source"] if x.get("switch") == g)
    gens = gens + [{"workers": workers, "offset": at, "batch": last["batch"] + 1, "query": f"query-{len(gens)}"}]
    _write_text(checkpoint / GENERATIONS, json.dumps(gens))
    return {**config, "generations": gens, "gen": len(gens) - 1}


def _drop_old_queries(checkpoint: Loc, config: dict) -> None:
    """The queries of earlier generations, once the last one has committed a batch (until
    then a kill during the switch resumes from them; after it nothing reads them)."""
    gens = config["generations"]
    commits = checkpoint / gens[-1]["query"] / "commits"
    if len(gens) > 1 and commits.is_dir() and any(p.name.isdigit() for p in commits.iterdir()):
        for g in gens[:-1]:
            if (checkpoint / g["query"]).is_dir():
                (checkpoint / g["query"]).rmtree()


def _write_text(path: Loc, text: str) -> None:
    path.write_atomic(text.encode("utf-8"))


def _finish(out: Loc, progress: _Progress, start: float, config: dict, index: str) -> dict:
    metrics = _metrics(out, progress.batches, time.perf_counter() - start, config, index)
    _write_text(out / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    if metrics["batches"] and importlib.util.find_spec("matplotlib") is not None:  # the plots extra
        from .plots import plot_batches

        png = io.BytesIO()
        plot_batches(metrics["batches"], png, f"{config['workers']} workers, {config['partitioner']}, index {index}")
        (out / "metrics.png").write_atomic(png.getvalue())
    return metrics


def run_spark(events: str | Path, out: str | Path, window: str | Window = "none", space: Space | None = None,
              index: str = DEFAULT_INDEX, workers: int = 1, partitioner: str | None = None, init_objects: int = 1000,
              lines_per_batch: int = 10_000, master: str | None = None, checkpoint: str | Path | None = None,
              lines_per_second: float | None = None, snapshot_every: int = 16, spark: Any = None,
              spark_conf: dict[str, str] | None = None, rebalance: dict | None = None, sink: str | None = None,
              **index_params: Any) -> dict:
    """``skpubsub run --engine spark``: the same four files as the local engine.

    Resumes from ``checkpoint`` (default ``OUT/_checkpoint``) when it holds an
    unfinished run of the same input and flags; another run's checkpoint is an error.
    ``rebalance``: :class:`~skpubsub.runtime.rebalance.Rebalancer` parameters (dynamic load
    adjustment between micro-batches, ``spark/NOTES.md``).
    """
    return stream(events, out, checkpoint or Loc(out) / "_checkpoint", window, space, index, workers,
                  partitioner, init_objects, lines_per_batch, master, lines_per_second=lines_per_second,
                  snapshot_every=snapshot_every, spark=spark, once=True, spark_conf=spark_conf, rebalance=rebalance,
                  sink=sink, **index_params)


def check_flags(workers: int, lines_per_batch: int, lines_per_second: float | None = None,
                snapshot_every: int = 16, init_objects: int = 0, trigger_seconds: float = 1.0) -> None:
    """Nonsensical flags are usage errors (``--lines-per-batch 0`` ran and wrote empty outputs)."""
    def whole(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    if not whole(workers) or workers < 1:
        raise ValueError(f"--workers must be an integer >= 1, got {workers!r}")
    if not whole(lines_per_batch) or lines_per_batch < 1:
        raise ValueError(f"--lines-per-batch must be an integer >= 1, got {lines_per_batch!r}")
    if lines_per_second is not None and not (isinstance(lines_per_second, (int, float))
                                             and 0 < lines_per_second < float("inf")):
        raise ValueError(f"--lines-per-second must be a finite number > 0, got {lines_per_second!r}")
    if not whole(snapshot_every) or snapshot_every < 1:
        raise ValueError(f"snapshot_every must be an integer >= 1, got {snapshot_every!r}")
    if not whole(init_objects) or init_objects < 0:
        raise ValueError(f"--init-objects must be an integer >= 0, got {init_objects!r}")
    if not (isinstance(trigger_seconds, (int, float)) and 0 < trigger_seconds < float("inf")):
        raise ValueError(f"trigger_seconds must be a finite number > 0, got {trigger_seconds!r}")


_TRACEBACK = "Traceback (most recent call last):"
_LONGEST = 1000  # characters of a cause kept on the one line


def _python_cause(text: str) -> str | None:
    """The exception line of the last Python traceback in ``text`` (Spark nests the worker's
    traceback in its own messages): ``FileExistsError: [Errno 17] File exists: '...'``."""
    at = text.rfind(_TRACEBACK)
    if at < 0:
        return None
    for line in text[at + len(_TRACEBACK):].splitlines():
        if line.strip() and not line[0].isspace():  # frames, code and carets are indented
            name, colon, msg = line.partition(": ")
            if colon and re.fullmatch(r"[A-Za-z_][\w.]*", name):
                line = f"{name.rsplit('.', 1)[-1]}: {msg}"  # pyspark.errors....PythonException -> PythonException
            return line.strip()
    return None


def start_session(master: str | None, workers: int, spark_conf: dict[str, str] | None, brief: bool = False):
    """``session.spark_session``; a start that fails is one line (SPEC 7): PySpark's reason,
    and the driver JVM's own words when they went to its log (session._launch)."""
    from .session import spark_session

    try:
        return spark_session(master, workers, conf=spark_conf, brief=brief)
    except spark_errors() as exc:
        why, said = describe_failure(exc), jvm_said()
        raise SparkFailure(f"Spark did not start: {why.rstrip('.')}; the JVM said: {said}" if said else
                           f"Spark did not start: {why}") from None


def describe_failure(exc: BaseException) -> str:
    """One line for a Spark failure: the innermost Python exception's message when a Python
    worker (or the sink) raised, else the innermost Spark/Java error's class and message."""
    from py4j.protocol import Py4JJavaError

    chain, e = [], exc
    while e is not None and e not in chain:  # CapturedException.cause: the JVM's causes, converted
        chain.append(e)
        e = getattr(e, "_cause", None) or e.__cause__
    texts = [getattr(e, "_desc", None) or str(e) for e in chain]
    for text in reversed(texts):
        found = _python_cause(text)
        if found:
            return found[:_LONGEST]
    inner = chain[-1]
    what = None
    if isinstance(inner, Py4JJavaError):
        try:
            t = inner.java_exception
            while t.getCause() is not None and t.getCause() != t:
                t = t.getCause()
            what = t.toString()
        except Exception:  # noqa: BLE001 - the JVM may be gone; the Python side's text is enough
            what = None
    if what is None:
        try:
            cond = inner.getCondition() if hasattr(inner, "getCondition") else None
        except Exception:  # noqa: BLE001 - asks the JVM, which may be gone
            cond = None
        msg = texts[-1].strip()
        what = msg if not cond or msg.startswith(f"[{cond}]") else f"[{cond}] {msg}"
    line = next((x.strip() for x in what.splitlines() if x.strip()), type(inner).__name__)
    line = re.sub(r"^\s*An error occurred while calling \S+\.\s*", "", line) or type(inner).__name__
    return line[:_LONGEST]


def spark_errors() -> tuple[type[BaseException], ...]:
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    return (PySparkException, Py4JError)


EXECUTOR_WAIT = float(os.environ.get("SKPUBSUB_EXECUTOR_WAIT", "60"))  # s without an executor: an error


def _await(spark, q, timeout: float | None, progress: _Progress | None = None) -> None:
    """``q.awaitTermination(timeout)``, but a cluster left without executors (workers killed
    or lost) is an error after EXECUTOR_WAIT seconds, never a silent hang; Spark itself
    retries the tasks of a lost executor on the others."""
    from .session import executors

    end = None if timeout is None else time.monotonic() + timeout
    lost = None
    longest = 0.5 if progress is not None and progress.bar is not None else 2.0
    try:
        while True:
            step = longest if end is None else max(0.05, min(longest, end - time.monotonic()))  # > 0: PySpark refuses 0
            if q.awaitTermination(step):
                return
            if progress is not None:
                progress.tick(q)
            if end is not None and time.monotonic() >= end:
                return
            if executors(spark) >= 1:
                lost = None
            elif lost is None:
                lost = time.monotonic()
            elif time.monotonic() - lost > EXECUTOR_WAIT:
                q.stop()
                raise ValueError(f"no Spark executor left on {spark.sparkContext.master} for {EXECUTOR_WAIT:.0f} s "
                                 "(workers stopped or lost); the checkpoint keeps what was done: run the same "
                                 "command again once workers are back")
    except KeyboardInterrupt:  # the query first: its running batch's Python callback must not
        q.stop()  # outlive the session the caller stops next (a Py4J trace, SPEC 7's one line)
        raise


def stream(source: str | Path, out: str | Path, checkpoint: str | Path, window: str | Window = "none",
           space: Space | None = None, index: str = DEFAULT_INDEX, workers: int = 1, partitioner: str | None = None,
           init_objects: int = 1000, lines_per_batch: int = 10_000, master: str | None = None, *,
           lines_per_second: float | None = None, snapshot_every: int = 16, spark: Any = None,
           once: bool = False, timeout: float | None = None, trigger_seconds: float = 1.0,
           spark_conf: dict[str, str] | None = None, rebalance: dict | None = None, sink: str | None = None,
           **index_params: Any) -> dict:
    """``skpubsub stream``: follow ``source`` (an event file, a directory that JSONL
    files are moved into, or a Redis stream URL) until ``timeout`` seconds or Ctrl-C, then
    finish what has arrived and write the final results; ``once``: only what is there now.
    ``sink``: a Redis stream URL each notification is appended to (``redis_stream``)."""
    check_flags(workers, lines_per_batch, lines_per_second, snapshot_every, init_objects, trigger_seconds)
    window = Window.parse(window) if isinstance(window, str) else window
    space = space or Space()
    source, out, checkpoint = as_input(source), Loc(out), Loc(checkpoint)
    sink = RedisURL.parse(sink).uri if sink is not None else None  # a bad URL refused before Spark starts
    config = {"window": str(window), "space": str(space), "workers": workers,
              "partitioner": partitioner or "hash", "init_objects": init_objects}
    if rebalance is None and os.environ.get("SKPUBSUB_SPARK_FLEET", "1") != "0":
        config["fleet"] = True  # the fleet's router and workers (spark/shares.py); rebalancing needs the dispatcher
    if rebalance is not None:
        from ..runtime.rebalance import Rebalancer

        Rebalancer(space, **rebalance)  # bad parameters are refused here, not inside a batch
        if workers < 2:
            raise ValueError("--rebalance needs --workers 2 or more")
        config["rebalance"] = dict(sorted(rebalance.items()))
    start = time.perf_counter()
    from pyspark import SparkContext

    own = spark is None and SparkContext._active_spark_context is None  # started here: stopped here
    spark = spark or start_session(master, workers, spark_conf, brief=once)  # a finite input: C1 only
    try:
        return _stream(spark, source, out, checkpoint, config, window, space, index, index_params, once,
                       timeout, trigger_seconds, lines_per_batch, lines_per_second, snapshot_every, workers,
                       start, sink)
    except spark_errors() as exc:  # a task, job or the query failed: one line, the checkpoint kept
        raise SparkFailure(f"Spark run failed: {describe_failure(exc)}; the checkpoint {checkpoint} keeps the "
                           "batches done: run the same command again once the cause is fixed") from None
    finally:
        if own:  # Python workers and the JVM end before this interpreter (no broken-pipe trace at exit)
            spark.stop()
            from .session import end_jvm

            end_jvm()  # a JVM writing the class archive ends inside the command (session.class_archive)


def _stream(spark, source: Loc, out: Loc, checkpoint: Loc, config: dict, window: Window, space: Space, index: str,
            index_params: dict, once: bool, timeout: float | None, trigger_seconds: float, lines_per_batch: int,
            lines_per_second: float | None, snapshot_every: int, workers: int, start: float,
            sink: str | None = None) -> dict:
    from .session import wait_for_executors

    wait_for_executors(spark, EXECUTOR_WAIT)
    config, source = _prepare(spark, source, checkpoint, config, index, index_params, window, space)
    clear_other_runs(out, config["run"])  # another checkpoint's batches are never joined
    bar = None
    if _Bar.wanted():
        from .source import _read

        bar = _Bar(_read(source, {"file": "", "pos": 0, "line": 0}, None, keep=False)[1]["line"] if once else None)
    progress = _Progress(bar)
    if config["generations"][-1]["workers"] != workers:  # another --workers: a new generation
        config = _switch(spark, source, out, checkpoint, config, index, index_params, lines_per_batch,
                         snapshot_every, progress, workers)
    _drop_old_queries(checkpoint, config)
    spark.conf.set("spark.sql.shuffle.partitions", str(workers))  # new queries only; a restart keeps its own
    config["keys"] = partition_keys(spark, workers)
    config["sink"] = sink  # not in run.json: a restart may add, change or drop it
    progress.base = config["generations"][-1]["batch"]
    args = (spark, source, out, checkpoint, config, index, index_params, lines_per_batch, lines_per_second)
    try:
        if not once:
            q = start_query(*args, once=False, trigger_seconds=trigger_seconds, snapshot_every=snapshot_every)
            try:
                _await(spark, q, timeout, progress)
            except KeyboardInterrupt:
                pass
            finally:
                q.stop()
                progress.absorb(q)
        q = start_query(*args, once=True, snapshot_every=snapshot_every)  # the rest, then results
        _await(spark, q, None, progress)
        progress.absorb(q)
        if bar is not None and q.lastProgress is not None:
            bar.show(q.lastProgress)
    finally:
        if bar is not None:
            bar.close()
    _drop_old_queries(checkpoint, config)
    metrics = _finish(out, progress, start, config, index)
    if is_redis(source):  # rejected.jsonl names entries, not lines (SPEC 9)
        from .redis_stream import name_entries

        name_entries(source, out)
    return metrics
