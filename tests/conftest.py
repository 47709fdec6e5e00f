import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("CI", "1")  # no progress bars in test output
# Every JVM the tests start (Spark drivers, a loopback cluster's daemons and executors) lives
# for seconds to minutes on small inputs: C1 only and the serial collector cut a short Spark
# run's CPU by ~38% (60.0 -> 37.2 CPU s, 38.2 -> 28.6 s wall: spark/NOTES.md, "The test
# suite's JVMs"). Not the product's default: a long run wants C2 and a concurrent collector.
os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


def pytest_configure(config) -> None:
    """Under ``-n N`` (N >= 2), before the workers start: the Numba kernels compiled into the
    package's cache once, by two processes that split them (tests/warm_kernels.py), instead of
    by every worker for itself at the same time. Skipped in a worker, in a run without
    workers, and with SKPUBSUB_NO_WARM=1."""
    n = getattr(config.option, "numprocesses", None)
    if hasattr(config, "workerinput") or not isinstance(n, int) or n < 2 or os.environ.get("SKPUBSUB_NO_WARM"):
        return
    script = Path(__file__).with_name("warm_kernels.py")
    procs = [subprocess.Popen([sys.executable, str(script), str(p)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for p in range(2)]
    for p in procs:
        p.wait()
