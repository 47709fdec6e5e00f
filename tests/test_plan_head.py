"""The plan from the head's columns (``runner.plan_head``: the reader's blocks as they are,
no event a record) is the plan from its events (``active_subs(events_of(head))``), for
every planner, and the statistics of its objects are ``Statistics.from_objects``'."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from skpubsub.core.config import Space, Window
from skpubsub.io import lines
from skpubsub.io.events import Pub, Sub, events_of
from skpubsub.partition.registry import PLANNERS
from skpubsub.partition.stats import Statistics
from skpubsub.runtime.feeder import judged
from skpubsub.runtime.runner import active_subs, plan_head


def _stream(seed: int, path: Path) -> None:
    """Runs of subscriptions (long enough for the reader's blocks), a few alone among objects,
    then objects; some seeds with an ``unsub`` or an id twice (the events' way)."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(rng.choice((8, 40, 300)))]
    kinds = (["knn"], ["range"], ["knn", "range", "topk"], ["topk", "range", "knn"])[seed % 4]
    lines, t = [], 0

    def sub(i: int, kind: str) -> dict:
        r = {"op": "sub", "id": f"s{i}", "t": t, "kind": kind, "keywords": rng.sample(words, rng.randint(1, 4))}
        if kind == "range":
            x, y = rng.uniform(-60, 60), rng.uniform(-40, 40)
            r["rect"] = [x, y, x + rng.uniform(0, 20), y + rng.uniform(0, 20)]
        else:
            r.update(x=rng.uniform(-60, 60), y=rng.uniform(-40, 40), k=rng.randint(1, 8))
        if kind == "topk":
            r["alpha"] = rng.choice((0.0, 0.3, 0.9))
            if rng.random() < 0.3:
                r["weights"] = [rng.uniform(0.1, 3) for _ in r["keywords"]]
        elif rng.random() < 0.5:
            r["match"] = rng.choice(("all", "any"))
        return r

    def pub(i: int) -> dict:
        x, y = (180, -90) if i == 3 else (rng.uniform(-60, 60), rng.uniform(-40, 40))  # (a corner: the last cell)
        return {"op": "pub", "id": f"o{i}", "t": t, "x": x, "y": y,
                "keywords": rng.sample(words, rng.randint(1, 5))}

    n = rng.choice((900, 2000))  # runs of one kind: the reader's blocks
    for i in range(n):
        lines.append(sub(i, kinds[i * len(kinds) // n]))
    if seed % 3 == 1:
        lines.append({"op": "unsub", "id": "s3", "t": t})
    if seed % 3 == 2:
        lines.append(sub(5, kinds[0]))  # s5 again: a new life of the id
    for i in range(300):
        t += 1
        lines.append(sub(n + i, rng.choice(kinds)) if i % 50 == 7 else pub(i))
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))


def _head(path: Path, init: int = 200) -> tuple[list, list]:
    """The run's head (its items up to ``init`` objects, as ``run`` buffers it) and the rest."""
    head, rest, pubs = [], [], 0
    items = judged(path, Window.parse("none"), Space(), apart=False)
    for out, label, _ in items:
        (head if pubs < init else rest).extend(out if label is None else [out])
        pubs += sum(type(ev) is Pub for ev in out) if label is None else len(out) if label == "pub" else 0
    items.close()
    return head, rest


def _same_stats(a: Statistics, b: Statistics) -> None:
    assert a.n == b.n and (a.cell_count == b.cell_count).all()
    assert list(a.keyword_freq.items()) == list(b.keyword_freq.items())  # order too: ties read it
    assert [(w, list(c.items())) for w, c in a.keyword_cells.items()] == \
        [(w, list(c.items())) for w, c in b.keyword_cells.items()]
    assert (a.sample_x, a.sample_y, a.sample_kw) == (b.sample_x, b.sample_y, b.sample_kw)


@pytest.mark.parametrize("seed", range(6))
def test_the_plan_from_columns_is_the_plan_from_events(tmp_path: Path, seed: int, monkeypatch) -> None:
    monkeypatch.setattr(lines, "_BLOCK", 1 << 15)  # blocks of ~250 lines: several in a small head
    path = tmp_path / "events.jsonl"
    _stream(seed, path)
    head, rest = _head(path)
    assert any(type(it).__name__ == "SubBlock" for it in head)  # the columns' way is taken
    events = events_of(head)
    want_stats = Statistics.from_objects([ev for ev in events if type(ev) is Pub], Space())
    subs = active_subs(events)
    later = [ev for ev in events_of(rest) if type(ev) is Sub]
    for name in sorted(PLANNERS):
        planner = PLANNERS[name]
        got, stats = plan_head(head, Space(), planner, 3)
        want = planner(subs, want_stats, 3)
        _same_stats(stats, want_stats)
        assert got.describe() == want.describe(), name
        assert got.loads() == want.loads(), name
        assert [got.assign(s) for s in subs] == [want.assign(s) for s in subs], name
        assert [got.assign(s) for s in later] == [want.assign(s) for s in later], name  # the new-sub rule
        assert got.loads() == want.loads(), name
