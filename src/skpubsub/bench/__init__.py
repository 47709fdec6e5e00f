"""Benchmark support: synthetic workloads over real places."""

__all__ = ["WorkloadConfig", "generate", "write_jsonl"]


def __getattr__(name: str):
    """The workload generator, imported on first use: ``bench``'s command line (built on every
    ``skpubsub`` start) needs none of it, and it brings the datasets' modules (PEP 562)."""
    if name in __all__:
        from . import workload

        return getattr(workload, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
