"""``skpubsub loadgen``: a load generator for a local ``skpubsub serve`` (a benchmark, not a test).

    skpubsub loadgen [--url URL --data DIR] [--subscriptions S] [--clients C] [--rate R]
                     [--seconds D] [--batch B] [--publishers P] [--out OUT]

Without ``--url`` it starts its own server (``skpubsub serve --port 0`` on ``OUT/server-data``,
``--index``/``--window``/``--fsync`` as given) and stops it at the end; with ``--url`` it talks
to a running one whose ``DIR`` it is given (for ``DIR/admin.key``). Loopback only: any other
address is refused.

The workload: S range subscriptions on a 100 x 100 grid of 1-degree cells (subscription ``i``
on cell ``(i mod 100, i div 100 mod 100)`` with keyword ``k<i mod 10>``: every cell holds
``S / 10,000`` of them, all with the same keyword), registered in requests of 5,000. C of them
(the first C) are followed over Server-Sent Events, one connection each. P publishers, each on
its own kept-alive connection, post objects at R objects/s in all (requests of B objects) for D
seconds into the followed cells in turn, with the cell's keyword, so that every object notifies
every subscription of its cell, the followed one among them. Each object's id carries its send
time: the SSE client that gets the notification knows the publish-to-notification latency.

Reports (stdout, ``OUT/loadgen.json``, and ``OUT/latency.png`` when matplotlib is installed, the
``plots`` extra): objects/s reached, request latency (POST to answer) and publish-to-notification
latency p50/p95/p99/max, per-second series, and the server's own timers from ``/metrics``.

Bounded: at most 1,000,000 subscriptions, 10,000 clients, 600 s; the drain after the last
publication waits at most ``--drain`` seconds for missing notifications. Everything runs on one
asyncio loop (one process: one core for the load generator).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import msgspec

MAX_SUBSCRIPTIONS = 1_000_000
MAX_CLIENTS = 10_000
MAX_SECONDS = 600.0
CELLS = 100  # cells per side of the subscriptions' grid (1 degree each)
REGISTER_CHUNK = 5_000

DESCRIPTION = ("Load generator for a local `skpubsub serve` (loopback only): S range subscriptions, C SSE "
               "clients, publishers at R objects/s for D seconds; reports throughput and publish-to-"
               "notification latency p50/p95/p99 and writes OUT/loadgen.json and OUT/latency.png. "
               "Without --url it starts (and stops) its own server.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--url", default=None, help="a running server (loopback); default: start one")
    p.add_argument("--data", default=None, help="the running server's --data DIR (for admin.key); with --url")
    p.add_argument("--subscriptions", type=int, default=10_000, help="S range subscriptions (default 10,000)")
    p.add_argument("--clients", type=int, default=50, help="C of them followed over SSE (default 50)")
    p.add_argument("--hooks", action="store_true",
                   help="the C followed subscriptions get webhooks (SPEC 9) to a receiver loadgen runs, not SSE")
    p.add_argument("--rate", type=float, default=1000, help="R objects/s, all publishers together (default 1,000)")
    p.add_argument("--seconds", type=float, default=10, help="D seconds of publishing (default 10)")
    p.add_argument("--batch", type=int, default=1, help="B objects per request (default 1)")
    p.add_argument("--publishers", type=int, default=4, help="P concurrent publishers (connections)")
    p.add_argument("--drain", type=float, default=5.0, help="seconds to wait for the last notifications")
    p.add_argument("--out", default="loadgen-out", help="OUT directory: loadgen.json, latency.png")
    g = p.add_argument_group("the server loadgen starts (without --url)")
    g.add_argument("--index", default="dkm")
    g.add_argument("--window", default="none")
    g.add_argument("--fsync", default="batch", choices=["always", "batch", "off"])
    g.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                   help="one more `skpubsub serve` argument (repeatable), e.g. --server-arg=--profile=prof.out")


# -- small pieces -----------------------------------------------------------------------------------
def pct(xs: list[float], p: float) -> float | None:
    """The p-th percentile (nearest rank) of ``xs``; None when empty."""
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(p / 100 * len(xs) + 0.5)) - 1))]


def summary_ms(xs: list[float]) -> dict[str, float | None]:
    out: dict[str, float | None] = {"count": len(xs)}
    for name, p in (("p50", 50), ("p95", 95), ("p99", 99), ("max", 100)):
        v = pct(xs, p)
        out[name] = None if v is None else round(v * 1000, 3)
    out["mean"] = round(sum(xs) / len(xs) * 1000, 3) if xs else None
    return out


def is_loopback(host: str) -> bool:
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0].split("%")[0]).is_loopback for i in infos)


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass


class HTTP:
    """One kept-alive HTTP/1.1 connection (asyncio streams; Content-Length answers)."""

    def __init__(self, host: str, port: int, key: str | None = None) -> None:
        self.host, self.port, self.key = host, port, key
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def _open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        try:
            return await self._request(method, path, body)
        except (ConnectionError, asyncio.IncompleteReadError):  # an idle kept-alive connection the server closed
            await self.close()
            return await self._request(method, path, body)

    async def _request(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        if self.writer is None:
            await self._open()
        auth = f"Authorization: Bearer {self.key}\r\n" if self.key else ""
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n{auth}"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
        self.writer.write(head + body)
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("server closed the connection")
        status = int(status_line.split()[1])
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            try:
                await self.writer.wait_closed()
            except OSError:
                pass
            self.writer = None


class Stats:
    def __init__(self) -> None:
        self.lat: list[float] = []  # publish-to-notification, seconds
        self.lat_at: list[float] = []  # arrival, seconds since the start of publishing
        self.req: list[float] = []  # request latency
        self.req_at: list[float] = []
        self.sent_at: list[tuple[float, int]] = []  # (send time since start, objects)
        self.received = 0
        self.foreign = 0  # notifications of objects not ours (another run on the same server)
        self.stream_errors: list[str] = []
        self.start = 0.0  # time.time() when publishing started

    def note(self, obj: Any, now: float) -> None:
        """A notification's object id arrived at ``now``: its latency (ids carry send times)."""
        if isinstance(obj, str) and "@" in obj:
            self.lat.append(now - float(obj.rpartition("@")[2]))
            self.lat_at.append(now - self.start)
            self.received += 1
        else:
            self.foreign += 1


async def receiver(st: Stats) -> tuple[asyncio.base_events.Server, str]:
    """The webhooks' receiver (``--hooks``): HTTP/1.1 on loopback, kept-alive connections,
    each POST answered 204 and its notification's latency noted."""
    decode = msgspec.json.decode

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                n = 0
                for line in head.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        n = int(line[15:])
                body = await reader.readexactly(n)
                now = time.time()
                writer.write(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n")
                st.note(decode(body).get("object"), now)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError,
                asyncio.CancelledError):  # the server's connection gone, or the run's end
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=4096)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/hook"


async def follow(host: str, port: int, ident: str, token: str, st: Stats, ready: asyncio.Event,
                 opened: list[int], n_clients: int) -> None:
    """One SSE client: de-chunks the response, takes each ``data:`` line's object id."""
    decode = msgspec.json.decode
    try:
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 22)
    except OSError as exc:
        st.stream_errors.append(f"{ident}: {exc}")
        opened[0] += 1
        if opened[0] >= n_clients:
            ready.set()
        return
    try:
        writer.write((f"GET /v1/subscriptions/{quote(ident, safe='')}/notifications HTTP/1.1\r\n"
                      f"Host: {host}\r\nAuthorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n").encode())
        status = (await reader.readline()).split()
        chunked = False
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            if line.lower().startswith(b"transfer-encoding:") and b"chunked" in line.lower():
                chunked = True
        opened[0] += 1
        if opened[0] >= n_clients:
            ready.set()
        if len(status) < 2 or status[1] != b"200":
            st.stream_errors.append(f"{ident}: HTTP {status[1:2]}")
            return
        buf = b""
        while True:
            if chunked:
                size_line = await reader.readline()
                if not size_line:
                    return
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    return
                data = await reader.readexactly(size + 2)
                buf += data[:-2]
            else:
                data = await reader.read(65536)
                if not data:
                    return
                buf += data
            if b"\n\n" not in buf:
                continue
            cut = buf.rindex(b"\n\n") + 2
            block, buf = buf[:cut], buf[cut:]
            now = time.time()
            for line in block.split(b"\n"):
                if line.startswith(b"data: {"):
                    st.note(decode(line[6:]).get("object"), now)
    except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
        st.stream_errors.append(f"{ident}: {type(exc).__name__}: {exc}")
    finally:
        writer.close()


def _cell(i: int) -> tuple[int, int]:
    return i % CELLS, (i // CELLS) % CELLS


async def _register(http: HTTP, n: int, hook: str | None = None, hooked: int = 0) -> list[tuple[str, str, int]]:
    """S range subscriptions (the first ``hooked`` with a webhook to ``hook``); returns (id,
    token, i) of the accepted ones, in order."""
    run = os.urandom(3).hex()
    subs: list[tuple[str, str, int]] = []
    for lo in range(0, n, REGISTER_CHUNK):
        chunk = []
        for i in range(lo, min(n, lo + REGISTER_CHUNK)):
            cx, cy = _cell(i)
            chunk.append({"op": "sub", "id": f"lg{run}-{i}", "kind": "range",
                          "rect": [cx, cy, cx + 1, cy + 1], "keywords": [f"k{i % 10}"]})
            if i < hooked:
                chunk[-1]["hook"] = {"url": hook}
        status, body = await http.request("POST", "/v1/events", msgspec.json.encode(chunk))
        if status != 200:
            raise RuntimeError(f"registering subscriptions: HTTP {status}: {body[:300]!r}")
        for rec, ans in zip(chunk, msgspec.json.decode(body)):
            if "token" not in ans:
                raise RuntimeError(f"subscription refused: {ans}")
            subs.append((ans["id"], ans["token"], int(rec["id"].rpartition("-")[2])))
    return subs


async def _publisher(p: int, http: HTTP, a: argparse.Namespace, targets: list[tuple[int, int, str]],
                     st: Stats, t_end: float, prefix: str) -> int:
    """Post objects at R/P objects/s (requests of B) until ``t_end``; returns objects accepted."""
    per = a.rate / a.publishers
    n = 0
    k = 0
    encode = msgspec.json.encode
    while True:
        due = st.start + (k * a.batch) / per
        now = time.time()
        if due >= t_end:
            return n
        if due > now:
            await asyncio.sleep(due - now)
        objs = []
        sent = time.time()
        for j in range(a.batch):
            cx, cy, kw = targets[(p + (k * a.batch + j) * a.publishers) % len(targets)]
            objs.append({"id": f"{prefix}{p}-{k}-{j}@{sent:.6f}", "x": cx + 0.5, "y": cy + 0.5, "keywords": [kw]})
        body = encode(objs if a.batch > 1 else objs[0])
        status, ans = await http.request("POST", "/v1/objects", body)
        done = time.time()
        if status != 200:
            raise RuntimeError(f"publishing: HTTP {status}: {ans[:300]!r}")
        st.req.append(done - sent)
        st.req_at.append(done - st.start)
        st.sent_at.append((sent - st.start, a.batch))
        n += a.batch
        k += 1


def _server_metrics(text: str) -> dict[str, float]:
    """The sums and counts of the service's own timers (Prometheus text)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        for stem in ("skpubsub_wal_seconds", "skpubsub_apply_seconds", "skpubsub_batch_events",
                     "skpubsub_notifications_total", "skpubsub_sse_dropped_total"):
            if name in (f"{stem}_sum", f"{stem}_count", stem):
                out[name] = float(value)
        if name.startswith("skpubsub_request_seconds_sum") or name.startswith("skpubsub_request_seconds_count"):
            out[name] = float(value)
    return out


def _cpu(pid: int | None) -> float | None:
    """CPU seconds (user + system) of a process: ours when ``pid`` is None (Linux /proc)."""
    if pid is None:
        t = os.times()
        return t.user + t.system
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


async def _run(a: argparse.Namespace, url: str, key: str, server_pid: int | None = None
               ) -> tuple[dict[str, Any], Stats]:
    u = urlsplit(url)
    host, port = u.hostname, u.port or 80
    admin = HTTP(host, port, key)
    status, body = await admin.request("GET", "/healthz")
    if status != 200:
        raise RuntimeError(f"the server is not ready: HTTP {status}: {body[:200]!r}")
    st = Stats()
    st.start = time.time() + 3600  # nothing counts before publishing starts
    hooks = None
    if a.hooks:
        hooks, hook_url = await receiver(st)
    t0 = time.perf_counter()
    subs = await _register(admin, a.subscriptions, hook_url if hooks else None, a.clients if hooks else 0)
    reg_s = time.perf_counter() - t0
    print(f"registered {len(subs):,} subscriptions in {reg_s:.2f} s ({len(subs) / max(reg_s, 1e-9):,.0f}/s)",
          flush=True)
    followed = subs[: a.clients]
    # every object goes to a followed cell with that cell's keyword; followers per (cell, keyword)
    followers: dict[tuple[int, int, str], int] = {}
    for _, _, i in followed:
        key_ = (*_cell(i), f"k{i % 10}")
        followers[key_] = followers.get(key_, 0) + 1
    targets = sorted(followers)
    ready = asyncio.Event()
    opened = [0]
    t0 = time.perf_counter()
    streams = [] if hooks else [asyncio.create_task(follow(host, port, ident, tok, st, ready, opened, len(followed)))
                                for ident, tok, _ in followed]
    if hooks:
        opened[0] = len(followed)
        print(f"{len(followed):,} subscriptions with webhooks to {hook_url}", flush=True)
    else:
        try:
            await asyncio.wait_for(ready.wait(), 60 + len(followed) / 50)
        except asyncio.TimeoutError:
            pass
        open_s = time.perf_counter() - t0
        print(f"opened {opened[0]:,} SSE streams in {open_s:.2f} s"
              + (f" ({len(st.stream_errors)} refused: {st.stream_errors[0]})" if st.stream_errors else ""),
              flush=True)
    pubs = [HTTP(host, port, key) for _ in range(a.publishers)]
    # warm-up: one request per publisher (connections open, any first-call cost paid), not counted
    for p, h in enumerate(pubs):
        cx, cy, kw = targets[p % len(targets)]
        await h.request("POST", "/v1/objects", msgspec.json.encode({"id": f"warm{p}", "x": cx + 0.5, "y": cy + 0.5,
                                                                     "keywords": [kw]}))
    await asyncio.sleep(0.2)
    prefix = f"o{os.urandom(2).hex()}-"
    cpu0 = (_cpu(None), _cpu(server_pid) if server_pid else None)
    st.start = time.time()
    t_end = st.start + a.seconds
    sent = await asyncio.gather(*(_publisher(p, h, a, targets, st, t_end, prefix) for p, h in enumerate(pubs)))
    wall = time.time() - st.start
    cpu1 = (_cpu(None), _cpu(server_pid) if server_pid else None)
    load = os.getloadavg()[0]
    published = sum(sent)
    # each published object notifies the followers of its target
    per_target = [followers[t] for t in targets]
    expected = 0
    for p, n in enumerate(sent):
        for m in range(n):
            expected += per_target[(p + m * a.publishers) % len(targets)]
    drain_until = time.time() + a.drain
    while st.received < expected and time.time() < drain_until:
        await asyncio.sleep(0.05)
    status, mtext = await admin.request("GET", "/metrics")
    server = _server_metrics(mtext.decode()) if status == 200 else {}
    for t in streams:
        t.cancel()
    await asyncio.gather(*streams, return_exceptions=True)
    if hooks is not None:
        hooks.close()
    for h in [admin, *pubs]:
        await h.close()
    # per-second series
    secs = int(max(a.seconds, max(st.lat_at, default=0)) + 1)
    series = []
    for s in range(secs):
        lats = [v for v, at in zip(st.lat, st.lat_at) if s <= at < s + 1]
        objs = sum(n for at, n in st.sent_at if s <= at < s + 1)
        series.append({"second": s, "objects": objs, "notifications": len(lats),
                       "p50_ms": None if not lats else round(pct(lats, 50) * 1000, 3),
                       "p99_ms": None if not lats else round(pct(lats, 99) * 1000, 3)})
    n_apply = server.get("skpubsub_apply_seconds_count") or 0
    report = {
        "config": {k: getattr(a, k) for k in ("subscriptions", "clients", "hooks", "rate", "seconds", "batch",
                                              "publishers", "index", "window", "fsync")},
        "url": url,
        "registered": len(subs),
        "register_seconds": round(reg_s, 3),
        "streams_opened": opened[0] - len(st.stream_errors),
        "stream_errors": st.stream_errors[:20],
        "published": published,
        "publish_seconds": round(wall, 3),
        "objects_per_second": round(published / wall, 1) if wall > 0 else None,
        "requests": len(st.req),
        "request_latency_ms": summary_ms(st.req),
        "notifications_expected": expected,
        "notifications_received": st.received,
        "notifications_missing": max(0, expected - st.received),
        "notification_latency_ms": summary_ms(st.lat),
        "per_second": series,
        "cpu_seconds_while_publishing": {
            "loadgen": round(cpu1[0] - cpu0[0], 3),
            "server": None if cpu0[1] is None or cpu1[1] is None else round(cpu1[1] - cpu0[1], 3),
            "wall": round(wall, 3), "load_average_1min_after": round(load, 2), "cores": os.cpu_count()},
        "server": {
            "metrics": server,
            "apply_ms_per_batch": round(1000 * server.get("skpubsub_apply_seconds_sum", 0) / n_apply, 3)
            if n_apply else None,
            "wal_ms_per_batch": round(1000 * server.get("skpubsub_wal_seconds_sum", 0) / n_apply, 3)
            if n_apply else None,
            "events_per_batch": round(server.get("skpubsub_batch_events_sum", 0)
                                      / max(1.0, server.get("skpubsub_batch_events_count", 0)), 2),
        },
    }
    return report, st


def _plot(report: dict, st: Stats, path: Path) -> str | None:
    """latency.png: each notification's latency over time, the per-second p50/p99, objects/s."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install 'skpubsub[plots]'): no latency.png"
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(9, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    if st.lat:
        step = max(1, len(st.lat) // 50_000)
        ax.scatter(st.lat_at[::step], [v * 1000 for v in st.lat[::step]], s=2, alpha=0.25, color="tab:blue",
                   label="notifications", rasterized=True)
    xs = [r["second"] + 0.5 for r in report["per_second"] if r["p50_ms"] is not None]
    ax.plot(xs, [r["p50_ms"] for r in report["per_second"] if r["p50_ms"] is not None], color="tab:green",
            label="p50 per second")
    ax.plot(xs, [r["p99_ms"] for r in report["per_second"] if r["p99_ms"] is not None], color="tab:red",
            label="p99 per second")
    ax.axhline(50, color="grey", ls="--", lw=0.8, label="50 ms")
    ax.set_yscale("log")
    ax.set_ylabel("publish to notification (ms)")
    ax.legend(loc="upper right", fontsize=8)
    nl = report["notification_latency_ms"]
    c = report["config"]
    ax.set_title(f"{report['registered']:,} subscriptions, {report['streams_opened']:,} "
                 f"{'webhooks' if report['config']['hooks'] else 'SSE clients'}, "
                 f"{c['rate']:,.0f} objects/s asked in requests of {c['batch']}: "
                 f"{report['objects_per_second'] or 0:,.0f}/s reached\n"
                 f"p50 {nl['p50']} ms, p95 {nl['p95']} ms, p99 {nl['p99']} ms", fontsize=9)
    bx.bar([r["second"] + 0.5 for r in report["per_second"]], [r["objects"] for r in report["per_second"]],
           width=0.9, color="tab:gray")
    bx.set_ylabel("objects/s sent")
    bx.set_xlabel("seconds since publishing started")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


def _start_server(a: argparse.Namespace, out: Path) -> tuple[subprocess.Popen, str, str]:
    data = out / "server-data"
    cmd = [sys.executable, "-m", "skpubsub", "serve", "--data", str(data), "--port", "0", "--index", a.index,
           "--window", a.window, "--fsync", a.fsync, "--max-streams", str(max(2000, a.clients + 100)),
           "--max-events", str(max(10_000, REGISTER_CHUNK, a.batch)), *a.server_arg]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.wait(10)
        raise RuntimeError(f"the server did not start: {line.strip()} {proc.stderr.read().strip()[-500:]}")
    url = line.split("listening on ")[1].split()[0]
    return proc, url, (data / "admin.key").read_text().strip()


def main(a: argparse.Namespace) -> int:
    a.window = str(a.window)  # `skpubsub` parses --window for every command
    for name, v, lo, hi in (("--subscriptions", a.subscriptions, 1, MAX_SUBSCRIPTIONS),
                            ("--clients", a.clients, 1, MAX_CLIENTS), ("--seconds", a.seconds, 0.1, MAX_SECONDS),
                            ("--batch", a.batch, 1, 10_000), ("--publishers", a.publishers, 1, 1000),
                            ("--rate", a.rate, 0.1, 10_000_000), ("--drain", a.drain, 0, 120)):
        if not lo <= v <= hi:
            raise ValueError(f"{name} must be in [{lo:,}, {hi:,}], got {v}")
    if a.clients > a.subscriptions:
        raise ValueError("--clients must be at most --subscriptions (each client follows one)")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    _raise_fd_limit()
    proc = None
    if a.url is None:
        proc, url, key = _start_server(a, out)
        print(f"started skpubsub serve at {url} (index {a.index}, window {a.window}, fsync {a.fsync})", flush=True)
    else:
        url = a.url
        if not is_loopback(urlsplit(url).hostname or ""):
            raise ValueError(f"loadgen runs against a local server only (loopback), not {url}")
        if a.data is None:
            raise ValueError("--url needs --data DIR (the server's data directory, for admin.key)")
        key = (Path(a.data) / "admin.key").read_text().strip()
    try:
        report, st = asyncio.run(_run(a, url, key, proc.pid if proc is not None else None))
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
    report["server_started_by_loadgen"] = proc is not None
    png = out / "latency.png"
    why = _plot(report, st, png)
    report["png"] = None if why else str(png)
    (out / "loadgen.json").write_text(json.dumps(report, indent=2) + "\n")
    nl, rl = report["notification_latency_ms"], report["request_latency_ms"]
    print(f"published {report['published']:,} objects in {report['publish_seconds']:.2f} s = "
          f"{report['objects_per_second'] or 0:,.0f} objects/s (asked {a.rate:,.0f}; {a.publishers} publishers, "
          f"{a.batch} per request)")
    print(f"request latency: p50 {rl['p50']} ms, p95 {rl['p95']} ms, p99 {rl['p99']} ms")
    print(f"publish-to-notification ({report['notifications_received']:,} of {report['notifications_expected']:,} "
          f"on {report['streams_opened']:,} {'webhooks' if a.hooks else 'SSE clients'}): p50 {nl['p50']} ms, p95 {nl['p95']} ms, "
          f"p99 {nl['p99']} ms, max {nl['max']} ms")
    sv, cpu = report["server"], report["cpu_seconds_while_publishing"]
    print(f"CPU while publishing ({cpu['wall']:.1f} s): server {cpu['server']} s, loadgen {cpu['loadgen']} s; "
          f"load average {cpu['load_average_1min_after']} on {cpu['cores']} cores")
    print(f"server: {sv['events_per_batch']} events per micro-batch, apply {sv['apply_ms_per_batch']} ms and log "
          f"{sv['wal_ms_per_batch']} ms per micro-batch")
    print(why or f"wrote {out / 'loadgen.json'} and {png}")
    return 0


if __name__ == "__main__":  # python -m skpubsub.service.loadgen (as `skpubsub loadgen`)
    _ap = argparse.ArgumentParser(prog="python -m skpubsub.service.loadgen", description=DESCRIPTION)
    add_arguments(_ap)
    raise SystemExit(main(_ap.parse_args()))
