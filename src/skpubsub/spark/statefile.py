"""Files the Spark runtime reads back from its checkpoint, as data, never pickles (SPEC 7).

A state file is two lines: a header ``{"format": F, "version": V, "bytes": n, "sha256": h}``
and a JSON body of ``n`` bytes with that hash. ``read_state`` refuses a file whose format,
version, size or hash is not what it expects, with the reason; nothing in it is executed.
The statistics (:class:`~skpubsub.partition.stats.Statistics`) are one such file.
The framing is :func:`skpubsub.engine.snapshot.frame` (shared with the workers' snapshots).
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from ..core.config import Space
from ..engine.snapshot import Refused, frame, unframe
from ..partition.stats import Statistics
from .fs import Loc

STATS_FORMAT = "skpubsub-spark-statistics"
STATS_VERSION = 1


def write_state(path: Path | Loc, fmt: str, version: int, body: Any) -> None:
    """Atomically (temporary name, fsync, rename)."""
    Loc(path).write_atomic(frame(fmt, version, body))


def read_state(path: Path | Loc, fmt: str, version: int) -> Any:
    """The body of a state file written by :func:`write_state`; :class:`Refused` otherwise."""
    try:
        raw = Loc(path).read_bytes()
    except OSError as exc:
        raise Refused(f"{path}: cannot read ({exc.strerror or exc})") from None
    return unframe(raw, fmt, version, str(path))[1]


def stats_body(st: Statistics) -> dict:
    s = st.space
    return {"space": [s.x1, s.y1, s.x2, s.y2], "grid": st.grid, "sample_cap": st.sample_cap, "n": st.n,
            "keyword_freq": dict(st.keyword_freq), "cell_count": st.cell_count.tolist(),
            "keyword_cells": {w: [[int(c), int(k)] for c, k in cells.items()] for w, cells in st.keyword_cells.items()},
            "sample_x": list(st.sample_x), "sample_y": list(st.sample_y),
            "sample_kw": [list(k) for k in st.sample_kw]}


def _ints(v: Any, what: str) -> list[int]:
    if not isinstance(v, list) or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in v):
        raise Refused(f"statistics: {what} must be non-negative integers")
    return v


def stats_from_body(b: Any) -> Statistics:
    """Validated: every field of the right type and shape, else :class:`Refused`."""
    if not isinstance(b, dict):
        raise Refused("statistics: not an object")
    try:
        space = Space(*(float(v) for v in b["space"]))
        grid, cap, n = b["grid"], b["sample_cap"], b["n"]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (grid, cap, n)) or not grid:
            raise Refused("statistics: grid, sample_cap and n must be integers")
        cells = _ints(b["cell_count"], "cell counts")
        if len(cells) != grid * grid:
            raise Refused("statistics: cell counts do not fit the grid")
        freq = b["keyword_freq"]
        if not isinstance(freq, dict):
            raise Refused("statistics: keyword_freq must be an object")
        _ints(list(freq.values()), "keyword frequencies")
        kc: dict[str, Counter] = {}
        for w, pairs in b["keyword_cells"].items():
            if not isinstance(pairs, list) or not all(isinstance(p, list) and len(p) == 2 for p in pairs):
                raise Refused("statistics: keyword_cells must map keywords to [cell, count] pairs")
            flat = _ints([x for p in pairs for x in p], "keyword cells")
            if any(c >= grid * grid for c in flat[0::2]):
                raise Refused("statistics: a keyword cell outside the grid")
            kc[w] = Counter(dict(zip(flat[0::2], flat[1::2])))
        xs, ys, kws = b["sample_x"], b["sample_y"], b["sample_kw"]
        if not (isinstance(xs, list) and isinstance(ys, list) and isinstance(kws, list)
                and len(xs) == len(ys) == len(kws) <= cap):
            raise Refused("statistics: the sample's columns differ in length")
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in xs + ys):
            raise Refused("statistics: sample coordinates must be finite numbers")
        if not all(isinstance(k, list) and all(isinstance(w, str) for w in k) for k in kws):
            raise Refused("statistics: sample keywords must be lists of strings")
    except (KeyError, TypeError, AttributeError) as exc:
        raise Refused(f"statistics: missing or mistyped field ({exc})") from None
    except Refused:
        raise
    except ValueError as exc:  # the space
        raise Refused(f"statistics: {exc}") from None
    return Statistics(space=space, grid=grid, sample_cap=cap, n=n, keyword_freq=Counter(freq),
                      cell_count=np.array(cells, dtype=np.int64), keyword_cells=kc,
                      sample_x=[float(v) for v in xs], sample_y=[float(v) for v in ys],
                      sample_kw=[tuple(k) for k in kws])


def write_stats(path: Path, st: Statistics) -> None:
    write_state(path, STATS_FORMAT, STATS_VERSION, stats_body(st))


def read_stats(path: Path) -> Statistics:
    return stats_from_body(read_state(path, STATS_FORMAT, STATS_VERSION))
