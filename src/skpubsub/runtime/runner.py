"""``skpubsub run``: stream an event file through validation and an engine into files."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from itertools import chain, groupby
from pathlib import Path
from typing import Any

import numpy as np

from ..core.config import Space, Window
from .engines import DEFAULT_INDEX, make_engine
from .feeder import judged, reads_apart
from ..io.events import BLOCKS, Rejection, Sub, SubBlock, Unsub, events_of
from ..io.lexicon import Words
from ..io.lines import stream_lines
from ..io.sinks import RunWriter
from ..io.validate import Gate

BATCH = 2048  # events per engine call
FLEET_BATCH = 16384  # events per micro-batch of the fleet (each costs a round trip to every worker)


class _Single:
    """One engine behind the cluster interface the run loop drives."""

    def __init__(self, engine) -> None:
        self.engine = engine

    def apply_columnar(self, events):
        """Notifications as columns where the engine has them (the writer formats them).
        ``events`` may hold ``SubBlock`` s and ``PubBlock`` s: the engine with columns takes
        them as they are, another (the reference) is given their events."""
        apply = getattr(self.engine, "apply_columnar", None)
        return apply(events) if apply is not None else self.engine.apply(events_of(events))

    def results(self):
        """As columns where the engine has them (the writer formats them in one pass)."""
        columns = getattr(self.engine, "result_columns", None)
        return columns() if columns is not None else self.engine.all_results()


def active_subs(events: list) -> list[Sub]:
    """The subscriptions still active after ``events`` (ids may be reused), in order."""
    active: dict = {}
    for ev in events:
        if isinstance(ev, Sub):
            active[ev.id] = ev
        elif isinstance(ev, Unsub):
            active.pop(ev.id, None)
    return sorted(active.values(), key=lambda ev: ev.seq)


def plan_head(head: list, space: Space, planner, workers: int):
    """``planner``'s plan from the stream's head (events and the reader's blocks) and the
    head objects' statistics: by the blocks' columns (no event a record) for a planner that
    reads a ``SubBlock`` (``planner.columns``), the events of the active subscriptions for
    the others; the same plan as from ``active_subs(events_of(head))`` (tests/test_plan_head.py)."""
    from ..partition.stats import Statistics

    stats = Statistics.from_items(head, space)
    subs = head_subs(head)
    if type(subs) is SubBlock and not getattr(planner, "columns", False):
        subs = list(subs)
    return planner(subs, stats, workers), stats


def head_subs(items: list) -> "SubBlock | list[Sub]":
    """``active_subs(events_of(items))`` as one ``SubBlock`` where that is only the head's
    subscriptions joined (no ``unsub``, no id twice: the common head), else as events."""
    parts = [it for it in items if type(it) is SubBlock or type(it) is Sub]
    if parts and not any(type(it) is Unsub for it in items):
        b = SubBlock.join(_one_lexicon(parts))
        if len(set(b.id)) == len(b):
            return b
    return active_subs(events_of(items))


class _WordList:
    """A lexicon's stand-in for ``Words``: the reader's words and, after them, the words of
    the head's records that came as events (never the reader's own lexicon, which only the
    reader extends)."""

    __slots__ = ("words",)

    def __init__(self, words: list[str]) -> None:
        self.words = words


def _one_lexicon(parts: list) -> list:
    """``parts`` (blocks and ``Sub`` events) as blocks whose keywords are codes into one word
    list, so that ``SubBlock.join`` keeps them codes (no tuple a record); ``parts`` as they
    are when the blocks' codes are of several lexicons or none."""
    lexes = {id(p.keywords.lex): p.keywords.lex for p in parts
             if type(p) is SubBlock and type(p.keywords) is Words}
    if len(lexes) != 1:
        return parts
    base = next(iter(lexes.values())).words
    code = {w: i for i, w in enumerate(base)}
    lex = _WordList(list(base))

    def coded(kws) -> Words:
        flat = list(chain.from_iterable(kws))
        for w in dict.fromkeys(flat):
            if w not in code:
                code[w] = len(lex.words)
                lex.words.append(w)
        off = np.zeros(len(kws) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, kws), np.int64, len(kws)), out=off[1:])
        return Words(np.fromiter(map(code.__getitem__, flat), np.int32, len(flat)), off, lex)

    out = []
    for is_event, run in groupby(parts, lambda p: type(p) is Sub):
        for b in ((SubBlock.of(list(run)),) if is_event else run):
            b = b[:]  # a view of the columns, its keyword column replaced
            kws = b.keywords
            b.keywords = Words(kws.codes, kws.off, lex) if type(kws) is Words else coded(list(kws))
            out.append(b)
    return out


def _multi(index: str, window: Window, space: Space, workers: int, partitioner: str, head: list,
           processes: bool, index_params: dict, rebalance: dict | None = None, fleet=None):
    """Plan from the buffered head of the stream (O_init + the subscriptions in it) for
    ``fleet`` (runtime/fleet.py, its workers started already) if given, else for the
    dispatcher's cluster."""
    from ..partition.registry import PLANNERS
    from .local import LocalCluster
    from .rebalance import Rebalancer

    plan, stats = plan_head(head, space, PLANNERS[partitioner], workers)
    if fleet is not None:
        return fleet.start(plan, dict(stats.keyword_freq))
    rb = Rebalancer(space, planner=PLANNERS[partitioner], **rebalance) if rebalance is not None else None
    return LocalCluster(plan, window, space, index=index, processes=processes,
                        rarity=dict(stats.keyword_freq), rebalancer=rb, **index_params)


def chunks(items: list, size: int) -> Iterator[list]:
    """``items`` (events and blocks) in pieces of about ``size`` events, blocks sliced."""
    part: list = []
    n = 0
    for it in items:
        if n >= size:
            yield part
            part, n = [], 0
        m = len(it) if type(it) in BLOCKS else 1
        i = 0
        while m - i > size - n:  # a block whose rest overfills the piece: cut it
            j = i + size - n
            part.append(it[i:j])
            yield part
            part, n, i = [], 0, j
        if m - i:
            part.append(it[i:] if i else it)
            n += m - i
    if part:
        yield part


def fleet_applies(index: str, rebalance: dict | None) -> bool:
    """Workers as a fleet (blocks in, each worker its own window; runtime/fleet.py) unless
    the run rebalances (migrations need the dispatcher's window) or runs the plain oracle."""
    return rebalance is None and index != "reference"


@contextlib.contextmanager
def fewer_collections(young: int = 50_000) -> Iterator[None]:
    """Python's cyclic collector less often while a run streams: it starts a young collection
    every 700 net allocations by default, and with millions of live events and ids its
    older generations cost ~10% of a run (a kNN run's CPU profile). Our objects rarely form
    cycles; reference counting frees the rest as before."""
    old = gc.get_threshold()
    gc.set_threshold(young, 20, 100)
    try:
        yield
    finally:
        gc.set_threshold(*old)


@fewer_collections()  # a context manager as a decorator: for the whole of each run
def run(events: str | Path, out: str | Path, window: str | Window = "none", space: Space | None = None,
        index: str = DEFAULT_INDEX, progress: bool | None = None, workers: int = 1, partitioner: str | None = None,
        init_objects: int = 1000, processes: bool = True, rebalance: dict | None = None,
        batch_size: int = BATCH, apart: bool | None = None, **index_params: Any) -> dict:
    """Run one event file; returns the metrics also written to ``metrics.json``.

    Streams the input: memory is O(batch + engine state), never the whole file.
    With ``partitioner``, ``workers`` engines run behind a dispatcher; the plan is
    made from the stream's head up to its first ``init_objects`` objects (O_init).
    ``rebalance``: :class:`~skpubsub.runtime.rebalance.Rebalancer` parameters
    (dynamic load adjustment between micro-batches). ``apart``: the single engine's input
    read and judged in a second process (``feeder.judged``; None: for a large file).
    """
    window = Window.parse(window) if isinstance(window, str) else window
    space = space or Space()
    multi = partitioner is not None
    blocks = not multi or fleet_applies(index, rebalance)  # the reader's blocks, else line by line
    if multi and blocks and batch_size == BATCH:
        batch_size = FLEET_BATCH
    engine = None if multi else _Single(make_engine(index, window, space, **index_params))
    fleet = None
    writer = RunWriter(Path(out))
    accepted: Counter[str] = Counter()
    rejected: Counter[str] = Counter()
    path = Path(events)
    size = path.stat().st_size
    if progress is None:
        progress = sys.stderr.isatty() and not os.environ.get("CI")
    bar = None
    start = time.perf_counter()
    # the reading process, if any, forked before the bar's thread starts
    items = judged(path, window, space, apart) if blocks else None
    if multi and blocks:  # the workers start while the head is read and planned
        from .fleet import Fleet
        from .fleetworker import warm
        if processes and reads_apart(path, apart):
            # while the reading process reads ahead, the engine's kernels read from Numba's
            # cache once, here: the workers forked next have them (NOTES.md, "The fleet")
            warm(window, space, index, index_params)
        fleet = Fleet(workers, window, space, index, processes=processes, **index_params)
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=size, unit="B", unit_scale=True, desc="events", file=sys.stderr)
    apply_s = 0.0
    # the file (multi) or the Gate's items: closed with the loop however it ends (a reading process too)
    with contextlib.closing(items) if blocks else open(path, "rb") as source:
        batch: list = []  # events, and SubBlocks and PubBlocks of several (single engine)
        size_of = 0  # events in the batch
        done = 0

        def flush() -> None:
            nonlocal apply_s, size_of
            if engine is None:  # still reading O_init: events wait in the batch
                return
            t0 = time.perf_counter()
            if hasattr(engine, "exchange"):  # the fleet: a batch out, the one before back
                for part in chunks(batch, batch_size):  # (the head waited for the plan whole)
                    notes = engine.exchange(part)
                    if notes is not None:
                        writer.notifications(notes)
            else:
                writer.notifications(engine.apply_columnar(batch))  # one engine, or the workers' merged lines
            apply_s += time.perf_counter() - t0
            batch.clear()
            size_of = 0

        def start_plan() -> None:
            nonlocal engine
            engine = _multi(index, window, space, workers, partitioner, batch, processes, index_params, rebalance,
                            fleet)

        if not blocks:  # O_init decides when the engines start: event by event, as it counts them
            gate = Gate(window, space)
            for line_no, raw in stream_lines(source):
                ev = gate.admit_line(raw, line_no)
                if isinstance(ev, Rejection):
                    flush()  # keep rejected.jsonl and notifications in stream order
                    writer.rejection(ev)
                    rejected[ev.label] += 1
                    continue
                accepted[ev.label] += 1
                batch.append(ev)
                if engine is None:
                    if accepted["pub"] >= init_objects:
                        start_plan()
                    continue
                if len(batch) >= batch_size:
                    flush()
                    if bar is not None:
                        bar.update(source.tell() - done)
                        done = source.tell()
        else:  # a block of lines at a time (Gate.admit_block); batches cut where they always were
            for out, label, pos in source:
                if label is None:
                    for ev in out:
                        if type(ev) is Rejection:
                            flush()  # keep rejected.jsonl and notifications in stream order
                            writer.rejection(ev)
                            rejected[ev.label] += 1
                        else:
                            accepted[ev.label] += 1
                            batch.append(ev)
                            size_of += 1
                            if size_of >= batch_size:
                                flush()
                else:
                    accepted[label] += len(out)  # a block of one kind, no rejection
                    i, n = 0, len(out)  # a SubBlock or PubBlock: a slice is one item of the batch
                    if engine is None:  # the head: whole blocks wait for the plan
                        batch.append(out)
                        i = n
                    while i < n:  # fill the batch to batch_size, flush, go on
                        j = min(n, i + max(1, batch_size - size_of))
                        batch.append(out[i:j])
                        size_of += j - i
                        i = j
                        if size_of >= batch_size:
                            flush()
                if engine is None and accepted["pub"] >= init_objects:
                    start_plan()  # the head (O_init and the subscriptions before) waits in the batch
                if bar is not None:
                    bar.update(pos - done)
                    done = pos
        if engine is None:
            start_plan()
        flush()
        if hasattr(engine, "drain") and (notes := engine.drain()) is not None:
            writer.notifications(notes)
        if bar is not None:
            bar.update(size - done)
            bar.close()
    results = engine.results()
    wall = time.perf_counter() - start
    st = _stats(engine)
    n_obj = accepted["pub"]
    metrics = {
        "engine": "local",
        "workers": workers,
        "partitioner": partitioner,
        "index": index,
        "window": str(window),
        "space": str(space),
        "accepted": dict(sorted(accepted.items())),
        "rejected": dict(sorted(rejected.items())),
        "accepted_total": sum(accepted.values()),
        "rejected_total": sum(rejected.values()),
        "notifications": writer.n_notifications,
        "wall_seconds": round(wall, 6),
        "engine_seconds": round(apply_s, 6),
        "objects": n_obj,
        "objects_per_second": round(n_obj / wall, 2) if wall > 0 else None,
        "candidates_per_object": round(st["candidates"] / n_obj, 4) if n_obj else 0.0,
        "affected_per_object": round(st["affected"] / n_obj, 4) if n_obj else 0.0,
    }
    if not multi and hasattr(engine.engine, "nbytes"):
        metrics["memory_bytes"] = int(engine.engine.nbytes)
    if multi:
        metrics.update(engine.metrics() if hasattr(engine, "exchange") else engine.dispatcher.metrics())
        metrics["batches"] = engine.batches
        metrics["update_seconds_total"] = round(sum(b["update_seconds"] for b in engine.batches), 6)
        metrics["balance_seconds_total"] = round(sum(b["balance_seconds"] for b in engine.batches), 6)
        metrics["plan"] = engine.router.plan.describe() if hasattr(engine, "router") else engine.dispatcher.plan.describe()
        if getattr(engine, "rebalancer", None) is not None:
            metrics["migrated_subscriptions"] = engine.migrated
            metrics["adjustments"] = engine.rebalancer.log
        engine.close()
    writer.finish(results, metrics)
    return metrics


def _stats(engine) -> dict:
    if isinstance(engine, _Single):
        return engine.engine.stats
    total: dict = {}
    for st in engine.worker_stats():
        for k, v in st.items():
            total[k] = total.get(k, 0) + v
    return total
