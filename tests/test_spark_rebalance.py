"""Rebalancing on the Spark runtime (issue 21 item 5): the sequencer's migrations across a
micro-batch boundary keep every output exact, and a restarted sequencer makes them again.

The first tests drive the Spark pieces in process (sequencer -> routed payloads as data ->
worker states -> part lines -> the sink's merge), no Spark session: every window, GR and
DP, global repartitioning, and a restart in the middle. The Spark tests run the real query.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from spark_inprocess import apply_batch, reference_files

from skpubsub.core.config import Window
from skpubsub.partition.common import AssignedPlan
from skpubsub.partition.registry import PLANNERS
from skpubsub.spark.codec import decode_export
from skpubsub.spark.sequencer import Sequencer
from skpubsub.spark.sink import merge_results
from skpubsub.spark.worker import WorkerState
from skpubsub.testing.streams import random_stream


@pytest.fixture
def skewed(monkeypatch):
    """Planners putting every subscription on the last worker: ``skewed`` always,
    ``skewed-kop`` at first only (a later global repartitioning plans by kop)."""
    calls = []

    def skew(subs, stats, m):
        return AssignedPlan(m, "skewed", {}, {}, new_rule=lambda sub, p: ((m - 1,), 1.0))

    def then_kop(subs, stats, m):
        calls.append(1)
        return skew(subs, stats, m) if len(calls) == 1 else PLANNERS["kop"](subs, stats, m)

    monkeypatch.setitem(PLANNERS, "skewed", skew)
    monkeypatch.setitem(PLANNERS, "skewed-kop", then_kop)
    return "skewed"


class InProcess:
    """The Spark runtime's protocol without Spark: what the source, the worker tasks and the
    sink do with each micro-batch, including the exports between batches and the loads."""

    def __init__(self, s, m: int, rebalance: dict, partitioner: str, lines_per_batch: int) -> None:
        self.window, self.space = Window.parse(s.window), s.space_or_default
        self.lines = [(i, json.dumps(r).encode()) for i, r in enumerate(s.events, 1)]
        self.m, self.b, self.partitioner, self.rebalance = m, lines_per_batch, partitioner, rebalance
        self.workers = [WorkerState(w, self.window, self.space, "dkm", {}) for w in range(m)]
        self.exports: dict[tuple[int, int], bytes] = {}
        self.records: dict[int, dict] = {}  # the source's rebalancing records, by start line
        self.loads: dict[int, list[float]] = {}  # the sink's loads files, by end line
        self.notes: list[bytes] = []
        self.results: list[bytes] = []
        self.seqr = self.fresh()

    def fresh(self) -> Sequencer:
        q = Sequencer(self.window, self.space, self.m, self.partitioner, 5, None, rebalance=self.rebalance)
        q.read_export = lambda tag, w: decode_export(self.exports[tag, w], self.window, self.space)
        return q

    def refeed(self, upto: int) -> None:
        """A restart: a fresh sequencer re-fed along the recorded boundaries and loads."""
        q, at = self.fresh(), 0
        while at < upto:
            rec = self.records[at]
            q.feed(self.lines[at:rec["end"]], loads=rec["loads"], tag=rec["end"], keep=False)
            assert q.migrated == rec["migrated"]
            at = rec["end"]
        self.seqr = q

    def batch(self, start: int) -> int:
        end = min(start + self.b, len(self.lines))
        final = end == len(self.lines)
        loads = self.loads.get(start)
        rows = self.seqr.feed(self.lines[start:end], end=final, loads=loads, tag=end)
        self.records[start] = {"end": end, "loads": loads, "migrated": self.seqr.migrated}
        notes, results, load = apply_batch(self.workers, rows, self.window, self.space, self.exports)
        self.notes += notes
        self.results += results
        self.loads[end] = load
        return end

    def run(self, restart_at: int | None = None) -> tuple[list[bytes], list[bytes]]:
        at = 0
        while at < len(self.lines):
            if restart_at is not None and at >= restart_at:
                self.refeed(at)
                restart_at = None
            at = self.batch(at)
        return self.notes, list(merge_results(self.results)) if self.results else []


@pytest.mark.parametrize("algorithm", ["gr", "dp"])
def test_migrations_across_batch_boundaries_are_exact(skewed: str, algorithm: str) -> None:
    """Every subscription starts on one worker; the sequencer migrates between batches
    (``none``: exported by one worker, adopted by the other in the next batch); the merged
    outputs equal the reference engine's, under every window."""
    moved, windows = 0, set()
    for seed in range(24):
        s = random_stream(seed * 7 + 3, n_events=(80, 160))
        rb = {"sigma": 1.1, "period": 1, "p": 3, "grid": 4, "algorithm": algorithm, "measure": "model"}
        ip = InProcess(s, 3, rb, skewed, lines_per_batch=7)
        assert ip.run() == reference_files(s), (s.seed, s.window)
        moved += ip.seqr.migrated
        windows.add(Window.parse(s.window).kind)
    assert moved > 100 and len(windows) == 3


def test_a_restarted_sequencer_makes_the_same_migrations(skewed: str) -> None:
    """A restart mid-stream: the sequencer is rebuilt by re-feeding the input along the
    recorded batch boundaries with the recorded (measured CPU) loads; the migrations come out
    the same (checked at each boundary) and so do the outputs."""
    restarted = 0
    for seed in range(16):
        s = random_stream(seed * 11 + 5, n_events=(100, 160))
        rb = {"sigma": 1.05, "period": 1, "p": 3, "grid": 4, "algorithm": "gr", "measure": "cpu"}
        ip = InProcess(s, 2, rb, skewed, lines_per_batch=9)
        cut = 9 * random.Random(seed).randint(3, max(3, len(s.events) // 9 - 1))
        assert ip.run(restart_at=cut) == reference_files(s), (s.seed, s.window)
        restarted += ip.records.get(cut, {}).get("migrated", 0) > 0
    assert restarted > 5  # restarts after migrations had happened


def test_global_repartitioning_on_the_sequencer_is_exact(skewed: str) -> None:
    kinds = set()
    for seed in range(10):
        s = random_stream(seed * 3 + 2, n_events=(100, 160), windows=("count", "none"))
        rb = {"sigma": 100.0, "period": 50, "global_period": 3, "drain": 0.6, "grid": 4, "measure": "model"}
        ip = InProcess(s, 3, rb, "skewed-kop", lines_per_batch=8)
        assert ip.run() == reference_files(s), (s.seed, s.window)
        kinds |= {r.get("global") for r in ip.seqr.rebalancer.log}
    assert {"replanned", "drained"} <= kinds


def test_the_cli_hands_rebalance_to_the_spark_engine(tmp_path: Path, monkeypatch) -> None:
    """``run --engine spark --rebalance`` was silently ignored (nothing reached run_spark)."""
    from skpubsub.cli import main
    from skpubsub.spark import pipeline

    got: dict = {}

    class Stop(Exception):
        pass

    def fake(*args, **kw):
        got.update(kw)
        raise Stop

    monkeypatch.setattr(pipeline, "run_spark", fake)
    events = tmp_path / "e.jsonl"
    events.write_text('{"op": "pub", "id": "o", "t": 0, "x": 0, "y": 0, "keywords": ["a"]}\n')
    with pytest.raises(Stop):
        main(["run", str(events), "--out", str(tmp_path / "o"), "--engine", "spark", "--workers", "2",
              "--rebalance", "--sigma", "1.3", "--rebalance-period", "2", "--migration", "dp", "--global-period", "5"])
    assert got["rebalance"] == {"sigma": 1.3, "period": 2, "algorithm": "dp", "global_period": 5}
    got.clear()
    with pytest.raises(Stop):
        main(["run", str(events), "--out", str(tmp_path / "o"), "--engine", "spark", "--workers", "2"])
    assert got["rebalance"] is None


# -- on Spark ------------------------------------------------------------------------------
def _patch_workload(path: Path, seed: int = 1, n_init: int = 60, n_subs: int = 30, n_objs: int = 240) -> Path:
    """O_init spread over the world, then subscriptions and most objects in one 60 x 40
    degree patch: the ``location`` planner puts every subscription on one worker."""
    rng = random.Random(seed)
    kws = ["a", "b", "c", "d", "e", "f"]
    out, t = [], 0

    def obj(i: int, x: float, y: float) -> dict:
        return {"op": "pub", "id": f"o{i}", "t": t, "x": x, "y": y, "keywords": rng.sample(kws, rng.randint(1, 3))}

    out += [obj(i, rng.uniform(-180, 180), rng.uniform(-90, 90)) for i in range(n_init)]
    j = n_init
    for s in range(n_subs):
        t += 1
        kind = rng.choice(["knn", "knn", "topk", "range"])
        rec = {"op": "sub", "id": f"s{s}", "t": t, "kind": kind, "keywords": rng.sample(kws, rng.randint(1, 2)),
               "match": rng.choice(["any", "all"])}
        cx, cy = rng.uniform(0, 60), rng.uniform(0, 40)
        if kind == "range":
            rec["rect"] = [cx - 3, cy - 3, cx + 3, cy + 3]
        else:
            rec["x"], rec["y"], rec["k"] = cx, cy, 3
        out.append(rec)
        for _ in range(n_objs // n_subs):
            t += 1
            inside = rng.random() < 0.8
            out.append(obj(j, rng.uniform(0, 60) if inside else rng.uniform(-180, 180),
                           rng.uniform(0, 40) if inside else rng.uniform(-90, 90)))
            j += 1
    path.write_text("".join(json.dumps(r) + "\n" for r in out))
    return path


def _files(out: Path) -> dict[str, str]:
    return {f: (out / f).read_text() for f in ("results.jsonl", "notifications.jsonl", "rejected.jsonl")}


@pytest.fixture(scope="module")
def spark():
    from skpubsub.spark.session import spark_session

    return spark_session("local[2]", workers=2)


def _forget_after(out: Path, batch: int) -> None:
    """As if the run had been killed once ``batch`` was committed: every later batch's
    offsets, commit, outputs, loads, exports and rebalancing records are gone."""
    ckpt = out / "_checkpoint"
    (run,) = (out / "batches").iterdir()
    info = json.loads((run / f"batch-{batch:010d}.json").read_text())
    line = max(x["end_line"] for x in info["source"])
    for log in ("offsets", "commits"):
        for p in (ckpt / "query" / log).iterdir():
            if p.name.isdigit() and int(p.name) > batch:
                p.unlink()
    for p in run.iterdir():
        kind, _, rest = p.name.partition("-")
        n = int(rest.split("-")[0].split(".")[0]) if rest[:1].isdigit() else -1
        if (kind in ("batch", "notes", "results", "rejected") and n > batch) or \
                (kind in ("loads", "export") and n > line):
            p.unlink()
    for p in (ckpt / "sequencer" / "rebalance").iterdir():
        if int(p.stem) >= line:
            p.unlink()
    for f in ("results.jsonl", "notifications.jsonl", "rejected.jsonl", "metrics.json"):
        (out / f).unlink()


@pytest.mark.slow
@pytest.mark.xdist_group("spark")
def test_rebalancing_on_spark_is_exact_and_survives_a_restart_mid_migration(spark, tmp_path: Path) -> None:
    """A real Spark run with rebalancing (window none: exports between batches) on a workload
    the planner puts on one worker: migrations happen (metrics), the files equal the
    reference engine's; then the run is cut back to the batch that exported the first
    migration's results (its adoption not yet run) and resumed: the restarted sequencer
    re-feeds along its records, adopts from the export, decides again from new loads, and
    the files are still the reference's."""
    from skpubsub.spark.pipeline import run_spark

    events = _patch_workload(tmp_path / "events.jsonl")  # 330 lines: 4 batches
    ref = tmp_path / "reference"
    from skpubsub.runtime.runner import run

    run(events, ref, window="none", index="reference")
    want = _files(ref)
    out = tmp_path / "spark"
    kw = {"window": "none", "workers": 2, "partitioner": "location", "init_objects": 60, "lines_per_batch": 90,
          "spark": spark, "rebalance": {"sigma": 1.2, "period": 1}}
    m = run_spark(events, out, **kw)
    assert _files(out) == want
    assert m["migrated_subscriptions"] > 0 and m["adjustments"], m.get("adjustments")
    (run_dir,) = (out / "batches").iterdir()
    infos = [json.loads(p.read_text()) for p in sorted(run_dir.glob("batch-*.json"))]
    first = next(b["batch"] for b in infos if any(x.get("migrated") for x in b["source"]))
    assert list(run_dir.glob("export-*.json"))  # the moved results went as files
    assert first < infos[-1]["batch"]
    _forget_after(out, first)
    m2 = run_spark(events, out, **kw)
    assert _files(out) == want
    assert m2["migrated_subscriptions"] > 0
