"""``skpubsub bench``: the benchmark suite — engines side by side on the same events, in one run.

The workload is either an event file or generated in memory from a real dataset
(:mod:`skpubsub.bench.workload`, no churn by default: every subscription at
``t = 0``, then the objects).  The events are validated once by the
:class:`~skpubsub.io.validate.Gate` and held in memory; each index then applies
them to a fresh engine (notifications are produced but not written), so the
figures are the engines' own costs.  Per run and per index, two phases are timed
separately:

- **build** — the events before the first ``pub`` (the initial subscriptions):
  build seconds, and ``engine.nbytes`` per active subscription after it and at
  the end of the run (``nbytes`` covers the index, the subscription/result
  tables and the object table; the reference engine has none: null);
- **arrivals** — every later event: objects per second (the papers' AMP).

Expiries (the papers' EMP) happen during the arrivals under a ``count``/``time``
window; when the engine's ``stats`` carry ``expired`` (objects that left the
window) and ``expiry_seconds`` (time spent handling them), the report gives
expired objects per second of expiry work, otherwise null.  It also gives
candidates examined and subscriptions affected per object, the notification
count, and whether the final ``all_results()`` and the notification stream equal
the baseline's (the exactness check).

Each repeat runs every index once, alternating; figures are medians over the
repeats (every run is kept in the JSON).  Before timing, each compiled index gets
one untimed warm-up run on a small prefix of the workload (it loads/compiles the
Numba kernels).  The baseline is the first index (or ``--baseline``); the
reference engine or the plain ``grid`` is always among the indexes.  At a scale the
baseline cannot finish, ``--baseline-events N`` runs it on the first N events only;
every index runs that prefix too, for the ratio and the exactness check, and the
whole stream for its other figures (checked against each other).
"""

from __future__ import annotations

import datetime
import gc
import hashlib
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from ..core.config import Space, Window
from ..runtime.engines import make_engine
from ..runtime.runner import fewer_collections
from ..index import INDEXES
from ..io.events import objects_as_blocks
from ..store.subscriptions import K_RANGE
from .inputs import Workload, baseline_prefix, load_workload, phases, warm_end, warmup_events

CHUNK = 4096  # events per engine.apply call while timing the arrivals
BASELINES = ("reference", "grid")  # one of them is always measured (unless --baseline none)
NO_BASELINE = "none"
REFERENCE_CHECKS_NOTE = 20_000_000  # objects x subscriptions above which the reference gets a note


# -- one run ----------------------------------------------------------------------------------
def _active_subs(engine: Any) -> int:
    engine.flush()
    subs = engine.subs
    return len(subs.slot_of) if hasattr(subs, "slot_of") else len(subs)


def _buffered(engine: Any) -> float | None:
    """Mean buffer length of the active kNN/top-k subscriptions (objects held per result)."""
    cols = getattr(getattr(engine, "subs", None), "cols", None)
    if cols is None:
        return None
    ranked = cols.active[: cols.top] & (cols.kind[: cols.top] != K_RANGE)
    return float(cols.res_n[: cols.top][ranked].mean()) if ranked.any() else None


def _per(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return a / b


def split_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``"dkm[refresh_from=1e12,max_cells=8]"`` -> ``("dkm", {"refresh_from": 1e12, "max_cells": 8})``:
    an index with parameters, so variants of one index can be measured side by side."""
    if "[" not in spec:
        return spec, {}
    name, _, rest = spec.partition("[")
    if not rest.endswith("]"):
        raise ValueError(f"bad index spec {spec!r}: expected NAME[key=value,...]")
    params: dict[str, Any] = {}
    for item in filter(None, rest[:-1].split(",")):
        key, eq, val = item.partition("=")
        if not eq:
            raise ValueError(f"bad index spec {spec!r}: {item!r} is not key=value")
        if val.strip().lower() in ("true", "false"):
            params[key.strip()] = val.strip().lower() == "true"
            continue
        try:
            num = float(val)
            params[key.strip()] = int(num) if num.is_integer() and "." not in val and "e" not in val else num
        except ValueError:
            params[key.strip()] = val
    return name, params


@fewer_collections()  # the collector as `skpubsub run` sets it: the engine measured as it runs there
def run_once(index: str, events: list, build: int, window: Window, space: Space,
             warm_objects: int = 0) -> dict[str, Any]:
    """One fresh engine over the events: the window's fill (the papers' shape, ``phases``),
    build (the subscriptions: registration), cold fill (the first ``warm_objects`` objects
    after it, untimed) and arrivals timed apart."""
    gc.collect()
    name, params = split_spec(index)
    engine = make_engine(name, window, space, **params)
    notes_hash = hashlib.blake2b(digest_size=16)
    n_notes = 0

    window_fill, _ = phases(events[:build])
    start = time.perf_counter()
    for i in range(0, window_fill, CHUNK):
        notes = engine.apply(events[i:min(i + CHUNK, window_fill)])
        n_notes += len(notes)
        for n in notes:
            notes_hash.update(repr(n).encode())
    window_fill_s = time.perf_counter() - start
    start, cpu = time.perf_counter(), time.process_time()
    notes = engine.apply(events[window_fill:build])
    engine.flush()
    build_s, build_cpu = time.perf_counter() - start, time.process_time() - cpu
    n_subs = build - window_fill
    n_notes += len(notes)
    for n in notes:
        notes_hash.update(repr(n).encode())
    mem_build = getattr(engine, "nbytes", None)
    subs_build = _active_subs(engine)
    fill = warm_end(events, build, warm_objects)
    start = time.perf_counter()
    for i in range(build, fill, CHUNK):
        notes = engine.apply(events[i:min(i + CHUNK, fill)])
        n_notes += len(notes)
        for n in notes:
            notes_hash.update(repr(n).encode())
    fill_s = time.perf_counter() - start
    before = dict(engine.stats)

    # Arrivals are timed to the notifications as the engine makes them (columns on a compiled
    # index, objects on the plain path); making Python objects of columns is timed apart. An
    # engine with columns is given runs of objects as columns too, as ``run`` gives them (its
    # reader makes them, as it parses: untimed like the parse).
    apply = getattr(engine, "apply_columnar", None)
    chunks = [events[i:i + CHUNK] for i in range(fill, len(events), CHUNK)]
    if apply is None:
        apply = engine.apply
    else:
        chunks = [objects_as_blocks(c) for c in chunks]
    arrival_s = delivery_s = 0.0
    for chunk in chunks:
        start = time.perf_counter()
        batch = apply(chunk)
        mid = time.perf_counter()
        notes = batch if isinstance(batch, list) else batch.to_list()
        arrival_s += mid - start
        delivery_s += time.perf_counter() - mid
        n_notes += len(notes)  # hashed outside the timed region
        for n in notes:
            notes_hash.update(repr(n).encode())

    stats = engine.stats
    n_obj = stats["objects"] - before.get("objects", 0)
    expired = exp_s = None
    if "expired" in stats and "expiry_seconds" in stats:
        expired = int(stats["expired"] - before.get("expired", 0))
        exp_s = float(stats["expiry_seconds"] - before.get("expiry_seconds", 0.0))
    mem_end = getattr(engine, "nbytes", None)
    subs_end = _active_subs(engine)
    results = repr(engine.all_results()).encode()
    return {
        "window_fill_seconds": window_fill_s,
        "build_seconds": build_s,
        "build_cpu_seconds": build_cpu,
        "build_cpu_us_per_subscription": 1e6 * build_cpu / n_subs if n_subs else None,
        "cold_fill_seconds": fill_s,
        "arrival_seconds": arrival_s,
        "objects": n_obj,
        "objects_per_second": _per(n_obj, arrival_s) if n_obj else None,
        "delivery_seconds": delivery_s,
        "objects_per_second_delivered": _per(n_obj, arrival_s + delivery_s) if n_obj else None,
        "expired": expired,
        "expiry_seconds": exp_s,
        "expiries_per_second": _per(expired, exp_s) if expired else None,
        "objects_per_second_excl_expiry": (_per(n_obj, arrival_s - exp_s)
                                           if n_obj and exp_s is not None else None),
        "notifications": n_notes,
        "notifications_digest": notes_hash.hexdigest(),
        "results_digest": hashlib.blake2b(results, digest_size=16).hexdigest(),
        "candidates": stats["candidates"] - before.get("candidates", 0),
        "affected": stats["affected"] - before.get("affected", 0),
        "refills": (stats["refills"] - before.get("refills", 0)) if "refills" in stats else None,
        "refill_reads": (stats["refill_reads"] - before.get("refill_reads", 0)) if "refill_reads" in stats else None,
        "evictions": (stats["evictions"] - before.get("evictions", 0)) if "evictions" in stats else None,
        "buffered_per_subscription": _buffered(engine),
        "memory_bytes_build": mem_build,
        "memory_bytes_end": mem_end,
        "subscriptions_build": subs_build,
        "subscriptions_end": subs_end,
    }


# -- the suite --------------------------------------------------------------------------------
def order_indexes(indexes: list[str], baseline: str | None) -> tuple[list[str], list[str]]:
    """Indexes in run order, baseline first; the notes on what was added."""
    notes: list[str] = []
    out: list[str] = []
    for ix in indexes:
        if ix and ix not in out:
            out.append(ix)
    if baseline == NO_BASELINE:
        notes.append("--baseline none: only the named indexes ran; no ratios, and their results and "
                     "notifications are checked against each other only")
        return out, notes
    if not any(ix in BASELINES for ix in out):
        out.insert(0, "grid")
        notes.append("added the plain grid index: the reference engine or the plain grid is always measured")
    if baseline is not None:
        if baseline in out:
            out.remove(baseline)
        out.insert(0, baseline)
    return out, notes


def _sig(x: float | None) -> float | None:
    """A ratio to 4 significant digits: rounding to decimals would turn a tiny one into 0."""
    return None if x is None else float(f"{x:.4g}")


def _median(xs: list) -> float | None:
    vals = [x for x in xs if x is not None]
    return statistics.median(vals) if vals and len(vals) == len(xs) else None


def _r(x: float | None, nd: int) -> float | None:
    return None if x is None else round(x, nd)


def machine_info() -> dict[str, Any]:
    import numpy

    try:
        import numba
        numba_version = numba.__version__
    except ImportError:  # pragma: no cover
        numba_version = None
    return {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "numba": numba_version,
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def bench(work: Workload, indexes: list[str], window: Window, space: Space, repeat: int = 3,
          warmup: bool = True, notes: list[str] | None = None, progress: Any = None,
          baseline_events: int | None = None, warm_objects: int = 0, baseline: str | None = None
          ) -> dict[str, Any]:
    """Run every index ``repeat`` times (alternating) over ``work``; the report dict.

    ``indexes[0]`` is the baseline (``baseline`` "none": there is none, ``order_indexes``).
    ``warm_objects``: objects applied untimed after the build (the cold fill, timed apart).  ``progress``: a callable taking a line of text.
    ``baseline_events``: the baseline runs only the first N events, where every other index
    runs too (timed, giving the ratio and the exactness check) besides the whole stream.
    """
    say = progress or (lambda _msg: None)
    events, build = work.events, work.build
    counts = work.counts()
    notes = list(notes or [])
    if work.cut:
        notes.append(f"stream cut to its first {len(events)} valid events by --max-events "
                     f"({work.cut} later events not run)")
    if "reference" in indexes:
        checks = counts["objects"] * max(1, counts["initial_subscriptions"])
        msg = ("the reference engine checks every subscription against every object "
               f"(~{checks:.2g} checks per run)")
        if checks > REFERENCE_CHECKS_NOTE and not work.cut:
            msg += "; use --max-events to cut the stream"
        notes.append(msg)
        say(f"note: {msg}")
    if "reference" in indexes and window.retains and len(indexes) > 1:
        notes.append("aff/obj: the reference counts result changes, the indexed engines entries into "
                     "their k-best buffers (up to kmax*k under a window), so they may differ")
    if window.retains and any(getattr(INDEXES.get(name.split("[")[0]), "compiled", False) for name in indexes):
        notes.append("compiled indexes remove expiring objects from buffers and refill them inside the "
                     "publish kernel, timed with the arrivals: their arrivals obj/s includes expiries, "
                     "and expiries obj/s counts only the plain path's share (n/a when there is none)")
    if any(getattr(INDEXES.get(name.split("[")[0]), "compiled", False) for name in indexes):
        notes.append("compiled indexes hand their notifications on as columns (Engine.apply_columnar); "
                     "'delivered obj/s' adds making a Python object of each, as Engine.apply returns them")
    if window.kind == "none":
        notes.append("window none: objects never expire, so there are no expiry figures")
    elif counts["objects"] and window.kind == "count" and counts["objects"] <= window.n:
        notes.append(f"window {window}: no more objects than the window holds, so none expires")

    warm: dict[str, float | None] = {}
    if warmup:
        wev = warmup_events(events, build)
        wbuild = phases(wev)[1]
        for ix in indexes:
            if ix == "reference":  # nothing to compile; O(S) per object
                warm[ix] = None
                continue
            start = time.perf_counter()
            run_once(ix, wev, wbuild, window, space)
            warm[ix] = time.perf_counter() - start
            say(f"warm-up {ix}: {len(wev)} events in {warm[ix]:.2f} s (untimed)")

    base = indexes[0]
    prefix = baseline_prefix(events, build, baseline_events)
    if prefix is not None:
        notes.append(f"--baseline-events: the baseline {base} ran the first {len(prefix):,} events only; "
                     f"every index ran them too, and its ratio and exactness check are on them; "
                     f"its other figures are over the whole stream")
    runs: dict[str, list[dict]] = {ix: [] for ix in indexes}
    prefix_runs: dict[str, list[dict]] = {ix: [] for ix in indexes}
    for rep in range(repeat):
        for ix in indexes:
            todo = [(prefix, prefix_runs, "first events")] if prefix is not None else []
            if prefix is None or ix != base:
                todo.append((events, runs, "all events"))
            for evs, into, what in todo:
                r = run_once(ix, evs, build, window, space, warm_objects)
                into[ix].append(r)
                ops = r["objects_per_second"]
                reg = r["build_cpu_us_per_subscription"]
                say(f"run {rep + 1}/{repeat} {ix} ({what}): "
                    + (f"window fill {r['window_fill_seconds']:.3f} s, " if work.fill else "")
                    + f"build {r['build_seconds']:.3f} s"
                    + (f" ({reg:,.1f} us CPU a subscription)" if reg is not None else "")
                    + f", arrivals {ops or 0:,.0f} objects/s")
    if prefix is not None:
        runs[base] = prefix_runs[base]
    else:
        prefix_runs = runs
    # The ratios and the exactness check compare runs over the same events.
    base_ops = _median([r["objects_per_second"] for r in prefix_runs[base]])
    base_dops = _median([r["objects_per_second_delivered"] for r in prefix_runs[base]])
    base_eps = _median([r["expiries_per_second"] for r in prefix_runs[base]])
    base_res = prefix_runs[base][0]["results_digest"]
    base_notes = prefix_runs[base][0]["notifications_digest"]
    report: dict[str, Any] = {
        "suite": "skpubsub bench",
        "workload": work.describe,
        **counts,
        "window": str(window),
        "space": [space.x1, space.y1, space.x2, space.y2],
        "repeat": repeat,
        "baseline": NO_BASELINE if baseline == NO_BASELINE else base,
        "baseline_events": None if prefix is None else len(prefix),
        "warmup_objects": warm_objects,
        "machine": machine_info(),
        "notes": notes,
        "indexes": {},
    }
    for ix, rs in runs.items():
        ops = _median([r["objects_per_second"] for r in rs])
        dops = _median([r["objects_per_second_delivered"] for r in rs])
        eps = _median([r["expiries_per_second"] for r in rs])
        ps = prefix_runs[ix]
        p_ops = _median([r["objects_per_second"] for r in ps])
        last = rs[-1]
        n_obj = last["objects"]
        subs_b, subs_e = last["subscriptions_build"], last["subscriptions_end"]
        mem_b, mem_e = last["memory_bytes_build"], last["memory_bytes_end"]
        report["indexes"][ix] = {
            "build_seconds_median": _r(_median([r["build_seconds"] for r in rs]), 6),
            "build_seconds_runs": [_r(r["build_seconds"], 6) for r in rs],
            "cold_fill_seconds_median": _r(_median([r["cold_fill_seconds"] for r in rs]), 6),
            "window_fill_seconds_median": _r(_median([r["window_fill_seconds"] for r in rs]), 6),
            "build_cpu_us_per_subscription_median": _r(_median([r["build_cpu_us_per_subscription"] for r in rs]), 2),
            "memory_bytes_build": mem_b,
            "memory_bytes_end": mem_e,
            "subscriptions_build": subs_b,
            "subscriptions_end": subs_e,
            "bytes_per_subscription_build": _r(_per(mem_b, subs_b), 1),
            "bytes_per_subscription_end": _r(_per(mem_e, subs_e), 1),
            "arrival_seconds_runs": [_r(r["arrival_seconds"], 6) for r in rs],
            "arrivals_objects_per_second_median": _r(ops, 1),
            "arrivals_objects_per_second_runs": [_r(r["objects_per_second"], 1) for r in rs],
            "ratio_to_baseline": _sig(_per(p_ops, base_ops)),
            "baseline_events_objects_per_second_median": None if prefix is None else _r(p_ops, 1),
            "delivery_seconds_runs": [_r(r["delivery_seconds"], 6) for r in rs],
            "arrivals_delivered_objects_per_second_median": _r(dops, 1),
            "delivered_ratio_to_baseline": _sig(_per(_median([r["objects_per_second_delivered"] for r in ps]),
                                                     base_dops)),
            "arrivals_objects_per_second_excl_expiry_median":
                _r(_median([r["objects_per_second_excl_expiry"] for r in rs]), 1),
            "expired": last["expired"],
            "refills": last["refills"],
            "refill_reads": last["refill_reads"],
            "refill_reads_per_expiry": _r(_per(last["refill_reads"], last["expired"]), 2),
            "refill_reads_per_refill": _r(_per(last["refill_reads"], last["refills"]), 2),
            "refills_per_object": _r(_per(last["refills"], n_obj), 4),
            "candidates_per_affected": _r(_per(last["candidates"], last["affected"]), 3),
            "evictions": last["evictions"],
            "buffered_per_subscription": _r(last["buffered_per_subscription"], 2),
            "expiry_seconds_runs": [_r(r["expiry_seconds"], 6) for r in rs],
            "expiries_objects_per_second_median": _r(eps, 1),
            "expiries_objects_per_second_runs": [_r(r["expiries_per_second"], 1) for r in rs],
            "expiry_ratio_to_baseline": _sig(_per(_median([r["expiries_per_second"] for r in ps]), base_eps)),
            "notifications": last["notifications"],
            "candidates_per_object": _r(_per(last["candidates"], n_obj), 3),
            "affected_per_object": _r(_per(last["affected"], n_obj), 3),
            "same_results_as_baseline": all(r["results_digest"] == base_res for r in ps),
            "same_notifications_as_baseline": all(r["notifications_digest"] == base_notes for r in ps),
            "same_as_first_run": all(r["results_digest"] == rs[0]["results_digest"]
                                     and r["notifications_digest"] == rs[0]["notifications_digest"] for r in rs),
            "warmup_seconds": _r(warm.get(ix), 3),
        }
    if baseline == NO_BASELINE:
        report["baseline"] = NO_BASELINE
        for r in report["indexes"].values():
            r["ratio_to_baseline"] = r["delivered_ratio_to_baseline"] = r["expiry_ratio_to_baseline"] = None
    for ix, r in report["indexes"].items():
        if not (r["same_results_as_baseline"] and r["same_notifications_as_baseline"]):
            notes.append(f"{ix}: results or notifications differ from the baseline {base}!")
        if not r["same_as_first_run"]:
            notes.append(f"{ix}: its runs gave different results or notifications!")
    whole = [ix for ix in indexes if ix != base] if prefix is not None else []
    for ix in whole[1:]:  # over the whole stream the indexes can still be checked against each other
        if (runs[ix][0]["results_digest"], runs[ix][0]["notifications_digest"]) != (
                runs[whole[0]][0]["results_digest"], runs[whole[0]][0]["notifications_digest"]):
            notes.append(f"{ix}: results or notifications over the whole stream differ from {whole[0]}'s!")
    return report


# -- output -----------------------------------------------------------------------------------
def _fmt(x: float | None, spec: str, width: int) -> str:
    return f"{'n/a':>{width}}" if x is None else f"{x:>{width}{spec}}"


def _describe(rep: dict[str, Any]) -> str:
    w = rep["workload"]
    if "events_file" in w:
        src = f"events file {w['events_file']}"
    else:
        kinds = f"{w['kind']}" + (f", match {w['match']}" if w["kind"] != "topk" else "")
        src = f"{w['dataset']} workload ({kinds}, kmax {w['kmax']}, seed {w['seed']})"
    fill = rep.get("fill_objects")
    return (f"{src}: {rep['events']:,} events = "
            + (f"{fill:,} objects filling the window + " if fill else "")
            + f"{rep['initial_subscriptions']:,} initial subscriptions "
            f"+ {rep['arrival_events']:,} arrivals ({rep['objects']:,} objects); window {rep['window']}; "
            f"median of {rep['repeat']} run(s); baseline {rep['baseline']}"
            + (f" on the first {rep['baseline_events']:,} events (ratios and exactness on them)"
               if rep.get("baseline_events") else ""))


def format_report(rep: dict[str, Any]) -> str:
    lines = [_describe(rep)]
    wid = max([11] + [len(ix) + 2 for ix in rep["indexes"]])  # index names may carry parameters
    head = (f"{'index':<{wid}}{'build s':>9}{'B/sub build':>13}{'B/sub end':>11}{'arrivals obj/s':>16}"
            f"{'ratio':>9}{'delivered obj/s':>17}{'expiries obj/s':>16}{'cand/obj':>10}{'aff/obj':>9}"
            f"{'refills':>9}{'reads/exp':>11}"
            f"{'buf/sub':>9}  same results")
    lines.append(head)
    lines.append("-" * len(head))
    for ix, r in rep["indexes"].items():
        ratio = r["ratio_to_baseline"]
        same = r["same_results_as_baseline"] and r["same_notifications_as_baseline"]
        if ix == rep["baseline"]:
            same_txt = "yes (baseline)"
        elif same:
            same_txt = "yes"
        elif r["same_results_as_baseline"]:
            same_txt = "NO (notifications differ)"
        else:
            same_txt = "NO (results differ)"
        ratio_txt = f"{'n/a':>9}" if ratio is None else f"{ratio:>8.2f}x"
        lines.append(
            f"{ix:<{wid}}{_fmt(r['build_seconds_median'], '.3f', 9)}"
            f"{_fmt(r['bytes_per_subscription_build'], ',.0f', 13)}"
            f"{_fmt(r['bytes_per_subscription_end'], ',.0f', 11)}"
            f"{_fmt(r['arrivals_objects_per_second_median'], ',.0f', 16)}{ratio_txt}"
            f"{_fmt(r['arrivals_delivered_objects_per_second_median'], ',.0f', 17)}"
            f"{_fmt(r['expiries_objects_per_second_median'], ',.0f', 16)}"
            f"{_fmt(r['candidates_per_object'], ',.1f', 10)}{_fmt(r['affected_per_object'], '.2f', 9)}"
            f"{_fmt(r['refills'], ',d', 9)}{_fmt(r['refill_reads_per_expiry'], ',.1f', 11)}"
            f"{_fmt(r['buffered_per_subscription'], '.1f', 9)}  {same_txt}")
    for note in rep["notes"]:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def stable(rep: dict[str, Any]) -> dict[str, Any]:
    """The JSON scripts read (a stable interface): ``indexes`` a list in run order, each
    ``{"index", "objects_per_second" (arrivals after the build and the cold fill, median),
    "build_seconds", "notifications", "candidates_per_object", "memory_bytes"}`` and then
    every other figure of the report."""
    rows = [{"index": ix, "objects_per_second": r["arrivals_objects_per_second_median"],
             "build_seconds": r["build_seconds_median"], "notifications": r["notifications"],
             "candidates_per_object": r["candidates_per_object"], "memory_bytes": r["memory_bytes_end"], **r}
            for ix, r in rep["indexes"].items()]
    return {**rep, "indexes": rows}


def by_index(rep: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A report's indexes by name, from the report or its JSON (``stable``)."""
    ixs = rep["indexes"]
    return {r["index"]: r for r in ixs} if isinstance(ixs, list) else ixs


def write_outputs(rep: dict[str, Any], out: str | Path | None = None, json_path: str | Path | None = None
                  ) -> list[Path]:
    """``out/bench.json`` + PNG plots (with ``out``), and/or the JSON at ``json_path``."""
    written: list[Path] = []
    text = json.dumps(stable(rep), indent=2) + "\n"
    if out is not None:
        d = Path(out)
        d.mkdir(parents=True, exist_ok=True)
        (d / "bench.json").write_text(text)
        written.append(d / "bench.json")
        from .plots import write_plots  # matplotlib only here

        written.extend(write_plots(rep, d))
    if json_path is not None:
        p = Path(json_path)
        if p.parent != Path(""):
            p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        written.append(p)
    return written


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(events: str | None, indexes: list[str], window: Window, space: Space, repeat: int = 3,
         max_events: int | None = None, out: str | None = None, json_path: str | None = None,
         workload: Any = None, baseline: str | None = None, warmup: bool = True,
         baseline_events: int | None = None, warm_objects: int = 0) -> int:
    """``skpubsub bench``: ``events`` (a file) or ``workload`` (a WorkloadConfig)."""
    order, notes = order_indexes(indexes, baseline)
    work = load_workload(events, workload, window, space, max_events)
    _progress(f"{len(work.events):,} valid events in memory ({work.rejected} rejected); "
              f"indexes {', '.join(order)}")
    rep = bench(work, order, window, space, repeat, warmup=warmup, notes=notes, progress=_progress,
                baseline_events=baseline_events, warm_objects=warm_objects, baseline=baseline)
    print(format_report(rep))
    for p in write_outputs(rep, out, json_path):
        print(f"wrote {p}")
    return 0


__all__ = ["bench", "by_index", "stable", "format_report", "main", "order_indexes", "run_once", "write_outputs"]
