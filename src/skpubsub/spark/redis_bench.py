"""Throughput and publish-to-delivery latency through Redis in and out on Spark (a benchmark).

    python -m skpubsub.spark.redis_bench EVENTS --redis redis://127.0.0.1:6379 --out DIR
        [--warm N] [--rate R] [--workers M] [--lines-per-batch B] [--trigger-seconds S]

Starts ``skpubsub stream --source redis://.../in-<id> --sink redis://.../out-<id>`` (a
subprocess, its own Spark), XADDs the first ``--warm`` lines of EVENTS (the subscriptions and
the objects before the plan) and waits until the job has sequenced them, then XADDs the rest at
``--rate`` lines/s, noting each line's send time. A reader follows the sink stream (``XREAD
BLOCK``): an entry id's first part is the event's stream position, so each notification's
latency is its arrival less its event's send time. Reports objects/s (the timed objects over
the time from the first send to the last notification) and latency p50/p99 in
``DIR/redis_bench.json``. The job stops after the last notification (``--timeout``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from ..io.redis_bus import RedisURL


def _pct(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m skpubsub.spark.redis_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("events")
    ap.add_argument("--redis", required=True, help="redis://HOST:PORT of a running server")
    ap.add_argument("--out", required=True)
    ap.add_argument("--warm", type=int, default=None, help="lines sent before timing (default: the subscriptions "
                                                           "and 1,000 objects)")
    ap.add_argument("--rate", type=float, default=1000.0, help="lines/s after the warm-up")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--lines-per-batch", type=int, default=10_000)
    ap.add_argument("--trigger-seconds", type=float, default=0.5)
    ap.add_argument("--index", default="dkm")
    ap.add_argument("--window", default="none")
    a = ap.parse_args(argv)
    lines = Path(a.events).read_bytes().splitlines()
    if a.warm is None:
        objs = [i for i, x in enumerate(lines) if b'"pub"' in x]
        a.warm = objs[min(999, len(objs) - 1)] + 1 if objs else len(lines)
    tag = os.urandom(3).hex()
    base = RedisURL.parse(a.redis.rstrip("/") + "/x")
    r = base.connect()
    src, dst = f"in-{tag}", f"out-{tag}"
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "skpubsub", "stream", "--source", f"{a.redis.rstrip('/')}/{src}",
           "--sink", f"{a.redis.rstrip('/')}/{dst}", "--checkpoint", str(out / f"ck-{tag}"), "--out",
           str(out / f"out-{tag}"), "--workers", str(a.workers), "--partitioner", "hash", "--index", a.index,
           "--window", a.window, "--lines-per-batch", str(a.lines_per_batch), "--trigger-seconds",
           str(a.trigger_seconds), "--timeout", "3600", "--master", f"local[{a.workers}]"]
    sent: dict[int, float] = {}
    arrivals: list[tuple[float, int]] = []
    stop = threading.Event()

    def read() -> None:
        rr = base.connect()
        last = "0-0"
        while not stop.is_set():
            got = rr.xread({dst: last}, block=500, count=10_000)
            now = time.time()
            for _, entries in got or ():
                for eid, _ in entries:
                    arrivals.append((now, int(eid.split(b"-")[0])))
                last = entries[-1][0].decode()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    log = (out / f"stream-{tag}.log").open("w")
    job = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        pipe = r.pipeline(transaction=False)
        for x in lines[:a.warm]:
            pipe.xadd(src, {"event": x})
        pipe.execute()
        batches = out / f"out-{tag}" / "batches"
        t_warm = time.time()
        while True:  # the job has sequenced the warm-up lines (its batch records say how many)
            n = sum(sum(s.get("lines", 0) for s in json.loads(p.read_text()).get("source", ()))
                    for p in batches.glob("*/batch-*.json"))
            if n >= a.warm:
                break
            if job.poll() is not None or time.time() - t_warm > 600:
                raise SystemExit(f"the stream job did not take the warm-up lines; see {log.name}")
            time.sleep(0.2)
        warm_s = time.time() - t_warm
        t0 = time.time()
        for i in range(a.warm, len(lines)):
            due = t0 + (i - a.warm) / a.rate
            now = time.time()
            if due > now:
                time.sleep(due - now)
            sent[i + 1] = time.time()
            r.xadd(src, {"event": lines[i]})
        t_sent = time.time()
        expected_last = len(lines)
        deadline = time.time() + 120
        while time.time() < deadline:  # until the notifications of the last events stop coming
            time.sleep(2.0)
            if arrivals and arrivals[-1][1] >= expected_last - 50 and time.time() - arrivals[-1][0] > 2.0:
                break
    finally:
        stop.set()
        job.terminate()
        job.wait(120)
        log.close()
    lat = [at - sent[seq] for at, seq in arrivals if seq in sent]
    timed = [at for at, seq in arrivals if seq in sent]
    wall = (max(timed) - t0) if timed else None
    n_obj = sum(1 for i in range(a.warm, len(lines)) if b'"pub"' in lines[i])
    report = {"events": a.events, "lines": len(lines), "warm_lines": a.warm, "warm_seconds": round(warm_s, 3),
              "rate": a.rate, "workers": a.workers, "trigger_seconds": a.trigger_seconds,
              "timed_objects": n_obj, "send_seconds": round(t_sent - t0, 3),
              "objects_per_second": round(n_obj / wall, 1) if wall else None,
              "notifications": len(lat), "latency_ms": {"p50": _pct(lat, 50) and round(_pct(lat, 50) * 1000, 1),
                                                          "p99": _pct(lat, 99) and round(_pct(lat, 99) * 1000, 1),
                                                          "max": round(max(lat) * 1000, 1) if lat else None},
              "load_average_1min": round(os.getloadavg()[0], 2)}
    (out / "redis_bench.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report))
    r.delete(src, dst, f"{dst}:skpubsub-run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
