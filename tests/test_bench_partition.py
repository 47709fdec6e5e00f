"""`skpubsub bench partition`: every planner on one tiny workload (JSON, exactness, PNGs, errors)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skpubsub.bench.partition import head_length
from skpubsub.cli import main
from skpubsub.io.events import Pub, Sub

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PNGS = ("partition_update.png", "partition_loads.png", "partition_map.png")
ALL = ["hash", "kop", "sop", "dkm", "location", "keyword", "prefix", "ps2"]
ROW_KEYS = {
    "planning_seconds", "update_seconds", "balance_seconds", "worker_cpu_seconds", "worker_load_max_over_mean",
    "steady_update_seconds", "steady_balance_seconds", "steady_worker_load_max_over_mean",
    "estimated_loads", "messages_per_object", "replication_ratio", "objects", "wall_seconds",
    "objects_per_second", "batches", "batch_worker_cpu_seconds", "notifications", "results_digest",
    "notifications_digest", "same_results", "plan",
}
TOP_KEYS = {"suite", "workload", "events", "objects", "config", "statistics_seconds", "baseline", "machine",
            "notes", "partitioners"}
FLAGS = ["--workers", "3", "--init-objects", "200", "--batch", "150"]
TINY = ["--dataset", "geonames-cities", "--subscriptions", "300", "--objects", "600", "--kind", "knn",
        "--match", "any", *FLAGS]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Tiny GeoNames workloads written once (loading the dataset is the slow part):
    ``knn`` - 300 kNN subscriptions (match any) then 600 objects; ``mix`` - every kind, with churn."""
    from skpubsub.bench.workload import WorkloadConfig, generate, write_jsonl
    from skpubsub.datasets import load

    d = tmp_path_factory.mktemp("bench-partition")
    places = load("geonames-cities")
    cfgs = {"knn": WorkloadConfig(objects=600, subscriptions=300, kind="knn", match="any", sub_rate=0,
                                  unsub_rate=0, seed=1),
            "mix": WorkloadConfig(objects=300, subscriptions=120, kind="mix", match="mix", sub_rate=1,
                                  unsub_rate=1, objects_per_step=10, seed=2)}
    out = {}
    for name, cfg in cfgs.items():
        out[name] = d / f"{name}.jsonl"
        write_jsonl(generate(cfg, places), out[name])
    return out


def _check(rep: dict, names: list[str], m: int) -> None:
    assert TOP_KEYS <= rep.keys()
    assert list(rep["partitioners"]) == names
    assert rep["baseline"] == names[0]
    assert rep["config"]["workers"] == m and rep["config"]["partitioners"] == names
    assert {"cpu_count", "python", "numpy", "numba", "timestamp"} <= rep["machine"].keys()
    for name, r in rep["partitioners"].items():
        assert ROW_KEYS <= r.keys(), name
        assert r["same_results"] is True, name
        assert r["worker_load_max_over_mean"] >= 1.0, name
        assert r["steady_worker_load_max_over_mean"] >= 1.0, name
        assert 0 < r["messages_per_object"] <= m, name
        assert r["replication_ratio"] >= 1.0, name
        assert len(r["worker_cpu_seconds"]) == m, name
        assert r["update_seconds"] >= r["steady_update_seconds"] >= 0, name
        assert r["update_seconds"] >= r["balance_seconds"] >= 0, name
        # update time is the per-batch slowest worker: at least the busiest worker over the run / batches
        assert r["update_seconds"] >= max(r["worker_cpu_seconds"]) - 1e-3, name
        assert r["objects"] == rep["objects"] and r["objects_per_second"] > 0, name
        assert r["batches"] == len(r["batch_worker_cpu_seconds"]) == -(-rep["events"] // rep["config"]["batch"])
        assert r["plan"]["partitioner"] == name
        assert r["planning_seconds"] >= 0


def _check_pngs(out: Path) -> None:
    for name in PNGS:
        data = (out / name).read_bytes()
        assert data[:8] == PNG_MAGIC, name
        assert len(data) > 2000, name


def test_every_planner_in_process(files, tmp_path, capsys):
    out = tmp_path / "bp"
    code = main(["bench", "partition", str(files["knn"]), *FLAGS, "--no-processes", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    for name in ALL:
        assert name in printed
    assert "same results" in printed and "NO" not in printed
    rep = json.loads((out / "partition.json").read_text())
    _check(rep, ALL, 3)
    assert rep["config"]["processes"] is False
    assert rep["workload"] == {"events_file": str(files["knn"])}
    assert rep["config"]["o_init_objects"] == 200 and rep["config"]["planned_subscriptions"] == 300
    # the plans that have rectangles carry them for the map
    assert rep["partitioners"]["location"]["plan"]["leaves"]
    assert rep["partitioners"]["sop"]["plan"]["subsets"]
    _check_pngs(out)


def test_churn_window_and_alias(files, tmp_path, capsys):
    out = tmp_path / "bp"
    code = main(["bench-partition", str(files["mix"]), "--partitioners", "prefix,hash,location,prefix",
                 "--workers", "2", "--init-objects", "100", "--batch", "97", "--no-processes",
                 "--window", "count:150", "--out", str(out)])
    assert code == 0
    rep = json.loads((out / "partition.json").read_text())
    _check(rep, ["prefix", "hash", "location"], 2)  # duplicates dropped, order kept
    assert rep["config"]["window"] == "count:150"
    assert rep["unsubs"] > 0
    _check_pngs(out)


def test_no_out_prints_table_only(files, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(["bench", "partition", str(files["knn"]), *FLAGS, "--partitioners", "dkm,kop",
                 "--no-processes", "--no-warmup"])
    assert code == 0
    assert "dkm" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, msg", [
    (["--partitioners", "hash,bogus"], "unknown partitioner 'bogus'"),
    (["--partitioners", "kd-tree"], "unknown partitioner 'kd-tree'"),
    (["--partitioners", ","], "at least one partitioner"),
    (["--workers", "0"], "--workers must be >= 1"),
    (["--batch", "0"], "--batch must be >= 1"),
    (["--index", "nope"], "nope"),
])
def test_bad_flags_exit_2(argv, msg, capsys):
    assert main(["bench", "partition", *TINY, "--no-processes", *argv]) == 2
    err = capsys.readouterr().err
    assert msg in err
    if "partitioner" in msg and "at least" not in msg:
        assert "unknown partitioner" in err and "known: hash" in err


def test_missing_events_file(tmp_path, capsys):
    assert main(["bench", "partition", str(tmp_path / "none.jsonl")]) == 2
    assert "no such events file" in capsys.readouterr().err


def test_index_mode_unchanged(files, tmp_path):
    """`skpubsub bench` without `partition` is still the index benchmark."""
    out = tmp_path / "b"
    assert main(["bench", str(files["mix"]), "--indexes", "grid", "--repeat", "1", "--no-warmup",
                 "--out", str(out)]) == 0
    assert (out / "bench.json").is_file() and not (out / "partition.json").exists()


def test_head_length():
    subs = [Sub(seq=i, id=f"s{i}", t=0, kind="knn", keywords=("a",), k=1) for i in range(1, 4)]
    pubs = [Pub(seq=i, id=f"o{i}", t=1, x=0.0, y=0.0, keywords=("a",)) for i in range(4, 8)]
    evs = subs + pubs
    assert head_length(evs, 1) == 4
    assert head_length(evs, 3) == 6
    assert head_length(evs, 99) == len(evs)


@pytest.mark.slow
def test_generated_workload_real_processes(tmp_path, capsys):
    out = tmp_path / "bp"
    code = main(["bench", "partition", *TINY, "--partitioners", "hash,dkm", "--processes", "--out", str(out)])
    assert code == 0
    rep = json.loads((out / "partition.json").read_text())
    _check(rep, ["hash", "dkm"], 3)
    assert rep["config"]["processes"] is True
    assert rep["workload"]["dataset"] == "geonames-cities" and rep["workload"]["subscriptions"] == 300
    _check_pngs(out)
