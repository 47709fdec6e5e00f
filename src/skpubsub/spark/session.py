"""One SparkSession configured for the runtime (local mode by default)."""

from __future__ import annotations

import os
import sys
import time

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


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


def spark_session(master: str | None = None, workers: int = 2, app: str = "skpubsub",
                  conf: dict[str, str] | None = None):
    """Get or create the session: RocksDB state store, ``spark.sql.shuffle.partitions``
    = ``workers`` (one state partition per worker), this Python for the Python workers.

    ``master`` defaults to ``$SKPUBSUB_MASTER`` or ``local[*]``. Starting takes 10-25 s.
    In local mode the driver JVM runs the state store too: it gets
    ``$SKPUBSUB_DRIVER_MEMORY`` (default 6g; engine snapshots pass through it).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    master = master or os.environ.get("SKPUBSUB_MASTER") or "local[*]"
    spark = (SparkSession.builder.master(master).appName(app)
             .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
             .config("spark.sql.shuffle.partitions", str(workers))
             .config("spark.driver.memory", os.environ.get("SKPUBSUB_DRIVER_MEMORY", "6g"))
             .config("spark.sql.execution.arrow.pyspark.enabled", "true")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.streaming.noDataMicroBatches.enabled", "false"))
    if "//127.0.0.1:" in master or "//localhost:" in master:  # a cluster on loopback (skpubsub cluster)
        spark = spark.config("spark.driver.host", os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"))
    for k, v in (conf or {}).items():  # --conf, --executor-memory, --executor-cores
        spark = spark.config(k, v)
    spark = spark.getOrCreate()
    spark.conf.set("spark.sql.shuffle.partitions", str(workers))
    spark.sparkContext.setLogLevel("ERROR")
    from .source import EventSource

    spark.dataSource.register(EventSource)
    return spark
