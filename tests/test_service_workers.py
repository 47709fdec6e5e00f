"""``serve --workers M``: the local multi-worker runtime behind the service (SPEC section 8).

Results and notifications equal ``skpubsub run`` of the acknowledged events (byte for byte),
across a SIGTERM (snapshot) and a SIGKILL (log tail) restart; subscriptions' streams are
numbered as with one engine."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")

from skpubsub.service.client import sub_path  # noqa: E402
from skpubsub.testing.streams import random_stream  # noqa: E402

from test_service import _take, clean_records, expected, post_in_chunks, server  # noqa: E402,F401


@pytest.mark.parametrize("seed,window,partitioner", [(31, "none", "hash"), (33, "time:5", "dkm")])
def test_workers_equal_run_across_restarts(server, tmp_path, seed, window, partitioner) -> None:
    from skpubsub.runtime.runner import run

    s = random_stream(seed, n_events=260, window=window, junk=False)
    records = clean_records(s)
    srv = server("--workers", "2", "--partitioner", partitioner, "--snapshot-every", "50",
                 window=s.window, space=str(s.space_or_default), index="dkm")
    acked = post_in_chunks(srv.client(), records[:120], random.Random(seed))
    assert srv.stop() == 143  # a last snapshot: the restart re-plans from its records
    srv.start()
    assert "restored from snapshot" in srv.banner
    acked += post_in_chunks(srv.client(), records[120:200], random.Random(seed + 1))
    srv.kill()  # the log tail after the last snapshot
    srv.start()
    acked += post_in_chunks(srv.client(), records[200:], random.Random(seed + 2))
    res, lines, per_reg = expected(s.window, s.space_or_default, acked)
    c = srv.client()
    assert c.get("/v1/admin/results").json() == [{"id": i, "results": r} for i, r in res]
    state = c.get("/v1/admin/state").json()["subscriptions"]
    for sub in state:
        if sub["kind"] != "range":  # one subscription's result, from its worker
            got = c.get(sub_path(sub["id"], f"?seq={sub['seq']}")).json()
            assert got["results"] == sub["results"] == dict(res)[sub["id"]]
        got = [d for _, _, d in _take(c.stream(sub_path(sub["id"], f"/notifications?seq={sub['seq']}"), timeout=3),
                                       len(per_reg[sub["seq"]]))]
        assert [g + "\n" for g in got] == per_reg[sub["seq"]]
    srv.stop()
    # skpubsub run of the acknowledged events (the same runtime): the same notifications
    ev_file = tmp_path / "acked.jsonl"
    ev_file.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "_seq"}) + "\n" for r in acked))
    run(ev_file, tmp_path / "run", window=s.window, space=s.space_or_default, index="dkm", workers=2,
        partitioner=partitioner, processes=False)
    assert (tmp_path / "run" / "notifications.jsonl").read_text() == "".join(lines)


def test_workers_flags_are_checked(tmp_path) -> None:
    for flags, says in ((["--workers", "0"], "--workers must be >= 1"),
                        (["--workers", "2", "--partitioner", "nope"], "unknown partitioner 'nope'"),
                        (["--workers", "2", "--index", "reference"], "not 'reference'")):
        p = subprocess.run([sys.executable, "-m", "skpubsub", "serve", "--data", str(tmp_path / "d"), "--port", "0",
                            *flags], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and p.stderr.startswith("skpubsub: error:") and says in p.stderr, p.stderr
        assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_a_dead_worker_makes_writes_fail_in_one_line_and_a_restart_goes_on(server) -> None:
    """A worker process killed (OOM, a bug): writes answer 503 with one line, nothing
    acknowledged is lost; the server started again on the same DIR has every acknowledged event."""
    import os
    import signal

    srv = server("--workers", "2", window="count:5", index="dkm")
    c = srv.client()
    rect = {"op": "sub", "kind": "range", "rect": [0, 0, 10, 10], "keywords": ["cafe"], "t": 1}
    acked = [c.post("/v1/events", dict(rect, id=f"s{i}")).json()["seq"] for i in range(4)]
    children = [int(p) for p in open(f"/proc/{srv.proc.pid}/task/{srv.proc.pid}/children").read().split()
                if b"spawn_main" in open(f"/proc/{p}/cmdline", "rb").read()]  # not the resource tracker
    assert len(children) == 2
    os.kill(children[0], signal.SIGKILL)
    a = c.post("/v1/objects", {"id": "o1", "x": 1, "y": 1, "keywords": ["cafe"], "t": 2})
    assert a.status == 503 and "a --workers process died" in a.json()["error"], a.json()
    assert "\n" not in a.json()["error"]
    srv.stop()
    assert "Traceback" not in srv.proc.stderr.read().split("Process SpawnProcess")[0]
    srv2 = server("--workers", "2", window="count:5", index="dkm", fresh=False)
    h = srv2.client().get("/healthz").json()
    assert h["status"] == "ok" and h["seq"] >= acked[-1] and h["subscriptions"] == 4
