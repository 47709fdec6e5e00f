"""Redis Streams in and out (SPEC section 9) with a real redis-server on a loopback port.

The fast tests drive the pieces (the URL, the sink's exactly-once append, the source's
reads and statistics); the slow one runs ``run --engine spark redis://...`` with ``--sink``
in a subprocess, kills it (-9) mid-stream, runs it again, and checks the files against the
reference engine on the same events and the sink's stream against ``notifications.jsonl``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

redis = pytest.importorskip("redis")

from skpubsub.io.redis_bus import RedisURL, StreamSink, entry_ids  # noqa: E402
from skpubsub.testing.streams import random_stream  # noqa: E402

SERVER = shutil.which("redis-server")


@pytest.fixture(scope="module")
def redis_port(tmp_path_factory):
    """A redis-server of this module on a free loopback port (no persistence), stopped by pid."""
    if SERVER is None:
        pytest.skip("redis-server is not installed (tests/system_setup.sh)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    d = tmp_path_factory.mktemp("redis")
    p = subprocess.Popen([SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                          "--dir", str(d)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = redis.Redis(port=port)
    deadline = time.monotonic() + 20
    while True:
        try:
            r.ping()
            break
        except redis.ConnectionError:
            assert p.poll() is None and time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
    yield port
    p.terminate()
    p.wait(10)


def _lines(stream) -> list[str]:
    return [r if isinstance(r, str) else json.dumps(r) for r in stream.events]


def _xadd_events(r, key: str, lines: list[str | None]) -> list[str]:
    """One entry a line (``None``: an entry without the ``event`` field); their ids."""
    ids = []
    for line in lines:
        ids.append(r.xadd(key, {"event": line} if line is not None else {"other": "x"}).decode())
    return ids


def test_urls() -> None:
    u = RedisURL.parse("redis://127.0.0.1:7000/events")
    assert (u.host, u.port, u.db, u.key, u.tls) == ("127.0.0.1", 7000, 0, "events", False)
    assert RedisURL.parse("rediss://h/3/a%2Fb") == RedisURL(True, "h", 6379, 3, "a/b")
    for bad, why in [("redis://u:secret@h:1/k", "REDIS_PASSWORD"), ("redis://h:1/", "redis://HOST:PORT/KEY"),
                     ("redis://h:1/a/b/c", "redis://HOST:PORT/KEY"), ("redis://h:99999/k", "bad port"),
                     ("http://h/k", "not a Redis")]:
        with pytest.raises(ValueError, match=why):
            RedisURL.parse(bad)


def test_entry_ids_follow_the_notification_keys() -> None:
    keys = [b"%016x%016x" % (s, g) for s, g in [(1, 1), (2, 1), (2, 3), (2, 3), (9, 0)]]
    ids = list(entry_ids(keys))
    assert ids == ["1-16", "2-16", "2-48", "2-49", "9-0"]
    assert sorted(ids, key=lambda i: tuple(map(int, i.split("-")))) == ids


def test_the_sink_appends_once_whatever_a_replay_sends_again(redis_port) -> None:
    r = redis.Redis(port=redis_port)
    url = f"redis://127.0.0.1:{redis_port}/notes-a"
    keys = [b"%016x%016x" % (s, g) for s, g in [(1, 1), (2, 1), (2, 3), (3, 2), (5, 1)]]
    lines = [b'{"n":%d}\n' % i for i in range(5)]
    sink = StreamSink(url, "run1")
    assert sink.write(zip(keys[:2], lines[:2])) == 2  # a batch cut short (killed mid-pipeline)
    again = StreamSink(url, "run1")  # the restarted job
    assert again.write(zip(keys[:4], lines[:4])) == 2  # the replayed batch: only what was missing
    assert again.write(zip(keys[:4], lines[:4])) == 0
    assert again.write(zip(keys[4:], lines[4:])) == 1
    got = r.xrange("notes-a")
    assert [f[b"notification"] for _, f in got] == [x.rstrip(b"\n") for x in lines]
    assert [i.decode() for i, _ in got] == list(entry_ids(keys))
    with pytest.raises(ValueError, match="another run"):
        StreamSink(url, "run2").write(zip(keys, lines))


def test_the_password_comes_from_the_environment(redis_port, monkeypatch) -> None:
    r = redis.Redis(port=redis_port)
    r.config_set("requirepass", "s3cret")
    try:
        url = f"redis://127.0.0.1:{redis_port}/notes-p"
        monkeypatch.delenv("REDIS_PASSWORD", raising=False)
        with pytest.raises(ValueError, match=r"^Redis stream redis://127.0.0.1:\d+/0/notes-p: AuthenticationError"):
            StreamSink(url, "r").write([(b"%032x" % 1, b"{}")])
        monkeypatch.setenv("REDIS_PASSWORD", "s3cret")
        assert StreamSink(url, "r").write([(b"%032x" % 1, b"{}")]) == 1
    finally:
        redis.Redis(port=redis_port, password="s3cret").config_set("requirepass", "")


def test_the_source_reads_entries_as_numbered_lines(redis_port) -> None:
    from skpubsub.spark.redis_stream import read_entries
    from skpubsub.spark.source import _read

    r = redis.Redis(port=redis_port)
    url = f"redis://127.0.0.1:{redis_port}/in-a"
    s = random_stream(3, n_events=60, window="count:10")
    lines = _lines(s)
    ids = _xadd_events(r, "in-a", lines[:30] + [None] + lines[30:])
    got, end = _read(url, {"file": "", "pos": 0, "line": 0, "final": False}, 20)
    assert [n for n, _ in got] == list(range(1, 21)) and end["file"] == ids[19] and end["line"] == 20
    assert [raw.decode() for _, raw in got] == lines[:20]
    got, end = read_entries(url, end, 100, stop={"line": 31})
    assert [n for n, _ in got] == list(range(21, 32)) and got[-1][1] == b"" and end["file"] == ids[30]
    _, whole = read_entries(url, {"file": "", "line": 0}, None, keep=False)
    assert whole["line"] == len(ids) and whole["file"] == ids[-1]
    r.xdel("in-a", ids[3])
    with pytest.raises(ValueError, match="lost 1 of its"):
        read_entries(url, {"file": "", "line": 0}, 5)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "skpubsub.cli", *args]


@pytest.fixture(scope="module")
def spark():
    from skpubsub.spark.session import spark_session

    return spark_session("local[2]", workers=2)


@pytest.mark.slow
@pytest.mark.xdist_group("spark")
def test_redis_in_and_out_on_spark_killed_and_restarted(spark, redis_port, tmp_path: Path) -> None:
    """Events from a stream (bad entries among them, one without the field), notifications to
    another; the job is killed (-9) after two batches and run again: the files equal the
    reference engine's on the same events (rejections naming entries), and the output stream
    holds each line of notifications.jsonl once, in order."""
    from skpubsub.runtime.runner import run

    r = redis.Redis(port=redis_port)
    s = random_stream(511, n_events=(200, 260), windows=("count",))
    lines = _lines(s) + [None]  # the last entry has no "event" field
    lines.insert(len(lines) // 3, None)
    ids = _xadd_events(r, "in-k", lines)
    events = tmp_path / "events.jsonl"  # the same events as a file: a field-less entry is a blank line
    events.write_text("".join((x or "") + "\n" for x in lines))
    run(events, tmp_path / "ref", window=s.window, space=s.space, index="reference")
    want = {f: (tmp_path / "ref" / f).read_text() for f in ("results.jsonl", "notifications.jsonl")}
    rej = [json.loads(x) for x in (tmp_path / "ref" / "rejected.jsonl").read_text().splitlines()]
    assert sum(x is None for x in lines) == 2 and len(rej) >= 2
    want["rejected.jsonl"] = "".join(json.dumps({"entry": ids[x["line"] - 1], "error": x["error"], "raw": x["raw"]},
                                                ensure_ascii=False, separators=(",", ":")) + "\n" for x in rej)
    out = tmp_path / "spark"
    cmd = _cli("run", f"redis://127.0.0.1:{redis_port}/in-k", "--out", str(out), "--engine", "spark",
               "--sink", f"redis://127.0.0.1:{redis_port}/out-k", "--workers", "2", "--partitioner", "hash",
               "--init-objects", "5", "--lines-per-batch", "40", "--window", s.window,
               *(["--space", str(s.space)] if s.space else []), "--master", "local[2]")
    env = {**os.environ, "CI": "1"}
    log = tmp_path / "first.err"
    with log.open("w") as err:
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    batches = out / "batches"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and len(list(batches.glob("*/batch-*.json"))) < 2:
        assert p.poll() is None, ("the run ended before it could be killed", log.read_text()[-2000:])
        time.sleep(0.1)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    done = len(list(batches.glob("*/batch-*.json")))
    assert 2 <= done < len(lines) // 40, done  # killed mid-stream
    assert r.xlen("out-k") > 0  # the sink had written some
    from skpubsub.cli import main

    assert main(cmd[3:]) == 0  # again, on this process's session (a third JVM's start costs ~30 s)
    got = {f: (out / f).read_text() for f in want}
    assert got == want
    notes = [f[b"notification"].decode() + "\n" for _, f in r.xrange("out-k")]
    assert notes == want["notifications.jsonl"].splitlines(True)  # each once, in order
