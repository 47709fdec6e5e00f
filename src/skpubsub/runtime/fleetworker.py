"""The fleet's worker side (runtime/fleet.py): the worker process, its protocol
(``Worker``: a share in, its notification lines and keys out) and the warm-up that loads a
worker's kernels before the workers fork (``warm``; ``sample_runs`` also feeds the Spark
daemon's, spark/daemon.py)."""

from __future__ import annotations

import signal
import time
from typing import Any

import numpy as np

from ..core.config import Space, Window
from ..engine.messages import Tick
from ..io.events import PubBlock, SubBlock
from ..io.lexicon import Lexicon, Words
from ..io.notewriter import results_block
from ..store.subscriptions import K_RANGE
from .engines import make_engine


def start_deaf(p) -> None:
    """Start worker process ``p`` with SIGINT blocked, a mask it inherits through the exec of
    a spawn: a terminal's Ctrl-C reaches the whole group, and one that came while the worker
    still imported (before it ignores it) would add its traceback to the parent's one line
    (SPEC 7). The parent's own Ctrl-C stays pending while blocked, and is taken as soon as
    the worker has started."""
    if not hasattr(signal, "pthread_sigmask"):
        p.start()
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        p.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def worker_main(conn, window: Window, space: Space, index: str, params: dict, held: list = ()) -> None:
    """A worker process: one engine (its own window clock), driven over a pipe. Ctrl-C is the
    parent's to handle (SPEC 7): ignored here; it ends when its pipe closes. ``held``: the
    parent's pipe ends a fork left open here, closed."""
    for c in held:
        c.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # (a forked worker has the parent's handler)
    engine = make_engine(index, window, space, **params)
    serve = Worker(engine)
    try:
        while True:
            msg = conn.recv()
            if msg is None:
                return
            conn.send(serve(msg))
    except (EOFError, ConnectionError):  # the parent is gone
        return


def sample_runs(space: Space, kinds: tuple[str, ...] = ("range", "knn"), ends: bool = False) -> list[bytes]:
    """A few lines of each kind of subscription in ``kinds``, then objects (``ends``: then an
    ``unsub`` and a late object, past a small window's end), inside ``space``: each run as
    the bytes of its lines, as ``Gate.admit_block`` takes a block of one kind."""
    import json

    cx, cy = (space.x1 + space.x2) / 2, (space.y1 + space.y2) / 2
    d = min(space.x2 - space.x1, space.y2 - space.y1) / 100

    def sub(i: int, kind: str, **rec) -> str:
        return json.dumps({"op": "sub", "id": f"{kind}{i}", "t": 0, "kind": kind,
                           "keywords": ["a", "b"][: 1 + i % 2], **rec})

    def pub(i: int, t: int, x: float) -> str:
        return json.dumps({"op": "pub", "id": f"o{i}", "t": t, "x": x, "y": cy, "keywords": ["a", "b"][: 1 + i % 2]})

    match = {"range": lambda i: {"rect": [cx - d, cy - d, cx + d, cy + d], "match": "all" if i % 2 else "any"},
             "knn": lambda i: {"x": cx + d * i / 8, "y": cy, "k": 2, "match": "all" if i % 2 else "any"},
             "topk": lambda i: {"x": cx + d * i / 8, "y": cy, "k": 2, "alpha": 0.5}}
    runs = [[sub(i, kind, **match[kind](i)) for i in range(4)] for kind in kinds]
    runs.append([pub(i, 1 + i // 3, cx + d * i / 16) for i in range(8)])
    if ends:
        runs.append([json.dumps({"op": "unsub", "id": f"{kinds[0]}0", "t": 4}), pub(9, 5, cx)])
    return ["\n".join(run).encode() for run in runs]


def admitted(runs: list[bytes], window: Window, space: Space) -> tuple[list, Any]:
    """``runs`` through a coded Gate, a block at a time: (its items, its lexicon)."""
    from ..io.validate import Gate

    gate, items, at = Gate(window, space, coded=True), [], 1
    for run in runs:
        got = gate.admit_block(at, run)
        items.extend([got] if type(got) in (SubBlock, PubBlock) else got)
        at += run.count(b"\n") + 1
    return items, gate.lexicon


def warm(window: Window, space: Space, index: str, params: dict) -> None:
    """A worker's path run once on a few lines of each kind by a throwaway engine, so that
    its compiled kernels are read from Numba's cache in this process: workers forked after
    have them, rather than each reading them in its first batches (~0.2 s of CPU a worker;
    runtime/NOTES.md). Best effort: what fails here is loaded where it is needed."""
    try:
        items, lex = admitted(sample_runs(space), window, space)
        Worker(make_engine(index, window, space, **params))(("batch", items, (lex.gen, list(lex.words))))
    except Exception:  # noqa: BLE001 - only a head start: the real batches load what they need
        pass


class Worker:
    """A worker's side of the protocol: ``("batch", share, news)`` -> its notifications'
    lines with their keys and its CPU seconds; ``("end", seq, t)`` -> its results' lines
    with their registration seqs; ``("stats",)``."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.lex = Lexicon()  # the reader's lexicon, as far as the parent told (``Words``' codes)

    def __call__(self, msg: tuple) -> Any:
        if msg[0] == "batch":
            t0 = time.process_time()
            _, share, news = msg
            if news is not None:
                gen, fresh = news
                if gen != self.lex.gen:
                    self.lex = Lexicon(gen)
                self.lex.words.extend(fresh)
            for part in share:
                kws = getattr(part, "keywords", None)
                if type(kws) is Words:
                    kws.lex = self.lex
            r = self.engine.apply_tagged(share)
            out = (r.notes.json_bytes(), r.item, r.reg, r.notes.matches())
            return out, time.process_time() - t0
        if msg[0] == "end":
            eng = self.engine
            eng.apply_tagged([Tick(msg[1], msg[2])])  # subscriptions ending by then end (silently)
            return result_lines(eng)
        if msg[0] == "stats":
            return dict(self.engine.stats)
        raise ValueError(f"unknown message {msg[0]!r}")


def result_lines(eng) -> tuple[bytes, np.ndarray]:
    """The worker's ``results.jsonl`` lines and each one's registration seq."""
    columns = getattr(eng, "result_columns", None)
    if columns is None:  # a plain engine: (id, ids) pairs
        from ..io.sinks import result_line
        pairs = eng.all_results()
        seqs = np.array([eng.subs.cols.seq[eng.subs.slot_of[sid]] for sid, _ in pairs], dtype=np.int64)
        return "".join(result_line(sid, ids) for sid, ids in pairs).encode("utf-8"), seqs
    res = columns()
    c = eng.subs.cols
    slots = c.active[: c.top] & (c.kind[: c.top] != K_RANGE)
    seqs = np.sort(c.seq[: c.top][slots])  # result_columns' order
    return results_block(res).tobytes(), seqs
