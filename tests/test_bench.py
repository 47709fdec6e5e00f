"""`skpubsub bench`: the benchmark suite end to end (tiny workloads, JSON, PNG plots, errors)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from skpubsub.bench.compare import by_index, order_indexes
from skpubsub.bench.inputs import phases, warm_end, warmup_events
from skpubsub.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

INDEX_KEYS = {
    "build_seconds_median", "build_seconds_runs", "bytes_per_subscription_build", "bytes_per_subscription_end",
    "memory_bytes_build", "memory_bytes_end", "arrivals_objects_per_second_median",
    "arrivals_objects_per_second_runs", "ratio_to_baseline", "expired", "expiries_objects_per_second_median",
    "expiries_objects_per_second_runs", "notifications", "candidates_per_object", "affected_per_object",
    "same_results_as_baseline", "same_notifications_as_baseline",
}
TOP_KEYS = {"workload", "events", "objects", "initial_subscriptions", "window", "repeat", "baseline",
            "machine", "notes", "indexes"}

EVENTS = [
    {"op": "sub", "id": "s1", "t": 0, "kind": "knn", "x": 2.35, "y": 48.85, "k": 2, "keywords": ["cafe", "wifi"]},
    {"op": "sub", "id": "s2", "t": 0, "kind": "range", "rect": [2.2, 48.8, 2.5, 48.9], "keywords": ["concert"]},
    {"op": "sub", "id": "s3", "t": 0, "kind": "topk", "x": 2.35, "y": 48.85, "k": 2, "alpha": 0.3,
     "keywords": ["jazz", "bar"]},
    {"op": "sub", "id": "s4", "t": 0, "kind": "knn", "x": 2.3, "y": 48.8, "k": 1, "keywords": ["bar", "concert"],
     "match": "all"},
    {"op": "pub", "id": "o1", "t": 1, "x": 2.34, "y": 48.86, "text": "Late jazz at the corner cafe"},
    {"op": "pub", "id": "o2", "t": 2, "x": 2.3, "y": 48.85, "keywords": ["concert", "bar"]},
    {"op": "pub", "id": "o3", "t": 3, "x": 2.36, "y": 48.85, "keywords": ["wifi"]},
    {"op": "unsub", "id": "s1", "t": 4},
    {"op": "pub", "id": "o4", "t": 5, "x": 2.31, "y": 48.81, "keywords": ["bar", "concert", "cafe"]},
    {"op": "pub", "id": "o5", "t": 6, "x": 2.3, "y": 48.8, "keywords": ["bar", "jazz"]},
    {"op": "pub", "id": "o6", "t": 7, "x": 2.33, "y": 48.84, "keywords": ["cafe"]},
]


STABLE_KEYS = {"index", "objects_per_second", "build_seconds", "notifications", "candidates_per_object",
               "memory_bytes"}


def _read(path) -> dict:
    """A bench JSON (the stable shape: ``indexes`` a list of rows led by STABLE_KEYS), with
    its indexes by name as the in-process report has them."""
    rep = json.loads(Path(path).read_text())
    assert isinstance(rep["indexes"], list)
    for row in rep["indexes"]:
        assert STABLE_KEYS <= row.keys()
        assert row["objects_per_second"] == row["arrivals_objects_per_second_median"]
    rep["indexes"] = by_index(rep)
    return rep


def _check_report(rep: dict, indexes: list[str]) -> None:
    assert TOP_KEYS <= rep.keys()
    assert list(rep["indexes"]) == indexes
    assert rep["baseline"] == indexes[0]
    assert {"cpu_count", "python", "numpy", "numba", "timestamp"} <= rep["machine"].keys()
    for ix, r in rep["indexes"].items():
        assert INDEX_KEYS <= r.keys(), ix
        assert r["ratio_to_baseline"] > 0, ix
        assert r["arrivals_objects_per_second_median"] > 0, ix
        assert len(r["arrivals_objects_per_second_runs"]) == rep["repeat"]
        assert r["build_seconds_median"] >= 0
        assert r["same_results_as_baseline"] is True, ix
        assert r["same_notifications_as_baseline"] is True, ix
        if ix != "reference":
            assert r["bytes_per_subscription_build"] > 0, ix
    assert rep["indexes"][indexes[0]]["ratio_to_baseline"] == 1.0


def _check_pngs(out: Path) -> None:
    for name in ("throughput.png", "memory.png"):
        data = (out / name).read_bytes()
        assert data[:8] == PNG_MAGIC, name
        assert len(data) > 1000, name


def test_generated_workload(tmp_path, capsys):
    out = tmp_path / "bench"
    code = main(["bench", "--dataset", "geonames-cities", "--subscriptions", "200", "--objects", "400",
                 "--indexes", "reference,grid,dkm", "--repeat", "2", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "same results" in printed and "reference" in printed and "dkm" in printed
    rep = _read(out / "bench.json")
    _check_report(rep, ["reference", "grid", "dkm"])
    assert rep["workload"]["dataset"] == "geonames-cities"
    assert rep["workload"]["subscriptions"] == 200
    assert rep["workload"]["sub_rate"] == 0 and rep["workload"]["unsub_rate"] == 0  # no churn by default
    assert rep["initial_subscriptions"] == 200 and rep["objects"] == 400
    for r in rep["indexes"].values():  # window none: nothing expires
        assert r["expiries_objects_per_second_median"] is None
    _check_pngs(out)


def test_events_file_with_window(tmp_path, capsys):
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps(e) + "\n" for e in EVENTS) + "not json\n")
    out = tmp_path / "out"
    extra = tmp_path / "more" / "report.json"
    code = main(["bench", str(events), "--indexes", "reference,grid,dkm", "--window", "count:2",
                 "--repeat", "2", "--out", str(out), "--json", str(extra)])
    assert code == 0
    assert extra.read_text() == (out / "bench.json").read_text()  # --json: the same report
    rep = _read(out / "bench.json")
    _check_report(rep, ["reference", "grid", "dkm"])
    assert rep["workload"] == {"events_file": str(events)}
    assert rep["rejected"] == 1 and rep["objects"] == 6 and rep["initial_subscriptions"] == 4
    for r in rep["indexes"].values():
        assert r["expired"] in (None, 4)  # count:2 over 6 objects
        eps = r["expiries_objects_per_second_median"]
        assert eps is None or eps > 0
    _check_pngs(out)


def test_max_events_and_baseline(tmp_path, capsys):
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps(e) + "\n" for e in EVENTS))
    code = main(["bench", str(events), "--indexes", "dkm", "--repeat", "1", "--max-events", "8",
                 "--no-warmup", "--json", str(tmp_path / "r.json")])
    assert code == 0
    printed = capsys.readouterr().out
    rep = _read(tmp_path / "r.json")
    assert list(rep["indexes"]) == ["grid", "dkm"]  # the plain grid is always measured
    assert rep["events"] == 8 and "--max-events" in printed
    _check_report(rep, ["grid", "dkm"])

    code = main(["bench", str(events), "--indexes", "grid,dkm", "--baseline", "dkm", "--repeat", "1",
                 "--no-warmup", "--json", str(tmp_path / "b.json")])
    assert code == 0
    rep = _read(tmp_path / "b.json")
    _check_report(rep, ["dkm", "grid"])
    assert not (tmp_path / "throughput.png").exists()  # plots only with --out


def test_baseline_none_runs_only_the_named_indexes_and_warmup_objects_are_untimed(tmp_path):
    events = tmp_path / "e.jsonl"
    events.write_text("".join(json.dumps(e) + "\n" for e in EVENTS))
    code = main(["bench", str(events), "--indexes", "dkm,aoiq", "--baseline", "none", "--warmup-objects", "2",
                 "--repeat", "1", "--no-warmup", "--json", str(tmp_path / "n.json")])
    assert code == 0
    raw = json.loads((tmp_path / "n.json").read_text())
    assert [r["index"] for r in raw["indexes"]] == ["dkm", "aoiq"]  # no plain grid added
    rep = _read(tmp_path / "n.json")
    assert rep["baseline"] == "none" and rep["warmup_objects"] == 2
    for r in rep["indexes"].values():
        assert r["ratio_to_baseline"] is None
        assert r["same_results_as_baseline"] and r["same_notifications_as_baseline"]  # with each other
        assert r["cold_fill_seconds_median"] > 0
    # 6 objects, 2 of them the cold fill: the arrivals count 4 objects (5 events, an unsub among them)
    assert rep["objects"] == 6
    assert main(["bench", str(events), "--indexes", "dkm", "--baseline", "none", "--baseline-events", "5"]) == 2


def test_warm_end_is_after_the_nth_object_past_the_build():
    from skpubsub.io.events import Pub, Unsub
    evs = ["s", "s", Pub(3, "o1", 1, 0, 0, ("a",)), Unsub(4, "s", 2), Pub(5, "o2", 3, 0, 0, ("a",))]
    assert warm_end(evs, 2, 0) == 2
    assert warm_end(evs, 2, 1) == 3
    assert warm_end(evs, 2, 2) == 5
    assert warm_end(evs, 2, 9) == 5


def test_unknown_index(capsys):
    assert main(["bench", "--dataset", "geonames-cities", "--indexes", "grid,nope"]) == 2
    assert "unknown index" in capsys.readouterr().err
    assert main(["bench", "--indexes", "grid", "--baseline", "nope"]) == 2
    assert "unknown index" in capsys.readouterr().err


def test_bad_flags(tmp_path, capsys):
    assert main(["bench", str(tmp_path / "missing.jsonl")]) == 2
    assert "no such events file" in capsys.readouterr().err
    assert main(["bench", "--repeat", "0"]) == 2
    assert "--repeat" in capsys.readouterr().err


def test_order_indexes_and_warmup():
    assert order_indexes(["grid", "dkm"], None) == (["grid", "dkm"], [])
    order, notes = order_indexes(["dkm", "gi2", "dkm"], None)
    assert order == ["grid", "dkm", "gi2"] and notes
    assert order_indexes(["reference", "grid", "dkm"], "dkm")[0] == ["dkm", "reference", "grid"]

    from skpubsub.io.validate import Gate

    gate = Gate()
    evs = [gate.admit(e) for e in EVENTS]
    build = 4
    warm = warmup_events(evs, build, n=4)  # 2 subs, then 2 arrivals (the unsub of s1 kept only if s1 is in)
    assert [e.id for e in warm] == ["s1", "s2", "o1", "o2"]
    warm = warmup_events(evs, build, n=10)
    assert [e.id for e in warm] == ["s1", "s2", "s3", "s4", "o1", "o2", "o3", "s1", "o4"]
    warm = warmup_events(evs[1:], build - 1, n=20)  # s1 never subscribed: its unsub is dropped
    assert "s1" not in [e.id for e in warm]


def test_fill_window_phases(tmp_path, capsys):
    """The papers' shape: the window's fill, the registration and the arrivals timed apart."""
    assert phases([]) == (0, 0)
    out = tmp_path / "bench"
    code = main(["bench", "--dataset", "geonames-cities", "--subscriptions", "150", "--objects", "300",
                 "--fill-window", "500", "--kind", "knn", "--window", "count:500", "--indexes", "reference,grid",
                 "--repeat", "1", "--no-warmup", "--out", str(out)])
    assert code == 0
    assert "500 objects filling the window + 150 initial subscriptions" in capsys.readouterr().out
    rep = _read(out / "bench.json")
    assert rep["fill_objects"] == 500 and rep["build_events"] == 650 and rep["objects"] == 800
    for r in rep["indexes"].values():
        assert r["window_fill_seconds_median"] > 0 and r["build_cpu_us_per_subscription_median"] > 0
        assert r["same_results_as_baseline"] and r["same_notifications_as_baseline"]


def test_engine_never_imports_matplotlib():
    code = ("import sys, skpubsub.cli, skpubsub.engine.engine, skpubsub.bench.compare; "
            "sys.exit('matplotlib' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.mark.parametrize("window", ["time:2"])
def test_time_window(tmp_path, window):
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps(e) + "\n" for e in EVENTS))
    assert main(["bench", str(events), "--indexes", "reference,dkm", "--window", window, "--repeat", "1",
                 "--no-warmup", "--json", str(tmp_path / "t.json")]) == 0
    rep = _read(tmp_path / "t.json")
    _check_report(rep, ["reference", "dkm"])


def test_index_variants_with_parameters(tmp_path, capsys):
    """NAME[key=value,...]: two settings of one index side by side, parameters reaching it."""
    from skpubsub.bench.compare import split_spec

    assert split_spec("dkm[refresh_from=1e12,max_cells=8,kmax=1.5]") == (
        "dkm", {"refresh_from": 1e12, "max_cells": 8, "kmax": 1.5})
    assert split_spec("grid") == ("grid", {})
    assert split_spec("aoiq[batch=true,prefix=False]") == ("aoiq", {"batch": True, "prefix": False})
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps(e) + "\n" for e in EVENTS))
    code = main(["bench", str(events), "--indexes", "grid;dkm[max_cells=1];dkm[max_cells=64]", "--repeat", "1",
                 "--no-warmup", "--json", str(tmp_path / "r.json")])
    assert code == 0
    rep = _read(tmp_path / "r.json")
    assert list(rep["indexes"]) == ["grid", "dkm[max_cells=1]", "dkm[max_cells=64]"]
    for r in rep["indexes"].values():
        assert r["same_results_as_baseline"] and r["same_notifications_as_baseline"]
    assert main(["bench", str(events), "--indexes", "grid;nope[a=1]"]) == 2
    assert main(["bench", str(events), "--indexes", "grid;dkm[a]"]) == 2


def test_baseline_events(tmp_path, capsys):
    """--baseline-events: the baseline runs a prefix; every index runs it too (ratio, exactness)
    and the whole stream (its own figures)."""
    events = tmp_path / "events.jsonl"
    events.write_text("".join(json.dumps(e) + "\n" for e in EVENTS))
    code = main(["bench", str(events), "--indexes", "grid;dkm;dkm[max_cells=1]", "--window", "count:2",
                 "--baseline-events", "6", "--repeat", "2", "--no-warmup", "--out", str(tmp_path / "b")])
    assert code == 0
    printed = capsys.readouterr().out
    rep = _read(tmp_path / "b" / "bench.json")
    assert rep["baseline_events"] == 6 and "first 6 events" in printed
    _check_report(rep, ["grid", "dkm", "dkm[max_cells=1]"])
    assert rep["indexes"]["grid"]["notifications"] < rep["indexes"]["dkm"]["notifications"]  # a prefix
    for ix in ("dkm", "dkm[max_cells=1]"):
        r = rep["indexes"][ix]
        assert r["baseline_events_objects_per_second_median"] > 0
        assert r["expired"] == 4  # the whole stream: 6 objects, window count:2
        assert r["same_as_first_run"]
    assert not any("differ" in n for n in rep["notes"])
    _check_pngs(tmp_path / "b")

    # A prefix as long as the stream is the plain run; one holding no object is an error.
    assert main(["bench", str(events), "--indexes", "grid,dkm", "--baseline-events", "99", "--repeat", "1",
                 "--no-warmup", "--json", str(tmp_path / "w.json")]) == 0
    assert json.loads((tmp_path / "w.json").read_text())["baseline_events"] is None
    capsys.readouterr()
    assert main(["bench", str(events), "--indexes", "grid,dkm", "--baseline-events", "4", "--no-warmup"]) == 2
    assert "leaves the baseline no objects" in capsys.readouterr().err
    assert main(["bench", str(events), "--baseline-events", "0"]) == 2
    assert "--baseline-events" in capsys.readouterr().err


def test_bench_gate_admits_what_run_admits(tmp_path):
    """``skpubsub bench gate``: the Gate alone; its counts are ``run``'s on the same file
    (junk lines, every kind of event, a window)."""
    from skpubsub.testing.streams import random_stream

    lines = []
    for seed in range(40):
        lines += [json.dumps(r) if isinstance(r, dict) else str(r) for r in random_stream(seed).events]
    lines[5:5] = ["not json", "{\"op\": \"sub\"", ""]
    ev = tmp_path / "ev.jsonl"
    ev.write_text("\n".join(lines) + "\n")
    out = tmp_path / "r.json"
    assert main(["bench", "gate", str(ev), "--window", "count:7", "--repeat", "2", "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert len(rep["cpu_s"]) == 2 and rep["lines"] == len(lines)
    assert main(["run", str(ev), "--window", "count:7", "--out", str(tmp_path / "run")]) == 0
    m = json.loads((tmp_path / "run" / "metrics.json").read_text())
    want = {**m["accepted"], **{f"rejected {k}": v for k, v in m["rejected"].items()}}
    got = {k: v for k, v in rep["counts"].items() if k != "blocks as columns"}
    assert got == want and m["rejected"] and len(m["accepted"]) >= 4
    assert main(["bench", "gate", str(tmp_path / "none.jsonl")]) == 2
