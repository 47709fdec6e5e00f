"""Conformance: an engine against the reference engine, event by event.

:func:`compare` validates a stream once (one :class:`~skpubsub.io.validate.Gate`)
and feeds the same accepted events to :class:`~skpubsub.testing.reference.ReferenceEngine`
and to the engine under test. It checks, per event, the notifications (SPEC
section 3: at most one per subscription, in registration order), ``results(id)``
for every subscription id seen so far (``None`` once it ended or for ``range``),
``all_results()``, and the engine's ``_check()`` invariants; then it replays the
stream into a fresh engine in batches of random sizes (including empty ones),
which must give the same notifications, concatenated, and the same results.
A mismatch raises ``AssertionError`` with the event index, the event, expected
vs actual, and the recent history; :func:`minimize` shrinks a failing stream.

Comparison is exact: every engine computes ranking keys with the operation order
of :mod:`skpubsub.core.scoring`, so results agree even on ties (SPEC section 1 allows
differences only between keys closer than 1e-9, which an engine using another
operation order would have to argue case by case).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from typing import Any

from ..core.config import Space, Window
from ..io.events import Event, Pub, Rejection, Sub, Unsub
from ..io.notifications import Change, Match, note_line
from ..io.validate import Gate
from .reference import ReferenceEngine

EngineFactory = Callable[[Window, Space], Any]
HISTORY = 8  # events shown before a mismatch


def engine_factory(index: str, **params: Any) -> EngineFactory:
    """A factory ``(window, space) -> engine`` for :func:`compare` (``make_engine`` by name)."""
    from ..runtime.engines import make_engine

    def make(window: Window, space: Space) -> Any:
        return make_engine(index, window, space, **params)

    make.__name__ = make.__qualname__ = describe(index, params)
    make.index, make.params = index, dict(params)  # type: ignore[attr-defined]  (checks.check_snapshot)
    return make


# Engine/index parameters worth a conformance run of their own: small grids put
# many subscriptions in one cell, large ones spread regions over many cells; the
# max_cells/shrink variants force global postings or lazy re-posting; kmax=1
# (no result buffer: every expiry of a member refills) and kmax=4 (deep buffers)
# bracket the engine's default; the k-skyband buffer policies (dominance eviction,
# refills up to a threshold) run on both paths, with kmax=1 (buffers of k: truncation
# and eviction meet); theta_n with warm_n=0 chooses levels by the cost model from the
# first object (theta_n=1: every region on its minimum bounding node). Parameters
# neither the index nor ``Engine`` accepts are dropped, so a renamed knob degrades a
# variant instead of breaking every test; an index not listed runs with its defaults.
INDEX_VARIANTS: dict[str, list[dict[str, Any]]] = {
    "grid": [{"grid": 1}, {"grid": 2, "kmax": 1.0}, {"grid": 8}, {"grid": 64, "kmax": 4.0},
             {"grid": 16, "max_cells": 1_000_000, "shrink": 1},
             {"grid": 64, "max_cells": 2, "shrink": 1000, "kmax": 1.0},
             {"grid": 8, "buffer": "skyband"}, {"grid": 4, "buffer": "cskyband", "kmax": 1.0}],
    # dkm and gi2 are one compiled class today: the variants run under one name
    # refresh_from=1: `all` postings reviewed at 1, 2, 4, ... objects (re-posted under a new keyword);
    # prefix=False: top-k under plain keywords (the prefix filter off)
    "dkm": [{}, {"grid": 4, "max_cells": 1, "kmax": 1.0}, {"grid": 64, "max_cells": 16, "kmax": 4.0},
            {"refresh_from": 1}, {"buffer": "skyband", "theta_n": 1e-3, "warm_n": 0}, {"buffer": "cskyband"},
            {"buffer": "ckskyband"},
            {"grid": 4, "max_cells": 1, "buffer": "cskyband", "kmax": 1.5},
            {"prefix": False}, {"grid": 64, "max_cells": 1, "prefix": False, "buffer": "cskyband"}],
    # theta_u 0: a block per third keyword; 1e9: update cost rules, blocks widen instead;
    # batch: candidates by Algorithm 2 per run of pubs
    "aoiq": [{}, {"grid": 4, "max_cells": 1, "kmax": 1.0, "theta_u": 1e9},
             {"theta_u": 0.0, "buffer": "ckskyband", "warm_n": 0, "batch": True},
             {"grid": 8, "max_cells": 2, "kmax": 1.0, "batch": True},
             {"grid": 64, "theta_u": 1e9, "buffer": "skyband", "theta_n": 1.0, "warm_n": 0}],
    # group 1: every subscription its own group; tighten 0: a cell rebuilt on every raised
    # score; 1e9: never (snapshots only loosen)
    "igpt": [{}, {"grid": 1, "group": 1, "kmax": 1.0}, {"grid": 64, "group": 2, "tighten": 0.0, "buffer": "cskyband"},
             {"grid": 4, "tighten": 1e9, "buffer": "skyband"}],
    # auto: aoiq with pairs for kNN only (range and any as dkm, top-k under the prefix filter)
    "auto": [{}, {"grid": 4, "max_cells": 1, "kmax": 1.0, "theta_u": 0.0, "refresh_from": 1},
             {"buffer": "cskyband", "theta_u": 1e9, "warm_n": 0}],
}


def index_configs(variants: dict[str, list[dict[str, Any]]] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """(index name, params) for every registered index (``INDEXES``) and its variants."""
    import inspect

    from ..engine.engine import Engine
    from ..index import INDEXES

    variants = INDEX_VARIANTS if variants is None else variants
    engine_params = set(inspect.signature(Engine).parameters) - {"window", "space", "index", "index_params"}
    out: list[tuple[str, dict[str, Any]]] = []
    for name, cls in INDEXES.items():
        accepted = set(inspect.signature(cls).parameters) | engine_params
        for params in variants.get(name, [{}]):
            kept = {k: v for k, v in params.items() if k in accepted}
            if (name, kept) not in out:
                out.append((name, kept))
    return out


def describe(index: str, params: dict) -> str:
    return index + (f"({', '.join(f'{k}={v!r}' for k, v in sorted(params.items()))})" if params else "")


def validate(records: Sequence[Any], window: Window | str, space: Space | None) -> tuple[list[Event], list[Any]]:
    """Accepted events (with the raw record of each) of ``records`` through one Gate.

    Records are numbered from 1 like the lines of a file, so a rejected record
    still takes its position (``seq``). A record may be a parsed JSON value, a raw
    line (``bytes``, without its newline) or an already validated event.
    """
    gate = Gate(window, space)
    events: list[Event] = []
    raws: list[Any] = []
    for pos, rec in enumerate(records, 1):
        if isinstance(rec, (Pub, Sub, Unsub)):
            ev: Event | Rejection = rec
        elif isinstance(rec, (bytes, bytearray)):  # a raw JSON line, as read from a file
            ev = gate.admit_line(bytes(rec), pos)
        else:
            ev = gate.admit(rec, pos)
        if isinstance(ev, Rejection):
            continue
        events.append(ev)
        raws.append(rec)
    return events, raws


def _fmt_record(rec: Any) -> str:
    if isinstance(rec, (Pub, Sub, Unsub)):
        return repr(rec)
    if isinstance(rec, (bytes, bytearray)):
        return repr(bytes(rec)[:300])
    try:
        return json.dumps(rec)
    except (TypeError, ValueError):
        return repr(rec)


def _fmt_notes(notes: Sequence[Any]) -> str:
    if not notes:
        return "    (none)"
    return "\n".join(f"    {_fmt_note(n)}" for n in notes)


def _fmt_note(n: Any) -> str:
    if isinstance(n, (Match, Change)):
        try:
            return note_line(n).rstrip("\n")  # as notifications.jsonl has it
        except (TypeError, ValueError):  # an engine's bad value (not JSON): shown as it is
            return repr(n)
    return repr(n)


def _same(a: Any, b: Any) -> bool:
    """Plain equality is exact here: ids are ints or strings (``1 != "1"``), and the
    dataclasses compare their class (a Match never equals a Change). Lists of
    notifications must also agree in order."""
    return a == b


def _canon(ident: Any) -> tuple[str, Any]:
    return (type(ident).__name__, ident)


class _Failure:
    """Builds the readable report for one mismatch."""

    def __init__(self, name: str, window: Window, space: Space, events: list[Event], raws: list[Any]) -> None:
        self.name, self.window, self.space, self.events, self.raws = name, window, space, events, raws

    def head(self, i: int, what: str, mode: str) -> list[str]:
        ev = self.events[i]
        lines = [f"engine {self.name} differs from the reference ({mode}): {what}",
                 f"  window {self.window}, space {self.space}; at valid event #{i} "
                 f"(stream position {ev.seq}, t={ev.t!r}) of {len(self.events)}",
                 f"  event: {_fmt_record(self.raws[i])}"]
        if i:
            lines.append(f"  the {min(i, HISTORY)} events before it:")
            for j in range(max(0, i - HISTORY), i):
                lines.append(f"    #{j}: {_fmt_record(self.raws[j])}")
        return lines

    def message(self, lines: list[str]) -> str:
        lines.append("  (skpubsub.testing.conformance.minimize(records, window, space, factory) "
                     "shrinks a failing stream)")
        return "\n".join(lines)

    def raise_(self, lines: list[str]) -> None:
        raise AssertionError(self.message(lines))


def compare(events: Sequence[Any], window: Window | str = "none", space: Space | None = None,
            engine_factory: EngineFactory | None = None, check_every_event: bool = True, *,
            batches: bool = True, batch_seed: int = 0, name: str | None = None) -> None:
    """Assert that ``engine_factory(window, space)`` behaves exactly like the reference.

    ``events``: raw records (dicts in SPEC JSON format, junk allowed) or validated
    events. Cost: O(events x (reference + engine + subscription ids)) per pass;
    two passes (one event at a time, then batches) unless ``batches=False``.
    ``check_every_event``: the engine's ``_check()`` and every id's results after each event
    and batch; else after the last only (the structural checks are most of the cost).
    """
    if engine_factory is None:
        raise TypeError("compare needs an engine_factory(window, space)")
    w = Window.parse(window) if isinstance(window, str) else window
    sp = space or Space()
    valid, raws = validate(events, w, sp)
    label = name or getattr(engine_factory, "__name__", repr(engine_factory))
    fail = _Failure(label, w, sp, valid, raws)

    ref = ReferenceEngine(w, sp)
    eng = engine_factory(w, sp)
    check = getattr(eng, "_check", None)
    seen: dict[Any, Any] = {}  # canonical id -> id: every subscription id seen, in order
    expected: list[list[Any]] = []  # reference notifications per event
    snapshots: list[list] = []  # reference all_results() after each event

    def run(engine: Any, i: int, batch: list[Event], mode: str, who: str) -> list[Any]:
        try:
            return engine.apply(batch)
        except Exception as exc:  # a crash is a conformance failure too, with the same context
            lines = fail.head(i, f"{who} raised {type(exc).__name__}: {exc}", mode)
            raise AssertionError(fail.message(lines)) from exc

    for i, ev in enumerate(valid):
        exp = run(ref, i, [ev], "one event at a time", "the reference engine")
        act = run(eng, i, [ev], "one event at a time", "the engine")
        expected.append(exp)
        if isinstance(ev, Sub):
            seen.setdefault(_canon(ev.id), ev.id)
        if not _same(exp, act):
            lines = fail.head(i, "notifications differ", "one event at a time")
            lines += ["  expected (reference):", _fmt_notes(exp), "  actual (engine):", _fmt_notes(act)]
            lines += _result_context(ref, eng, [n.sub for n in list(exp) + list(act)])
            fail.raise_(lines)
        if check is not None and (check_every_event or i == len(valid) - 1):
            try:
                check()
            except AssertionError as exc:
                fail.raise_(fail.head(i, f"engine._check() failed after the event: {exc!r}", "one event at a time"))
        if check_every_event or i == len(valid) - 1:
            _compare_results(fail, i, ref, eng, seen.values(), "one event at a time")
        snapshots.append(ref.all_results())
    if not valid:
        _compare_results(fail, -1, ref, eng, (), "no events")

    if not batches or not valid:
        return
    rng = random.Random(batch_seed * 1_000_003 + len(valid))
    eng2 = engine_factory(w, sp)
    check2 = getattr(eng2, "_check", None)
    i = 0
    while i < len(valid):
        size = rng.choice((1, 2, 3, 4, 5, 8, 13, 32, 0, len(valid)))
        batch = valid[i:i + size]
        mode = f"in batches, this one of {len(batch)} events #{i}..#{i + len(batch) - 1}"
        act = run(eng2, i, batch, mode, "the engine")
        exp = [n for j in range(i, i + len(batch)) for n in expected[j]]
        if not _same(exp, act):
            _batch_mismatch(fail, i, batch, expected, act, mode)
        last = i + len(batch) - 1
        if batch:
            if check2 is not None and (check_every_event or last == len(valid) - 1):
                try:
                    check2()
                except AssertionError as exc:
                    fail.raise_(fail.head(last, f"engine._check() failed after the batch: {exc!r}", mode))
            if not _same(snapshots[last], eng2.all_results()):
                lines = fail.head(last, "all_results() differ after the batch", mode)
                lines += [f"  expected: {snapshots[last]!r}", f"  actual:   {eng2.all_results()!r}"]
                fail.raise_(lines)
        i += len(batch)
    for ident in seen.values():
        if not _same(ref.results(ident), eng2.results(ident)):
            lines = fail.head(len(valid) - 1, f"results({ident!r}) differ at the end", "in batches")
            lines += [f"  expected: {ref.results(ident)!r}", f"  actual:   {eng2.results(ident)!r}"]
            fail.raise_(lines)


def _result_context(ref: Any, eng: Any, ids: Sequence[Any]) -> list[str]:
    lines = []
    done = set()
    for ident in ids:
        if _canon(ident) in done:
            continue
        done.add(_canon(ident))
        lines.append(f"  results({ident!r}) after the event: reference {ref.results(ident)!r}, "
                     f"engine {eng.results(ident)!r}")
    return lines


def _compare_results(fail: _Failure, i: int, ref: Any, eng: Any, ids: Any, mode: str) -> None:
    for ident in ids:
        exp, act = ref.results(ident), eng.results(ident)
        if not _same(exp, act):
            lines = fail.head(i, f"results({ident!r}) differ after the event", mode)
            lines += [f"  expected: {exp!r}", f"  actual:   {act!r}"]
            fail.raise_(lines)
    exp_all, act_all = ref.all_results(), eng.all_results()
    if not _same(exp_all, act_all):
        lines = fail.head(max(i, 0), "all_results() differ after the event", mode)
        lines += [f"  expected: {exp_all!r}", f"  actual:   {act_all!r}"]
        fail.raise_(lines)


def _batch_mismatch(fail: _Failure, i: int, batch: list[Event], expected: list[list[Any]],
                    act: list[Any], mode: str) -> None:
    """Point at the first event of the batch whose share of the notifications differs."""
    pos = 0
    for j in range(i, i + len(batch)):
        exp = expected[j]
        got = act[pos:pos + len(exp)]
        if not _same(exp, got) or j == i + len(batch) - 1:
            lines = fail.head(j, "notifications differ", mode)
            lines += ["  expected for this event (reference):", _fmt_notes(exp),
                      "  actual, from the same place in the batch's output:", _fmt_notes(act[pos:]),
                      f"  (batch output: {len(act)} notifications, expected "
                      f"{sum(len(expected[m]) for m in range(i, i + len(batch)))})"]
            fail.raise_(lines)
        pos += len(exp)


def fails(records: Sequence[Any], window: Window | str, space: Space | None, factory: EngineFactory,
          **kwargs: Any) -> bool:
    """True when :func:`compare` raises AssertionError on ``records``."""
    try:
        compare(records, window, space, factory, **kwargs)
    except AssertionError:
        return True
    return False


def minimize(records: Sequence[Any], window: Window | str, space: Space | None, factory: EngineFactory,
             **kwargs: Any) -> list[Any]:
    """A smallest-found sub-sequence of ``records`` on which :func:`compare` still fails.

    Greedy delta debugging: drop chunks, then single records, while it still fails.
    Records that become invalid (an ``unsub`` whose ``sub`` went) are simply rejected
    by the Gate. O(n^2) compares at worst; meant for a reproducer, not for CI.
    """
    cur = list(records)
    if not fails(cur, window, space, factory, **kwargs):
        raise ValueError("the stream does not fail; nothing to minimise")
    chunk = max(1, len(cur) // 2)
    while chunk >= 1:
        i = 0
        shrunk = False
        while i < len(cur):
            trial = cur[:i] + cur[i + chunk:]
            if trial and fails(trial, window, space, factory, **kwargs):
                cur = trial
                shrunk = True
            else:
                i += chunk
        if not shrunk:
            chunk //= 2
    # finally drop the records the Gate rejects anyway
    valid, raws = validate(cur, window, space)
    trial = list(raws)
    if fails(trial, window, space, factory, **kwargs):
        cur = trial
    return cur


def compare_counting(streams: Sequence[tuple[Any, int]], index: str, check_every_event: bool = True,
                     **params: Any) -> dict[str, int]:
    """``compare`` each ``(stream, batch_seed)`` (a stream has ``events``, ``window`` and
    ``space``) on ``index`` with ``params``; returns the integer ``stats`` of every engine
    made, summed, so a test can assert that the work it meant to exercise happened.
    ``check_every_event`` False: the structural checks after the last event only (a long
    GeoNames stream; the random streams check after every event)."""
    made: list[Any] = []

    def make(window: Window, space: Space | None) -> Any:
        e = engine_factory(index, **params)(window, space)
        made.append(e)
        return e

    for stream, seed in streams:
        compare(stream.events, stream.window, stream.space, make, check_every_event, batch_seed=seed)
    total: dict[str, int] = {}
    for e in made:
        for k, v in getattr(e, "stats", {}).items():
            if isinstance(v, int):
                total[k] = total.get(k, 0) + v
    return total
