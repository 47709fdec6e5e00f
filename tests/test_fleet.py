"""The fleet (runtime/fleet.py): worker engines fed blocks, each keeping the whole window,
give the reference engine's notifications and results byte for byte, for every window,
plan (replicated, skewed, every planner) and batch cut."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from skpubsub.core.config import Space
from skpubsub.io.events import Rejection, objects_as_blocks
from skpubsub.io.notifications import note_lines
from skpubsub.io.sinks import result_line
from skpubsub.io.validate import Gate
from skpubsub.partition.common import AssignedPlan
from skpubsub.runtime.fleet import Fleet, Router, take
from skpubsub.runtime.runner import chunks, run
from skpubsub.testing.reference import ReferenceEngine
from skpubsub.testing.streams import random_stream, streams
from test_runtime import hash_plan, replicated_plan  # (the tests' folder is on the path)


def skewed_plan(m: int) -> AssignedPlan:
    """Everything on the last worker: the others see objects (or nothing) and ticks."""
    return AssignedPlan(m, "skewed", {}, {}, new_rule=lambda sub, p: ((m - 1,), 1.0))


def _events(s):
    g = Gate(s.window, s.space)
    return [ev for i, r in enumerate(s.events, 1) if not isinstance(ev := g.admit(r, i), Rejection)]


def _check(s, plan, batch: int, index: str = "dkm") -> None:
    """Batch by batch, the fleet's merged lines are the reference engine's; then the results."""
    events = _events(s)
    ref = ReferenceEngine(s.window, s.space)
    fleet = Fleet(plan.m, s.window, s.space or Space(), index, processes=False).start(plan)
    got, want = [], []
    for i in range(0, len(events), batch):
        part = events[i:i + batch]
        want.append("".join(note_lines(ref.apply(part))).encode())
        out = fleet.exchange(objects_as_blocks(part))  # objects as blocks, as the reader gives them
        if out is not None:
            got.append(out.json_bytes())
    last = fleet.drain()
    if last is not None:
        got.append(last.json_bytes())
    assert b"".join(got) == b"".join(want), s
    assert fleet.results() == "".join(result_line(sid, ids) for sid, ids in ref.all_results()).encode(), s


@pytest.mark.parametrize("make_plan", [hash_plan, replicated_plan, skewed_plan])
@pytest.mark.parametrize("m", [1, 2, 3])
def test_seeded_streams_equal_the_reference(make_plan, m: int) -> None:
    for seed in range(20):
        _check(random_stream(seed * 7 + m), make_plan(m), batch=1 + seed % 9)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(max_events=80), st.sampled_from([hash_plan, replicated_plan, skewed_plan]),
       st.integers(1, 3), st.integers(1, 12))
def test_hypothesis_streams_equal_the_reference(s, make_plan, m: int, batch: int) -> None:
    _check(s, make_plan(m), batch)


def test_plain_index_workers_equal_the_reference() -> None:
    for seed in range(6):
        _check(random_stream(500 + seed), hash_plan(2), batch=5, index="grid")


def test_take_keeps_the_chosen_records_of_every_column() -> None:
    s = random_stream(3, n_events=120, junk=False, window="none")
    blocks = [b for b in objects_as_blocks(_events(s)) if type(b).__name__ == "PubBlock" and len(b) > 3]
    assert blocks
    import numpy as np
    b = blocks[0]
    idx = np.array([0, 2, len(b) - 1])
    assert list(take(b, idx)) == [b[i] for i in idx.tolist()]


def test_chunks_cut_blocks_and_keep_order() -> None:
    s = random_stream(4, n_events=200, junk=False, window="none")
    items = objects_as_blocks(_events(s))
    from skpubsub.io.events import events_of
    for size in (1, 3, 7, 64, 1000):
        parts = list(chunks(items, size))
        assert events_of([it for p in parts for it in p]) == events_of(items)
        assert all(len(events_of(p)) <= size for p in parts)


def test_router_sends_objects_only_where_a_subscription_may_take_them() -> None:
    from skpubsub.core.config import Window
    from skpubsub.io.events import Pub, Sub, Unsub, events_of
    r = Router(skewed_plan(2), Window.parse("none"))  # all on worker 1: worker 0 gets nothing
    a = Sub(1, "a", 0, "range", ("x",), rect=(0.0, 0.0, 1.0, 1.0))
    b = Sub(2, "b", 0, "knn", ("y", "z"), match_all=True, x=0.0, y=0.0, k=1)  # posted under one of y, z
    o, p, q = Pub(3, "o", 1, 0.5, 0.5, ("x",)), Pub(4, "p", 1, 0.5, 0.5, ("w",)), Pub(5, "q", 1, 0., 0., ("y", "z"))
    shares, pos, n = r.route([a, b, o, p, q])
    assert n == 5 and not shares[0] and len(pos[0]) == 0
    assert [ev.id for ev in events_of(shares[1])] == ["a", "b", "o", "q"] and pos[1].tolist() == [0, 1, 2, 4]
    shares, pos, n = r.route([Unsub(6, "a", 2), Pub(7, "o2", 3, 0.5, 0.5, ("x",))])
    assert [ev.id for ev in events_of(shares[1])] == ["a"], "no subscription holds x any more"


@pytest.mark.parametrize("window", ["none", "count:40", "time:25"])
@pytest.mark.parametrize("partitioner", ["dkm", "ps2", "location", "prefix"])
def test_run_with_workers_writes_the_single_engines_files(tmp_path: Path, window: str, partitioner: str) -> None:
    s = random_stream(77, n_events=400, window=window, junk=True)
    src = tmp_path / "events.jsonl"
    src.write_text(s.to_jsonl())
    one, many = tmp_path / "one", tmp_path / "many"
    run(src, one, window=window, space=s.space)
    run(src, many, window=window, space=s.space, workers=2, partitioner=partitioner, processes=False,
        init_objects=10, batch_size=37)
    for name in ("notifications.jsonl", "results.jsonl", "rejected.jsonl"):
        assert (many / name).read_bytes() == (one / name).read_bytes(), name


@pytest.mark.slow
def test_run_with_worker_processes_writes_the_single_engines_files(tmp_path: Path) -> None:
    for window in ("none", "time:25"):
        s = random_stream(78, n_events=600, window=window, junk=True)
        src = tmp_path / "events.jsonl"
        src.write_text(s.to_jsonl())
        one, many = tmp_path / f"one-{window[:4]}", tmp_path / f"many-{window[:4]}"
        run(src, one, window=window, space=s.space)
        m = run(src, many, window=window, space=s.space, workers=3, partitioner="dkm", init_objects=10,
                batch_size=50, apart=window == "none")  # (read apart: the kernels warmed before the fork)
        for name in ("notifications.jsonl", "results.jsonl", "rejected.jsonl"):
            assert (many / name).read_bytes() == (one / name).read_bytes(), name
        assert m["workers"] == 3 and len(m["batches"][0]["worker_cpu_seconds"]) == 3


@pytest.mark.parametrize("window", ["count:300", "time:1000"])
def test_runs_of_subscriptions_against_a_full_window(tmp_path: Path, window: str) -> None:
    """A filled window, then a long run of kNN and top-k subscriptions (registered at once,
    their initial results found in bulk and notified as columns), then objects: the fleet's
    files equal the single engine's."""
    import json
    import random

    rng = random.Random(5)
    words = [f"w{i}" for i in range(12)]
    lines = []
    for i in range(300):
        lines.append({"op": "pub", "id": f"o{i}", "t": i, "x": rng.uniform(0, 10), "y": rng.uniform(0, 10),
                      "keywords": rng.sample(words, 3)})
    for i in range(120):
        sub = {"op": "sub", "id": f"s{i}", "t": 300, "x": rng.uniform(0, 10), "y": rng.uniform(0, 10),
               "k": rng.randint(1, 6), "keywords": rng.sample(words, rng.randint(1, 3))}
        sub.update({"kind": "topk", "alpha": 0.5} if i % 3 == 0 else {"kind": "knn", "match": rng.choice(("all", "any"))})
        lines.append(sub)
    for i in range(300, 500):
        lines.append({"op": "pub", "id": f"o{i}", "t": i + 1, "x": rng.uniform(0, 10), "y": rng.uniform(0, 10),
                      "keywords": rng.sample(words, 3)})
    src = tmp_path / "events.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in lines))
    one, many = tmp_path / "one", tmp_path / "many"
    run(src, one, window=window)
    run(src, many, window=window, workers=2, partitioner="hash", processes=False, init_objects=1000)
    for name in ("notifications.jsonl", "results.jsonl"):
        assert (many / name).read_bytes() == (one / name).read_bytes(), name
    assert (one / "notifications.jsonl").read_text().count('"added"') > 100
