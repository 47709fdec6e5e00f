"""PNG plots of ``skpubsub bench`` and ``skpubsub bench partition`` reports (matplotlib, Agg backend).

Imported lazily by :mod:`skpubsub.bench.compare` and :mod:`skpubsub.bench.partition`
only when plots are written, so the engine and the rest of the command line never
import matplotlib.  Figures
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
    on = f" on its first {rep['baseline_events']:,} events" if rep.get("baseline_events") else ""
    ax.set_title(f"Throughput; ratio to baseline {rep.get('baseline')}{on}\n{_subtitle(rep)}", fontsize=9)
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


# -- skpubsub bench partition ------------------------------------------------------------------
UPDATE, BALANCE = ARRIVALS, EXPIRIES
MAP_POINTS = 30_000  # subscriptions drawn per map panel at most (the same seeded subset in every panel)


def _worker_colors(m: int) -> list:
    from matplotlib import colormaps

    if m <= 10:
        cmap = colormaps["tab10"]
        return [cmap(i) for i in range(m)]
    if m <= 20:
        cmap = colormaps["tab20"]
        return [cmap(i) for i in range(m)]
    cmap = colormaps["turbo"]
    return [cmap(i / max(1, m - 1)) for i in range(m)]


def _partition_subtitle(rep: dict[str, Any]) -> str:
    w = rep.get("workload", {})
    c = rep.get("config", {})
    src = w.get("dataset") or Path(str(w.get("events_file", "events"))).name
    kind = f" {w['kind']}/{w['match']}" if "kind" in w else ""
    return (f"{src}{kind}: {c.get('planned_subscriptions', 0):,} subs, {rep.get('objects', 0):,} objects, "
            f"M = {c.get('workers')}, window {c.get('window')}, batch {c.get('batch')}")


def _panels(n: int, width: float = 4.2, height: float = 3.4, sharey: bool = False) -> tuple[Figure, list]:
    cols = min(4, max(1, n))
    rows = -(-n // cols)
    fig = Figure(figsize=(width * cols, height * rows + 0.6), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False, sharey=sharey).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def plot_partition_update(rep: dict[str, Any], path: str | Path) -> Path:
    """Update time (sum of the slowest worker's CPU seconds per batch) and balance per planner."""
    names = list(rep["partitioners"])
    rows = [rep["partitioners"][n] for n in names]
    upd = [r.get("update_seconds") or 0.0 for r in rows]
    bal = [r.get("balance_seconds") or 0.0 for r in rows]
    fig, ax = _figure(len(names))
    width = 0.38
    xs = list(range(len(names)))
    for off, vals, color, label in ((-width / 2, upd, UPDATE, "update time (slowest worker)"),
                                    (width / 2, bal, BALANCE, "balance (slowest - fastest)")):
        xb = [x + off for x in xs]
        ax.bar(xb, vals, width, color=color, label=label)
        for x, v in zip(xb, vals):
            ax.annotate(f"{v:.3g}", (x, v), ha="center", va="bottom", xytext=(0, 2),
                        textcoords="offset points", fontsize=7)
    for x, r in zip(xs, rows):
        mm = r.get("worker_load_max_over_mean")
        if mm is not None:
            ax.annotate(f"max/mean {mm:.2f}", (x, 0), ha="center", va="top", xytext=(0, -14),
                        textcoords="offset points", fontsize=7, color="#444444")
    ax.set_ylim(0, max(upd + bal + [1e-9]) * 1.15)
    ax.set_xticks(xs, names)
    ax.tick_params(axis="x", pad=16)
    ax.set_ylabel("worker CPU seconds, summed over batches")
    ax.set_title(f"Update time and balance per planner\n{_partition_subtitle(rep)}", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.savefig(path, format="png")
    return Path(path)


def plot_partition_loads(rep: dict[str, Any], plots: dict[str, dict], path: str | Path) -> Path:
    """Per planner: cumulative CPU seconds of each worker vs batch index (shared y axis)."""
    from matplotlib.ticker import MaxNLocator

    names = [n for n in rep["partitioners"] if n in plots]
    m = int(rep["config"]["workers"])
    colors = _worker_colors(m)
    fig, axes = _panels(len(names), sharey=True)
    for ax, name in zip(axes, names):
        cum = plots[name]["cumulative"]
        xs = range(1, len(cum) + 1)
        for w in range(m):
            ax.plot(xs, cum[:, w] if len(cum) else [], color=colors[w], lw=1.1, label=f"worker {w}")
        sf = plots[name].get("steady_from")
        if sf is not None and 0 < sf < len(cum):
            ax.axvline(sf + 0.5, color="#888888", ls=":", lw=0.9)  # the steady_* figures start here
        r = rep["partitioners"][name]
        mm = r.get("worker_load_max_over_mean")
        ax.set_title(f"{name}: max/mean {mm:.2f}" if mm is not None else name, fontsize=9)
        ax.set_xlabel("batch", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
    if axes:
        axes[0].set_ylabel("cumulative worker CPU s", fontsize=8)
        if m <= 16:
            axes[0].legend(fontsize=6, loc="upper left", ncols=2)
    fig.suptitle(f"Per-worker load over time (dotted: end of the first batch with objects)\n"
                 f"{_partition_subtitle(rep)}",
                 fontsize=9)
    fig.savefig(path, format="png")
    return Path(path)


def _rects(desc: dict[str, Any]) -> list[tuple[tuple[float, float, float, float], int | None]]:
    """Rectangles of a plan description with their worker (None: not one worker's):
    location kd-tree leaves, sop subsets (their quadtree cells), dkm subsets (cells)."""
    out: list = []
    for leaf in desc.get("leaves") or []:
        if isinstance(leaf, dict) and leaf.get("rect") is not None:
            out.append((tuple(leaf["rect"]), leaf.get("worker")))
    for sub in desc.get("subsets") or []:
        if isinstance(sub, dict) and sub.get("r") is not None:
            out.append((tuple(sub["r"]), sub.get("worker")))
    return out


def plot_partition_map(rep: dict[str, Any], plots: dict[str, dict], path: str | Path,
                       max_points: int = MAP_POINTS) -> Path:
    """Per planner: subscription locations coloured by worker, plus the plan's rectangles."""
    import numpy as np
    from matplotlib.collections import PatchCollection
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Rectangle

    names = [n for n in rep["partitioners"] if n in plots]
    m = int(rep["config"]["workers"])
    colors = _worker_colors(m)
    cmap = ListedColormap(colors)
    allx = np.concatenate([plots[n]["x"] for n in names]) if names else np.zeros(0)
    ally = np.concatenate([plots[n]["y"] for n in names]) if names else np.zeros(0)
    ok = np.isfinite(allx) & np.isfinite(ally)
    sp = rep["config"].get("space", [-180.0, -90.0, 180.0, 90.0])
    if ok.any():
        x1, x2 = float(allx[ok].min()), float(allx[ok].max())
        y1, y2 = float(ally[ok].min()), float(ally[ok].max())
    else:
        x1, y1, x2, y2 = sp
    mx, my = max((x2 - x1) * 0.03, 0.5), max((y2 - y1) * 0.03, 0.5)
    xlim = (max(sp[0], x1 - mx), min(sp[2], x2 + mx))
    ylim = (max(sp[1], y1 - my), min(sp[3], y2 + my))
    aspect = (ylim[1] - ylim[0]) / max(xlim[1] - xlim[0], 1e-9)
    fig, axes = _panels(len(names), width=4.6, height=max(2.2, min(4.6, 4.6 * aspect)))
    for ax, name in zip(axes, names):
        d = plots[name]
        n = len(d["x"])
        # the same seeded subset in every panel (the active subscriptions in registration order)
        idx = np.sort(np.random.default_rng(0).choice(n, max_points, replace=False)) if n > max_points \
            else np.arange(n)
        ax.scatter(d["x"][idx], d["y"][idx], c=d["worker"][idx], cmap=cmap, vmin=-0.5, vmax=m - 0.5,
                   s=1.5, linewidths=0, rasterized=True)
        repl = idx[d["replicated"][idx]]
        if len(repl):
            ax.scatter(d["x"][repl], d["y"][repl], facecolors="none", edgecolors="k", s=6, linewidths=0.3)
        rects = _rects(rep["partitioners"][name].get("plan") or {})
        if rects:
            patches = [Rectangle((r[0], r[1]), r[2] - r[0], r[3] - r[1]) for r, _ in rects]
            edge = [colors[w] if isinstance(w, int) and 0 <= w < m else (0.4, 0.4, 0.4, 0.6) for _, w in rects]
            lw = 1.2 if any(isinstance(w, int) for _, w in rects) else 0.5
            ax.add_collection(PatchCollection(patches, facecolor="none", edgecolor=edge, linewidth=lw))
        shown = f"{len(idx):,} of {n:,}" if n > max_points else f"{n:,}"
        extra = f", {len(rects)} rects" if rects else ""
        ax.set_title(f"{name}: {shown} subs{extra}", fontsize=9)
        ax.set_xlim(*xlim)
        ax.set_ylim(*ylim)
        ax.tick_params(labelsize=7)
    fig.suptitle(f"Subscriptions by assigned worker (colour = worker)\n{_partition_subtitle(rep)}", fontsize=9)
    fig.savefig(path, format="png")
    return Path(path)


def write_partition_plots(rep: dict[str, Any], plots: dict[str, dict], out: str | Path) -> list[Path]:
    d = Path(out)
    return [plot_partition_update(rep, d / "partition_update.png"),
            plot_partition_loads(rep, plots, d / "partition_loads.png"),
            plot_partition_map(rep, plots, d / "partition_map.png")]


__all__ = ["plot_memory", "plot_partition_loads", "plot_partition_map", "plot_partition_update",
           "plot_throughput", "write_partition_plots", "write_plots"]
