"""One SparkSession configured for the runtime (local mode by default)."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time

from ..runtime.failure import RunFailure


class SparkFailure(RunFailure):
    """A task, job or query of the run failed inside Spark (a worker engine raising, an
    output part that cannot be written, the JVM gone): one line naming the cause, for the
    command line's ``skpubsub: error: ...`` (SPEC 7). The checkpoint is left as Spark left
    it: the same command resumes from the last committed batch once the cause is fixed."""


ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


# Per-micro-batch fixed cost (issue 21 item 4; measured in spark/NOTES.md). Each can be
# overridden with --conf.
FAST = {
    # RocksDB commits write a changelog; snapshots are uploaded by the maintenance thread
    # every minDeltasForSnapshot versions instead of zipping and copying SST files each batch.
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    # file: checkpoints without Hadoop's .crc side files (the offset and commit logs, state
    # changelogs): half the commit latency. Only the file: scheme; hdfs:, s3a: untouched.
    "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
    # The Python daemon that forks each task's Python worker loads the engine's kernels once,
    # before its first fork (spark/daemon.py), not every new worker inside a batch.
    "spark.python.daemon.module": "skpubsub.spark.daemon",
}


# The driver JVM of a run of a finite input (``brief``: `run`, `demo`, `bench spark`) compiles
# with C1 only. Such a run is short next to what C2 needs to pay back: on knn_100k (~30 s) its
# compiler threads took 9 s of CPU on a 2-core machine where the Python workers wait for it,
# the JVM 24-25 s of CPU in all; C1 alone: 16-18 s. The steady batches of the demo's workload
# (count:20000, 10,000 lines each) kept their Spark overhead (0.65-0.87 s against 0.77-1.4 s),
# the whole run 0.88-0.91x (2 pairs, load ~2.5). A session that lives on (`stream`, a
# library's) keeps both compilers: test_spark.py's shared session took 187 s with C1 only
# against 163 s (one pair, load 2.5-3.7).
BRIEF_JAVA = "-XX:TieredStopAtLevel=1"
_DUMP: tuple[str, str] | None = None  # (archive being written by this process's JVM at its exit, final name)


def _archive_key() -> str:
    """What a class archive depends on: the Java that runs it and Spark's jars (names, sizes)."""
    import hashlib

    import pyspark

    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java") or "java"
    java = os.path.realpath(java)
    st = os.stat(java) if os.path.exists(java) else None
    h = hashlib.sha1(f"{java}:{st.st_size if st else 0}:{st.st_mtime_ns if st else 0}:{pyspark.__version__}".encode())
    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    for name in sorted(os.listdir(jars)) if os.path.isdir(jars) else ():
        h.update(f"{name}:{os.path.getsize(os.path.join(jars, name))};".encode())
    return h.hexdigest()[:12]


def class_archive() -> list[str]:
    """JVM options for a class-data-sharing archive of what a run loads (Spark's classes,
    Catalyst's, the state store's): ``-XX:SharedArchiveFile`` where one is ready, else
    ``-XX:ArchiveClassesAtExit`` so that the second run's JVM writes it when it ends
    (``end_jvm``: 11-24 s once, at load 2-3; the first run only leaves a mark, so a fresh install's
    first run is not made slower). Measured (C1 only, load ~3, 3 pairs): session start
    5.8-6.5 s against 9.1-11.3 s, its first query 1.6-2.4 against 3.1-3.3 s. The archive is
    ~160-180 MB, in the package's ``__pycache__`` beside the kernel cache (``make clean``
    removes both), else in a private per-user temp folder.
    ``$SKPUBSUB_CLASS_ARCHIVE``: ``0`` none, or the folder to keep it in. An archive of
    another Java or Spark is never picked (its name is their key); a stale one the JVM ignores."""
    global _DUMP
    chosen = os.environ.get("SKPUBSUB_CLASS_ARCHIVE", "")
    if chosen == "0":
        return []
    import skpubsub

    try:
        name = f"spark-classes-{_archive_key()}.jsa"
    except OSError:
        return []
    user = str(os.getuid()) if hasattr(os, "getuid") else "user"
    here = os.path.join(os.path.dirname(os.path.abspath(skpubsub.__file__)), "__pycache__")
    per_user = os.path.join(tempfile.gettempdir(), f"skpubsub-jvm-{user}")
    where = next((d for d, private in (((chosen, False),) if chosen else ((here, False), (per_user, True)))
                  if skpubsub._usable_dir(d, private)), None)  # noqa: SLF001 - as the kernels' cache chooses
    if where is None:
        return []
    path = os.path.join(where, name)
    if os.path.isfile(path):
        return [f"-XX:SharedArchiveFile={path}"]
    seen = path + ".seen"
    if not os.path.exists(seen):  # a fresh install's first run is not made slower: the next one writes it
        with contextlib.suppress(OSError):
            open(seen, "w").close()
        return []
    _DUMP = (f"{path}.{os.getpid()}.part", path)
    return [f"-XX:ArchiveClassesAtExit={_DUMP[0]}"]


def end_jvm(timeout: float = 120.0) -> None:
    """After a finite run whose JVM writes the class archive at its exit: end that JVM now and
    wait for it (PySpark leaves its gateway JVM running until this interpreter exits, and the
    archive would be written after the command ended), then put the archive in place whole.
    Nothing to do otherwise; never raises."""
    global _DUMP
    from pyspark import SparkContext

    if _DUMP is None or SparkContext._active_spark_context is not None:
        return
    part, path = _DUMP
    _DUMP = None
    gw = SparkContext._gateway
    proc = getattr(gw, "proc", None)
    try:
        if gw is not None:
            gw.shutdown()
        if proc is not None:
            proc.stdin.close()  # the JVM's gateway ends when its stdin closes, then it writes the archive
            proc.wait(timeout=timeout)
        SparkContext._gateway = SparkContext._jvm = None
        if os.path.isfile(part) and os.path.getsize(part) > 0:
            os.replace(part, path)
    except Exception:  # noqa: BLE001 - no archive this time: the next run writes one
        pass
    finally:
        with contextlib.suppress(OSError):
            os.remove(part)


# Quiet by default (issue 21 item 7): the driver JVM starts at WARN without Spark's banner
# (PySpark counts as a shell: a root level other than the shell's WARN prints "Setting
# default log level"), its startup warnings (no native Hadoop library, the host name's
# address) off, nothing once the session is up (setLogLevel OFF: a failure is one line
# of ours, SPEC 7); the Python worker Spark
# starts on the driver to plan transformWithStateInPandas has its stdout (five lines of
# "Streaming TransformWithStateInPandas Python worker ...") dropped. ``--verbose``
# (``$SKPUBSUB_VERBOSE=1``) keeps Spark's own defaults.
LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
logger.utils.name = org.apache.spark.util.Utils
logger.utils.level = error
"""
QUIET_MODULES = ("pyspark.sql.streaming.transform_with_state_driver_worker",)


def verbose() -> bool:
    return os.environ.get("SKPUBSUB_VERBOSE", "") not in ("", "0")


def _quiet_files() -> tuple[str, str, str]:
    """(log4j2 configuration, Python wrapper, the driver JVM's log) in a private temporary
    folder, written once per process: the wrapper runs this Python, with stdout dropped for
    QUIET_MODULES (they talk to the JVM over a socket, never stdout)."""
    d = tempfile.mkdtemp(prefix="skpubsub-spark-")
    atexit.register(shutil.rmtree, d, True)  # registered before PySpark's own exit hook: runs after it
    log4j = os.path.join(d, "log4j2.properties")
    with open(log4j, "w") as f:
        f.write(LOG4J2)
    wrapper = os.path.join(d, "python")
    cases = "|".join(f'"-m {m}"' for m in QUIET_MODULES)
    with open(wrapper, "w") as f:
        f.write(f'#!/bin/sh\ncase "$1 $2" in\n  {cases}) exec "{sys.executable}" "$@" >/dev/null ;;\nesac\n'
                f'exec "{sys.executable}" "$@"\n')
    os.chmod(wrapper, 0o755)
    return log4j, wrapper, os.path.join(d, "jvm.log")


_QUIET: tuple[str, str, str] | None = None


def _launch(builder, log: str | None):
    """``builder.getOrCreate()``; with ``log``, the driver JVM it launches (and the Python
    workers that JVM starts) write their stdout and stderr there, not on ours. Its uncaught
    exceptions are printed by the JVM itself, past any log level: CI (stop 31) saw a stream
    thread's StackOverflowError trace after a Ctrl-C's one line, and every run began with
    "WARNING: Using incubator modules". PySpark's launcher takes no streams for the JVM from
    here, so it inherits fds 1 and 2, pointed at ``log`` while it starts."""
    if log is None:
        return builder.getOrCreate()
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        return builder.getOrCreate()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def jvm_said() -> str:
    """The start of the driver JVM's log, on one line ("" when empty, or when the JVM writes
    to our stderr: --verbose), for an error saying why Spark did not start (a bad --conf or
    driver memory, no Java)."""
    if _QUIET is None or not os.path.exists(_QUIET[2]):
        return ""
    with open(_QUIET[2], "rb") as f:
        lines = [x.strip() for x in f.read(8192).decode("utf-8", "replace").splitlines()]
    notices = ("WARNING: Using incubator modules", "Picked up JAVA_TOOL_OPTIONS", "NOTE: Picked up", "at ")
    lines = [x for x in lines if x and not x.startswith(notices)]
    return "; ".join(lines[:2])


def parse_conf(pairs: list[str] | None, executor_memory: str | None = None,
               executor_cores: int | None = None) -> dict[str, str]:
    """``--conf key=value`` (repeatable), ``--executor-memory``, ``--executor-cores`` -> Spark conf."""
    conf: dict[str, str] = {}
    for kv in pairs or ():
        key, eq, value = kv.partition("=")
        if not eq or not key.strip() or key != key.strip():
            raise ValueError(f"--conf takes key=value, got {kv!r}")
        conf[key] = value
    if executor_memory is not None:
        conf["spark.executor.memory"] = executor_memory
    if executor_cores is not None:
        if executor_cores < 1:
            raise ValueError(f"--executor-cores must be >= 1, got {executor_cores}")
        conf["spark.executor.cores"] = str(executor_cores)
    return conf


def executors(spark) -> int:
    """Executors registered now (the driver not counted; local mode: 1)."""
    if spark.sparkContext.master.startswith("local"):
        return 1
    return max(0, spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1)


def wait_for_executors(spark, timeout: float) -> None:
    """Return once an executor has joined; a clear error after ``timeout`` s (never a silent wait)."""
    deadline = time.monotonic() + timeout
    while executors(spark) < 1:
        if time.monotonic() > deadline:
            raise ValueError(f"no Spark executor joined {spark.sparkContext.master} within {timeout:.0f} s: are "
                             "its workers up, with the memory and cores --executor-memory/--executor-cores ask for?")
        time.sleep(0.5)


def _kill_unconnected_jvm() -> None:
    """The driver JVM this process launched, when the launch did not get as far as the Py4J
    connection: PySpark waits for the JVM's connection file in a sleep loop, and a Ctrl-C
    there removes the file's folder and leaves the JVM running, for good (its main thread
    fails on the missing folder, its other threads live on; it watches our stdin only once
    connected). Seen: every Ctrl-C in the first seconds of a Spark start left one. Our
    children running ``pyspark-shell`` (spark-submit execs the JVM in place); killed, so no
    JVM outlives the command (SPEC 7)."""
    me = os.getpid()
    for d in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != me:
                continue
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if b"pyspark-shell" not in f.read().split(b"\0"):
                    continue
            os.kill(int(d), signal.SIGKILL)
            os.waitpid(int(d), 0)
        except (OSError, ValueError, IndexError, ChildProcessError):  # gone meanwhile, or reaped by PySpark
            continue


class _QuietPy4J(logging.Filter):
    """Ctrl-C during a run is one line (SPEC 7), as without Spark. PySpark's SparkContext
    installs a SIGINT handler that calls the JVM (``cancelAllJobs``) from inside the handler,
    re-entering the Py4J call the main thread is in: a "reentrant call" traceback, and a
    broken connection that then fails the session's stop (the driver JVM outlives it and
    logs its lost cluster). ``spark_session`` puts the handler back that was there before, so
    Ctrl-C is a plain KeyboardInterrupt; the callers stop their query and session on it,
    which cancels the jobs. Py4J logs an interrupted call with the root logger's
    ``logging.exception`` (basicConfig'd on first use: a traceback on stderr), and the
    broken connection's shutdown with its own ``py4j.clientserver`` logger, which then
    propagates to that root handler: unless ``--verbose`` this filter on the root logger
    drops the first, and the ``py4j`` loggers are silenced."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == "root" and f"{os.sep}py4j{os.sep}" in record.pathname)

    @classmethod
    def install(cls) -> None:
        root = logging.getLogger()
        if not any(isinstance(f, cls) for f in root.filters):
            root.addFilter(cls())
        logging.getLogger("py4j").setLevel(logging.CRITICAL + 1)


def spark_session(master: str | None = None, workers: int = 2, app: str = "skpubsub",
                  conf: dict[str, str] | None = None, brief: bool = False):
    """Get or create the session: RocksDB state store, ``spark.sql.shuffle.partitions``
    = ``workers`` (one state partition per worker), this Python for the Python workers.

    ``master`` defaults to ``$SKPUBSUB_MASTER`` or ``local[*]``. Starting takes 10-25 s.
    In local mode the driver JVM runs the state store too: it gets
    ``$SKPUBSUB_DRIVER_MEMORY`` (default 6g; engine snapshots pass through it).
    ``brief``: a run of a finite input; its driver JVM compiles with C1 only (``BRIEF_JAVA``).
    """
    global _QUIET
    from pyspark.sql import SparkSession

    master = master or os.environ.get("SKPUBSUB_MASTER") or "local[*]"
    # on this machine only (local mode, a loopback cluster): a remote executor has no wrapper
    quiet = not verbose() and (master.startswith("local") or "//127.0.0.1:" in master or "//localhost:" in master)
    if quiet and SparkSession.getActiveSession() is None:
        _QUIET = _QUIET or _quiet_files()
        os.environ.setdefault("PYSPARK_PYTHON", _QUIET[1])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(master).appName(app)
             .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
             .config("spark.sql.shuffle.partitions", str(workers))
             .config("spark.driver.memory", os.environ.get("SKPUBSUB_DRIVER_MEMORY", "6g"))
             .config("spark.sql.execution.arrow.pyspark.enabled", "true")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.streaming.noDataMicroBatches.enabled", "false"))
    for k, v in FAST.items():
        spark = spark.config(k, v)
    from pyspark import SparkContext

    fresh = SparkContext._gateway is None  # a JVM to start
    java = ([BRIEF_JAVA, *class_archive()] if brief and fresh else []) + (
        [f"-Dlog4j2.configurationFile=file:{_QUIET[0]}"] if quiet and _QUIET is not None else [])
    if java:
        spark = spark.config("spark.driver.extraJavaOptions", " ".join(java))
    if "//127.0.0.1:" in master or "//localhost:" in master:  # a cluster on loopback (skpubsub cluster)
        spark = spark.config("spark.driver.host", os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"))
    for k, v in (conf or {}).items():  # --conf, --executor-memory, --executor-cores
        spark = spark.config(k, v)
    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGINT) if main else None
    launches = quiet and _QUIET is not None and fresh
    try:
        spark = _launch(spark, _QUIET[2] if launches else None)
    except BaseException:
        if SparkContext._gateway is None:  # interrupted (or failed) before the JVM connected
            _kill_unconnected_jvm()
        raise
    if main and before is not None:
        signal.signal(signal.SIGINT, before)  # PySpark's own handler undone (_QuietPy4J)
    spark.conf.set("spark.sql.shuffle.partitions", str(workers))
    if not verbose():  # a failed task or query reaches the user as one line (pipeline.describe_failure),
        _QuietPy4J.install()  # not as Py4J's log records
        spark.sparkContext.setLogLevel("OFF")  # or the JVM's ERROR lines and stack traces on stderr
    from .source import EventSource

    spark.dataSource.register(EventSource)
    if fresh and not master.startswith("local"):
        warm_executors(spark)
    return spark


def _touch(it):  # a task that only makes its executor start the Python daemon
    return iter(())


def warm_executors(spark) -> threading.Thread:
    """On a cluster, start the executors' Python daemons now, in a background job, so that
    their kernel warm-up (``daemon.py``: 1.5-2.5 s, a minute on a fresh install) runs while
    the driver plans the query (its own chain of Python processes: the source looked up,
    created, planned, transformWithState planned; ~8 s) instead of inside the first batch.
    Not in local mode: there the executor is the driver's JVM, whose ``SparkEnv`` creates
    every Python process under one lock (``createPythonWorker`` is synchronized), so the
    daemon's warm-up held up the driver's chain (measured: the query started only after it).
    A failure here changes nothing: the first batch starts the daemons as before."""
    def run() -> None:
        try:
            sc = spark.sparkContext
            sc.setLocalProperty("spark.job.description", "skpubsub: Python daemons warmed")
            sc.parallelize(range(sc.defaultParallelism), sc.defaultParallelism).mapPartitions(_touch).count()
        except Exception:  # noqa: BLE001 - stopped meanwhile, or no executor yet: the first batch warms
            pass

    t = threading.Thread(target=run, name="skpubsub-warm-executors", daemon=True)
    t.start()
    return t
