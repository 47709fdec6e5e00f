"""A load generator for a local ``skpubsub serve`` (a benchmark, not a test).

    python -m skpubsub.service.loadgen --data DIR [--subscriptions S] [--clients C]
        [--rate R] [--seconds D] [--batch B]

Starts nothing: it talks to the server whose ``DIR`` it is given (URL from
``--url``, admin key from ``DIR/admin.key``), loopback only. Registers S range
subscriptions over a 100 x 100 grid of 1-degree cells (keyword ``k<i mod 10>``), follows C
of them over SSE, and publishes objects at R objects/s for D seconds in requests of B objects
into the followed cells, each object's text carrying its send time. Reports: accepted
objects/s, request latency (POST to answer) and publish-to-notification latency (send time
to SSE arrival) p50/p95/p99.
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

from .client import Client, sub_path


def _pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m skpubsub.service.loadgen")
    ap.add_argument("--url", required=True)
    ap.add_argument("--data", required=True, help="the server's DIR (for admin.key)")
    ap.add_argument("--subscriptions", type=int, default=10_000)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--rate", type=float, default=1000, help="objects/s")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--batch", type=int, default=1, help="objects per request")
    ap.add_argument("--publishers", type=int, default=4, help="concurrent publishing threads")
    a = ap.parse_args(argv)
    if urlsplit(a.url).hostname not in ("127.0.0.1", "localhost", "::1"):
        ap.error("loadgen runs against a local server only (loopback)")
    key = (Path(a.data) / "admin.key").read_text().strip()
    c = Client(a.url, key=key)
    t0 = c.get("/healthz").json()
    base_t = time.time()
    subs = []
    t = time.perf_counter()
    for lo in range(0, a.subscriptions, 5000):
        chunk = [{"op": "sub", "id": f"lg{lo + i}", "kind": "range",
                  "rect": [(lo + i) % 100, ((lo + i) // 100) % 100, (lo + i) % 100 + 1, ((lo + i) // 100) % 100 + 1],
                  "keywords": [f"k{(lo + i) % 10}"]} for i in range(min(5000, a.subscriptions - lo))]
        ans = c.post("/v1/events", chunk).json()
        subs += [(r["id"], r["token"], ch["rect"]) for r, ch in zip(ans, chunk) if "token" in r]
    reg_s = time.perf_counter() - t
    print(f"registered {len(subs)} subscriptions in {reg_s:.2f} s ({len(subs) / reg_s:,.0f}/s)", flush=True)
    followed = subs[: a.clients]
    lat: list[float] = []
    lock = threading.Lock()
    stop = threading.Event()
    ready = threading.Barrier(len(followed) + 1)

    def follow(ident, token) -> None:
        first = True
        try:
            for event, _, data in Client(a.url).stream(sub_path(ident, "/notifications"), token=token, timeout=a.seconds + 30):
                if first:
                    first = False
                if stop.is_set():
                    return
                now = time.time()
                n = json.loads(data)
                sent = float(str(n["object"]).split("@")[1])
                with lock:
                    lat.append(now - sent)
        except OSError:
            pass

    threads = [threading.Thread(target=follow, args=(i, tok), daemon=True) for i, tok, _ in followed]
    for th in threads:
        th.start()
    time.sleep(1.0)  # the streams open
    req_lat: list[float] = []
    sent = [0]
    per_pub = a.rate / a.publishers

    def publish(p: int) -> None:
        cl = Client(a.url, key=key)
        n = 0
        start = time.perf_counter()
        while True:
            el = time.perf_counter() - start
            if el >= a.seconds:
                return
            due = int(el * per_pub)
            if n >= due:
                time.sleep(min(0.002, (n - due + 1) / per_pub))
                continue
            objs = []
            for j in range(a.batch):
                ident, _, rect = followed[(n + j) % len(followed)]
                objs.append({"id": f"p{p}-{n + j}@{time.time():.6f}", "x": rect[0] + 0.5, "y": rect[1] + 0.5,
                             "keywords": [f"k{int(ident[2:]) % 10}"]})
            r0 = time.perf_counter()
            ans = cl.post("/v1/objects", objs if a.batch > 1 else objs[0])
            req_lat.append(time.perf_counter() - r0)
            assert ans.status == 200, ans
            n += a.batch
            with lock:
                sent[0] += a.batch

    t = time.perf_counter()
    pubs = [threading.Thread(target=publish, args=(p,), daemon=True) for p in range(a.publishers)]
    for th in pubs:
        th.start()
    for th in pubs:
        th.join()
    wall = time.perf_counter() - t
    time.sleep(1.0)
    stop.set()
    with lock:
        got = list(lat)
    ms = lambda v: f"{v * 1000:.1f} ms"  # noqa: E731
    print(f"published {sent[0]} objects in {wall:.2f} s = {sent[0] / wall:,.0f} objects/s "
          f"(target {a.rate:,.0f}; {a.publishers} publishers, {a.batch} per request)")
    print(f"request latency: p50 {ms(_pct(req_lat, 50))}, p95 {ms(_pct(req_lat, 95))}, p99 {ms(_pct(req_lat, 99))}")
    print(f"publish-to-notification ({len(got)} notifications on {len(followed)} SSE clients): "
          f"p50 {ms(_pct(got, 50))}, p95 {ms(_pct(got, 95))}, p99 {ms(_pct(got, 99))}"
          + (f", mean {ms(statistics.mean(got))}" if got else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
