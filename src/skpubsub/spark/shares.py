"""The fleet on Spark: the serial step is the local fleet's ``Router`` on the Gate's
blocks, and a worker applies its share of a batch by the single engine's columnar path
(runtime/fleet.py, runtime/NOTES.md). No PySpark here.

- :class:`ShareSequencer`: the Gate (coded) a block of lines at a time, the O_init head
  buffered until the plan is made, then ``Router.route`` of each batch: per worker its
  share as blocks (``SubBlock``/``PubBlock`` columns), single events and ``Tick`` s.
  Under ``count``/``time`` every worker gets every object and keeps the whole window; no
  backfill, no "what leaves" message (``Router``).
- the codec: a share as msgpack (data, never a pickle: SPEC 7), blocks as columns, each
  checked as it is read (types by msgspec, then the Gate's column tests: finite
  coordinates inside the space, kinds, ``k``, words normal) and refused with the reason.
- :class:`ShareWorker`: an engine with its own window clock; ``apply`` gives the same
  rows as ``worker.WorkerState`` (a batch's notification lines with their (event seq,
  registration seq, is range match) columns, results at the end). Its snapshot is the
  events it is a function of (live subscriptions; the alive objects, or under ``none``
  the objects their results hold) as SPEC records, restored by applying them again in
  stream order and checked by the results' digest (spark/NOTES.md, "The fleet on Spark").
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Callable
from itertools import chain
from typing import Any, NamedTuple, Optional, Union

import msgspec
import numpy as np

from ..core.config import Space, Window
from ..engine import snapshot
from ..engine.messages import Tick
from ..engine.snapshot import Refused, dumps, event_of, event_record, results_digest
from ..io.events import KINDS, RANGE, TOPK, BLOCKS, Pub, PubBlock, Rects, Rejection, Sub, SubBlock, Unsub, events_of
from ..io.encode import json_text
from ..io.lexicon import Lexicon, Words
from ..io.validate import Gate
from ..partition.registry import PLANNERS
from ..partition.stats import Statistics
from ..runtime.engines import make_engine
from ..runtime.fleet import Router, as_runs
from ..runtime.fleetworker import result_lines
from ..runtime.runner import active_subs, fewer_collections, plan_head
from .codec import END, encode_driver, pack_notes
from .sequencer import DRIVER, _blocks, head_part, switch_tag, totals

FORMAT = "skpubsub-spark-share-worker"
VERSION = 1


# -- the codec ----------------------------------------------------------------------------------
class _Kw(msgspec.Struct, array_like=True):
    words: list[str]
    codes: bytes  # int32 little-endian, into ``words``
    off: bytes  # int64 little-endian, n + 1


class _Subs(msgspec.Struct, tag="S", array_like=True):
    seq: list[int]
    id: list[Union[int, str]]
    t: list[Union[int, float]]
    kind: list[str]
    keywords: _Kw
    match_all: Optional[list[bool]]
    rect: Optional[bytes]  # float64 little-endian, n x 4
    x: Optional[list[float]]
    y: Optional[list[float]]
    k: Optional[list[int]]
    alpha: Optional[list[float]]
    weights: Optional[list[Optional[list[float]]]]
    expires: Optional[list[Union[int, float, None]]]


class _Pubs(msgspec.Struct, tag="P", array_like=True):
    seq: list[int]
    id: list[Union[int, str]]
    t: list[Union[int, float]]
    x: list[float]
    y: list[float]
    keywords: _Kw
    expires: Optional[list[Union[int, float, None]]]


class _Event(msgspec.Struct, tag="e", array_like=True):
    seq: int
    record: bytes  # its SPEC record as JSON (``snapshot.dumps``: any id, any string)


class _Tick(msgspec.Struct, tag="t", array_like=True):
    seq: int
    t: Union[int, float]


class _End(msgspec.Struct, tag="x", array_like=True):
    pass


class _Handover(msgspec.Struct, tag="E", array_like=True):
    tag: int


class _Seed(msgspec.Struct, tag="R", array_like=True):
    events: list[_Event]


class Handover(NamedTuple):
    """Ask a worker for its state as data (``ShareWorker.snapshot``'s events), written as
    its export file ``tag``: the last batch of a generation of workers (``switch_rows``)."""

    tag: int


class Seed(NamedTuple):
    """Events a new worker applies silently before anything else: the subscriptions placed
    on it and the objects they need, when the number of workers changes (``switch``)."""

    events: tuple


_Entry = Union[_Subs, _Pubs, _Event, _Tick, _End, _Handover, _Seed]
_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(list[_Entry]).decode


def _kw(col) -> _Kw:
    """A keyword column as codes into the words it uses (its own small lexicon)."""
    if type(col) is Words:
        u, codes = np.unique(col.flat(), return_inverse=True)
        words = [col.lex.words[c] for c in u.tolist()]
        off = col.off - col.off[0]
    else:
        flat = list(chain.from_iterable(col))
        words = list(dict.fromkeys(flat))
        code = {w: i for i, w in enumerate(words)}
        codes = np.fromiter(map(code.__getitem__, flat), np.int64, len(flat))
        off = np.zeros(len(col) + 1, np.int64)
        np.cumsum(np.fromiter(map(len, col), np.int64, len(col)), out=off[1:])
    return _Kw(words, codes.astype("<i4").tobytes(), np.asarray(off, "<i8").tobytes())


def _listed(c) -> list | None:
    return None if c is None else c.tolist() if isinstance(c, np.ndarray) else list(c)


def _block_entry(b) -> _Subs | _Pubs:
    if type(b) is PubBlock:
        return _Pubs(_listed(b.seq), _listed(b.id), _listed(b.t), _listed(b.x), _listed(b.y), _kw(b.keywords),
                     _listed(b.expires))
    rect = b.rect
    if rect is not None:
        if type(rect) is not Rects:  # a mixed block: no rectangle (None) for a kNN/top-k one
            rect = Rects(np.array([(0.0,) * 4 if r is None else r for r in rect], np.float64).reshape(-1, 4))
        rect = np.ascontiguousarray(rect.array, "<f8").tobytes()
    weights = None if b.weights is None else [None if w is None else list(w) for w in b.weights]
    return _Subs(_listed(b.seq), _listed(b.id), _listed(b.t), _listed(b.kind), _kw(b.keywords),
                 _listed(b.match_all), rect, _listed(b.x), _listed(b.y), _listed(b.k), _listed(b.alpha), weights,
                 _listed(b.expires))


def _entry(it: Any) -> Any:
    if it is END:
        return _End()
    if type(it) is Tick:
        return _Tick(it.seq, it.t)
    if type(it) is Handover:
        return _Handover(it.tag)
    if type(it) is Seed:
        return _Seed([_Event(ev.seq, dumps(event_record(ev))) for ev in it.events])
    if type(it) in BLOCKS:
        return _block_entry(it)
    return _Event(it.seq, dumps(event_record(it)))


def _as_records(it: Any, entry: Any) -> list:
    """``entry``, or its block's events as records if msgpack cannot hold the block."""
    if type(it) in BLOCKS:
        try:
            _encode(entry)
        except (TypeError, ValueError, OverflowError, UnicodeError):
            return [_Event(ev.seq, dumps(event_record(ev))) for ev in it]
    return [entry]


def encode_share(items: list) -> bytes:
    """A worker's share (blocks, events, ``Tick`` s, ``END``, ``Seed`` s, ``Handover`` s) as
    data. A block msgpack cannot hold as it is (an integer past 64 bits, a lone surrogate)
    goes as its events' records (JSON, which holds any)."""
    entries = [_entry(it) for it in items]
    try:
        return _encode(entries)
    except (TypeError, ValueError, OverflowError, UnicodeError):
        return _encode([e for it, entry in zip(items, entries) for e in _as_records(it, entry)])


def _finite(*cols) -> bool:
    """Every number of the columns finite (a NaN anywhere, not only at an end: no ``min``)."""
    return all(np.isfinite(np.asarray(c, dtype=np.float64)).all() for c in cols if c)


def _words(kw: _Kw, n: int, what: str) -> Words:
    codes = np.frombuffer(kw.codes, "<i4").astype(np.int32)
    off = np.frombuffer(kw.off, "<i8").astype(np.int64)
    if len(off) != n + 1 or off[0] != 0 or off[-1] != len(codes) or (np.diff(off) < 1).any() or (
            len(codes) and (codes.min() < 0 or codes.max() >= len(kw.words))):
        raise Refused(f"routed share: {what}' keyword column is malformed")
    lex = Lexicon()
    lex.words.extend(kw.words)
    words = lex._checked(Words(codes, off, lex))
    if words is None:
        raise Refused(f"routed share: {what}' keywords are not normal, or repeat")
    return words


def _checked_ends(ts: list, exps: list | None, what: str) -> None:
    if exps is not None and not all(e is None or (math.isfinite(e) and e > t) for t, e in zip(ts, exps)):
        raise Refused(f"routed share: {what}' expiries must be finite and after their times")


def _subs_block(e: _Subs, space: Space) -> SubBlock:
    n = len(e.seq)
    kinds, ks = e.kind, e.k
    if not set(kinds) <= set(KINDS):
        raise Refused("routed share: an unknown subscription kind")
    if not _finite(e.t, e.x or (), e.y or (), e.alpha or ()):
        raise Refused("routed share: subscriptions' numbers must be finite")
    rect = None
    if e.rect is not None:
        arr = np.frombuffer(e.rect, "<f8").astype(np.float64)
        if len(arr) != 4 * n:
            raise Refused("routed share: subscriptions' rectangles are malformed")
        rect = arr.reshape(n, 4)
        rng = kinds.count(RANGE) == n
        live = rect if rng else rect[np.fromiter((k == RANGE for k in kinds), np.bool_, n)]
        if not (np.isfinite(live).all() and (live[:, 0] <= live[:, 2]).all() and (live[:, 1] <= live[:, 3]).all()):
            raise Refused("routed share: a rectangle is not finite and ordered")  # (it may reach outside: SPEC 6)
        rect = Rects(rect) if rng else [tuple(r) if kd == RANGE else None for r, kd in zip(rect.tolist(), kinds)]
    points = [(x, y) for x, y, kd in zip(e.x or (), e.y or (), kinds) if kd != RANGE]
    if (e.x is None) != (e.y is None) or not all(space.contains(x, y) for x, y in points):
        raise Refused("routed share: a subscription's point is outside the space")
    if RANGE in kinds and rect is None or len(points) < kinds.count("knn") + kinds.count(TOPK):
        raise Refused("routed share: a subscription lacks its place")
    if any(kd != RANGE and (ks is None or k < 1) for kd, k in zip(kinds, ks or [0] * n)):
        raise Refused("routed share: a kNN/top-k subscription's k must be 1 or more")
    if e.alpha is not None and not all(0 <= a <= 1 for a in e.alpha):
        raise Refused("routed share: alpha must lie in [0, 1]")
    _checked_ends(e.t, e.expires, "subscriptions")
    words = _words(e.keywords, n, "subscriptions")
    weights = e.weights
    if weights is not None:
        lens = words.lens().tolist()
        if len(weights) != n or not all(w is None or (len(w) == m and all(math.isfinite(v) and v > 0 for v in w))
                                        for w, m in zip(weights, lens)):
            raise Refused("routed share: top-k weights are malformed")
        weights = [None if w is None else tuple(w) for w in weights]
    try:
        return SubBlock(seq=e.seq, id=e.id, t=e.t, kind=kinds, keywords=words, match_all=e.match_all, rect=rect,
                        x=e.x, y=e.y, k=ks, alpha=e.alpha, weights=weights, expires=e.expires)
    except ValueError as exc:
        raise Refused(f"routed share: {exc}") from None


def _pubs_block(e: _Pubs, space: Space) -> PubBlock:
    n = len(e.seq)
    if not _finite(e.t, e.x, e.y) or (n and not (space.x1 <= min(e.x) and max(e.x) <= space.x2
                                                and space.y1 <= min(e.y) and max(e.y) <= space.y2)):
        raise Refused("routed share: an object's numbers are not finite or its point is outside the space")
    _checked_ends(e.t, e.expires, "objects")
    words = _words(e.keywords, n, "objects")
    flat, off = words.lex.words, words.off.tolist()
    codes = words.codes.tolist()
    kws = [tuple([flat[c] for c in codes[a:b]]) for a, b in zip(off, off[1:])]
    try:
        return PubBlock(seq=e.seq, id=e.id, t=e.t, x=e.x, y=e.y, keywords=kws, expires=e.expires)
    except ValueError as exc:
        raise Refused(f"routed share: {exc}") from None


def _event(e: _Event, window: Window, space: Space) -> Any:
    try:
        rec = json.loads(e.record)
    except (ValueError, UnicodeError):
        raise Refused(f"routed share: event {e.seq} is not JSON") from None
    return event_of(e.seq, rec, window, space)


def decode_share(blob: bytes, window: Window, space: Space) -> list:
    """:func:`encode_share`'s items, checked; :class:`Refused` with the reason otherwise."""
    try:
        raw = _decode(blob)
    except (msgspec.MsgspecError, ValueError, OverflowError) as exc:
        raise Refused(f"routed share: malformed ({exc})") from None
    out: list = []
    for e in raw:
        cls = type(e)
        if cls is _Subs:
            out.append(_subs_block(e, space))
        elif cls is _Pubs:
            out.append(_pubs_block(e, space))
        elif cls is _Event:
            out.append(_event(e, window, space))
        elif cls is _Seed:
            out.append(Seed(tuple(_event(ev, window, space) for ev in e.events)))
        elif cls is _Handover:
            out.append(Handover(e.tag))
        elif cls is _Tick:
            if isinstance(e.t, bool) or not math.isfinite(e.t):
                raise Refused("routed share: a tick's time must be a finite number")
            out.append(Tick(e.seq, e.t))
        else:
            out.append(END)
    return out


# -- the serial step ------------------------------------------------------------------------------
class ShareSequencer:
    """Gate + O_init buffer + plan + :class:`Router`; ``feed`` as ``Sequencer.feed`` (rows
    ``(worker, part, payload)``, payloads :func:`encode_share`), O(lines) in C passes and
    O(subscriptions) for their placing."""

    rebalance = None  # (the dispatcher's sequencer rebalances; this one does not)

    def __init__(self, window: Window, space: Space, workers: int, partitioner: str,
                 init_objects: int = 1000, stats: Statistics | None = None, rebalance: dict | None = None) -> None:
        if partitioner not in PLANNERS:
            raise ValueError(f"unknown partitioner {partitioner!r}; known: {', '.join(PLANNERS)}")
        if rebalance is not None:
            raise ValueError("the fleet's sequencer does not rebalance")
        self.window, self.space, self.m = window, space, workers
        self.partitioner, self.init_objects, self.stats = partitioner, init_objects, stats
        self.gate = Gate(window, space, coded=True)
        self.head: list | None = []  # items waiting for the plan (None once planned)
        self.router: Router | None = None
        self.accepted: Counter[str] = Counter()
        self.rejected: Counter[str] = Counter()
        self.last: tuple[int, Any] | None = None
        self.lines = 0
        self._stats: Statistics | None = None  # what the plan was made from
        self._subs: list = []  # the subscriptions routed (blocks, events), live or not: a new plan's input
        self._kept = 0  # their number
        self._seeds: dict[int, list] = {}  # another number of workers: the new workers' first items

    def _plan(self) -> list:
        head, self.head = self.head or [], None
        planner = PLANNERS[self.partitioner]
        if self.stats is None:  # by the head's columns, as ``run`` plans (runner.plan_head)
            plan, stats = plan_head(head, self.space, planner, self.m)
        else:  # an older checkpoint's statistics file
            stats = self.stats
            plan = planner(active_subs(events_of(head)), stats, self.m)
        self._stats = stats
        self.router = Router(plan, self.window, dict(stats.keyword_freq))
        return head

    def _keep(self, run: list) -> None:
        """Remember the subscriptions of ``run`` (pruned to the live ones when they are many)."""
        for it in run:
            if type(it) is SubBlock or type(it) is Sub:
                self._subs.append(it)
                self._kept += len(it) if type(it) is SubBlock else 1
        if self._kept > 2 * len(self.router.where) + 4096:
            self._subs = self._live()
            self._kept = len(self._subs)

    def _live(self) -> list[Sub]:
        """The live subscriptions, in registration order."""
        live = self.router.is_live
        out: list[Sub] = []
        for part in self._subs:
            if type(part) is Sub:
                if live(part.id, part.seq):
                    out.append(part)
            else:
                out.extend(part[j] for j, (sid, q) in enumerate(zip(part.id, part.seq)) if live(sid, q))
        return out

    @fewer_collections()
    def feed(self, lines: list[tuple[int, bytes | None]], end: bool = False, **_: Any) -> list[tuple[int, int, bytes]]:
        """Gate and route ``(line number, raw)`` lines; with ``end``, finish the input: plan
        if still buffering, then every worker's clock to the last event and its results."""
        driver: list = []
        run: list = []  # admitted items once planned, routed at once
        gate = self.gate
        for first, raws in _blocks(lines):
            self.lines = max(self.lines, first + len(raws) - 1)
            out = gate.admit_block(first, raws)
            label = gate.block_label
            if label is not None:
                self._take(out, label, len(out), run)
                continue
            for ev in out:
                if type(ev) is Rejection:
                    self.rejected[ev.label] += 1
                    driver.append(("rejected", ev.line, ev.error, ev.raw))
                else:
                    self._take(ev, ev.label, 1, run)
        if end and self.head is not None:
            run[:0] = self._plan()
        shares: list[list] = [[] for _ in range(self.m)]
        seeds, self._seeds = self._seeds, {}
        for wk, items in seeds.items():
            shares[wk].extend(items)
        if run:
            self._keep(run)
            got, _, _ = self.router.route(run)
            for wk, share in enumerate(got):
                shares[wk].extend(share)
        if end:
            if self.last is not None:
                for share in shares:  # subscriptions ending by the last time end, then results
                    share.extend((Tick(*self.last), END))
            driver.append(("meta", self.metadata()))
        rows = [(wk, 0, encode_share(share)) for wk, share in enumerate(shares) if share]
        if driver:
            rows.append((DRIVER, len(rows), encode_driver(driver)))
        return rows

    def _take(self, it: Any, label: str, n: int, run: list) -> None:
        """Count an admitted block or event; buffer it while the head waits for the plan,
        which is made right after the event that brings ``init_objects`` objects (a block
        cut there, as ``Sequencer._take_block`` cuts it)."""
        block = type(it) in BLOCKS
        if self.head is not None:
            need = self.init_objects
            k = head_part(self.accepted["pub"], need, label, n)
            self.head.append(it[:k] if block and k < n else it)
            self.accepted[label] += k
            self.last = (it.seq[k - 1], it.t[k - 1]) if block else (it.seq, it.t)
            if self.accepted["pub"] < need:
                return
            run.extend(self._plan())
            if k == n:
                return
            it, n = it[k:], n - k
        self.accepted[label] += n
        self.last = (it.seq[n - 1], it.t[n - 1]) if block else (it.seq, it.t)
        run.append(it)

    # -- another number of workers on restart (spark/NOTES.md, "M on restart") -------------
    def switch_rows(self, gen: int, keep: bool = True) -> list[tuple[int, int, bytes]]:
        """The last micro-batch of generation ``gen`` (no input line): the seeds still due,
        then every worker's state as data in its export file ``switch_tag(gen)``.
        ``keep=False``: a re-feed (nothing is sent)."""
        seeds, self._seeds = self._seeds, {}
        if not keep or self.router is None:
            return []
        shares = {wk: [*seeds.get(wk, ()), Handover(switch_tag(gen))] for wk in range(self.m)}
        return [(wk, 0, encode_share(share)) for wk, share in shares.items()]

    def switch(self, workers: int, held: Callable[[], list] | None = None) -> None:
        """Go on with ``workers`` workers after :meth:`switch_rows`: a plan for them from the
        live subscriptions (registration order) and the O_init statistics; with ``held`` (the
        old workers' exported events), each new worker seeded with the subscriptions it now
        holds and the objects: under a retaining window the alive ones, under ``none`` every
        object some result holds (a subscription's results are the best of the objects
        offered after it, so offering more than its own gives the same). Deterministic from
        the input, so a rebuilt sequencer places everything the same; None: a re-feed."""
        self.m, self._seeds = workers, {}
        old = self.router
        if old is None:  # still buffering O_init: the plan will be made for ``workers``
            return
        subs = self._live()
        self._subs, self._kept = subs, len(subs)
        plan = PLANNERS[self.partitioner](subs, self._stats, workers)
        router = self.router = Router(plan, self.window, dict(self._stats.keyword_freq))
        router.clock = old.clock  # (``time``) the objects alive are the same
        router.objects, router.object_messages, router.sent = old.objects, old.object_messages, old.sent
        placed = router.place_block(SubBlock.of(subs)) if subs else []
        if held is None:
            return
        got = held()
        objects = sorted({ev.seq: ev for ev in got if type(ev) is Pub}.values(), key=lambda ev: ev.seq)
        mine: dict[int, list] = {wk: [] for wk in range(workers)}
        for sub, ws in zip(subs, placed):
            for wk in ws:
                mine[wk].append(sub)
        self._seeds = {wk: [Seed(tuple(sorted(mine[wk] + objects, key=lambda ev: ev.seq)))] for wk in range(workers)}

    def metadata(self) -> dict:
        m = totals(self.accepted, self.rejected, self.lines)
        if self.router is not None:
            m.update(self.router.metrics())
            m["plan"] = self.router.plan.describe()
        return m


# -- a worker -----------------------------------------------------------------------------------
class ShareWorker:
    """One worker's engine (its own window clock) fed its shares; the interface of
    ``worker.WorkerState`` (``decode``, ``apply``, ``snapshot``, ``restore``, ``stat_row``)."""

    def __init__(self, worker: int, window: Window, space: Space, index: str, params: dict) -> None:
        self.worker = worker
        self.config = {"worker": worker, "window": str(window), "space": str(space), "index": index,
                       "params": params}
        self.engine = make_engine(index, window, space, **params)
        self.window = self.engine.window
        # What a snapshot needs, pruned at each: the subscriptions received (the live ones
        # are the engine's), and under a retaining window the objects (the alive ones are
        # those whose time is not up at the last event applied)
        self.subs: list = []
        self.pubs: list = []
        self.now: Any = None
        self.cpu_seconds = 0.0

    @staticmethod
    def decode(payload: bytes, window: Window, space: Space) -> list:
        return decode_share(payload, window, space)

    def apply(self, items: list) -> list[tuple]:
        """Apply a share's items in order; rows as ``WorkerState.apply`` gives them."""
        t0 = time.process_time()
        rows: list[tuple] = []
        text: list[bytes] = []
        cols: tuple[list, list, list] = ([], [], [])
        run: list = []
        for it in items:
            if it is END or type(it) is Seed or type(it) is Handover:
                self._run(run, text, cols)
                run = []
                if it is END:
                    rows.extend(self._results())
                elif type(it) is Seed:
                    self._silently(list(it.events))
                else:
                    rows.append((self.worker, "export", it.tag, 0, "", self.snapshot()))
            else:
                run.append(it)
        self._run(run, text, cols)
        if cols[0]:
            seqs, regs, match = (np.concatenate(c) for c in cols)
            rows.insert(0, (self.worker, "notes", len(seqs), 0, b"".join(text)[:-1].decode("utf-8"),
                            pack_notes(seqs, regs, match)))
        self.cpu_seconds = time.process_time() - t0
        return rows

    def _run(self, items: list, text: list, cols: tuple[list, list, list]) -> None:
        if not items:
            return
        r = self.engine.apply_tagged(items)
        if len(r.notes):
            seqs = np.fromiter(chain.from_iterable(it.seq if type(it) in BLOCKS else (it.seq,) for it in items),
                               np.int64)
            text.append(r.notes.json_bytes())
            cols[0].append(seqs[r.item])
            cols[1].append(r.reg)
            cols[2].append(r.notes.matches())
        retains = self.window.retains
        for it in items:
            cls = type(it)
            if cls is SubBlock or cls is Sub:
                self.subs.append(it)
            elif retains and (cls is PubBlock or cls is Pub):
                self.pubs.append(it)
        last = items[-1]
        self.now = last.t[-1] if type(last) in BLOCKS else last.t

    def _silently(self, evs: list) -> None:
        """Apply events (subscriptions and objects, in stream order) with no notification and
        the counters as they were: a state rebuilt, not a stream."""
        eng = self.engine
        stats = dict(eng.stats)
        if evs:
            eng.apply_columnar(as_runs(evs))
        eng.stats.clear()
        eng.stats.update(stats)
        self.subs.extend(ev for ev in evs if type(ev) is Sub)
        if self.window.retains:
            self.pubs.extend(ev for ev in evs if type(ev) is Pub)

    @classmethod
    def exported(cls, raw: bytes, window: Window, space: Space) -> list:
        """The events of a worker's export (:meth:`snapshot`'s), validated."""
        _, body = snapshot.unframe(raw, FORMAT, VERSION, "worker export")
        try:
            return [event_of(q, r, window, space) for q, r in body["events"]]
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, Refused):
                raise
            raise Refused(f"worker export: malformed ({type(exc).__name__}: {exc})") from None

    def _results(self) -> list[tuple]:
        text, seqs = result_lines(self.engine)
        lines = text.decode("utf-8").split("\n")[:-1] if text else []
        return [(self.worker, "result", 0, int(q), line, None) for q, line in zip(seqs.tolist(), lines)]

    # -- the snapshot -----------------------------------------------------------------------
    def _live_subs(self) -> list[Sub]:
        eng = self.engine
        slot_of, seq_col = eng.subs.slot_of, eng.subs.cols.seq
        out: list[Sub] = []
        for part in self.subs:
            if type(part) is Sub:
                s = slot_of.get(part.id)
                if s is not None and int(seq_col[s]) == part.seq:
                    out.append(part)
                continue
            for j, (sid, q) in enumerate(zip(part.id, part.seq)):
                s = slot_of.get(sid)
                if s is not None and int(seq_col[s]) == q:
                    out.append(part[j])
        return out

    def _alive(self) -> list[Pub]:
        """The objects alive in the window after the last event applied: under ``count`` the
        last N (every worker gets every object), under ``time`` those whose time is not up
        (an object due at an event routed elsewhere left here at a ``Tick`` of it)."""
        w = self.window
        pubs = events_of(self.pubs)
        if w.kind == "count":
            return pubs[-w.n:] if w.n else []
        return [p for p in pubs if not w.expiry(p.t, p.expires) <= self.now]

    def snapshot(self) -> bytes:
        """The state as data (framed JSON); prunes what it keeps to what is live. O(state)."""
        eng = self.engine
        subs = self._live_subs()
        self.subs = subs
        if self.window.retains:
            objects = self.pubs = self._alive()
        else:  # the objects the results hold (``export``: as events, time 0; none leaves)
            held = {p.seq: p for s in subs if s.kind != RANGE for p in eng.export(s.id)}
            objects = list(held.values())
        evs = sorted(chain(subs, objects), key=lambda ev: ev.seq)
        body = {"events": [[ev.seq, event_record(ev)] for ev in evs], "now": self.now,
                "stats": dict(eng.stats), "results": results_digest(eng)}
        return snapshot.frame(FORMAT, VERSION, body, **self.config)

    @classmethod
    def restore(cls, raw: bytes, worker: int, window: Window, space: Space, index: str,
                params: dict) -> "ShareWorker":
        """A worker from :meth:`snapshot`: its events applied again in stream order, silently,
        and the results checked against the digest; ``Refused`` if anything is off."""
        ws = cls(worker, window, space, index, params)
        head, body = snapshot.unframe(raw, FORMAT, VERSION, f"worker {worker} snapshot")
        if {k: head.get(k) for k in ws.config} != ws.config:
            raise Refused(f"worker {worker} snapshot: written for another configuration")
        try:
            evs = [event_of(q, r, ws.window, space) for q, r in body["events"]]
            stats, now, digest = body["stats"], body["now"], body["results"]
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, Refused):
                raise
            raise Refused(f"worker {worker} snapshot: malformed ({type(exc).__name__}: {exc})") from None
        if any(type(ev) is Unsub for ev in evs) or not isinstance(stats, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in stats.values()):
            raise Refused(f"worker {worker} snapshot: malformed")
        eng = ws.engine
        ws._silently(evs)
        if results_digest(eng) != digest:
            raise Refused(f"worker {worker} snapshot: its events do not give its results again")
        eng.stats.clear()
        eng.stats.update(stats)
        ws.now = now
        return ws

    def stat_row(self, **extra: Any) -> tuple:
        stat = {"worker": self.worker, "cpu_seconds": round(self.cpu_seconds, 6), **self.engine.stats, **extra}
        return (self.worker, "stat", 0, 0, json_text(stat), None)

