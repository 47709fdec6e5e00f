"""``Sequencer.feed`` admits lines by blocks (``Gate.admit_block``): the same rows as line by
line. No Spark session: the sequencer alone, on seeded streams with rejections, an over-long
line, unsubscriptions, expiries and the O_init boundary inside a block of objects."""

from __future__ import annotations

import json
import random
import sys

import pytest

from skpubsub.core.config import Space, Window
from skpubsub.spark.codec import decode_driver, decode_items
from skpubsub.spark.sequencer import DRIVER, Sequencer

WORDS = ["a", "b", "c", "d", "e", "f"]


def _stream(rng: random.Random, n: int, window: str) -> list[tuple[int, bytes | None]]:
    """``n`` numbered lines in runs of one op (so that blocks go by columns), some broken."""
    out: list = []
    active: list = []
    t, nid = 0, 0
    while len(out) < n:
        op = rng.choice(["pub", "pub", "range", "knn", "unsub", "bad"])
        for _ in range(rng.choice([1, 2] if op in ("bad", "unsub") else [1, 3, 40, 300, 600])):
            t += rng.choice([0, 0, 1])
            kws = rng.sample(WORDS, rng.randint(1, 3))
            x, y = rng.uniform(-170, 170), rng.uniform(-80, 80)
            if op == "pub":
                rec = {"op": "pub", "id": f"o{len(out)}", "t": t, "x": x, "y": y, "keywords": kws}
            elif op in ("range", "knn"):
                nid += 1
                rec = {"op": "sub", "id": f"s{nid}", "t": t, "kind": op, "keywords": kws,
                       "match": rng.choice(["all", "any"])}
                if op == "range":
                    rec["rect"] = [x, y, x + rng.uniform(0, 30), y + rng.uniform(0, 10)]
                else:
                    rec.update(x=x, y=y, k=rng.randint(1, 4))
                if rng.random() < 0.01:  # an expiry: blocks past it go event by event
                    rec["expires"] = t + rng.randint(0, 20)
                if rng.random() < 0.002 and active:  # an active id again: rejected
                    rec["id"] = rng.choice(active)
                active.append(rec["id"])
            elif op == "unsub":
                sid = rng.choice(active) if active and rng.random() < 0.9 else "nobody"
                rec = {"op": "unsub", "id": sid, "t": t}
                if sid in active:
                    active.remove(sid)
            else:
                rec = None
            if rec is None:
                raw = rng.choice([b"{not json", b"", b'{"op":"pub"}', None, b'{"op":"pub","id":1,"t":-5,"x":0,"y":0,"keywords":["a"]}'])
            else:
                raw = json.dumps(rec).encode()
            out.append((len(out) + 1, raw))
    return out[:n]


def _feed(lines, window: str, init_objects: int, sizes, line_by_line: bool = False):
    seqr = Sequencer(Window.parse(window), Space(), 3, "hash", init_objects=init_objects)
    if line_by_line:  # the old feed: every line through admit_line, event by event
        gate = seqr.gate

        def admit_block(first, raws):
            gate.block_label = None
            return [gate.admit_line(raw, first + i) for i, raw in enumerate(raws)]
        gate.admit_block = admit_block
    rows = []
    i = 0
    for size in sizes:
        rows.append(seqr.feed(lines[i:i + size], end=i + size >= len(lines)))
        i += size
        if i >= len(lines):
            break
    return rows, seqr


@pytest.mark.parametrize("window", ["none", "count:50", "time:30"])
@pytest.mark.parametrize("seed", range(4))
def test_blocks_give_the_rows_of_lines(window, seed):
    rng = random.Random(seed * 7 + len(window))
    lines = _stream(rng, 3000, window)
    lines[rng.randrange(len(lines))] = (lines[0][0], None)  # an over-long line ...
    lines = [(i + 1, raw) for i, (_, raw) in enumerate(lines)]  # ... numbered in place
    # O_init ends after the 1st object, the 2nd, one well inside, or never before the end
    pubs = [n for n, raw in lines if raw and raw.startswith(b'{"op": "pub"')]
    init = rng.choice([0, 1, 2, len(pubs) // 3, len(pubs) + 5])
    sizes = []
    while sum(sizes) < len(lines):
        sizes.append(rng.choice([1, 7, 500, 2500]))

    took, planned_in_block = [], []
    take, plan = Sequencer._take_block, Sequencer._plan

    def spy_take(self, block, label, run, per):
        took.append(len(block))
        return take(self, block, label, run, per)

    def spy_plan(self):
        planned_in_block.append(sys._getframe(1).f_code.co_name == "_take_block")
        return plan(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Sequencer, "_take_block", spy_take)
        mp.setattr(Sequencer, "_plan", spy_plan)
        got, q = _feed(lines, window, init, sizes)
    want, old = _feed(lines, window, init, [1] * len(lines), line_by_line=True)
    assert sum(took) >= 200, sum(took)  # lines went by columns: the test reads the block path
    assert _by_worker(got, window) == _by_worker(want, window)
    assert (q.accepted, q.rejected, q.last, q.lines) == (old.accepted, old.rejected, old.last, old.lines)
    assert q.rejected  # rejections, the over-long line among them
    assert q.metadata() == old.metadata()
    assert len(planned_in_block) == 1


@pytest.mark.parametrize("init", [0, 1, 137, 500, 501])
def test_plan_inside_a_block(init):
    """O_init ends inside a block of objects (or at its first or last, or never before the
    end): the block is cut there, its head buffered and planned, the rest routed."""
    rng = random.Random(init)
    recs = [{"op": "sub", "id": f"s{i}", "t": 0, "kind": "range", "keywords": rng.sample(WORDS, 2),
             "rect": [-10 * (i % 5), -10, 10, 10], "match": "any"} for i in range(60)]
    recs += [{"op": "pub", "id": i, "t": 1 + i // 7, "x": rng.uniform(-20, 20), "y": rng.uniform(-20, 20),
              "keywords": rng.sample(WORDS, 2)} for i in range(500)]
    recs += [{"op": "unsub", "id": f"s{i}", "t": 100} for i in range(0, 60, 7)]
    lines = [(i + 1, json.dumps(r).encode()) for i, r in enumerate(recs)]
    where = []
    plan = Sequencer._plan

    def spy_plan(self):
        where.append(sys._getframe(1).f_code.co_name)
        return plan(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Sequencer, "_plan", spy_plan)
        got, q = _feed(lines, "count:100", init, [10_000])
    want, old = _feed(lines, "count:100", init, [1] * len(lines), line_by_line=True)
    assert where == (["feed"] if init > 500 else ["_take_block"])  # > 500: planned at the end
    assert _by_worker(got, "count:100") == _by_worker(want, "count:100")
    assert q.metadata() == old.metadata() and q.accepted["pub"] == 500 and not q.rejected


def _by_worker(batches, window: str) -> dict[int, list]:
    """Each worker's items (and the driver's entries) over all batches, in order: batches cut
    differently number their rows differently, but every worker gets the same items."""
    out: dict[int, list] = {}
    for rows in batches:
        for wk, _, payload in rows:
            got = (decode_driver(payload) if wk == DRIVER
                   else decode_items(payload, Window.parse(window), Space()))
            out.setdefault(wk, []).extend(got)
    return out


@pytest.mark.parametrize("seed", range(3))
def test_same_batches_same_rows(seed):
    """The same batches fed by blocks and line by line: byte-identical rows, batch by batch."""
    rng = random.Random(100 + seed)
    lines = _stream(rng, 2500, "time:40")
    lines = [(i + 1, raw) for i, (_, raw) in enumerate(lines)]
    lines[1234] = (1235, None)
    sizes = [rng.choice([1, 300, 1500]) for _ in range(len(lines))]
    init = rng.choice([0, 3, 200])
    got, q = _feed(lines, "time:40", init, sizes)
    want, old = _feed(lines, "time:40", init, sizes, line_by_line=True)
    assert got == want
    assert q.rejected and q.metadata() == old.metadata()


def test_numbers_cut_blocks():
    """Lines whose numbers are not consecutive are admitted under their own numbers."""
    rng = random.Random(5)
    lines = _stream(rng, 600, "none")
    lines = [(i * 2 + 1 if i > 300 else i + 1, raw) for i, (_, raw) in enumerate(lines)]
    got, q = _feed(lines, "none", 3, [600])
    want, old = _feed(lines, "none", 3, [600], line_by_line=True)
    assert got == want and q.lines == old.lines == lines[-1][0]


def test_bench_sequencer_command(tmp_path):
    """``skpubsub bench sequencer``: runs the feeds alone and reports the rows' digest."""
    from skpubsub.cli import main

    lines = _stream(random.Random(9), 400, "none")
    ev = tmp_path / "ev.jsonl"
    ev.write_bytes(b"\n".join(raw if raw is not None else b"x" * 10 for _, raw in lines) + b"\n")
    out = tmp_path / "r.json"
    assert main(["bench", "sequencer", str(ev), "--lines-per-batch", "64", "--repeat", "2",
                 "--init-objects", "5", "--json", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert len(rep["cpu_s"]) == 2 and rep["lines"] == 400 and len(rep["rows_sha256"]) == 64
    assert sum(rep["accepted"].values()) + sum(rep["rejected"].values()) == 400
