"""Synthetic event streams over real places, built the way the papers build them.

A workload is a stream of SPEC events (section 3) made from a dataset of places
(:mod:`skpubsub.datasets`):

- **objects** — the places in a seeded random order (a fresh permutation each
  time the dataset is exhausted), one ``pub`` each, ids ``o0, o1, ...``, at
  ``x, y`` = longitude, latitude, with a seeded random subset of at most
  ``object_keywords`` of the place's keywords (tweet-sized).  Object ``i`` is at
  time step ``t = 1 + i // objects_per_step``.
- **initial subscriptions** — ``subscriptions`` ``sub`` events at ``t = 0``, before
  every object, ids ``s0, s1, ...``.  Each sits at the place of a random object
  of the stream and takes 1..``sub_keywords`` of that place's keywords: each
  pick is, with even odds, weighted by the keyword's frequency among the
  stream's objects (frequent words) or uniform (often rare words).  ``k`` is
  uniform in 1..``kmax``; ``alpha`` uniform in [0, 1] (``topk``); ``range``
  rectangles are squares of side ``range_size`` degrees centred at the place.
  ``kind`` and ``match`` are fixed or, with ``mix``, drawn per subscription.
- **churn** — at each step ``t >= 1``, before the step's objects: the step's
  share of ``unsub_rate`` ``unsub`` events of random active subscriptions, then
  the step's share of ``sub_rate`` new subscriptions (rates may be fractional:
  step ``s`` gets ``floor(s * rate) - floor((s - 1) * rate)``).  A fraction
  ``expire_fraction`` of all subscriptions get ``expires = t + L`` with ``L``
  uniform in 1..``lifetime`` steps; an expired subscription is never unsubscribed.
- **the papers' shape** (``fill_window`` = N > 0; Skype's and CkQST's experiments): the
  window is filled first with N objects (``o0`` .. at steps ``1 + i // objects_per_step``),
  then the ``subscriptions`` are registered at the last fill object's time ``T`` (each
  against the full window), then ``objects`` more objects stream (step ``T + 1 + j //
  objects_per_step``, churn at each of those steps). Every object takes all the words of
  its place (``object_keywords`` does not apply) at the place's location moved by ``jitter``
  degrees at most on each axis (uniform, kept inside the space).

Everything is drawn from ``numpy.random.default_rng(seed)`` (split into
independent streams for the object order, object keywords, subscriptions and
churn, so changing a subscription parameter leaves the objects unchanged): the
same configuration always gives byte-identical output.  Every event passes
:class:`skpubsub.io.validate.Gate` with the default space and window ``none``.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..datasets import DATASETS, Places, load
from ..io.events import MAX_K

KINDS = ("knn", "topk", "range")
KIND_CHOICES = (*KINDS, "mix")
MATCHES = ("all", "any")
MATCH_CHOICES = (*MATCHES, "mix")


@dataclass(frozen=True)
class WorkloadConfig:
    """Parameters of a workload; see the module docstring for their meaning."""

    dataset: str = "geonames-cities"
    objects: int = 10_000
    subscriptions: int = 1_000
    kind: str = "mix"  # knn | topk | range | mix
    match: str = "mix"  # all | any | mix (knn and range; topk has no match)
    kmax: int = 10
    range_size: float = 1.0  # side of a range rectangle, degrees
    sub_rate: float = 1.0  # subscription inserts per time step
    unsub_rate: float = 1.0  # unsubscriptions per time step
    objects_per_step: int = 100
    seed: int = 0
    object_keywords: int = 8  # at most this many keywords per object
    sub_keywords: int = 5  # 1..this many keywords per subscription
    expire_fraction: float = 0.0  # share of subscriptions given an `expires`
    lifetime: int = 100  # steps; expires = t + uniform 1..lifetime
    limit: int | None = None  # load only the first `limit` places of the dataset
    fill_window: int = 0  # the papers' shape: this many objects before the subscriptions
    jitter: float = 0.01  # degrees an object of the papers' shape moves from its place, at most

    def __post_init__(self) -> None:
        def bad(msg: str) -> None:
            raise ValueError(f"bad workload config: {msg}")

        def is_int(v: Any) -> bool:
            return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

        def is_num(v: Any) -> bool:
            return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) \
                and math.isfinite(float(v))

        if self.dataset not in DATASETS:
            bad(f"unknown dataset {self.dataset!r}; known datasets: {', '.join(DATASETS)}")
        for name in ("objects", "subscriptions", "fill_window"):
            v = getattr(self, name)
            if not is_int(v) or v < 0:
                bad(f"{name} must be an integer >= 0, got {v!r}")
        for name in ("objects_per_step", "object_keywords", "sub_keywords", "lifetime"):
            v = getattr(self, name)
            if not is_int(v) or v < 1:
                bad(f"{name} must be an integer >= 1, got {v!r}")
        if self.kind not in KIND_CHOICES:
            bad(f"unknown kind {self.kind!r}; use one of {', '.join(KIND_CHOICES)}")
        if self.match not in MATCH_CHOICES:
            bad(f"unknown match {self.match!r}; use one of {', '.join(MATCH_CHOICES)}")
        if not is_int(self.kmax) or not 1 <= self.kmax <= MAX_K:
            bad(f"kmax must be an integer in 1..{MAX_K}, got {self.kmax!r}")
        for name in ("range_size", "sub_rate", "unsub_rate", "jitter"):
            v = getattr(self, name)
            if not is_num(v) or v < 0:
                bad(f"{name} must be a finite number >= 0, got {v!r}")
        if not is_num(self.expire_fraction) or not 0 <= self.expire_fraction <= 1:
            bad(f"expire_fraction must be in [0, 1], got {self.expire_fraction!r}")
        if not is_int(self.seed) or self.seed < 0:
            bad(f"seed must be an integer >= 0, got {self.seed!r}")
        if self.limit is not None and (not is_int(self.limit) or self.limit < 1):
            bad(f"limit must be an integer >= 1, got {self.limit!r}")

    @property
    def steps(self) -> int:
        """Number of time steps holding objects (churn happens at each of them)."""
        return -(-self.objects // self.objects_per_step)

    def expected(self) -> dict[str, int]:
        """Counts fixed by the configuration: objects, subscriptions, steps.

        ``subscriptions`` counts every ``sub`` (initial and churn); the number of
        ``unsub`` events is at most ``unsubs_max`` (fewer when too few are active).
        """
        return {
            "pubs": self.fill_window + self.objects,
            "initial_subs": self.subscriptions,
            "subs": self.subscriptions + _per_step_total(self.sub_rate, self.steps),
            "unsubs_max": _per_step_total(self.unsub_rate, self.steps),
            "steps": self.steps,
        }

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _per_step(rate: float, step: int) -> int:
    """Events of a per-step ``rate`` that fall in ``step`` (1-based): exact in total."""
    return math.floor(step * rate) - math.floor((step - 1) * rate)


def _per_step_total(rate: float, steps: int) -> int:
    return math.floor(steps * rate) if steps > 0 else 0


class _Active:
    """The active subscription ids, with O(1) random pick and removal."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.pos: dict[str, int] = {}
        self.expires: dict[str, float] = {}

    def add(self, ident: str, expires: float) -> None:
        self.pos[ident] = len(self.ids)
        self.ids.append(ident)
        self.expires[ident] = expires

    def remove_at(self, j: int) -> str:
        ident = self.ids[j]
        last = self.ids.pop()
        if j < len(self.ids):
            self.ids[j] = last
            self.pos[last] = j
        del self.pos[ident]
        del self.expires[ident]
        return ident

    def pick(self, rng: np.random.Generator, t: float) -> str | None:
        """Remove and return a random id still active at ``t``; expired ones are dropped."""
        while self.ids:
            j = int(rng.integers(len(self.ids)))
            expired = self.expires[self.ids[j]] <= t
            ident = self.remove_at(j)
            if not expired:
                return ident
        return None


class _SubMaker:
    def __init__(self, config: WorkloadConfig, places: Places, pool: np.ndarray,
                 rng: np.random.Generator) -> None:
        self.c = config
        self.places = places
        self.pool = pool
        self.rng = rng
        self.freq: Counter[str] = Counter()
        for i in pool.tolist():
            self.freq.update(places.keywords[i])
        self.next_id = 0

    def keywords(self, kws: tuple[str, ...]) -> list[str]:
        rng = self.rng
        m = min(int(rng.integers(1, self.c.sub_keywords + 1)), len(kws))
        left = list(kws)
        out: list[str] = []
        for _ in range(m):
            if rng.random() < 0.5:  # frequent words: weighted by frequency in the stream
                w = np.array([self.freq[k] for k in left], dtype=np.float64)
                j = int(rng.choice(len(left), p=w / w.sum()))
            else:  # uniform over the place's words: mostly rare ones
                j = int(rng.integers(len(left)))
            out.append(left.pop(j))
        return out

    def make(self, t: int) -> dict[str, Any]:
        c, rng = self.c, self.rng
        place = int(self.pool[int(rng.integers(len(self.pool)))])
        x = float(self.places.x[place])
        y = float(self.places.y[place])
        kind = c.kind if c.kind != "mix" else KINDS[int(rng.integers(len(KINDS)))]
        match = c.match if c.match != "mix" else MATCHES[int(rng.integers(len(MATCHES)))]
        ev: dict[str, Any] = {"op": "sub", "id": f"s{self.next_id}", "t": t, "kind": kind}
        self.next_id += 1
        if kind == "range":
            h = c.range_size / 2
            ev["rect"] = [x - h, y - h, x + h, y + h]
        else:
            ev["x"] = x
            ev["y"] = y
            ev["k"] = int(rng.integers(1, c.kmax + 1))
            if kind == "topk":
                ev["alpha"] = round(float(rng.random()), 4)
        ev["keywords"] = self.keywords(self.places.keywords[place])
        if kind != "topk":
            ev["match"] = match
        if c.expire_fraction > 0 and rng.random() < c.expire_fraction:
            ev["expires"] = t + int(rng.integers(1, c.lifetime + 1))
        return ev


def _object_order(n: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` place indices: seeded permutations of ``range(n)``, back to back."""
    if count == 0:
        return np.zeros(0, dtype=np.int64)
    reps = -(-count // n)
    return np.concatenate([rng.permutation(n) for _ in range(reps)])[:count]


def generate(config: WorkloadConfig, places: Places | None = None) -> Iterator[dict[str, Any]]:
    """The events of the workload, in stream order (SPEC event dicts).

    ``places`` defaults to ``load(config.dataset, limit=config.limit)``.
    """
    if places is None:
        places = load(config.dataset, limit=config.limit)
    n = len(places)
    if n == 0 and (config.objects or config.expected()["subs"]):
        raise ValueError(f"dataset {places.name!r} has no places")
    if n == 0 and config.fill_window:
        raise ValueError(f"dataset {places.name!r} has no places")
    # (the first four streams are spawn(4)'s: workloads without a fill are unchanged)
    r_order, r_objkw, r_subs, r_churn, r_jitter = np.random.default_rng(config.seed).spawn(5)
    order = _object_order(n, config.fill_window + config.objects, r_order)
    if config.fill_window:
        return _filled(config, places, order, r_jitter, r_subs, r_churn)
    return _events(config, places, order, r_objkw, r_subs, r_churn)


def _churn(config: WorkloadConfig, step: int, t: int, active: "_Active", new_sub,
           r_churn: np.random.Generator) -> Iterator[dict[str, Any]]:
    """Step ``step``'s churn at time ``t``: unsubscriptions of active ids (drawn by
    ``r_churn``), then new subscriptions (``new_sub(t)``)."""
    for _ in range(_per_step(config.unsub_rate, step)):
        ident = active.pick(r_churn, t)
        if ident is None:
            break
        yield {"op": "unsub", "id": ident, "t": t}
    for _ in range(_per_step(config.sub_rate, step)):
        yield new_sub(t)


def _filled(config: WorkloadConfig, places: Places, order: np.ndarray, r_jitter: np.random.Generator,
            r_subs: np.random.Generator, r_churn: np.random.Generator) -> Iterator[dict[str, Any]]:
    """The papers' shape (``fill_window``): the window's objects, the subscriptions at the last
    one's time, then the streaming objects with churn."""
    c = config
    maker = _SubMaker(c, places, order, r_subs)
    active = _Active()
    per_step, fill = c.objects_per_step, c.fill_window
    j = c.jitter
    xs = np.clip(places.x[order] + r_jitter.uniform(-j, j, len(order)), -180.0, 180.0).round(6).tolist()
    ys = np.clip(places.y[order] + r_jitter.uniform(-j, j, len(order)), -90.0, 90.0).round(6).tolist()
    kws = places.keywords
    order_list: list[int] = order.tolist()

    def pub(i: int, t: int) -> dict[str, Any]:
        return {"op": "pub", "id": f"o{i}", "t": t, "x": xs[i], "y": ys[i], "keywords": list(kws[order_list[i]])}

    def new_sub(t: int) -> dict[str, Any]:
        ev = maker.make(t)
        active.add(ev["id"], ev.get("expires", math.inf))
        return ev

    for i in range(fill):
        yield pub(i, 1 + i // per_step)
    last = 1 + (fill - 1) // per_step
    for _ in range(c.subscriptions):
        yield new_sub(last)
    for step in range(1, c.steps + 1):
        t = last + step
        yield from _churn(c, step, t, active, new_sub, r_churn)
        lo = fill + (step - 1) * per_step
        for i in range(lo, min(lo + per_step, len(order_list))):
            yield pub(i, t)


def _events(config: WorkloadConfig, places: Places, order: np.ndarray, r_objkw: np.random.Generator,
            r_subs: np.random.Generator, r_churn: np.random.Generator) -> Iterator[dict[str, Any]]:
    pool = order if len(order) else np.arange(len(places))
    needs_subs = config.subscriptions > 0 or (config.sub_rate > 0 and config.steps > 0)
    maker = _SubMaker(config, places, pool, r_subs) if needs_subs else None
    active = _Active()
    inf = math.inf

    def new_sub(t: int) -> dict[str, Any]:
        assert maker is not None
        ev = maker.make(t)
        active.add(ev["id"], ev.get("expires", inf))
        return ev

    for _ in range(config.subscriptions):
        yield new_sub(0)

    xs: list[float] = places.x.tolist()
    ys: list[float] = places.y.tolist()
    kws = places.keywords
    cap = config.object_keywords
    per_step = config.objects_per_step
    order_list: list[int] = order.tolist()
    for step in range(1, config.steps + 1):
        yield from _churn(config, step, step, active, new_sub, r_churn)
        lo = (step - 1) * per_step
        for i in range(lo, min(lo + per_step, len(order_list))):
            p = order_list[i]
            words = kws[p]
            if len(words) > cap:
                keep = np.sort(r_objkw.choice(len(words), cap, replace=False))
                words = tuple(words[j] for j in keep.tolist())
            yield {"op": "pub", "id": f"o{i}", "t": step, "x": xs[p], "y": ys[p],
                   "keywords": list(words)}


def write_jsonl(events: Iterable[dict[str, Any]], path: str | os.PathLike[str]) -> int:
    """Write one compact JSON line per event to ``path`` (``"-"``: standard output).

    Each line is ``json.dumps(ev, separators=(",", ":"))``.  Returns the number
    of lines written.
    """
    encode = json.JSONEncoder(separators=(",", ":")).encode  # = json.dumps(ev, separators=...)
    if str(path) == "-":
        return _write_lines(events, sys.stdout, encode)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        return _write_lines(events, f, encode)


def _write_lines(events: Iterable[dict[str, Any]], out: Any, encode: Any) -> int:
    count = 0
    write = out.write
    for ev in events:
        write(encode(ev) + "\n")
        count += 1
    out.flush()
    return count
