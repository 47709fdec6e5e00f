"""Spark's Python daemon (``spark.python.daemon.module``, set by ``session.py``) with the
engine's kernels loaded before it forks a Python worker for each task (issue 57 item 2).

PySpark's daemon forks every Python worker from itself, so whatever it has imported and
loaded a worker has at once. Numba loads a compiled kernel from its cache (or, on a fresh
install, compiles it) the first time it is called in a process: without this, each new
Python worker paid that inside its first batch (seconds a worker, a minute cold). Here
the daemon applies a small stream of every kind, under each kind of window, through the
path a worker takes (a share encoded and decoded, applied by columns, its lines and
results written), then starts PySpark's own ``manager``. Nothing that starts a thread is
imported before the fork (PySpark's rule: pandas and pyarrow are left to the worker), and
nothing but the daemon's port is written to its standard output.
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # numpy's BLAS threads are not forked safely

WARM_WINDOWS = ("none", "count:4", "time:3")


def warm(index: str = "auto") -> float:
    """Run a worker's path once under each window kind; returns the seconds it took."""
    from ..core.config import Space, Window
    from ..runtime.fleetworker import admitted, sample_runs
    from .codec import END
    from .shares import ShareWorker, decode_share, encode_share

    t0 = time.perf_counter()
    space = Space()
    runs = sample_runs(space, ("range", "knn", "topk"), ends=True)
    for w in WARM_WINDOWS:
        window = Window.parse(w)
        items, _ = admitted(runs, window, space)
        worker = ShareWorker(0, window, space, index, {})
        worker.apply(decode_share(encode_share(items[:2]), window, space))  # a run of subscriptions alone
        worker.apply(decode_share(encode_share(items[2:] + [END]), window, space))
        ShareWorker.restore(worker.snapshot(), 0, window, space, index, {})
    return time.perf_counter() - t0


def main() -> None:
    out = os.dup(1)
    os.dup2(2, 1)  # the JVM reads the daemon's port from its standard output: nothing else there
    try:
        took = warm(os.environ.get("SKPUBSUB_WARM_INDEX", "auto"))
        print(f"skpubsub: Python daemon {os.getpid()}: kernels ready in {took:.1f} s", file=sys.stderr)
    except Exception as exc:  # noqa: BLE001 - a worker loads what it needs itself: never stop Spark here
        print(f"skpubsub: Python daemon warm-up failed ({type(exc).__name__}: {exc})", file=sys.stderr)
    finally:
        sys.stdout.flush()
        os.dup2(out, 1)
        os.close(out)
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
