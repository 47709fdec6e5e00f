"""The check suite every subscription index must pass (river's ``yield_checks`` style).

``yield_checks("aoiq[batch=true]")`` yields named checks (plain functions of no
argument, ``__name__`` the check's name) for one index spec — an index name with
optional parameters as ``skpubsub bench`` takes them (:func:`skpubsub.bench.compare.split_spec`);
``index_specs()`` lists every registered index with its defaults and the variants of
:data:`skpubsub.testing.conformance.INDEX_VARIANTS`. A check raises ``AssertionError``
with a readable message when the index fails it:

- ``check_reference_{none,count,time}``: the engine equals the reference engine on
  seeded random streams under that window kind (``conformance.compare``: notifications,
  ``results``, ``all_results`` and ``engine._check()`` after every event, then the
  stream again in random batches);
- ``check_snapshot``: an engine saved as data (``engine/snapshot``: ``capture``, ``frame``
  to bytes, ``unframe``, ``restore`` into a fresh engine; no pickle) at random cuts (and
  after the last event) goes on exactly like the reference, and passes ``_check()`` after
  each restore, under every window kind (the engine runs as a worker of the local runtime,
  whose dispatcher drives its expiry and knows its live events: what a snapshot holds);
- ``check_catches_a_lost_posting_entry``: one live posting entry of one subscription
  removed from the index's data (the compiled indexes' posting store, the plain grid's
  sets) is caught by ``engine._check()``;
- ``check_catches_a_cleared_slot``: every posting of one subscription removed is caught
  by ``engine._check()`` *and* by conformance: an object made to qualify for that
  subscription gets the reference's notifications on an untouched twin engine and
  different ones on the damaged engine;
- ``check_catches_a_lost_alive_posting``: under ``count``/``time`` windows, one alive
  object's entry removed from the alive postings (``AliveStore``) is caught by
  ``engine._check()`` and by conformance (a new kNN subscription at the object, which
  the refill must find).

The planted-bug checks damage the data structures, not the code, so they hold for an
index whose kernel scans its postings itself (where wrapping ``candidates()`` would plant
nothing); they fail if the damage goes unnoticed, and for an index whose postings they
cannot reach (``_Postings`` knows the compiled grid's store and the plain grid's sets). Budgets are small (a few seconds per
check and index); ``SKPUBSUB_CONFORMANCE_SCALE`` multiplies the stream counts.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..core import postings as P
from ..core.config import Space, Window
from ..io.events import KNN, Pub, Sub
from ..store.subscriptions import K_RANGE, K_TOPK
from .conformance import compare, engine_factory, index_configs, validate
from .reference import ReferenceEngine
from .streams import WINDOW_KINDS, random_stream

SCALE = float(os.environ.get("SKPUBSUB_CONFORMANCE_SCALE", "1"))
# per window kind (20-150 events each, _check() after every event): the suite's contract per index;
# the volume is test_conformance's (the same compare on >= 20 streams per index and window)
REFERENCE_STREAMS = max(1, int(1 * SCALE))
SNAPSHOT_STREAMS = max(1, int(2 * SCALE))  # per window kind (60-200 events each)
PLANTED_TRIES = 40  # streams tried for a setup the planted bug can be shown on
SEED_BASE = 20_000_000  # away from test_conformance's seeds


# -- specs ---------------------------------------------------------------------------------
def spec(name: str, params: dict[str, Any]) -> str:
    """``("dkm", {"prefix": False})`` -> ``"dkm[prefix=false]"`` (``split_spec``'s inverse)."""
    if not params:
        return name

    def fmt(v: Any) -> str:
        return str(v).lower() if isinstance(v, bool) else repr(v) if isinstance(v, float) else str(v)

    return f"{name}[{','.join(f'{k}={fmt(v)}' for k, v in sorted(params.items()))}]"


def index_specs() -> list[str]:
    """Every registered index with its defaults, then each variant of the conformance list."""
    from ..index import INDEXES

    out = [spec(name, {}) for name in INDEXES]
    for name, params in index_configs():
        s = spec(name, params)
        if s not in out:
            out.append(s)
    return out


def parse(index: str) -> tuple[str, dict[str, Any]]:
    """``"aoiq[batch=true]"`` -> ``("aoiq", {"batch": True})``: the bench's parser, one syntax
    for variants everywhere."""
    from ..bench.compare import split_spec

    return split_spec(index)


# -- the suite -------------------------------------------------------------------------------
def yield_checks(index: str) -> Iterator[Callable[[], None]]:
    """The checks index spec ``index`` must pass, each a function of no argument named
    after the check (``check.__name__``)."""
    name, params = parse(index)
    factory = engine_factory(name, **params)

    def bind(check: Callable[..., None], *args: Any) -> Callable[[], None]:
        def run() -> None:
            check(factory, *args)

        run.__name__ = run.__qualname__ = check.__name__ + ("_" + "_".join(map(str, args)) if args else "")
        run.__doc__ = check.__doc__
        return run

    for kind in WINDOW_KINDS:
        yield bind(check_reference, kind)
    yield bind(check_snapshot)
    yield bind(check_catches_a_lost_posting_entry)
    yield bind(check_catches_a_cleared_slot)
    yield bind(check_catches_a_lost_alive_posting)


def check_reference(factory, kind: str, streams: int | None = None) -> None:
    """Equal to the reference engine on seeded random streams under window ``kind``."""
    first = SEED_BASE + 100_000 * WINDOW_KINDS.index(kind)
    for seed in range(first, first + (streams or REFERENCE_STREAMS)):
        s = random_stream(seed, windows=(kind,))
        try:
            compare(s.events, s.window, s.space, factory, batch_seed=seed)
        except AssertionError as exc:
            raise AssertionError(f"{s} (random_stream({seed}, windows=({kind!r},)))\n{exc}") from None


def check_snapshot(factory, streams: int | None = None) -> None:
    """Saved as data and restored at random cuts, the engine goes on like the reference.

    The engine is the one worker of a local runtime (in this process): the dispatcher
    expires objects and subscriptions for it and knows the events still live in it. At each
    cut its state is captured as SPEC records (``engine.snapshot.capture``), framed to bytes,
    read back (``unframe``, checksummed) and re-applied into a fresh engine of the same
    spec (``restore``: validated records only, the results checked against the digest),
    which takes the worker's place. ``factory``: an ``engine_factory`` (its index and
    parameters)."""
    from ..engine.snapshot import ENGINE_VERSION, capture, frame, restore, unframe
    from ..partition.registry import PLANNERS
    from ..partition.stats import Statistics
    from ..runtime.engines import make_engine
    from ..runtime.local import LocalCluster

    index, params = factory.index, factory.params
    fmt = "skpubsub-check-snapshot"
    for w, kind in enumerate(WINDOW_KINDS):
        first = SEED_BASE + 1_000_000 + 100_000 * w
        for seed in range(first, first + (streams or SNAPSHOT_STREAMS)):
            s = random_stream(seed, n_events=(60, 200), windows=(kind,))
            window, space = Window.parse(s.window), s.space or Space()
            evs, _ = validate(s.events, window, space)
            plan = PLANNERS["hash"]([], Statistics.from_objects([], space), 1)
            run = LocalCluster(plan, window, space, index=index, processes=False, **params)
            d, ref = run.dispatcher, ReferenceEngine(window, space)
            rng = random.Random(seed)
            cuts = sorted(rng.sample(range(1, len(evs)), min(4, len(evs) - 1))) + [len(evs)]
            lo = 0
            for hi in cuts:
                where = f"{s}, events {lo}..{hi - 1} of {len(evs)}"
                assert run.apply(evs[lo:hi]) == ref.apply(evs[lo:hi]), f"notifications differ after a restore: {where}"
                alive = [pub for pub, held in d.alive.values() if 0 in held]
                raw = frame(fmt, ENGINE_VERSION, capture(run._conns[0].engine, d.subs.values(), alive))
                assert isinstance(raw, bytes)
                fresh = make_engine(index, window, space, external_expiry=True, **params)
                restore(fresh, unframe(raw, fmt, ENGINE_VERSION)[1])
                run._conns[0].engine = fresh
                try:
                    fresh._check()
                except AssertionError as exc:
                    raise AssertionError(f"_check() failed after a restore: {where}: {exc!r}") from None
                assert run.results() == ref.all_results(), f"results differ after a restore: {where}"
                lo = hi


# -- planted bugs ------------------------------------------------------------------------------
def _prefix(factory, seed: int, kind: str) -> tuple[Any, Any, Any, list, Window, Space] | None:
    """An engine, its untouched twin and the reference after the first two thirds of a stream."""
    s = random_stream(seed, windows=(kind,), junk=False)
    window, space = Window.parse(s.window), s.space or Space()
    evs, _ = validate(s.events, window, space)
    evs = evs[: 2 * len(evs) // 3]
    if not evs:
        return None
    eng, twin, ref = factory(window, space), factory(window, space), ReferenceEngine(window, space)
    for e in (eng, twin, ref):
        e.apply(evs)
    return eng, twin, ref, evs, window, space


def _caught_by_check(eng) -> str | None:
    """The message ``eng._check()`` fails with, or None when it passes."""
    try:
        eng._check()
    except AssertionError as exc:
        return repr(exc) or "AssertionError"
    return None


def drop_entries(store: P.PostingStore, key: int, drop: np.ndarray) -> int:
    """Remove the entries of list ``key`` where ``drop`` (a mask over the list's entries in
    order) is True, compacting the list in place as a scan does (``postings.keep`` and
    ``truncate``), so the store stays well formed; returns how many went."""
    p = int(P.lookup(store.h_keys, store.h_vals, np.int64(key)))
    assert p >= 0, ("no list", key)
    keys, _, at = store._flat()
    at = at[keys == key]
    assert len(drop) == len(at)
    wb, wi = int(store.p_head[p]), 0
    for r in at[~drop].tolist():
        store.blk_data[wb * P.B + wi] = store.blk_data[r]
        if len(store.blk_filter):
            store.blk_filter[wb * P.B + wi] = store.blk_filter[r]
        wi += 1
        if wi == P.B:
            wb, wi = int(store.blk_next[wb]), 0
    dropped = int(drop.sum())
    if dropped:
        P.truncate(store.arrays, p, wb, wi, dropped)
    return dropped


class _Postings:
    """Where an index posts subscription slots, as data the planted bugs can damage."""

    def __init__(self, eng) -> None:
        self.eng = eng
        ix = eng.index
        self.grid = ix.kernel_grid if eng.compiled else None
        self.plain = None if self.grid is not None else ix if hasattr(ix, "cells") and hasattr(ix, "glob") else None

    def require(self) -> None:
        """A new kind of index needs its own way in here before these checks mean anything."""
        assert self.grid is not None or self.plain is not None, (
            f"checks._Postings does not know where index {type(self.eng.index).__name__} posts subscriptions "
            "(neither a compiled grid with a posting store nor the plain grid's sets): teach it")

    def live(self) -> dict[int, list[tuple[Any, int]]]:
        """slot -> [(list, index in it)] of its live postings (compiled: ``read_list``'s
        rule; plain grid: membership)."""
        out: dict[int, list[tuple[Any, int]]] = {}
        if self.plain is not None:
            for table in (self.plain.cells, self.plain.glob):
                for key, slots in table.items():
                    for s in slots:
                        out.setdefault(int(s), []).append(((table is self.plain.glob, key), -1))
            return out
        g, c = self.grid, self.eng.subs.cols
        from ..index.cells import decode_key

        for key, ents in g.store.contents().items():
            level, cx, cy = decode_key(key, g.lmax)
            for i, e in enumerate(ents.tolist()):
                s = e >> 32
                r = g._slots[s]
                box = r["box"]
                if (c.active[s] and r["epoch"] == (e & 0xFFFFFFFF) and r["level"] == level
                        and (level < 0 or (box[0] <= cx <= box[2] and box[1] <= cy <= box[3]))):
                    out.setdefault(s, []).append((key, i))
        return out

    def remove(self, s: int, where: list[tuple[Any, int]]) -> None:
        """Remove these postings (from ``live()``) of slot ``s``."""
        if self.plain is not None:
            for (is_glob, key), _ in where:
                table = self.plain.glob if is_glob else self.plain.cells
                table[key].discard(s)
                if not table[key]:
                    del table[key]
            return
        by_key: dict[int, list[int]] = {}
        for key, i in where:
            by_key.setdefault(key, []).append(i)
        store = self.grid.store
        for key, idx in by_key.items():
            n = len(store.contents()[key])
            mask = np.zeros(n, dtype=np.bool_)
            mask[idx] = True
            drop_entries(store, key, mask)

    def clear(self, s: int, one: bool = False) -> int:
        """Remove every live posting of slot ``s`` (``one``: only its first); returns how many."""
        where = self.live().get(s, [])
        if one:
            where = where[:1]
        self.remove(s, where)
        return len(where)


def _best_keywords(words: list[str], ws: np.ndarray) -> tuple[str, ...]:
    """The keywords of an object scoring the highest TSim for weights ``ws``: the prefix of
    the keywords by weight, descending, whose sum over sqrt(length) is largest."""
    order = np.argsort(-ws, kind="stable")
    csum = np.cumsum(ws[order])
    m = int(np.argmax(csum / np.sqrt(np.arange(1, len(ws) + 1)))) + 1
    return tuple(words[i] for i in order[:m].tolist())


def _qualifying_pub(eng, s: int, seq: int, t: Any, space: Space) -> Pub | None:
    """An object that changes slot ``s``'s notifications whatever it holds now: inside a
    range's rectangle with all its keywords; at a kNN's centre with all its keywords (distance
    0, newest first); at a top-k's centre with the keywords of the best text score."""
    c, vocab = eng.subs.cols, eng.vocab.words
    ids = eng.subs.keywords(s).tolist()
    words = [vocab[w] for w in ids]
    if c.kind[s] == K_RANGE:
        x1, y1 = max(c.rx1[s], space.x1), max(c.ry1[s], space.y1)
        x2, y2 = min(c.rx2[s], space.x2), min(c.ry2[s], space.y2)
        if x1 > x2 or y1 > y2:
            return None
        x, y = (x1 + x2) / 2, (y1 + y2) / 2
        kws = tuple(words)
    else:
        x, y = float(c.x[s]), float(c.y[s])
        kws = tuple(words)
        if c.kind[s] == K_TOPK:
            off = int(c.kw_off[s])
            kws = _best_keywords(words, eng.subs.kw.ws[off:off + len(ids)])
    return Pub(seq, "planted-probe", t, float(x), float(y), kws)


def check_catches_a_lost_posting_entry(factory) -> None:
    """One live posting entry of one subscription removed: ``engine._check()`` fails."""
    shown = 0
    for w, kind in enumerate(WINDOW_KINDS):
        for seed in range(SEED_BASE + 2_000_000 + 100_000 * w, SEED_BASE + 2_000_000 + 100_000 * w + PLANTED_TRIES):
            setup = _prefix(factory, seed, kind)
            if setup is None:
                continue
            eng = setup[0]
            where = _Postings(eng)
            where.require()
            live = where.live()
            if not live:
                continue
            s = min(live)
            assert _caught_by_check(eng) is None, "_check() failed before anything was planted"
            assert where.clear(s, one=True) == 1
            msg = _caught_by_check(eng)
            assert msg is not None, (f"engine._check() did not notice a lost posting entry of slot {s} "
                                     f"(random_stream({seed}, windows=({kind!r},)), first two thirds)")
            shown += 1
            break
    assert shown, "no stream offered a posted subscription"


def check_catches_a_cleared_slot(factory) -> None:
    """Every posting of one subscription removed: ``engine._check()`` fails, and an object
    that qualifies for it gets the reference's notifications on an untouched twin engine
    and different ones on the damaged engine (under each window kind)."""
    for w, kind in enumerate(WINDOW_KINDS):
        first = SEED_BASE + 3_000_000 + 100_000 * w
        assert _show_cleared_slot(factory, kind, range(first, first + PLANTED_TRIES), w), \
            f"no {kind} stream offered a subscription the planted bug can be shown on"


def _show_cleared_slot(factory, kind: str, seeds: range, turn: int) -> bool:
    for seed in seeds:
        setup = _prefix(factory, seed, kind)
        if setup is None:
            continue
        eng, twin, ref, evs, _, space = setup
        where = _Postings(eng)
        where.require()
        c = eng.subs.cols
        live = where.live()
        # range, kNN and top-k targets in turn (by window kind), the first that can be shown
        for s in sorted(live, key=lambda s: ((int(c.kind[s]) - turn) % 3, s)):
            pub = _qualifying_pub(eng, s, evs[-1].seq + 1, evs[-1].t, space)
            if pub is not None:
                break
        else:
            continue
        sid = eng.subs.ids[s]
        assert _caught_by_check(eng) is None, "_check() failed before anything was planted"
        want = ref.apply([pub])
        if not any(n.sub == sid for n in want):
            continue  # the reference did not notify it (a top-k tie, say): another stream
        assert where.clear(s) >= 1
        ctx = f"slot {s} (id {sid!r}), random_stream({seed}, windows=({kind!r},)), first two thirds, then {pub}"
        assert _caught_by_check(eng) is not None, \
            f"engine._check() did not notice that every posting of a subscription went: {ctx}"
        assert twin.apply([pub]) == want, f"the untouched twin differs from the reference: {ctx}"
        assert eng.apply([pub]) != want, f"conformance did not notice that every posting of a subscription went: {ctx}"
        return True
    return False


def check_catches_a_lost_alive_posting(factory) -> None:
    """Under count/time windows, the newest alive object's entry under one keyword removed
    from the alive postings: ``engine._check()`` fails, and a new kNN subscription at the
    object under that keyword (whose first result it must be) differs from the reference."""
    shown = 0
    for w, kind in enumerate(WINDOW_KINDS):
        if kind == "none":
            continue
        for seed in range(SEED_BASE + 4_000_000 + 100_000 * w, SEED_BASE + 4_000_000 + 100_000 * w + PLANTED_TRIES):
            setup = _prefix(factory, seed, kind)
            if setup is None:
                continue
            eng, twin, ref, evs, _, _ = setup
            oc = eng.objs.cols
            alive = np.flatnonzero(oc.alive[: oc.top])
            if not len(alive):
                continue
            o = int(alive[np.argmax(oc.seq[alive])])
            kw = int(eng.objs.keywords(o)[0])
            store = eng.alive.store
            ents = store.contents()[kw]
            mine = ((ents >> 32) == o) & ((ents & 0xFFFFFFFF) == (int(oc.seq[o]) & 0xFFFFFFFF))
            assert _caught_by_check(eng) is None, "_check() failed before anything was planted"
            assert drop_entries(store, kw, mine) == 1
            sub = Sub(evs[-1].seq + 1, "planted-probe", evs[-1].t, KNN, (eng.vocab.words[kw],), x=float(oc.x[o]),
                      y=float(oc.y[o]), k=1)
            ctx = (f"object {eng.objs.ids[o]!r}, random_stream({seed}, windows=({kind!r},)), first two thirds, "
                   f"then {sub}")
            assert _caught_by_check(eng) is not None, f"engine._check() did not notice a lost alive posting: {ctx}"
            want = ref.apply([sub])
            assert twin.apply([sub]) == want, f"the untouched twin differs from the reference: {ctx}"
            assert eng.apply([sub]) != want, f"conformance did not notice a lost alive posting: {ctx}"
            shown += 1
            break
    assert shown == 2, "no stream offered an alive object under a count or time window"


__all__ = ["check_catches_a_cleared_slot", "check_catches_a_lost_alive_posting", "check_catches_a_lost_posting_entry",
           "check_reference", "check_snapshot", "drop_entries", "index_specs", "spec", "yield_checks"]
