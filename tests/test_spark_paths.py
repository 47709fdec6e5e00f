"""Issue 21 item 2: the Spark runtime on any Hadoop file system, no pathlib on URLs.

Input, output and checkpoint given as ``file:`` URLs (a space in the path, the checkpoint
on a second mount point, /dev/shm) give the reference's files; the non-local branch
(``pyarrow.fs``) is driven on its in-memory mock file system; an ``hdfs:`` URL keeps its
two slashes all the way to the checkpoint location Spark is given.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import pytest

from skpubsub.runtime.runner import run
from skpubsub.spark.fs import Loc
from skpubsub.testing.streams import random_stream


def test_urls_keep_their_scheme_and_slashes() -> None:
    ck = Loc("hdfs://nn:8020/ckpt")
    assert (ck / "query").uri == "hdfs://nn:8020/ckpt/query"  # pathlib made it hdfs:/nn:8020/ckpt/query
    assert (Loc("s3a://bucket/out") / "batches" / "r").uri == "s3a://bucket/out/batches/r"
    local = Loc("file:///tmp/a b/out")  # as Hadoop takes it: no percent-encoding
    assert local.local and local.path == "/tmp/a b/out" and (local / "x").uri == "file:///tmp/a b/out/x"
    assert Loc("file:/tmp/x").path == "/tmp/x" and Loc("/tmp/y").uri == "file:///tmp/y"
    with pytest.raises(ValueError, match="names no host"):
        Loc("file://host/x")


def test_outputs_and_state_files_on_a_non_local_file_system() -> None:
    """The pyarrow branch: part files, batch records, the assembled outputs and a state
    file on mock://."""
    import pandas as pd

    from skpubsub.spark.codec import pack_notes
    from skpubsub.spark.sink import assemble, batch_dir, clear_other_runs, record_batch, write_parts
    from skpubsub.spark.source import _read
    from skpubsub.spark.statefile import Refused, read_state, write_state
    from skpubsub.spark.worker import COLUMNS

    root = Loc("mock:///r")
    root.mkdir()
    out = root / "out"

    def batch(run: str, b: int, rows: dict[int, list[tuple]]) -> None:
        meta = [r for w, rs in rows.items() for r in write_parts(batch_dir(out, run), b, w, rs)]
        record_batch(out, b, pd.DataFrame(meta, columns=COLUMNS), run=run)

    def notes(w: int, lines: list[str], seqs: list[int], regs: list[int]) -> tuple:
        return (w, "notes", len(lines), 0, "\n".join(lines), pack_notes(seqs, regs, [True] * len(lines)))

    batch("R", 0, {0: [notes(0, ["b", "a"], [2, 1], [0, 0])], 1: [notes(1, ["b2"], [2, 1], [1, 1])[:2]
                                                                  + (1, 0, "b2", pack_notes([2], [1], [True]))]})
    batch("R", 1, {0: [notes(0, ["c"], [3], [0]), (0, "result", 0, 5, "r1", None)],
                   -1: [(-1, "rejected", 7, 0, "x", None)]})
    batch("OLD", 0, {0: [notes(0, ["old"], [1], [0])]})
    clear_other_runs(out, "R")
    info = assemble(out, "R")
    assert (out / "notifications.jsonl").read_text() == "a\nb\nb2\nc\n"
    assert (out / "rejected.jsonl").read_text() == "x\n" and (out / "results.jsonl").read_text() == "r1\n"
    assert [b["batch"] for b in info["batches"]] == [0, 1] and not (out / "batches" / "OLD").exists()
    assert [b["notifications"] for b in info["batches"]] == [3, 1]
    write_state(root / "s.json", "fmt", 1, {"k": [1, 2]})
    assert read_state(root / "s.json", "fmt", 1) == {"k": [1, 2]}
    with pytest.raises(Refused, match="version"):
        read_state(root / "s.json", "fmt", 2)
    (root / "in").mkdir()
    (root / "in" / "a.jsonl").write_atomic(b"1\n2\n")
    (root / "in" / "b.jsonl").write_atomic(b"3")
    assert _read(root / "in", {"file": "", "pos": 0, "line": 0, "final": False}, None)[0] == [
        (1, b"1"), (2, b"2"), (3, b"3")]


@pytest.mark.slow
@pytest.mark.xdist_group("spark")
def test_file_urls_and_a_second_mount_point(tmp_path: Path) -> None:
    from skpubsub.cli import main

    s = random_stream(31, n_events=(120, 160), windows=("count",))
    d = tmp_path / "in put"  # a space in a URL
    d.mkdir()
    events = d / "events.jsonl"
    events.write_text("".join(json.dumps(r) + "\n" for r in s.events))
    run(events, tmp_path / "ref", window=s.window, space=s.space, index="reference")
    shm = Path("/dev/shm")
    ck = (shm if shm.is_dir() and os.access(shm, os.W_OK) else tmp_path) / f"skpubsub-ck-{uuid.uuid4().hex}"
    out = tmp_path / "out put"
    try:
        args = ["run", f"file://{events}", "--engine", "spark", "--out", f"file://{out}", "--checkpoint", f"file:{ck}",
                "--workers", "2", "--partitioner", "hash", "--init-objects", "5", "--lines-per-batch", "75",
                "--window", str(s.window), "--master", "local[2]"]
        if s.space:
            args += ["--space", str(s.space)]
        assert main(args) == 0
        for f in ("results.jsonl", "notifications.jsonl", "rejected.jsonl"):
            assert (out / f).read_text() == (tmp_path / "ref" / f).read_text(), f
        assert (ck / "query").is_dir() and (ck / "run.json").is_file()  # the checkpoint went where it was told
        assert not Path("file:").exists() and not (Path.cwd() / "file:").exists()
        assert main(args) == 0  # a rerun resumes from the URL checkpoint: same files
        assert (out / "notifications.jsonl").read_text() == (tmp_path / "ref" / "notifications.jsonl").read_text()
    finally:
        shutil.rmtree(ck, ignore_errors=True)
