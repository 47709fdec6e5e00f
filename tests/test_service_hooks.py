"""Webhooks of ``skpubsub serve`` (SPEC section 9) with the real parts: the server in a
subprocess, and a receiver that is a real HTTP/1.1 server on loopback (kept-alive
connections), which goes down and comes up during the run and sometimes answers 500.

What every receiver got is checked against the reference engine's notifications of the
acknowledged events: in order, each number at least once, none skipped, each signed with the
subscription's token.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import socket
import threading
import time
from collections import defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from test_service import Server, clean_records, expected, server  # noqa: E402,F401 (server: a fixture)

from skpubsub.service.client import sub_path  # noqa: E402
from skpubsub.testing.streams import random_stream  # noqa: E402


class Receiver:
    """An HTTP/1.1 receiver on 127.0.0.1:``port``: records every POST (subscription, seq header,
    body, whether the signature is good for the token given at ``expect``); ``down()`` closes
    the listener and every open connection, ``up()`` listens again on the same port;
    ``fail_rate`` of the POSTs are answered 500 (not acknowledged)."""

    def __init__(self, fail_rate: float = 0.0, seed: int = 0) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.tokens: dict[str, str] = {}
        self.got: dict[str, list[tuple[int | None, bytes]]] = defaultdict(list)
        self.bad_signatures = 0
        self.fail_rate, self.rng = fail_rate, random.Random(seed)
        self.lock = threading.Lock()
        self.conns: set[socket.socket] = set()
        self.httpd: ThreadingHTTPServer | None = None
        self.up()

    def expect(self, sub: str, token: str) -> None:
        self.tokens[sub] = token

    def up(self) -> None:
        rec = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with rec.lock:
                    rec.conns.add(self.connection)

            def finish(self) -> None:
                with rec.lock:
                    rec.conns.discard(self.connection)
                super().finish()

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                sub = self.headers["X-Skpubsub-Subscription"]
                seq = self.headers.get("X-Skpubsub-Seq")
                sig = self.headers["X-Skpubsub-Signature"]
                with rec.lock:
                    fail = rec.rng.random() < rec.fail_rate
                    token = rec.tokens.get(sub, "")
                    good = hmac.compare_digest(sig, "sha256=" + hmac.new(token.encode(), body, hashlib.sha256).hexdigest())
                    if not good:
                        rec.bad_signatures += 1
                    if not fail and good:
                        rec.got[sub].append((int(seq) if seq is not None else None, body))
                self.send_response(500 if fail or not good else 204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def down(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        with self.lock:
            for c in list(self.conns):
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"


def _check(got: list[tuple[int | None, bytes]], want: list[str]) -> None:
    """In order, each number at least once, none skipped: every number is at most one past
    the highest before it (a restart may send again from an older cursor), all of 1..N came,
    and each body is the notification's line."""
    top = 0
    for n, body in got:
        assert n is not None and n <= top + 1, (n, top)
        assert body.decode() == want[n - 1], n
        top = max(top, n)
    assert top == len(want), (top, len(want))


def _sub(ident: str, sp, words, i: int, hook: str | None) -> dict:
    cx, cy = (sp.x1 + sp.x2) / 2, (sp.y1 + sp.y2) / 2
    d = {"op": "sub", "id": ident, "keywords": words, "match": "any"}
    d.update([{"kind": "range", "rect": [sp.x1, sp.y1, cx, sp.y2] if i % 2 else [cx, sp.y1, sp.x2, sp.y2]},
              {"kind": "knn", "x": cx, "y": cy, "k": 3 + i},
              {"kind": "topk", "x": cx + i, "y": cy, "k": 4, "alpha": 0.5}][i % 3])
    if hook:
        d["hook"] = {"url": hook}
    return d


@pytest.mark.slow
def test_hooks_deliver_every_notification_through_receiver_outages_and_sigkills(tmp_path) -> None:
    """Six hooked subscriptions over a random stream; the receiver answers 500 to a tenth of the
    POSTs, goes down twice for a while, and the server is SIGKILLed twice mid-stream and started
    again on the same DIR: each receiver got every notification of its subscription in order,
    signed, none skipped; then the counters say all is delivered."""
    s = random_stream(17, n_events=1500, window="count:30", junk=False)
    records = clean_records(s)
    sp, t0 = s.space_or_default, records[0]["t"]
    words = sorted({w for r in records if r.get("op") == "pub" for w in r.get("keywords", [])} - {""})[:6]
    recv = Receiver(fail_rate=0.05, seed=3)
    hooked = [dict(_sub(f"h{i}", sp, words, i, recv.url), t=t0) for i in range(6)]
    srv = Server(tmp_path / "data", f"--space={sp}", "--snapshot-every", "300", "--hook-timeout", "1",
                 window=s.window, index="dkm").start()
    port = int(srv.url.rsplit(":", 1)[1])
    srv.flags += ["--port", str(port)]  # restarts listen where the first one did
    c = srv.client()
    a = c.post("/v1/events", hooked)
    assert a.status == 200, a
    regs = {}
    for h, ans in zip(hooked, a.json()):
        recv.expect(h["id"], ans["token"])
        regs[h["id"]] = ans["seq"]
    acked = [dict(h, _seq=ans["seq"]) for h, ans in zip(hooked, a.json())]
    rng = random.Random(9)
    sent, n = 0, len(records)
    plan = {n // 5: "down", 2 * n // 5: "kill", n // 2: "up", 3 * n // 5: "down", 7 * n // 10: "kill", 4 * n // 5: "up"}
    done = set()
    while sent < n:
        for at, what in plan.items():
            if sent >= at and at not in done:
                done.add(at)
                if what == "down":
                    recv.down()
                elif what == "up":
                    recv.up()
                else:
                    srv.kill()
                    srv.start()
                    c = srv.client()
        chunk = records[sent:sent + rng.choice([1, 5, 20, 40])]
        a = c.post("/v1/events", chunk)
        assert a.status == 200, a
        for rec, ans in zip(chunk, a.json()):
            assert "seq" in ans, ans
            acked.append(dict(rec, _seq=ans["seq"]))
        sent += len(chunk)
        time.sleep(0.003)
    _, _, per_reg = expected(s.window, sp, acked)
    deadline = time.time() + 60
    while time.time() < deadline:
        with recv.lock:
            if all(recv.got[i] and max(k for k, _ in recv.got[i]) >= len(per_reg[q]) for i, q in regs.items()):
                break
        time.sleep(0.1)
    try:
        assert recv.bad_signatures == 0
        assert sum(len(per_reg[q]) for q in regs.values()) > 100
        for i, q in regs.items():
            _check(recv.got[i], per_reg[q])
        metrics = c.get("/metrics").body.decode()
        for i, q in regs.items():
            assert f'skpubsub_hook_lag{{reg="{q}",sub="{i}"}} 0.0' in metrics, metrics
        assert 'skpubsub_hook_failed_total{reg="' in metrics
    finally:
        srv.stop()
        recv.down()
    cursors = json.loads((tmp_path / "data" / "hooks.json").read_text())["acked"]  # flushed at shutdown
    assert {int(k): v for k, v in cursors.items()} == {q: len(per_reg[q]) for q in regs.values()}


def test_who_may_set_a_hook_and_what_ends_it(server, tmp_path) -> None:
    """A hook needs the admin key or an allowed host (403, nothing registered); a bad one is
    that record's error. While the receiver is down past --keep-total, it gets one gap, then
    the kept ones; DELETE stops the hook once what was queued is delivered."""
    recv = Receiver()
    recv.down()
    srv = server("--hook-allow", "127.0.0.1", "--keep", "5", "--keep-total", "30", "--hook-timeout", "1",
                 space="0,0,10,10")
    c, anon = srv.client(), srv.client(key=None)
    rect = {"kind": "range", "rect": [0, 0, 10, 10], "keywords": ["a"]}
    a = anon.post("/v1/subscriptions", dict(rect, id="x", hook={"url": "http://example.org/h"}))
    assert a.status == 403 and "not allowed" in a.json()["error"], a
    assert c.get("/healthz").json()["seq"] == 0  # nothing registered
    a = anon.post("/v1/subscriptions", dict(rect, id="x", hook={"url": "ftp://127.0.0.1/h"}))
    assert a.status == 400 and a.json()["error"].startswith("bad hook url"), a
    a = anon.post("/v1/subscriptions", dict(rect, id="x", hook="http://127.0.0.1/"))
    assert a.status == 400 and a.json()["error"].startswith("bad hook"), a
    a = c.post("/v1/subscriptions", dict(rect, id="h", hook={"url": "http://example.org/h"}))  # admin: any host
    assert a.status == 201, a
    assert c.delete(sub_path("h"), key=a.json()["token"]).status == 200
    a = anon.post("/v1/subscriptions", dict(rect, id="s", hook={"url": recv.url}))  # an allowed host
    assert a.status == 201, a
    token = a.json()["token"]
    recv.expect("s", token)
    for k in range(60):
        assert c.post("/v1/objects", {"id": f"o{k}", "x": 1, "y": 1, "text": "a"}).status == 200
    assert c.delete(sub_path("s"), key=token).status == 200
    recv.up()
    deadline = time.time() + 20
    while time.time() < deadline and 'skpubsub_hook_lag{reg="3",sub="s"}' in c.get("/metrics").body.decode():
        time.sleep(0.1)
    got = recv.got["s"]
    assert got[0][0] is None and json.loads(got[0][1])["gap"]["after"] == 0  # the gap, once, first
    first = json.loads(got[0][1])["gap"]["first_kept"]
    assert first > 1 and [n for n, _ in got[1:]] == list(range(first, 61)), got
    assert [json.loads(b)["object"] for _, b in got[1:]] == [f"o{k - 1}" for k in range(first, 61)]
    # the hook stopped (no lag line), and its cursor is gone from the file at shutdown
    assert "skpubsub_hook_lag{" not in c.get("/metrics").body.decode()
    srv.stop()
    assert json.loads((Path(srv.data) / "hooks.json").read_text())["acked"] == {}
    recv.down()
