"""Another number of workers on restart (issue 21 item 5): a Spark checkpoint made with
``--workers M`` resumed with ``--workers M'`` goes on exactly.

The first tests drive the Spark pieces in process (sequencer -> routed payloads as data ->
worker states -> part lines -> the sink's merge, no Spark): the last batch of a generation
of workers exports (``none``), the sequencer re-places every live subscription for the new
workers, which start from seeds; with and without rebalancing, every window, restarts (a
sequencer rebuilt from the input along the generations) and several switches in a row. The
Spark tests run the real query, cut back and resumed with another ``--workers``.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest
from spark_inprocess import apply_batch, reference_files

from skpubsub.core.config import Window
from skpubsub.spark.codec import decode_export
from skpubsub.spark.sequencer import Sequencer
from skpubsub.spark.sink import merge_results
from skpubsub.spark.worker import WorkerState
from skpubsub.testing.streams import random_stream


class Generations:
    """The Spark runtime's protocol without Spark, with the number of workers changed at
    batch boundaries: ``gens`` is ``[(first line, workers), ...]``. ``restart``: each new
    generation's sequencer is a fresh one re-fed from the input (what a restarted source
    does), not the live one switched in place."""

    def __init__(self, s, gens: list[tuple[int, int]], partitioner: str, lines_per_batch: int,
                 rebalance: dict | None = None, restart: bool = False, init_objects: int = 5) -> None:
        self.window, self.space = Window.parse(s.window), s.space_or_default
        self.lines = [(i, json.dumps(r).encode()) for i, r in enumerate(s.events, 1)]
        self.gens, self.partitioner, self.b, self.rebalance = gens, partitioner, lines_per_batch, rebalance
        self.restart, self.init_objects = restart, init_objects
        self.files: dict[tuple[int, int], bytes] = {}  # (tag, worker) -> export (switch tags < 0)
        self.records: dict[int, dict] = {}  # the source's per-batch records, by start line
        self.loads: dict[int, list[float]] = {}
        self.notes: list[bytes] = []
        self.results: list[list[bytes]] = []
        self.switched = 0

    def fresh(self) -> Sequencer:
        q = Sequencer(self.window, self.space, self.gens[0][1], self.partitioner, self.init_objects, None,
                      rebalance=self.rebalance)
        q.read_export = lambda tag, w: decode_export(self.files[tag, w], self.window, self.space)
        return q

    def held(self, gen: int):
        m = self.gens[gen][1]
        return lambda: {k: v for w in range(m) for k, v in decode_export(self.files[-1 - gen, w], self.window,
                                                                          self.space).items()}

    def rebuild(self, gen: int) -> Sequencer:
        """A fresh sequencer at the start of generation ``gen``: the input re-fed along the
        recorded batches, each switch made again (seeds only for the last)."""
        q = self.fresh()
        for k in range(gen + 1):
            lo = self.gens[k][0]
            if k:
                q.switch_rows(k - 1, keep=False)
                q.switch(self.gens[k][1], self.held(k - 1) if k == gen else None)
            hi = self.gens[k + 1][0] if k < gen else lo
            at = lo
            while at < hi:
                rec = self.records[at]
                q.feed(self.lines[at:rec["end"]], loads=rec["loads"], tag=rec["end"], keep=False)
                assert q.migrated == rec["migrated"]
                at = rec["end"]
        return q

    def apply(self, rows, m: int) -> list[float]:
        assert m == len(self.workers), (m, len(self.workers))
        notes, results, load = apply_batch(self.workers, rows, self.window, self.space, self.files)
        self.notes += notes
        if results:  # the end's: the last batch with results holds them all
            self.results = results
        return load

    def run(self) -> tuple[list[bytes], list[bytes]]:
        g, at = 0, 0
        q = self.fresh()
        m = self.gens[0][1]
        self.workers = [WorkerState(w, self.window, self.space, "dkm", {}) for w in range(m)]
        while at < len(self.lines):
            if g + 1 < len(self.gens) and at >= self.gens[g + 1][0]:
                assert at == self.gens[g + 1][0]
                self.apply(q.switch_rows(g), m)  # the old generation's last batch: its exports
                g, m = g + 1, self.gens[g + 1][1]
                if self.restart:
                    q = self.rebuild(g)
                else:
                    q.switch(m, self.held(g - 1))
                self.workers = [WorkerState(w, self.window, self.space, "dkm", {}) for w in range(m)]
                self.switched += 1
                continue
            end = min(at + self.b, len(self.lines))
            loads = self.loads.get(at) if at != self.gens[g][0] else None  # a new generation: none yet
            rows = q.feed(self.lines[at:end], end=end == len(self.lines),
                          loads=loads if self.rebalance else None, tag=end)
            self.records[at] = {"end": end, "loads": loads if self.rebalance else None, "migrated": q.migrated}
            self.loads[end] = self.apply(rows, m)
            at = end
        self.seqr = q
        return self.notes, list(merge_results(self.results)) if self.results else []


def _stream(seed: int, **kw):
    return random_stream(seed, n_events=kw.pop("n_events", (100, 180)), **kw)


def _cut(rng: random.Random, n: int, b: int) -> int:
    return b * rng.randint(1, max(1, n // b - 1))


@pytest.mark.parametrize("pair", [(2, 3), (3, 1), (1, 2), (4, 2)])
@pytest.mark.parametrize("restart", [False, True])
def test_another_number_of_workers_continues_exactly(pair: tuple[int, int], restart: bool) -> None:
    """M -> M' at a random batch boundary, every window and several planners: the merged
    outputs equal the reference engine's."""
    windows = set()
    for seed in range(12):
        s = _stream(seed * 13 + pair[0] * 5 + pair[1])
        rng = random.Random(seed)
        b = rng.choice([7, 11, 20])
        part = ["hash", "kop", "location", "ps2"][seed % 4]
        gens = [(0, pair[0]), (_cut(rng, len(s.events), b), pair[1])]
        run = Generations(s, gens, part, b, restart=restart)
        assert run.run() == reference_files(s), (s.seed, s.window, gens, part)
        assert run.switched == 1
        windows.add(Window.parse(s.window).kind)
    assert len(windows) == 3


def test_a_switch_while_o_init_is_still_buffered_and_several_in_a_row() -> None:
    for seed in range(10):
        s = _stream(seed * 7 + 1)
        b = 9
        early = Generations(s, [(0, 2), (b, 3)], "kop", b, restart=True, init_objects=40)
        assert early.run() == reference_files(s), (s.seed, s.window)
        chain = Generations(s, [(0, 2), (2 * b, 3), (4 * b, 1), (4 * b, 2), (7 * b, 4)], "hash", b,
                            restart=bool(seed % 2))
        assert chain.run() == reference_files(s), (s.seed, s.window)
        assert chain.switched == 4


@pytest.fixture
def skewed(monkeypatch):
    from skpubsub.partition.common import AssignedPlan
    from skpubsub.partition.registry import PLANNERS

    def skew(subs, stats, m):
        return AssignedPlan(m, "skewed", {}, {}, new_rule=lambda sub, p: ((m - 1,), 1.0))

    monkeypatch.setitem(PLANNERS, "skewed", skew)
    return "skewed"


@pytest.mark.parametrize("restart", [False, True])
def test_switches_with_rebalancing_and_adoptions_pending(skewed: str, restart: bool) -> None:
    """Rebalancing migrates every batch (``none``: an adoption is due at the start of the
    next batch when the switch comes); the new generation rebalances too."""
    moved = 0
    for seed in range(16):
        s = _stream(seed * 5 + 2)
        rb = {"sigma": 1.05, "period": 1, "p": 3, "grid": 4, "algorithm": "gr", "measure": "model"}
        b = 8
        cut = _cut(random.Random(seed), len(s.events), b)
        run = Generations(s, [(0, 2), (cut, 3)], skewed, b, rebalance=rb, restart=restart)
        assert run.run() == reference_files(s), (s.seed, s.window, cut)
        moved += run.seqr.migrated
    assert moved > 50


# -- on Spark ------------------------------------------------------------------------------
def _workload(path: Path) -> Path:
    """The rebalancing tests' workload (the location planner puts it on one worker), 330 lines
    (with 240, the 2 -> 3 case under none made no migration after the switch)."""
    from test_spark_rebalance import _patch_workload

    return _patch_workload(path)


def _files(out: Path) -> dict[str, str]:
    return {f: (out / f).read_text() for f in ("results.jsonl", "notifications.jsonl", "rejected.jsonl")}


@pytest.fixture(scope="module")
def spark():
    from skpubsub.spark.session import spark_session

    return spark_session("local[2]", workers=2)


def _forget_after(out: Path, batch: int, query: str = "query", base: int = 0, offsets: bool = True) -> None:
    """As if the run had been killed once the run's batch ``batch`` (of the query in folder
    ``query``, whose batch 0 is the run's ``base``) was committed: the later batches' offsets,
    commits, outputs, loads, exports and rebalancing records are gone. ``offsets=False``: the
    next batch's offset stays (killed inside it, after Spark logged it: it is replayed)."""
    ckpt = out / "_checkpoint"
    (run,) = (out / "batches").iterdir()
    info = json.loads((run / f"batch-{batch:010d}.json").read_text())
    line = max(x.get("end_line", x.get("offset", {}).get("line", 0)) for x in info["source"])
    for log in ("offsets", "commits"):
        for p in (ckpt / query / log).iterdir():
            if p.name.isdigit() and base + int(p.name) > batch + (log == "offsets" and not offsets):
                p.unlink()
    for p in run.iterdir():
        kind, _, rest = p.name.partition("-")
        n = int(rest.split("-")[0].split(".")[0]) if rest[:1].isdigit() else -1
        if (kind in ("batch", "notes", "results", "rejected") and n > batch) or \
                (kind in ("loads", "export") and n > line) or (kind == "switch" and query == "query"):
            p.unlink()
    for p in (ckpt / "sequencer" / "rebalance").glob("*.json"):
        if int(p.stem) >= line:
            p.unlink()
    for f in ("results.jsonl", "notifications.jsonl", "rejected.jsonl", "metrics.json"):
        (out / f).unlink(missing_ok=True)


# On Spark, one case a side: more workers under none with rebalancing (the exports, an adoption
# pending), fewer under a retaining window (the seeds from the dispatcher). The other
# combinations (every window, planner and pair, with and without rebalancing) run above in
# process, in seconds: each Spark case costs ~20 s of the suite's serial Spark group.
CASES = [(2, 3, "none", True), (3, 1, "count:40", False)]  # --rebalance needs 2 workers or more


@pytest.mark.slow
@pytest.mark.xdist_group("spark")
@pytest.mark.parametrize("m1,m2,window,rebalance", CASES)
def test_a_checkpoint_resumed_with_another_number_of_workers_is_exact(spark, tmp_path: Path, m1: int, m2: int,
                                                                      window: str, rebalance: bool) -> None:
    """A run with ``--workers m1`` cut back to its second batch (as if killed), resumed with
    ``--workers m2``: the files equal the reference engine's, the metrics count the same
    events, the new generation ran with m2 workers."""
    from skpubsub.runtime.runner import run
    from skpubsub.spark.pipeline import run_spark

    events = _workload(tmp_path / "events.jsonl")
    run(events, tmp_path / "reference", window=window, index="reference")
    want = _files(tmp_path / "reference")
    ref = json.loads((tmp_path / "reference" / "metrics.json").read_text())
    out = tmp_path / "spark"
    kw = {"window": window, "partitioner": "location", "init_objects": 60, "lines_per_batch": 60, "spark": spark,
          "rebalance": {"sigma": 1.2, "period": 1} if rebalance else None}
    run_spark(events, out, workers=m1, **kw)
    assert _files(out) == want
    _forget_after(out, 1)
    m = run_spark(events, out, workers=m2, **kw)
    assert _files(out) == want
    assert (m["accepted"], m["rejected"], m["objects"]) == (ref["accepted"], ref["rejected"], ref["objects"])
    gens = json.loads((out / "_checkpoint" / "generations.json").read_text())
    assert [g["workers"] for g in gens] == [m1, m2] and gens[1]["offset"]["line"] == 120
    assert m["workers"] == m2 and max(len(b["worker_cache"]) for b in m["batches"][3:]) == m2
    assert not (out / "_checkpoint" / "query").exists()  # the old query, once the new one committed
    if rebalance and window == "none":
        assert m["migrated_subscriptions"] > 0


@pytest.mark.slow
@pytest.mark.xdist_group("spark")
def test_a_kill_during_the_switch_resumes_exactly(spark, tmp_path: Path, monkeypatch) -> None:
    """Killed inside the old workers' last batch (its offset logged, no commit; no new
    generation recorded), then killed again inside the new query's first batch: each time the
    same command resumes and the files equal the reference's (window none: the results travel
    as the old workers' exports)."""
    from skpubsub.runtime.runner import run
    from skpubsub.spark import pipeline

    events = _workload(tmp_path / "events.jsonl")
    run(events, tmp_path / "reference", window="none", index="reference")
    want = _files(tmp_path / "reference")
    out, ck = tmp_path / "spark", tmp_path / "spark" / "_checkpoint"
    kw = {"window": "none", "partitioner": "location", "init_objects": 60, "lines_per_batch": 60, "spark": spark}
    pipeline.run_spark(events, out, workers=2, **kw)
    _forget_after(out, 1)
    monkeypatch.setattr(pipeline, "_drop_old_queries", lambda *a: None)  # keep the old query to cut back to
    pipeline.run_spark(events, out, workers=3, **kw)
    assert _files(out) == want
    switch = json.loads((ck / "generations.json").read_text())[1]["batch"] - 1
    assert (ck / "query" / "offsets" / str(switch)).exists()
    # 1. inside the old workers' last batch: its commit, the new generation and all after it gone
    (ck / "generations.json").unlink()
    shutil.rmtree(ck / "query-1")
    _forget_after(out, switch - 1, "query", offsets=False)
    assert (ck / "query" / "offsets" / str(switch)).exists()
    monkeypatch.undo()
    pipeline.run_spark(events, out, workers=3, **kw)
    assert _files(out) == want
    assert not (ck / "query").exists()
    # 2. inside the new query's first batch: its commit gone (the seeds are sent again)
    gens = json.loads((ck / "generations.json").read_text())
    assert gens[1]["batch"] == switch + 1
    _forget_after(out, switch, "query-1", gens[1]["batch"], offsets=False)
    assert (ck / "query-1" / "offsets" / "0").exists() and not (ck / "query-1" / "commits" / "0").exists()
    pipeline.run_spark(events, out, workers=3, **kw)
    assert _files(out) == want
