"""PNG plots of a ``skpubsub bench`` report (matplotlib, Agg backend).

Imported lazily by :mod:`skpubsub.bench.compare` only when plots are written, so
the engine and the rest of the command line never import matplotlib.  Figures
are drawn on an explicit Agg canvas (no pyplot, no global backend state).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

ARRIVALS, EXPIRIES, RUNS = "#3b6ea8", "#d08c2e", "#222222"


def _figure(n: int) -> tuple[Figure, Any]:
    fig = Figure(figsize=(max(7.5, 1.6 * n + 2.5), 4.2), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _subtitle(rep: dict[str, Any]) -> str:
    w = rep.get("workload", {})
    src = w.get("dataset") or Path(str(w.get("events_file", "events"))).name
    return (f"{src}: {rep.get('initial_subscriptions', 0):,} subs, {rep.get('objects', 0):,} objects, "
            f"window {rep.get('window')}, median of {rep.get('repeat')}")


def plot_throughput(rep: dict[str, Any], path: str | Path) -> Path:
    """Objects/s per index (arrivals, and expiries when measured), log scale, ratio labels."""
    names = list(rep["indexes"])
    rows = [rep["indexes"][n] for n in names]
    arr = [r.get("arrivals_objects_per_second_median") for r in rows]
    exp = [r.get("expiries_objects_per_second_median") for r in rows]
    has_exp = any(v for v in exp)
    fig, ax = _figure(len(names))
    width = 0.38 if has_exp else 0.6
    xs = list(range(len(names)))
    xa = [x - width / 2 for x in xs] if has_exp else xs
    ax.bar(xa, [v or 0 for v in arr], width, color=ARRIVALS, label="arrivals (AMP)")
    for x, r in zip(xa, rows):  # every run, as dots over the median bar
        runs = [v for v in r.get("arrivals_objects_per_second_runs", []) if v]
        ax.plot([x] * len(runs), runs, "o", ms=3, color=RUNS, zorder=3)
    if has_exp:
        xe = [x + width / 2 for x in xs]
        ax.bar(xe, [v or 0 for v in exp], width, color=EXPIRIES, label="expiries (EMP)")
        for x, v, r in zip(xe, exp, rows):
            if v:
                er = r.get("expiry_ratio_to_baseline")
                ax.annotate(f"{er:.2f}x" if er else "", (x, v), ha="center", va="bottom",
                            xytext=(0, 3), textcoords="offset points", fontsize=8)
            else:
                ax.annotate("n/a", (x, 1), ha="center", va="bottom", fontsize=8)
    for x, v, r in zip(xa, arr, rows):
        ratio = r.get("ratio_to_baseline")
        label = "n/a" if not v else (f"{ratio:.2f}x" if ratio else f"{v:,.0f}")
        top = max([v or 1, *[u for u in r.get("arrivals_objects_per_second_runs", []) if u]])
        ax.annotate(label, (x, top), ha="center", va="bottom", xytext=(0, 4),
                    textcoords="offset points", fontsize=9, fontweight="bold")
    positive = [v for v in arr + exp if v]
    ax.set_yscale("log")
    if positive:
        ax.set_ylim(min(positive) / 3, max(positive) * 4)
    ax.set_xticks(xs, names)
    ax.set_ylabel("objects / s (log scale)")
    ax.set_title(f"Throughput; ratio to baseline {rep.get('baseline')}\n{_subtitle(rep)}", fontsize=9)
    ax.grid(axis="y", which="both", alpha=0.3)
    if has_exp:
        ax.legend(fontsize=8, loc="upper left")
    fig.savefig(path, format="png")
    return Path(path)


def plot_memory(rep: dict[str, Any], path: str | Path) -> Path:
    """Bytes per subscription per index, after the build and at the end of the run."""
    names = list(rep["indexes"])
    rows = [rep["indexes"][n] for n in names]
    build = [r.get("bytes_per_subscription_build") for r in rows]
    end = [r.get("bytes_per_subscription_end") for r in rows]
    fig, ax = _figure(len(names))
    width = 0.38
    xs = list(range(len(names)))
    for off, vals, color, label in ((-width / 2, build, ARRIVALS, "after build"),
                                    (width / 2, end, EXPIRIES, "end of run")):
        xb = [x + off for x in xs]
        ax.bar(xb, [v or 0 for v in vals], width, color=color, label=label)
        for x, v in zip(xb, vals):
            ax.annotate("n/a" if v is None else f"{v:,.0f}", (x, v or 0), ha="center", va="bottom",
                        xytext=(0, 3), textcoords="offset points", fontsize=8)
    top = max([v for v in build + end if v] or [1])
    ax.set_ylim(0, top * 1.18)
    ax.set_xticks(xs, names)
    ax.set_ylabel("bytes / subscription (engine.nbytes)")
    ax.set_title(f"Memory per subscription\n{_subtitle(rep)}", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.savefig(path, format="png")
    return Path(path)


def write_plots(rep: dict[str, Any], out: str | Path) -> list[Path]:
    d = Path(out)
    return [plot_throughput(rep, d / "throughput.png"), plot_memory(rep, d / "memory.png")]


__all__ = ["plot_memory", "plot_throughput", "write_plots"]
