"""Compile the Numba kernels into the package's cache before the test workers start.

Under ``pytest -n 2`` each worker compiled every kernel it met itself, at the same time as
the other (neither found the other's cache entry yet): most of the suite's first ten
minutes was two processes compiling the same code. ``conftest.pytest_configure`` now runs
this file first, as two processes that split the kernels between them (the families that
share the fewest kernels apart, the mixed ``auto`` index last so that it finds the others'
entries). The workers then load from the cache. Nothing here is a test: runs that fail
are the tests' business, so an error only makes a worker compile what was left.

    python tests/warm_kernels.py PART    (PART 0 or 1)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

WINDOWS = ("none", "count:60", "time:30")
BUFFERS = ("kmax", "skyband", "cskyband", "ckskyband")
PLANNERS = ("dkm", "prefix", "keyword", "ps2", "sop", "kop", "location")

# (index, buffers) jobs by part: the aoiq and igpt families and the planners apart from
# the dkm/gi2/grid ones, `auto` (all of them mixed) at the end of its part
PARTS = (
    [("aoiq", BUFFERS), ("igpt", BUFFERS), ("planners", ("kmax",))],
    [("dkm", BUFFERS), ("gi2", ("kmax",)), ("grid", ("kmax",)), ("auto", BUFFERS)],
)


def _events(tmp: Path) -> Path:
    """One small mixed stream with churn and expiries; each run applies its own window."""
    from skpubsub.bench.workload import WorkloadConfig, generate, write_jsonl

    cfg = WorkloadConfig(objects=300, subscriptions=80, kind="mix", match="mix", sub_rate=0.5,
                         unsub_rate=0.5, objects_per_step=10, expire_fraction=0.3, lifetime=20,
                         seed=3, limit=2000)
    path = tmp / "events.jsonl"
    write_jsonl(generate(cfg), path)
    return path


def warm(part: int) -> None:
    from skpubsub.runtime.runner import run

    with tempfile.TemporaryDirectory(prefix="skpubsub-warm-") as d:
        tmp = Path(d)
        events = _events(tmp)
        for index, buffers in PARTS[part]:
            for window in WINDOWS:
                if index == "planners":  # the planners' kernels, in process (no worker processes)
                    for p in PLANNERS:
                        run(events, tmp / "out", window, partitioner=p, workers=2, init_objects=50,
                            processes=False, progress=False)
                    continue
                for buffer in buffers:
                    run(events, tmp / "out", window, index=index, buffer=buffer, progress=False)


if __name__ == "__main__":
    warm(int(sys.argv[1]))
