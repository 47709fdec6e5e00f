"""``skpubsub loadgen`` (a benchmark) runs tiny against the server it starts, and writes a
valid JSON report and a PNG of latency over time; it refuses any non-loopback server."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")


@pytest.mark.parametrize("hooks", [[], ["--hooks"]], ids=["sse", "hooks"])
def test_loadgen_runs_tiny_and_writes_json_and_png(tmp_path, hooks) -> None:
    """Followed over SSE, or (``--hooks``) by webhooks to loadgen's own receiver."""
    out = tmp_path / "lg"
    p = subprocess.run([sys.executable, "-m", "skpubsub", "loadgen", "--subscriptions", "200", "--clients", "5",
                        "--seconds", "2", "--rate", "100", "--publishers", "2", "--out", str(out), *hooks],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "publish-to-notification" in p.stdout
    rep = json.loads((out / "loadgen.json").read_text())
    assert rep["registered"] == 200 and rep["streams_opened"] == 5 and rep["server_started_by_loadgen"]
    assert rep["published"] >= 100
    assert rep["config"]["hooks"] == bool(hooks)
    # every object went to a followed cell: each one is a notification on an SSE client (or a hook)
    assert rep["notifications_received"] == rep["notifications_expected"] == rep["published"]
    nl = rep["notification_latency_ms"]
    assert nl["count"] == rep["published"] and 0 < nl["p50"] <= nl["p95"] <= nl["p99"] <= nl["max"]
    assert rep["request_latency_ms"]["p50"] > 0
    assert sum(s["objects"] for s in rep["per_second"]) == rep["published"]
    png = out / "latency.png"
    if pytest.importorskip("matplotlib"):
        assert rep["png"] == str(png)
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        import matplotlib.image

        img = matplotlib.image.imread(png)
        assert img.shape[0] > 100 and img.shape[1] > 100
    # the server it started was stopped cleanly: its data directory has a final snapshot
    assert list((out / "server-data" / "snapshots").glob("snapshot-*.json"))


def test_loadgen_refuses_a_server_not_on_loopback(tmp_path) -> None:
    p = subprocess.run([sys.executable, "-m", "skpubsub", "loadgen", "--url", "http://192.0.2.1:8080",
                        "--data", str(tmp_path), "--out", str(tmp_path / "o")],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "loopback" in p.stderr
