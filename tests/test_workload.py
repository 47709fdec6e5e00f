"""The workload generator: deterministic, counts as configured, every event valid."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skpubsub.bench import WorkloadConfig, generate, write_jsonl
from skpubsub.datasets import DATASETS, Places, load
from skpubsub.io.events import Rejection
from skpubsub.io.validate import Gate


@pytest.fixture(scope="module")
def places() -> dict[str, Places]:
    return {name: load(name, limit=3000) for name in DATASETS}


def cfg(**kw) -> WorkloadConfig:
    base = dict(objects=1500, subscriptions=200, objects_per_step=50, sub_rate=2.5, unsub_rate=2.0,
                expire_fraction=0.3, lifetime=10, seed=7)
    base.update(kw)
    return WorkloadConfig(**base)


def run(config: WorkloadConfig, places: dict[str, Places]) -> list[dict]:
    return list(generate(config, places[config.dataset]))


def gate_all(events: list[dict]) -> list[Rejection]:
    gate = Gate()
    return [r for r in (gate.admit(ev) for ev in events) if isinstance(r, Rejection)]


@pytest.mark.parametrize("dataset", DATASETS)
def test_deterministic_and_byte_identical(dataset, places, tmp_path):
    c = cfg(dataset=dataset)
    a, b = run(c, places), run(c, places)
    assert a == b
    p1, p2 = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert write_jsonl(generate(c, places[dataset]), p1) == len(a)
    write_jsonl(iter(b), p2)
    assert p1.read_bytes() == p2.read_bytes()
    lines = p1.read_text(encoding="utf-8").splitlines()
    assert lines == [json.dumps(ev, separators=(",", ":")) for ev in a]


def test_seeds_differ(places):
    a = run(cfg(seed=1), places)
    b = run(cfg(seed=2), places)
    assert a != b
    assert [e for e in a if e["op"] == "pub"] != [e for e in b if e["op"] == "pub"]


def test_subscription_parameters_do_not_move_objects(places):
    a = [e for e in run(cfg(kind="knn", sub_rate=0.0), places) if e["op"] == "pub"]
    b = [e for e in run(cfg(kind="range", sub_rate=5.0, kmax=3), places) if e["op"] == "pub"]
    assert a == b


@pytest.mark.parametrize("dataset", DATASETS)
def test_every_event_accepted_by_gate(dataset, places, tmp_path):
    c = cfg(dataset=dataset)
    events = run(c, places)
    assert gate_all(events) == []
    path = tmp_path / "w.jsonl"  # and through the line parser too
    write_jsonl(events, path)
    gate = Gate()
    for n, raw in enumerate(path.read_bytes().split(b"\n")[:-1], 1):
        assert not isinstance(gate.admit_line(raw, n), Rejection)


def test_counts_match_config(places):
    c = cfg()
    events = run(c, places)
    ops = Counter(e["op"] for e in events)
    exp = c.expected()
    assert exp["steps"] == 30
    assert ops["pub"] == exp["pubs"] == 1500
    assert sum(1 for e in events if e["op"] == "sub" and e["t"] == 0) == 200
    assert ops["sub"] == exp["subs"] == 200 + 75
    assert 0 < ops["unsub"] <= exp["unsubs_max"] == 60
    assert [e["id"] for e in events if e["op"] == "pub"] == [f"o{i}" for i in range(1500)]
    sub_ids = [e["id"] for e in events if e["op"] == "sub"]
    assert sub_ids == [f"s{i}" for i in range(len(sub_ids))]
    assert events[:200] == [e for e in events if e["op"] == "sub" and e["t"] == 0]


def test_unsubs_only_of_active_ids(places):
    events = run(cfg(unsub_rate=9.0, sub_rate=1.0, subscriptions=100, expire_fraction=0.5), places)
    active: dict[str, float] = {}
    unsubs = 0
    for e in events:
        if e["op"] == "sub":
            assert e["id"] not in active
            active[e["id"]] = e.get("expires", math.inf)
        elif e["op"] == "unsub":
            assert active.pop(e["id"]) > e["t"]  # active and not yet expired
            unsubs += 1
    assert unsubs > 0
    assert gate_all(events) == []


def test_times_non_decreasing_and_steps(places):
    c = cfg(objects=1234, objects_per_step=100)
    events = run(c, places)
    ts = [e["t"] for e in events]
    assert ts == sorted(ts) and ts[0] == 0
    pubs = [e for e in events if e["op"] == "pub"]
    assert [e["t"] for e in pubs] == [1 + i // 100 for i in range(1234)]
    assert c.steps == 13 and pubs[-1]["t"] == 13
    for e in events:
        if "expires" in e:
            assert e["t"] < e["expires"] <= e["t"] + c.lifetime


@pytest.mark.parametrize("dataset", DATASETS)
def test_fields_in_range(dataset, places):
    c = cfg(dataset=dataset, kmax=7, range_size=0.5, sub_keywords=5, object_keywords=4)
    events = run(c, places)
    by_point: dict[tuple[float, float], set[str]] = {}
    pl = places[dataset]
    for x, y, kws in zip(pl.x.tolist(), pl.y.tolist(), pl.keywords):
        by_point.setdefault((x, y), set()).update(kws)
    kinds = Counter()
    for e in events:
        kws = e.get("keywords")
        if e["op"] == "pub":
            assert 1 <= len(kws) <= 4 and len(set(kws)) == len(kws)
            assert set(kws) <= by_point[(e["x"], e["y"])]
        elif e["op"] == "sub":
            kinds[e["kind"]] += 1
            assert 1 <= len(kws) <= 5 and len(set(kws)) == len(kws)
            if e["kind"] == "range":
                x1, y1, x2, y2 = e["rect"]
                assert x2 - x1 == pytest.approx(0.5) and y2 - y1 == pytest.approx(0.5)
                centre = ((x1 + x2) / 2, (y1 + y2) / 2)
                assert set(kws) <= min(by_point.items(), key=lambda kv: math.dist(kv[0], centre))[1]
            else:
                assert isinstance(e["k"], int) and 1 <= e["k"] <= 7
                assert set(kws) <= by_point[(e["x"], e["y"])]
            if e["kind"] == "topk":
                assert 0 <= e["alpha"] <= 1 and "match" not in e
            else:
                assert e["match"] in ("all", "any")
    assert set(kinds) == {"knn", "topk", "range"}


@pytest.mark.parametrize("kind", ["knn", "topk", "range"])
@pytest.mark.parametrize("match", ["all", "any"])
def test_fixed_kind_and_match(kind, match, places):
    events = run(cfg(kind=kind, match=match, objects=200, subscriptions=60), places)
    subs = [e for e in events if e["op"] == "sub"]
    assert subs and all(e["kind"] == kind for e in subs)
    if kind != "topk":
        assert all(e["match"] == match for e in subs)
    assert gate_all(events) == []


def test_mixes_both_frequent_and_rare_keywords(places):
    events = run(cfg(subscriptions=600, objects=3000, sub_rate=0.0), places)
    freq = Counter(w for e in events if e["op"] == "pub" for w in e["keywords"])
    counts = [freq[w] for e in events if e["op"] == "sub" for w in e["keywords"]]
    assert max(counts) > 100 and min(counts) <= 1


def test_objects_cycle_over_places():
    pl = Places("tiny", np.array([0.0, 1.0, 2.0]), np.array([0.0, 1.0, 2.0]),
                [("a",), ("b", "c"), ("a", "d")])
    c = WorkloadConfig(objects=9, subscriptions=4, objects_per_step=2, sub_rate=0, unsub_rate=0, seed=3)
    events = list(generate(c, pl))
    pubs = [e for e in events if e["op"] == "pub"]
    assert len(pubs) == 9
    assert Counter(e["x"] for e in pubs) == {0.0: 3, 1.0: 3, 2.0: 3}
    for i in range(0, 9, 3):  # each pass is a permutation
        assert sorted(e["x"] for e in pubs[i:i + 3]) == [0.0, 1.0, 2.0]
    assert gate_all(events) == []


def test_no_objects_only_subscriptions(places):
    events = run(cfg(objects=0, subscriptions=10), places)
    assert [e["op"] for e in events] == ["sub"] * 10
    assert gate_all(events) == []


def test_generate_loads_dataset_with_limit():
    c = WorkloadConfig(dataset="geonames-postal", objects=100, subscriptions=10, limit=50)
    events = list(generate(c))
    assert Counter(e["op"] for e in events)["pub"] == 100
    assert gate_all(events) == []


@pytest.mark.parametrize("bad", [
    dict(kind="kNN"), dict(match="some"), dict(dataset="nowhere"), dict(kmax=0), dict(kmax=1001),
    dict(objects=-1), dict(objects_per_step=0), dict(range_size=-1.0), dict(sub_rate=math.nan),
    dict(expire_fraction=1.5), dict(seed=-3), dict(limit=0), dict(objects=2.5), dict(kmax=True),
])
def test_bad_config(bad):
    with pytest.raises(ValueError):
        WorkloadConfig(**bad)


def test_write_jsonl_to_stdout(capsys):
    n = write_jsonl([{"op": "unsub", "id": "s1", "t": 2}, {"op": "unsub", "id": 3, "t": 2.5}], "-")
    assert n == 2
    assert capsys.readouterr().out == '{"op":"unsub","id":"s1","t":2}\n{"op":"unsub","id":3,"t":2.5}\n'


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    objects=st.integers(0, 300), subscriptions=st.integers(0, 40), per_step=st.integers(1, 40),
    sub_rate=st.floats(0, 4), unsub_rate=st.floats(0, 6), expire=st.floats(0, 1),
    lifetime=st.integers(1, 5), kind=st.sampled_from(["knn", "topk", "range", "mix"]),
    match=st.sampled_from(["all", "any", "mix"]), kmax=st.integers(1, 1000),
    range_size=st.floats(0, 400), seed=st.integers(0, 2**32), dataset=st.sampled_from(DATASETS),
)
def test_property_valid_and_deterministic(places, objects, subscriptions, per_step, sub_rate, unsub_rate,
                                          expire, lifetime, kind, match, kmax, range_size, seed, dataset):
    c = WorkloadConfig(dataset=dataset, objects=objects, subscriptions=subscriptions,
                       objects_per_step=per_step, sub_rate=sub_rate, unsub_rate=unsub_rate,
                       expire_fraction=expire, lifetime=lifetime, kind=kind, match=match, kmax=kmax,
                       range_size=range_size, seed=seed)
    events = run(c, places)
    assert events == run(c, places)
    assert gate_all(events) == []
    ops = Counter(e["op"] for e in events)
    exp = c.expected()
    assert ops["pub"] == exp["pubs"] and ops["sub"] == exp["subs"] and ops["unsub"] <= exp["unsubs_max"]


def test_fill_window_shape(places):
    """The papers' shape: the window's objects first, the subscriptions at the last one's time,
    then the streaming objects with churn; objects carry all their place's words near it."""
    c = cfg(fill_window=700, objects=300, subscriptions=150, objects_per_step=50, jitter=0.02)
    events = run(c, places)
    assert gate_all(events) == []
    ops = [e["op"] for e in events]
    assert ops[:700] == ["pub"] * 700 and ops[700:850] == ["sub"] * 150 and ops[850] != "sub"
    pubs = [e for e in events if e["op"] == "pub"]
    assert len(pubs) == c.expected()["pubs"] == 1000
    assert [e["id"] for e in pubs] == [f"o{i}" for i in range(1000)]
    assert [e["t"] for e in pubs[:700]] == [1 + i // 50 for i in range(700)]
    assert {e["t"] for e in events[700:850]} == {14}
    assert [e["t"] for e in pubs[700:]] == [15 + i // 50 for i in range(300)]
    ts = [e["t"] for e in events]
    assert ts == sorted(ts)
    assert any(e["op"] == "unsub" for e in events[850:])
    p = places[c.dataset]
    by_words: dict[tuple, list[int]] = {}
    for i, kws in enumerate(p.keywords):
        by_words.setdefault(tuple(kws), []).append(i)
    moved = 0
    for e in pubs:  # all the words of some place, within the jitter of it
        near = [i for i in by_words[tuple(e["keywords"])]
                if abs(e["x"] - p.x[i]) <= 0.02 + 1e-6 and abs(e["y"] - p.y[i]) <= 0.02 + 1e-6]
        assert near, e
        moved += (e["x"], e["y"]) != (float(p.x[near[0]]), float(p.y[near[0]]))
    assert moved > 900


def test_fill_window_leaves_other_workloads_unchanged(places):
    c = cfg()
    assert run(c, places) == run(WorkloadConfig(**{**c.to_dict(), "jitter": 0.5}), places)
