"""Issue 18, class 6: the Spark runtime against a hostile checkpoint and careless use.

* nothing in a checkpoint is unpickled: a planted ``stats.pkl`` (or a sequencer ``*.pkl``)
  is refused with a reason and its code never runs; the statistics are a data file
  whose damage or foreign format is refused;
* outputs are tied to their checkpoint: removing ``_checkpoint`` (as the refusal message
  says) and running again gives the reference's files, not the old run's batches joined;
* the source finds the end of its input without holding the lines;
* ``--lines-per-batch 0`` is a usage error.

Only one test starts Spark (shared session, xdist group "spark").
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from skpubsub.core.config import Space, Window
from skpubsub.partition.stats import Statistics
from skpubsub.runtime.runner import run
from skpubsub.spark.statefile import Refused, read_stats, write_stats
from skpubsub.testing.streams import random_stream


class _Boom:
    """Unpickling this runs code: it writes the marker file."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (Path(self.marker), "pwned"))


def _events(tmp_path: Path, seed: int = 3):
    s = random_stream(seed, n_events=(60, 80), windows=("count",))
    p = tmp_path / "events.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in s.events))
    return s, p


@pytest.mark.parametrize("planted", ["stats.pkl", "sequencer/12.pkl", "sequencer/0.pkl"])
def test_a_planted_pickle_in_the_checkpoint_is_refused_and_never_loaded(tmp_path: Path, planted: str) -> None:
    from skpubsub.spark.pipeline import _prepare

    _, events = _events(tmp_path)
    ck = tmp_path / "ck"
    (ck / planted).parent.mkdir(parents=True)
    marker = tmp_path / "marker"
    (ck / planted).write_bytes(pickle.dumps(_Boom(str(marker))))
    config = {"window": "count:5", "space": str(Space()), "workers": 2, "partitioner": "hash", "init_objects": 5}
    with pytest.raises(ValueError, match="pickles are never loaded"):
        _prepare(None, events, ck, config, "dkm", {}, Window.parse("count:5"), Space())
    assert not marker.exists()


def test_statistics_file_is_data_and_refuses_damage(tmp_path: Path) -> None:
    st = Statistics(space=Space(0, 0, 10, 10), grid=8)
    for i in range(30):
        st.add(i % 10, (i * 7) % 10, (f"k{i % 4}", "all"))
    path = tmp_path / "stats.json"
    write_stats(path, st)
    back = read_stats(path)
    assert (back.n, back.keyword_freq, back.keyword_cells, back.sample_x, back.sample_y, back.sample_kw,
            back.cell_count.tolist(), back.space, back.grid) == \
        (st.n, st.keyword_freq, st.keyword_cells, st.sample_x, st.sample_y, st.sample_kw,
         st.cell_count.tolist(), st.space, st.grid)
    raw = path.read_bytes()
    head, body = raw.split(b"\n", 1)
    for bad, why in [(raw[:-3], "damaged"), (head + b"\n" + body.replace(b'"n":30', b'"n":31'), "damaged"),
                     (pickle.dumps(st), "not a skpubsub-spark-statistics file"),
                     (head.replace(b'"version": 1', b'"version": 9') + b"\n" + body, "version 9"),
                     (b"", "not a")]:
        path.write_bytes(bad)
        with pytest.raises(Refused, match=why):
            read_stats(path)
    forged = json.loads(body)
    forged["cell_count"] = forged["cell_count"][:-1]
    from skpubsub.spark.statefile import STATS_FORMAT, STATS_VERSION, write_state
    write_state(path, STATS_FORMAT, STATS_VERSION, forged)
    with pytest.raises(Refused, match="grid"):
        read_stats(path)


def test_the_source_finds_its_end_without_holding_lines(tmp_path: Path) -> None:
    from skpubsub.spark.source import _read

    _, events = _events(tmp_path)
    start = {"file": "", "pos": 0, "line": 0, "final": False}
    lines, end = _read(events, start, None)
    nothing, same = _read(events, start, None, keep=False)
    assert nothing == [] and same == end and end["line"] == len(lines) > 0
    part, mid = _read(events, start, 10, keep=False)
    assert part == [] and mid["line"] == 10
    assert _read(events, mid, None)[0] == lines[10:]


def test_nonsense_flags_are_usage_errors(tmp_path: Path) -> None:
    from skpubsub.spark.pipeline import check_flags, run_spark

    _, events = _events(tmp_path)
    for bad in ({"lines_per_batch": 0}, {"workers": 0}, {"lines_per_second": 0.0}, {"init_objects": -1}):
        with pytest.raises(ValueError, match="must be"):
            run_spark(events, tmp_path / "out", **bad)  # before any Spark session starts
    check_flags(1, 1)
    r = subprocess.run([sys.executable, "-m", "skpubsub", "run", str(events), "--out", str(tmp_path / "o"),
                        "--engine", "spark", "--lines-per-batch", "0"], capture_output=True, text=True)
    assert r.returncode != 0 and r.stderr.strip().splitlines() == [
        "skpubsub: error: --lines-per-batch must be an integer >= 1, got 0"], r.stderr
    assert not (tmp_path / "o" / "notifications.jsonl").exists()


def test_a_jvm_that_cannot_start_is_one_line_with_its_reason(tmp_path: Path) -> None:
    """The driver JVM writes to a log, not on our stderr (session._launch): when it cannot
    start, its own words come in our one line."""
    import os

    _, events = _events(tmp_path)
    r = subprocess.run([sys.executable, "-m", "skpubsub", "run", str(events), "--out", str(tmp_path / "o"),
                        "--engine", "spark"], capture_output=True, text=True,
                       env={**os.environ, "SKPUBSUB_DRIVER_MEMORY": "6gx", "SKPUBSUB_VERBOSE": "0"})
    assert r.returncode == 1 and r.stderr.splitlines() == [
        "skpubsub: error: Spark did not start: [JAVA_GATEWAY_EXITED] Java gateway process exited before sending "
        "its port number; the JVM said: Invalid maximum heap size: -Xmx6gx; Error: Could not create the Java "
        "Virtual Machine."], r.stderr


@pytest.mark.slow
@pytest.mark.xdist_group("spark")
def test_removed_checkpoint_never_joins_old_batches(tmp_path: Path) -> None:
    """Run, remove ``OUT/_checkpoint`` (what the refusal message tells a user to do), run
    again with other flags: the outputs are the new run's alone, equal to the reference."""
    from skpubsub.spark.pipeline import run_spark
    from skpubsub.spark.session import spark_session

    spark = spark_session("local[2]", workers=2)
    s, events = _events(tmp_path, seed=11)
    out = tmp_path / "out"
    run_spark(events, out, window="count:5", space=s.space, workers=2, spark=spark, init_objects=5,
              lines_per_batch=30)  # batches 0-2; the new run has batch 0 only: an old one joined would show
    with pytest.raises(ValueError, match="belongs to another run"):  # the Spark tests' one check of the refusal
        run_spark(events, out, window="count:3", space=s.space, workers=2, spark=spark, init_objects=5)
    import shutil
    shutil.rmtree(out / "_checkpoint")
    run_spark(events, out, window="count:3", space=s.space, workers=2, spark=spark, init_objects=5,
              lines_per_batch=100)
    ref = tmp_path / "ref"
    run(events, ref, window="count:3", space=s.space, index="reference")
    for f in ("notifications.jsonl", "rejected.jsonl"):
        assert (out / f).read_text() == (ref / f).read_text(), f
    key = lambda line: json.dumps(json.loads(line)["id"])  # noqa: E731
    assert sorted((out / "results.jsonl").read_text().splitlines(), key=key) == \
        sorted((ref / "results.jsonl").read_text().splitlines(), key=key)
    assert len(list((out / "batches").iterdir())) == 1  # the old run's folder is gone
    assert Counter(p.suffix for p in (out / "_checkpoint").rglob("*.pkl")) == Counter()


@pytest.mark.slow
@pytest.mark.xdist_group("spark")
def test_a_failing_task_is_one_line_and_the_rerun_resumes(tmp_path: Path) -> None:
    """A worker task fails for a real reason (its output folder replaced by a regular file
    after the first batch: root cannot write through that): ``skpubsub run --engine spark``
    prints one line naming the Python cause, exits 1, leaves the checkpoint; with the folder
    put back the same command resumes and the files equal the local engine's."""
    import os
    import time

    from skpubsub.cli import main
    from skpubsub.spark.session import spark_session

    spark = spark_session("local[2]", workers=2)  # the rerun's (shared); the failing run has its own JVM
    s, events = _events(tmp_path, seed=11)
    out = tmp_path / "out"
    args = ["run", str(events), "--out", str(out), "--engine", "spark", "--workers", "2", "--master", "local[2]",
            "--window", "count:5", "--space", str(s.space), "--init-objects", "5",
            "--lines-per-batch", "25"]  # 69 lines, 3 batches: the second fails, the rerun does two
    p = subprocess.Popen([sys.executable, "-m", "skpubsub", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env={**os.environ, "SKPUBSUB_PROGRESS": "0"})
    deadline = time.monotonic() + 600
    first: list[Path] = []
    while not first and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
        first = list(out.glob("batches/*/batch-*.json"))
    assert first, p.communicate(timeout=60)[1][-3000:]
    folder = first[0].parent
    folder.rename(folder.with_name(folder.name + ".aside"))
    folder.write_text("not a folder\n")
    _, err = p.communicate(timeout=600)
    lines = err.splitlines()  # the JVM's own lines (its module warning too) go to its log: session._launch
    assert p.returncode == 1 and len(lines) == 1, err[-5000:]
    assert lines[0].startswith(f"skpubsub: error: Spark run failed: FileExistsError: [Errno 17] File exists: "
                               f"'{folder}'; the checkpoint {out / '_checkpoint'} keeps"), lines
    for trace in ("Traceback", "py4j", "Py4J", "at org.apache", "ERROR", "Exception"):
        assert trace not in err, err[-5000:]
    assert not (out / "notifications.jsonl").exists()
    assert list((out / "_checkpoint" / "query" / "commits").iterdir())  # batches done are kept

    folder.unlink()  # the cause fixed: the same command resumes from the checkpoint
    folder.with_name(folder.name + ".aside").rename(folder)
    assert main(args) == 0
    assert spark.sparkContext._jsc is not None  # the shared session was used, not stopped
    ref = tmp_path / "ref"
    run(events, ref, window="count:5", space=s.space, index="reference")
    for f in ("notifications.jsonl", "rejected.jsonl"):
        assert (out / f).read_text() == (ref / f).read_text(), f
    key = lambda line: json.dumps(json.loads(line)["id"])  # noqa: E731
    assert sorted((out / "results.jsonl").read_text().splitlines(), key=key) == \
        sorted((ref / "results.jsonl").read_text().splitlines(), key=key)
