"""Issue 18 class 6 / SPEC 7 on the Spark runtime: nothing read back is unpickled.

The workers' state-store snapshots are data (live subscriptions, alive objects, counters:
``engine/snapshot.py``), restored by re-applying them silently; a restored worker goes on
exactly as the live one. Routed payloads, driver rows and notification columns are data
too; a pickle, a damaged blob or another configuration's snapshot is refused with a reason
and never runs. No Spark session here.
"""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import pytest

import skpubsub.spark
from skpubsub.core.config import Window
from skpubsub.engine.snapshot import Refused
from skpubsub.spark.codec import decode_driver, decode_items, unpack_notes
from skpubsub.spark.sequencer import Sequencer
from skpubsub.spark.worker import WorkerState
from skpubsub.testing.streams import random_stream


class _Boom:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (Path(self.marker), "pwned"))


def test_no_pickle_is_read_back_anywhere_in_the_spark_runtime() -> None:
    src = Path(skpubsub.spark.__file__).parent
    found = [f"{p.name}:{i}" for p in sorted(src.glob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if re.search(r"\b(c?pickle|cloudpickle)\.loads?\(|^\s*import (c?pickle|cloudpickle)", line)]
    assert not found, found


def _routed(window: str, seed: int, workers: int = 2):
    s = random_stream(seed, n_events=(150, 200), windows=(window.split(":")[0],))
    w, space = Window.parse(s.window), s.space_or_default
    seqr = Sequencer(w, space, workers, "hash", init_objects=5)
    lines = [(i, json.dumps(r).encode()) for i, r in enumerate(s.events, 1)]
    rows = seqr.feed(lines, end=True)
    per: dict[int, list] = {}
    for wk, _, payload in rows:
        if wk >= 0:
            per.setdefault(wk, []).extend(decode_items(payload, w, space))
    return w, space, per


@pytest.mark.parametrize("window", ["none", "count", "time"])
def test_a_restored_worker_goes_on_exactly_as_the_live_one(window: str) -> None:
    for seed in range(3):
        w, space, per = _routed(window, seed * 7 + 1)
        for wk, items in per.items():
            cut = len(items) // 2
            live = WorkerState(wk, w, space, "dkm", {})
            live.apply(items[:cut])
            blob = live.snapshot()
            assert b"\n" in blob and blob.startswith(b'{"format": "skpubsub-spark-worker"')
            back = WorkerState.restore(blob, wk, w, space, "dkm", {})
            assert back.engine.all_results() == live.engine.all_results()
            assert set(back.alive) == set(live.engine.alive_by_seq) == set(live.alive)
            assert back.engine.stats == live.engine.stats
            assert back.apply(items[cut:]) == live.apply(items[cut:]), (window, seed, wk)
            assert back.engine.all_results() == live.engine.all_results()


def test_damaged_foreign_or_pickled_snapshots_are_refused(tmp_path: Path) -> None:
    w, space, per = _routed("count", 5)
    ws = WorkerState(0, w, space, "dkm", {})
    ws.apply(per[0][: len(per[0]) // 2])
    blob = ws.snapshot()
    head, body = blob.split(b"\n", 1)
    cases = [
        (blob[:-3], "damaged"),
        (head + b"\n" + body.replace(b'"op"', b'"oq"', 1), "damaged"),
        (pickle.dumps(_Boom(str(tmp_path / "marker"))), "not a skpubsub-spark-worker"),
        (head.replace(b'"version": 1', b'"version": 9') + b"\n" + body, "version 9"),
    ]
    for raw, reason in cases:
        with pytest.raises(Refused, match=reason):
            WorkerState.restore(raw, 0, w, space, "dkm", {})
    with pytest.raises(Refused, match="another configuration"):
        WorkerState.restore(blob, 1, w, space, "dkm", {})
    with pytest.raises(Refused, match="another configuration"):
        WorkerState.restore(blob, 0, Window.parse("count:7"), space, "dkm", {})
    assert not (tmp_path / "marker").exists()


def test_payloads_are_data_and_refused_when_not() -> None:
    boom = pickle.dumps(_Boom("/nonexistent/marker"))
    w = Window.parse("none")
    from skpubsub.core.config import Space

    for bad, reason in [(boom, "not JSON"), (b'[[1, "e", 1, {"op": "pub"}, []]]', "event 1 refused"),
                        (b'[[1, "z", 1, 2, []]]', "unknown item"), (b'[[1, "t", 1, NaN, []]]', "malformed tick")]:
        with pytest.raises(Refused, match=reason):
            decode_items(bad, w, Space())
    with pytest.raises(Refused):
        decode_driver(boom)
    with pytest.raises(Refused, match="bytes for 3"):
        unpack_notes(b"\0" * 50, 3)


def test_payloads_round_trip_on_both_paths() -> None:
    """msgspec and fastline in the common case; json and validate_record for what they refuse
    (a lone surrogate in an id, an integer time past 64 bits): the same items either way."""
    from skpubsub.core.config import Space
    from skpubsub.engine.messages import Backfill, Tick
    from skpubsub.io.events import Pub, Sub, Unsub
    from skpubsub.spark.codec import END, encode_items

    w, space = Window.parse("time:10"), Space()
    pub = Pub(3, "o\udc80", 5, 1.5, -2.25, ("jazz", "cafe"), 9.5)
    items = [(1, (Sub(1, 7, 2, "topk", ("jazz",), x=0.1, y=0.2, k=3, alpha=0.3, weights=(2.0,), expires=20), ())),
             (2, (Sub(2, "r", 2, "range", ("a", "b"), match_all=False, rect=(0, 0, 1, 1)), ())),
             (3, (pub, (1, 2))), (4, (Backfill(Pub(4, 9, 3, 0.0, 0.0, ("x",))), ())),
             (5, (Tick(5, 6.5), (3,))), (6, (Unsub(6, "r", 7), ())), (6, END)]
    for its in (items, [it for it in items if it[1] == END or getattr(it[1][0], "id", None) != pub.id]):
        assert decode_items(encode_items(its), w, space) == its
    big = [(1, (Unsub(1, "u", 2 ** 70), ()))]
    assert decode_items(encode_items(big), w, space) == big
