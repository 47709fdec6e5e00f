"""The service's Core without HTTP: snapshots written by a forked child while events go on
(SPEC section 8)."""

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

