"""The service's Core without HTTP: snapshots written by a forked child while events go on,
and the total cap on kept notifications (SPEC section 8)."""

from __future__ import annotations

import json
import time

import pytest

from skpubsub.service import core as core_mod
from skpubsub.service.core import Core


def _records(n_subs: int, n_pubs: int, t0: int = 0) -> list[dict]:
    recs: list[dict] = []
    for i in range(n_subs):
        kind = ("range", "knn", "topk")[i % 3]
        rec = {"op": "sub", "id": f"s{t0}-{i}", "t": t0, "kind": kind, "keywords": ["a" if i % 2 else "b"]}
        if kind == "range":
            rec["rect"] = [-50 + i % 7, -40, 60, 40]
        else:
            rec.update(x=i % 11, y=-(i % 5), k=2)
            if kind == "topk":
                rec["alpha"] = 0.5
        recs.append(rec)
    for j in range(n_pubs):
        recs.append({"op": "pub", "id": f"o{t0}-{j}", "t": t0 + 1 + j // 10, "x": (j * 7) % 90 - 45,
                     "y": (j * 13) % 70 - 35, "keywords": ["a", "b"] if j % 3 == 0 else ["ab"[j % 2]]})
    return recs


def _process(core: Core, recs: list[dict]) -> list[dict]:
    out = core.process([("events", dict(r), None) for r in recs])
    assert all("seq" in r for r in out.results), out.results[:3]
    return out.results


def _state(core: Core) -> tuple:
    return (json.loads(json.dumps(core.engine.all_results())),
            {reg.seq: (reg.next, reg.kept()) for reg in core.regs.values()})


@pytest.mark.parametrize("window", ["none", "count:7"])
def test_a_snapshot_is_written_by_a_child_while_events_go_on(tmp_path, monkeypatch, window) -> None:
    slow = 1.5
    real = core_mod.write_snapshot

    def slow_write(*a, **kw):  # only the child runs it: the parent must not wait for it
        time.sleep(slow)
        return real(*a, **kw)

    monkeypatch.setattr(core_mod, "write_snapshot", slow_write)
    core = Core(tmp_path / "d", window, index="dkm", fsync="off")
    core.open()
    _process(core, _records(30, 200))
    at = _state(core)
    t0 = time.perf_counter()
    forked = core.fork_snapshot()
    assert forked is not None and time.perf_counter() - t0 < slow / 2
    seq = forked.seq
    _process(core, _records(6, 80, t0=100))  # applied while the child writes
    assert core.seq > seq
    path, need = forked.wait()
    forked.finish((path, need))
    assert path.endswith(f"snapshot-{seq:012d}.json")
    if window == "none":  # the parent forgot the objects no result held at seq, kept the later ones
        assert need is not None and all(q in need or q > seq for q in core.objects)
    after = _state(core)
    core.close()
    # the snapshot holds the state at seq: restored alone (the log after it moved aside) ...
    again = Core(tmp_path / "d", window, index="dkm", fsync="off")
    for seg in (tmp_path / "d" / "wal").iterdir():
        seg.rename(tmp_path / seg.name)
    again.open()
    assert again.restored_from == seq and again.replayed == 0 and _state(again) == at
    again.close()
    # ... and with the log, the state after it
    for seg in tmp_path.glob("*.jsonl*"):
        seg.rename(tmp_path / "d" / "wal" / seg.name)
    third = Core(tmp_path / "d", window, index="dkm", fsync="off")
    third.open()
    assert third.restored_from == seq and third.replayed > 0 and _state(third) == after
    third.close()


def test_a_failed_child_is_reported_and_changes_nothing(tmp_path, monkeypatch) -> None:
    def broken(*a, **kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(core_mod, "write_snapshot", broken)
    core = Core(tmp_path / "d", "none", index="dkm", fsync="off")
    core.open()
    _process(core, _records(5, 30))
    n_objects = len(core.objects)
    forked = core.fork_snapshot()
    with pytest.raises(RuntimeError, match="No space left on device"):
        forked.wait()
    assert len(core.objects) == n_objects and not list((tmp_path / "d" / "snapshots").glob("*.json"))
    core.close()


def _kept(core: Core) -> dict:
    regs = list(core.regs.values()) + list(core.book.ended.values())
    return {r.seq: [n for n, _ in r.ring or ()] for r in regs if r.ring}


def test_the_total_cap_drops_the_oldest_kept_notifications_first(tmp_path) -> None:
    """--keep-total: across live and ended subscriptions, the oldest kept notifications go
    first (a model of the rule agrees); a snapshot + log restart keeps the same ones in the
    same order; a stream resuming before the oldest kept starts there (the app sends ``gap``)."""
    import random
    from collections import deque

    keep, cap = 40, 60
    words = "abcdef"

    def make() -> Core:
        return Core(tmp_path / "d", "none", index="dkm", fsync="off", keep=keep, keep_total=cap,
                    snapshot_every=10**9)

    core = make()
    core.open()
    rng = random.Random(5)
    subs = [{"op": "sub", "id": f"s{w}", "t": 0, "kind": "range", "rect": [-180, -90, 180, 90], "keywords": [w]}
            for w in words]
    out = core.process([("events", s, None) for s in subs])
    model: dict[int, deque] = {}
    order: deque = deque()
    batches = []
    for b in range(60):
        recs = [{"op": "pub", "id": f"o{b}-{i}", "t": 1 + b, "x": rng.uniform(-99, 99), "y": rng.uniform(-60, 60),
                 "keywords": rng.sample(words, rng.choice([1, 1, 2]))} for i in range(rng.choice([1, 7, 30]))]
        if b == 20:
            recs.append({"op": "unsub", "id": "sa", "t": 1 + b})  # ended: still readable, still counted
        batches.append(recs)
    snap_after = 35
    for b, recs in enumerate(batches):
        out = core.process([("events", dict(r), None) for r in recs])
        for item in out.feed:  # the model: per subscription the last `keep`, then the oldest out first
            if item[0] == "n":
                _, _, reg, n, _ = item
                model.setdefault(reg, deque(maxlen=keep)).append(n)
                order.append((reg, n))
        while sum(len(q) for q in model.values()) > cap:
            reg, n = order.popleft()
            if model[reg] and model[reg][0] == n:
                model[reg].popleft()
        assert core.book.kept_total == sum(len(q) for q in model.values()) <= cap
        assert _kept(core) == {r: list(q) for r, q in model.items() if q}, b
        if b == snap_after:
            core.snapshot_now()
    assert len(core.book.kept_order) <= 2 * cap + 1024  # stale entries compacted
    ended = core.book.ended[next(iter(core.book.ended))]
    assert ended.ring is None or len(ended.ring) < ended.next - 1  # the total cap reached the ended one too
    reg = core.regs["sb"]
    assert reg.first_kept > 1 and reg.after(0)[0][0] == reg.first_kept  # resuming from a dropped point
    want = (_kept(core), [r.seq for r in core.book.live_order()])
    core.close()
    again = make()
    again.open()
    assert again.restored_from is not None and again.replayed > 0
    assert (_kept(again), [r.seq for r in again.book.live_order()]) == want
    again.close()


def test_over_http_a_resume_from_a_dropped_point_says_gap_then_the_kept_ones(tmp_path) -> None:
    """--keep-total 5 over HTTP: the oldest of all go first; a stream asking from before the
    oldest kept gets ``event: gap`` (after, first_kept), then exactly the kept ones; one
    asking from a kept point gets exactly the ones after it, no gap (SPEC section 8)."""
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    from skpubsub.service.client import sub_path
    from test_service import Server

    srv = Server(tmp_path / "d", "--keep-total", "5").start()
    try:
        anon, admin = srv.client(None), srv.client()
        rect = {"kind": "range", "rect": [0, 0, 1, 1], "keywords": ["cafe"], "t": 1}
        tok = {i: anon.post("/v1/subscriptions", dict(rect, id=i)).json()["token"] for i in ("a", "b")}
        obj = {"op": "pub", "x": 0.5, "y": 0.5, "keywords": ["cafe"], "t": 2}
        assert admin.post("/v1/events", [dict(obj, id=f"o{j}") for j in range(4)]).status == 200  # 8 notifications

        def read(ident, last):
            out = []
            for ev in anon.stream(sub_path(ident, "/notifications"), token=tok[ident], last_event_id=last, timeout=1.5):
                out.append(ev)
                if ev[1] == "4":
                    break
            return out

        a, b = read("a", 0), read("b", 0)
        # kept: a's 4 and b's 1-4 arrived interleaved (a1 b1 a2 b2 ...): the newest 5 are b2..b4, a3, a4
        assert a[0][0] == "gap" and json.loads(a[0][2]) == {"after": 0, "first_kept": 3}
        assert [(e, i) for e, i, _ in a[1:]] == [("message", "3"), ("message", "4")]
        assert b[0][0] == "gap" and json.loads(b[0][2]) == {"after": 0, "first_kept": 2}
        assert [i for _, i, _ in b[1:]] == ["2", "3", "4"]
        assert [(e, i) for e, i, _ in read("b", 2)] == [("message", "3"), ("message", "4")]
    finally:
        srv.stop()


def test_the_feed_keeps_the_last_items_of_a_batch_numbered_as_the_rings(tmp_path) -> None:
    """The applier numbers only the feed items it keeps (the last ``feed_keep``, from the
    end of the batch): the same numbers and lines as the registrations' rings."""
    core = Core(tmp_path / "d", "none", index="dkm", fsync="off")
    core.open()
    core.feed_keep = 7
    rect = {"op": "sub", "t": 0, "kind": "range", "rect": [-10, -10, 10, 10]}
    core.process([("events", dict(rect, id=i, keywords=[w]), None) for i, w in (("a", "x"), ("b", "x"), ("c", "y"))])
    pubs = [{"op": "pub", "id": f"o{j}", "t": 1, "x": 0, "y": 0, "keywords": ["x", "y"] if j % 3 else ["x"]}
            for j in range(9)]
    out = core.process([("events", p, None) for p in pubs])
    everything = [("e", p["id"]) for p in pubs]
    # the rings, merged in the order the engine notified (per object: a, b, then c)
    notes = []
    for j, p in enumerate(pubs):
        for reg in (core.regs["a"], core.regs["b"]) + ((core.regs["c"],) if j % 3 else ()):
            notes.append(reg)
    numbered, seen = [], {}
    for reg in notes:
        seen[reg.seq] = seen.get(reg.seq, 0) + 1
        numbered.append(("n", dict(reg.ring)[seen[reg.seq]], reg.seq, seen[reg.seq], reg.kind))
    everything = everything + numbered
    got = [("e", it[1].id) if it[0] == "e" else it for it in out.feed]
    assert len(out.feed) == 7 and out.feed_count == len(everything)
    assert got == everything[-7:] and all(it[0] == "n" for it in got)
    core.close()


def test_entries_of_notifications_keep_let_go_leave_the_order_as_they_come(tmp_path) -> None:
    """Subscriptions notified in turn past --keep: the kept order holds exactly the kept
    notifications (no pile of stale entries waiting for a compaction pass on the loop)."""
    core = Core(tmp_path / "d", "none", index="dkm", fsync="off", keep=10, keep_total=1_000_000)
    core.open()
    rect = {"op": "sub", "t": 0, "kind": "range", "rect": [-10, -10, 10, 10], "keywords": ["x"]}
    core.process([("events", dict(rect, id=f"s{i}"), None) for i in range(100)])
    for b in range(30):
        core.process([("events", {"op": "pub", "id": f"o{b}-{j}", "t": 1, "x": 0, "y": 0, "keywords": ["x"]}, None)
                      for j in range(10)])
    assert core.book.kept_total == 1000 and len(core.book.kept_order) == 1000
    assert all(len(r.ring) == 10 and r.ring[0][0] == 291 for r in core.regs.values())
    core.close()
