"""``run``'s input read and judged in a second process (``runtime.feeder``): the same files
as when the run reads it itself, on hostile streams; an error reading, or the reading
process's death, is one line; the process never outlives the run."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import signal
from pathlib import Path

import pytest

from skpubsub.core.config import Space, Window
from skpubsub.io.events import events_of
from skpubsub.io.lexicon import Words
from skpubsub.runtime.failure import RunFailure
from skpubsub.runtime.feeder import judged
from skpubsub.runtime.runner import run
from skpubsub.testing.streams import random_stream
from test_hardening_fuzz import _mutate  # noqa: E402

OUTPUTS = ("results.jsonl", "notifications.jsonl", "rejected.jsonl")
TIMES = ("wall_seconds", "engine_seconds", "objects_per_second")


def _hostile_file(path: Path, seed: int, copies: int) -> Path:
    """A seeded stream with mutated lines (rejections between accepted runs), its records
    written ``copies`` times with fresh ids, so that the file spans many of the reader's
    blocks (``io.lines``: 512 KB each) and so many messages; a clean run of subscriptions
    before them and of objects after, which the Gate judges as blocks of columns."""
    st = random_stream(seed, n_events=(150, 200), junk=False, window="count:40")
    rng = random.Random(seed)
    with open(path, "wb") as f:
        for i in range(12_000):
            line = b'{"op":"sub","id":"r%d","t":0,"kind":"range","rect":[%d,-1,%d,1],"keywords":["q%d"]}\n'
            f.write(line % (i, i % 170 - 85, i % 170 - 84, i % 50))
        t = max((r["t"] for r in st.events if _num(r.get("t"))), default=0) + 1
        for c in range(copies):  # each copy later than the one before (time order: SPEC 2)
            for rec in st.events:
                rec = dict(rec, id=f"{rec['id']}~{c}") if "id" in rec else dict(rec)
                for k in ("t", "expires"):
                    if _num(rec.get(k)):
                        rec[k] += c * t
                line = json.dumps(rec).encode()
                for out in (_mutate(rng, line) if rng.random() < 0.05 else [line]):
                    f.write((out if _same_time(out, rec) else line) + b"\n")
        for i in range(12_000):
            line = b'{"op":"pub","id":"p%d","t":%d,"x":%d.5,"y":0,"keywords":["a","q%d"]}\n'
            f.write(line % (i, copies * t + i, i % 170 - 85, i % 50))
    return path


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _same_time(line: bytes, rec: dict) -> bool:
    """Is a mutated line's time, if it has a valid one, the record's (a mutation to a huge
    time would turn every later line into a rejection for time order)?"""
    if len(line) > 1 << 20:
        return True  # over-long: rejected unread
    try:
        got = json.loads(line)
    except ValueError:
        return True
    return not (isinstance(got, dict) and _num(got.get("t"))) or got["t"] == rec.get("t")


def _events(item: tuple) -> tuple:
    """An item as comparable values: a block as the events it holds."""
    out, label, pos = item
    return events_of([out]) if label else list(out), label, pos


def _outputs(out: Path) -> dict:
    got = {name: (out / name).read_bytes() for name in OUTPUTS}
    got["metrics"] = {k: v for k, v in json.loads((out / "metrics.json").read_text()).items() if k not in TIMES}
    return got


@pytest.mark.parametrize("seed", [3, 11])
def test_apart_gives_the_files_of_the_run_reading_itself(tmp_path: Path, seed: int) -> None:
    src = _hostile_file(tmp_path / "e.jsonl", seed, copies=25)
    assert src.stat().st_size > 4 * (1 << 19)
    run(src, tmp_path / "here", window="count:40", apart=False)
    run(src, tmp_path / "apart", window="count:40", apart=True)
    here, apart = _outputs(tmp_path / "here"), _outputs(tmp_path / "apart")
    assert here["rejected.jsonl"] and here["notifications.jsonl"]  # the stream tests both
    assert apart == here
    assert not mp.active_children()


def test_the_items_are_the_gates_in_either_process(tmp_path: Path) -> None:
    src = _hostile_file(tmp_path / "e.jsonl", 5, copies=20)
    w, sp = Window.parse("count:40"), Space()
    here = list(judged(src, w, sp, apart=False))
    apart = list(judged(src, w, sp, apart=True))
    assert len(here) > 2 and any(label for _, label, _ in here) and any(label is None for _, label, _ in here)
    assert [_events(i) for i in apart] == [_events(i) for i in here]
    assert any(type(out.keywords) is Words for out, label, _ in apart if label == "sub:range")  # coded in the child


def test_the_childs_new_lexicons_read_right(tmp_path: Path, monkeypatch) -> None:
    """Subscription blocks' keywords coded in the child, read through the run's mirror of
    its lexicon, while the child starts a new lexicon every few blocks (``LEX_MAX``)."""
    src = tmp_path / "subs.jsonl"
    with open(src, "wb") as f:
        for i in range(40_000):
            f.write(b'{"op":"sub","id":"s%d","t":%d,"kind":"knn","x":0,"y":0,"k":2,"keywords":["w%d","v%d"]}\n'
                    % (i, i // 100, i % 30_000, i % 7))
    w, sp = Window.parse("none"), Space()
    here = list(judged(src, w, sp, apart=False))
    monkeypatch.setattr("skpubsub.io.validate.LEX_MAX", 10_000)
    apart = list(judged(src, w, sp, apart=True))
    assert [_events(i) for i in apart] == [_events(i) for i in here]
    gens = [out.keywords.lex.gen for out, _, _ in apart]
    assert len(apart) > 4 and gens == sorted(gens) and 1 < len(set(gens)) < len(gens)
    pos = [i[2] for i in here]  # the offsets read so far, for the progress bar
    assert pos == sorted(pos) and pos[-1] == src.stat().st_size


def test_an_input_that_cannot_be_read_is_the_same_error(tmp_path: Path) -> None:
    for apart in (False, True):
        with pytest.raises(IsADirectoryError):
            list(judged(tmp_path, Window.parse("none"), Space(), apart=apart))
    assert not mp.active_children()


def test_the_reading_process_killed_is_one_line(tmp_path: Path) -> None:
    src = _hostile_file(tmp_path / "e.jsonl", 7, copies=60)
    items = judged(src, Window.parse("count:40"), Space(), apart=True)
    next(items)  # the child is a few blocks ahead (the pipe holds ~1 MB) of the file's ~40
    (child,) = mp.active_children()
    os.kill(child.pid, signal.SIGKILL)
    with pytest.raises(RunFailure, match=r"^the process reading .* ended unexpectedly \(exit code -9\)$"):
        for _ in items:
            pass
    assert not mp.active_children()


def test_a_run_left_early_ends_the_reading_process(tmp_path: Path) -> None:
    src = _hostile_file(tmp_path / "e.jsonl", 7, copies=60)
    items = judged(src, Window.parse("count:40"), Space(), apart=True)
    next(items)
    assert len(mp.active_children()) == 1
    items.close()
    assert not mp.active_children()
