"""The per-micro-batch plot of a Spark run (``metrics.png``, ``bench spark``)."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO


def plot_batches(batches: list[dict], path: Path | BinaryIO, title: str) -> Path | BinaryIO:
    """Stacked per-batch time: sequencer, slowest worker, sink, Spark overhead; latency line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [b["batch"] for b in batches]
    parts = [("sequencer", [b["sequencer_seconds"] for b in batches]),
             ("slowest worker", [max(b["worker_seconds"], default=0.0) for b in batches]),
             ("sink", [b["sink_seconds"] or 0.0 for b in batches]),
             ("Spark overhead", [max(b["spark_overhead_seconds"] or 0.0, 0.0) for b in batches])]
    fig, ax = plt.subplots(figsize=(8, 4))
    bottom = [0.0] * len(xs)
    for name, ys in parts:
        ax.bar(xs, ys, bottom=bottom, label=name)
        bottom = [a + b for a, b in zip(bottom, ys)]
    lat = [b["latency_seconds"] for b in batches]
    ax.plot(xs, [x if x is not None else float("nan") for x in lat], "k.-", label="end-to-end latency")
    ax.set_xlabel("micro-batch")
    ax.set_ylabel("seconds")
    ax.set_title(f"Spark runtime per micro-batch — {title}", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return path
