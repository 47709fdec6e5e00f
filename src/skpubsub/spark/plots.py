"""The per-micro-batch plot of a Spark run (``metrics.png``, ``bench spark``)."""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO


def plot_batches(batches: list[dict], path: Path | BinaryIO, title: str) -> Path | BinaryIO:
    """Stacked per-batch time: sequencer, workers (their span: ``pipeline._span``), sink, Spark
    overhead; latency line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [b["batch"] for b in batches]
    parts = [("sequencer", [b["sequencer_seconds"] for b in batches]),
             ("workers", [b["workers_seconds"] for b in batches]),
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


def plot_scaling(rows: list[dict], path: Path | BinaryIO, title: str, amdahl: dict | None = None) -> Path | BinaryIO:
    """``bench spark --cluster``: per executor count, objects/s; the median busy batch split
    into sequencer, workers (their span), sink and Spark overhead, with its latency; peak memory;
    the speed-up measured against the one Amdahl's law predicts from the serial fraction."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = list(range(len(rows)))
    labels = [str(r["executors"]) for r in rows]
    fig, (a1, a2, a3, a4) = plt.subplots(1, 4, figsize=(17, 4))
    if amdahl and amdahl.get("serial_fraction") is not None:
        ns = [int(n) for n in amdahl["predicted"]]
        a4.plot(ns, list(amdahl["predicted"].values()), "o--", label=f"Amdahl, serial {amdahl['serial_fraction']:.0%}")
        a4.plot(ns, list(amdahl["predicted_n_workers"].values()), "^-.", label="the same, n workers")
        got = [(int(n), v) for n, v in amdahl["measured"].items() if v is not None]
        a4.plot([n for n, _ in got], [v for _, v in got], "ks", label="measured")
        a4.plot(ns, ns, ":", color="grey", label="linear")
        a4.set_xscale("log", base=2)
        a4.set_xticks(ns, [str(n) for n in ns])
        a4.set_ylim(0, max(2.0, max(amdahl["predicted_n_workers"].values()) * 1.2))
        a4.set_xlabel("executors")
        a4.set_ylabel("speed-up over the batches")
        a4.set_title("scaling: measured and predicted", fontsize=10)
        a4.legend(fontsize=8)
    else:
        a4.set_axis_off()
    w = 0.38
    a1.bar([x - w / 2 for x in xs], [r["objects_per_second_wall"] or 0 for r in rows], w, label="wall")
    a1.bar([x + w / 2 for x in xs], [r["objects_per_second_batches"] or 0 for r in rows], w, label="micro-batches")
    a1.set_ylabel("objects/s")
    a1.set_title("throughput", fontsize=10)
    a1.legend(fontsize=8)
    bottom = [0.0] * len(rows)
    for name, key in (("sequencer", "sequencer_seconds"), ("workers", "workers_seconds"),
                      ("sink", "sink_seconds"), ("Spark overhead", "spark_overhead_seconds")):
        ys = [max(r["median_busy_batch"][key] or 0.0, 0.0) for r in rows]
        a2.bar(xs, ys, 0.6, bottom=bottom, label=name)
        bottom = [a + b for a, b in zip(bottom, ys)]
    a2.plot(xs, [r["median_busy_batch"]["latency_seconds"] or float("nan") for r in rows], "k.-", label="latency")
    a2.set_ylabel("seconds")
    a2.set_title("median busy micro-batch", fontsize=10)
    a2.legend(fontsize=8)
    mems = (("driver Python", lambda m: m["driver_python_bytes"]), ("driver JVM", lambda m: m["driver_jvm_bytes"]),
            ("executor JVM (max)", lambda m: m["executor_max_jvm_bytes"]),
            ("executor Python (max)", lambda m: m["executor_max_python_bytes"]))
    w = 0.8 / len(mems)
    for i, (name, get) in enumerate(mems):
        a3.bar([x - 0.4 + w * (i + 0.5) for x in xs], [(get(r["memory"]) or 0) / 2**20 for r in rows], w, label=name)
    a3.set_ylabel("peak RSS, MB")
    a3.set_title("peak memory", fontsize=10)
    a3.legend(fontsize=8)
    for ax in (a1, a2, a3):
        ax.set_xticks(xs, labels)
        ax.set_xlabel("executors (1 core each)")
    fig.suptitle(f"bench spark --cluster — {title}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return path
