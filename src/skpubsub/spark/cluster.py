"""``skpubsub cluster start|stop|status``: a Spark standalone cluster on this machine.

A master and N workers started from the pyspark install (``bin/spark-class``), bound to
127.0.0.1 only, their logs and work folders in ``DIR`` (default
``$TMPDIR/skpubsub-cluster``); ``DIR/cluster.json`` records the master URL and the
processes (data: pids with their start commands, checked against ``/proc`` before any is
signalled, so a reused pid is never killed). ``start`` returns once every worker has
registered with the master (its JSON status page), and prints the master URL for
``--master``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

STATE = "cluster.json"
MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


def default_dir() -> Path:
    return Path(os.environ.get("SKPUBSUB_CLUSTER_DIR") or Path(tempfile.gettempdir()) / "skpubsub-cluster")


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(home: Path) -> dict[str, str]:
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_MASTER_HOST": "127.0.0.1",
           "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
    env.setdefault("SPARK_NO_DAEMONIZE", "1")
    return env


def _spawn(home: Path, args: list[str], log: Path) -> dict[str, Any]:
    with open(log, "ab") as f:
        p = subprocess.Popen([str(home / "bin" / "spark-class"), *args], env=_env(home), stdout=f,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    return {"pid": p.pid, "role": args[0].rsplit(".", 1)[-1], "log": str(log)}


def _alive(proc: dict) -> bool:
    """The recorded process still runs, and is still the Spark daemon it was (not a reused pid)."""
    try:
        cmd = Path(f"/proc/{proc['pid']}/cmdline").read_bytes()
        state = Path(f"/proc/{proc['pid']}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    if state == "Z":
        return False
    # empty while the launcher script execs java: still ours
    return not cmd or f"org.apache.spark.deploy.{proc['role'].lower()}.{proc['role']}".encode() in cmd


def _status(ui: int) -> dict | None:
    """The master's /json/ page; None while it is not up (not listening yet, or listening
    with an empty page: CI saw that, stop 31)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as r:
            info = json.loads(r.read())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None


def read_state(directory: Path) -> dict | None:
    try:
        st = json.loads((directory / STATE).read_text())
    except (OSError, ValueError):
        return None
    ok = (isinstance(st, dict) and isinstance(st.get("master"), str) and isinstance(st.get("ui"), int)
          and isinstance(st.get("procs"), list)
          and all(isinstance(p, dict) and isinstance(p.get("pid"), int) and p.get("role") in ("Master", "Worker")
                  for p in st["procs"]))
    return st if ok else None


def start(directory: Path | None = None, workers: int = 2, cores: int = 1, memory: str = "1g",
          port: int = 0, timeout: float = 120.0) -> dict:
    """Start a master and ``workers`` workers; returns the state (``master`` URL, ``ui`` port)."""
    d = Path(directory or default_dir())
    st = read_state(d)
    if st is not None and any(_alive(p) for p in st["procs"]):
        raise ValueError(f"a cluster already runs from {d} ({st['master']}); `skpubsub cluster stop` first")
    if workers < 1 or cores < 1:
        raise ValueError("--workers and --cores must be >= 1")
    d.mkdir(parents=True, exist_ok=True)
    home = spark_home()
    port, ui = port or _free_port(), _free_port()
    master = f"spark://127.0.0.1:{port}"
    procs = [_spawn(home, [MASTER, "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui)],
                    d / "master.log")]
    st = {"master": master, "ui": ui, "procs": procs, "dir": str(d)}
    (d / STATE).write_text(json.dumps(st))
    deadline = time.monotonic() + timeout
    while True:  # the master first: workers that come too early retry slowly
        if _status(ui) is not None:
            break
        if time.monotonic() > deadline or not _alive(procs[0]):
            stop(d)
            raise ValueError(f"the Spark master did not start; see {d / 'master.log'}")
        time.sleep(0.3)
    for i in range(workers):
        wd = d / f"worker-{i}"
        wd.mkdir(exist_ok=True)
        procs.append(_spawn(home, [WORKER, master, "--host", "127.0.0.1", "--cores", str(cores), "--memory", memory,
                                   "--work-dir", str(wd), "--webui-port", str(_free_port())], d / f"worker-{i}.log"))
        (d / STATE).write_text(json.dumps(st))
    while True:
        try:
            alive = int((_status(ui) or {}).get("aliveworkers", 0))
        except (TypeError, ValueError):
            alive = 0
        if alive >= workers:
            return st
        if time.monotonic() > deadline or not all(_alive(p) for p in procs):
            stop(d)
            raise ValueError(f"only {alive} of {workers} Spark workers registered; see the logs in {d}")
        time.sleep(0.3)


def stop(directory: Path | None = None, grace: float = 10.0) -> int:
    """Stop the processes ``start`` recorded (TERM, then KILL after ``grace`` s); returns how many."""
    d = Path(directory or default_dir())
    st = read_state(d)
    if st is None:
        return 0
    procs = [p for p in st["procs"] if _alive(p)]
    for p in reversed(procs):  # workers first
        try:
            os.killpg(p["pid"], signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + grace
    while any(_alive(p) for p in procs) and time.monotonic() < deadline:
        time.sleep(0.2)
    for p in procs:
        if _alive(p):
            try:
                os.killpg(p["pid"], signal.SIGKILL)
            except OSError:
                pass
    (d / STATE).unlink(missing_ok=True)
    return len(procs)


def status(directory: Path | None = None) -> dict | None:
    d = Path(directory or default_dir())
    st = read_state(d)
    if st is None or not any(_alive(p) for p in st["procs"]):
        return None
    info = _status(st["ui"]) or {}
    return {**st, "aliveworkers": info.get("aliveworkers"), "cores": info.get("cores"),
            "alive": [p["pid"] for p in st["procs"] if _alive(p)]}
