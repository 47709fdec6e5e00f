"""The fleet on Spark in process (spark/shares.py, no Spark): the router's shares as data,
the worker engines keeping their own windows, the sink's merge; against the reference
engine on seeded and Hypothesis streams of every window, with workers restored from
their snapshots and sequencers rebuilt from the input at batch boundaries; and the codec
refusing damaged shares with the reason."""

from __future__ import annotations

import json
import random
from itertools import groupby

import msgspec
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from spark_inprocess import apply_batch, reference_files

from skpubsub.core.config import Window
from skpubsub.engine.messages import Tick
from skpubsub.engine.snapshot import Refused
from skpubsub.io.events import Pub, PubBlock, Rejection, Sub, SubBlock, events_of
from skpubsub.io.validate import Gate
from skpubsub.spark.codec import END
from skpubsub.spark.shares import ShareSequencer, ShareWorker, decode_share, encode_share
from skpubsub.spark.sink import merge_results
from skpubsub.testing.streams import random_stream, streams


def _run(s, m: int, partitioner: str, batch: int, rng: random.Random | None = None, init_objects: int = 5):
    """The stream through a sequencer and ``m`` workers in batches of ``batch`` lines; with
    ``rng``, at random batch boundaries a worker is replaced by its snapshot restored, or
    the sequencer by a fresh one re-fed from the input (a restarted source)."""
    window, space = Window.parse(s.window), s.space_or_default
    lines = [(i, json.dumps(r).encode()) for i, r in enumerate(s.events, 1)]

    def fresh() -> ShareSequencer:
        return ShareSequencer(window, space, m, partitioner, init_objects)

    q = fresh()
    workers = [ShareWorker(w, window, space, "dkm", {}) for w in range(m)]
    notes: list[bytes] = []
    results: list = []
    restored = 0
    for at in range(0, len(lines), batch):
        end = min(at + batch, len(lines))
        if rng is not None and rng.random() < 0.3:
            w = rng.randrange(m)
            workers[w] = ShareWorker.restore(workers[w].snapshot(), w, window, space, "dkm", {})
            restored += 1
        if rng is not None and rng.random() < 0.2:
            q = fresh()
            q.feed(lines[:at])  # (its rows were sent before: dropped)
        got, res, _ = apply_batch(workers, q.feed(lines[at:end], end=end == len(lines)), window, space, {})
        notes += got
        results = res or results
    return (notes, list(merge_results(results)) if results else []), restored


@pytest.mark.parametrize("m", [1, 2, 3])
def test_seeded_streams_equal_the_reference(m: int) -> None:
    windows, restored = set(), 0
    for seed in range(10):
        s = random_stream(seed * 11 + m, n_events=(100, 220))
        rng = random.Random(seed)
        part = ["hash", "dkm", "location", "ps2", "kop"][seed % 5]
        got, r = _run(s, m, part, rng.choice([3, 8, 25, 60]), rng)
        assert got == reference_files(s), (s.seed, s.window, part)
        windows.add(Window.parse(s.window).kind)
        restored += r
    assert windows == {"none", "count", "time"} and restored


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(max_events=80), st.integers(1, 3), st.integers(1, 30), st.integers(0, 2 ** 16))
def test_hypothesis_streams_equal_the_reference(s, m: int, batch: int, seed: int) -> None:
    got, _ = _run(s, m, "hash", batch, random.Random(seed), init_objects=3)
    assert got == reference_files(s)


def _blocks_of(window: str = "count:50"):
    """A stream's events with each run of subscriptions or objects as one block."""
    s = random_stream(5, n_events=200, junk=False, window=window)
    g = Gate(Window.parse(s.window), s.space_or_default)
    evs = [ev for i, r in enumerate(s.events, 1) if type(ev := g.admit(r, i)) is not Rejection]
    items: list = []
    for cls, run in groupby(evs, type):
        run = list(run)
        items.extend([(SubBlock if cls is Sub else PubBlock).of(run)] if cls in (Sub, Pub) and len(run) > 1 else run)
    return s, items


def test_a_share_reads_back_as_the_same_events() -> None:
    s, items = _blocks_of()
    items = items + [Tick(999, 1e6), END]
    w, sp = Window.parse(s.window), s.space_or_default
    back = decode_share(encode_share(items), w, sp)
    assert [type(it) for it in back] == [type(it) for it in items]
    assert events_of(back[:-2]) == events_of(items[:-2])
    assert back[-2] == items[-2] and back[-1] is END
    assert any(type(it) is SubBlock for it in back) and any(type(it) is PubBlock for it in back)


def test_a_block_msgpack_cannot_hold_travels_as_records() -> None:
    s, items = _blocks_of()
    w, sp = Window.parse(s.window), s.space_or_default
    at = next(i for i, it in enumerate(items) if type(it) is PubBlock)
    evs = list(items[at])
    evs[0] = msgspec.structs.replace(evs[0], id=2 ** 70)  # an id past 64 bits (SPEC: any integer)
    items = items[:at] + [PubBlock.of(evs)] + items[at + 1:]
    back = decode_share(encode_share(items), w, sp)
    assert events_of(back) == events_of(items) and back[at].id == 2 ** 70


def test_a_damaged_share_is_refused_with_the_reason() -> None:
    s, items = _blocks_of()
    w, sp = Window.parse(s.window), s.space_or_default
    blob = encode_share(items)
    with pytest.raises(Refused, match="routed share"):
        decode_share(blob[: len(blob) // 2], w, sp)
    raw = msgspec.msgpack.decode(blob)
    pub = next(i for i, e in enumerate(raw) if e[0] == "P")
    sub = next(i for i, e in enumerate(raw) if e[0] == "S")

    def refused(i: int, field: int, value, match: str) -> None:
        bad = [list(e) for e in raw]
        bad[i][field] = value
        with pytest.raises(Refused, match=match):
            decode_share(msgspec.msgpack.encode(bad), w, sp)

    n = len(raw[pub][1])
    refused(pub, 4, [sp.x2 + 1.0] * n, "outside the space")  # x
    refused(pub, 4, [float("nan")] * n, "finite")
    refused(pub, 5, [0.0] * (n - 1) + [float("nan")], "finite")  # y, one NaN among finite ones
    refused(sub, 3, [0] * (len(raw[sub][1]) - 1) + [float("inf")], "finite")  # t
    refused(pub, 6, [["Upper"], bytes(4 * n), np.arange(n + 1, dtype="<i8").tobytes()], "normal")
    refused(pub, 6, [["a"], bytes(4 * n), np.zeros(n + 1, "<i8").tobytes()], "malformed")  # no keyword
    refused(sub, 4, ["circle"] * len(raw[sub][1]), "unknown subscription kind")
    refused(pub, 2, list(range(n - 1)), "values")  # a short column


def test_a_snapshot_of_another_worker_or_damaged_is_refused() -> None:
    s = random_stream(9, n_events=150, window="count:30", junk=False)
    w, sp = Window.parse(s.window), s.space_or_default
    q = ShareSequencer(w, sp, 2, "hash", 3)
    workers = [ShareWorker(k, w, sp, "dkm", {}) for k in range(2)]
    apply_batch(workers, q.feed([(i, json.dumps(r).encode()) for i, r in enumerate(s.events, 1)]), w, sp, {})
    snap = workers[0].snapshot()
    with pytest.raises(Refused, match="another configuration"):
        ShareWorker.restore(snap, 1, w, sp, "dkm", {})
    with pytest.raises(Refused):
        ShareWorker.restore(snap[:-20], 0, w, sp, "dkm", {})
    head, _, body = snap.partition(b"\n")
    doc = json.loads(body)
    doc["results"] = "0" * 64  # a digest its events do not give again
    bad = json.dumps(doc).encode()
    hdr = json.loads(head)
    hdr["bytes"] = len(bad)
    import hashlib

    hdr["sha256"] = hashlib.sha256(bad).hexdigest()
    with pytest.raises(Refused, match="do not give its results again"):
        ShareWorker.restore(json.dumps(hdr).encode() + b"\n" + bad, 0, w, sp, "dkm", {})


def _run_gens(s, gens: list[tuple[int, int]], partitioner: str, batch: int, restart: bool):
    """``_run`` with the number of workers changed at batch boundaries (``gens``: ``[(first
    line, workers), ...]``): the old generation's last batch exports each worker's state,
    the sequencer switches in place or (``restart``) is rebuilt from the input along the
    generations, the new workers start from their seeds."""
    from skpubsub.spark.sequencer import switch_tag

    window, space = Window.parse(s.window), s.space_or_default
    lines = [(i, json.dumps(r).encode()) for i, r in enumerate(s.events, 1)]
    files: dict = {}

    def held(g: int, m: int):
        return lambda: [ev for w in range(m) for ev in ShareWorker.exported(files[switch_tag(g), w], window, space)]

    def rebuild(g: int) -> ShareSequencer:
        q = ShareSequencer(window, space, gens[0][1], partitioner, 5)
        for k in range(g + 1):
            if k:
                q.switch_rows(k - 1, keep=False)
                q.switch(gens[k][1], held(k - 1, gens[k - 1][1]) if k == g else None)
            lo, hi = gens[k][0], gens[k + 1][0] if k < g else gens[k][0]
            for at in range(lo, hi, batch):
                q.feed(lines[at:min(at + batch, hi)])
        return q

    q = ShareSequencer(window, space, gens[0][1], partitioner, 5)
    g, m = 0, gens[0][1]
    workers = [ShareWorker(w, window, space, "dkm", {}) for w in range(m)]
    notes: list[bytes] = []
    results: list = []
    at = 0
    while at < len(lines):
        if g + 1 < len(gens) and at == gens[g + 1][0]:
            got, _, _ = apply_batch(workers, q.switch_rows(g), window, space, files)
            assert not got
            g, m = g + 1, gens[g + 1][1]
            q = rebuild(g) if restart else q
            if not restart:
                q.switch(m, held(g - 1, gens[g - 1][1]))
            workers = [ShareWorker(w, window, space, "dkm", {}) for w in range(m)]
            continue
        end = min(at + batch, len(lines), gens[g + 1][0] if g + 1 < len(gens) else len(lines))
        got, res, _ = apply_batch(workers, q.feed(lines[at:end], end=end == len(lines)), window, space, files)
        notes += got
        results = res or results
        at = end
    return notes, list(merge_results(results)) if results else []


@pytest.mark.parametrize("pair", [(2, 3), (3, 1), (1, 2)])
@pytest.mark.parametrize("restart", [False, True])
def test_another_number_of_workers_continues_exactly(pair: tuple[int, int], restart: bool) -> None:
    windows = set()
    for seed in range(8):
        s = random_stream(seed * 13 + pair[0] * 5 + pair[1], n_events=(100, 180))
        rng = random.Random(seed)
        b = rng.choice([7, 11, 20])
        part = ["hash", "kop", "location", "ps2"][seed % 4]
        cut = b * rng.randint(1, max(1, len(s.events) // b - 1))
        gens = [(0, pair[0]), (cut, pair[1])] + ([(cut + b, pair[0])] if seed % 3 == 0 else [])
        assert _run_gens(s, gens, part, b, restart) == reference_files(s), (s.seed, s.window, gens, part)
        windows.add(Window.parse(s.window).kind)
    assert windows == {"none", "count", "time"}
