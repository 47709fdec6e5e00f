"""One SparkSession configured for the runtime (local mode by default)."""

from __future__ import annotations

import os
import sys

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def spark_session(master: str | None = None, workers: int = 2, app: str = "skpubsub"):
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
             .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
             .getOrCreate())
    spark.conf.set("spark.sql.shuffle.partitions", str(workers))
    spark.sparkContext.setLogLevel("ERROR")
    from .source import EventSource

    spark.dataSource.register(EventSource)
    return spark
