"""``skpubsub serve``: its flags (added to the main parser by ``skpubsub.cli``) and its run."""

from __future__ import annotations

import argparse
import gc
import importlib.util

import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from ..runtime.engines import DEFAULT_INDEX
from .wal import FSYNC_MODES

DESCRIPTION = ("Run the engine as a long-lived HTTP service (SPEC section 8): subscribe, publish, "
               "Server-Sent Events, a write-ahead log and snapshots in --data DIR, /metrics, a live map at /. "
               "The admin key is written to DIR/admin.key at first start.")


def add_arguments(p: argparse.ArgumentParser, env: Callable[[str, str | None], str | None]) -> None:
    p.add_argument("--data", required=True, help="data directory: log, snapshots, keys")
    p.add_argument("--host", default=env("host", "127.0.0.1"), help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=int(env("port", "8080") or 8080), help="0 picks a free port")
    p.add_argument("--window", default=env("window", "none"))
    p.add_argument("--space", default=env("space", "-180,-90,180,90"))
    p.add_argument("--index", default=env("index", DEFAULT_INDEX))
    p.add_argument("--grid", type=int, default=None, help="grid cells per side (grid indexes)")
    p.add_argument("--fsync", default=env("fsync", "batch"), choices=FSYNC_MODES,
                   help="always: fsync before each answer (one per micro-batch); batch (default): fsync "
                        "within --fsync-interval; off: leave it to the kernel")
    p.add_argument("--fsync-interval", type=float, default=0.05, help="seconds; the loss window of --fsync batch")
    p.add_argument("--snapshot-every", type=int, default=100_000, help="events between snapshots")
    p.add_argument("--snapshot-seconds", type=float, default=60.0, help="seconds between snapshots")
    p.add_argument("--keep", type=int, default=10_000, help="notifications kept per subscription")
    p.add_argument("--keep-total", type=int, default=1_000_000,
                   help="notifications kept in all, every subscription together (oldest dropped first)")
    p.add_argument("--keep-ended", type=int, default=10_000,
                   help="ended subscriptions whose stream stays readable (last notifications, then end)")
    p.add_argument("--ended-seconds", type=float, default=3600.0,
                   help="how long an ended subscription's stream stays readable")
    p.add_argument("--ended-notifications", type=int, default=1_000_000,
                   help="notifications kept by the ended subscriptions, all together")
    p.add_argument("--max-body", type=int, default=32 << 20, help="bytes of one request body")
    p.add_argument("--max-events", type=int, default=10_000, help="events of one request")
    p.add_argument("--max-batch", type=int, default=5_000, help="events of one micro-batch")
    p.add_argument("--max-streams", type=int, default=2_000, help="open SSE streams in total")
    p.add_argument("--streams-per-token", type=int, default=4, help="open SSE streams per subscription")
    p.add_argument("--write-timeout", type=float, default=10.0,
                   help="seconds a client may take to read one SSE chunk before it is dropped")
    p.add_argument("--hook-allow", default="", metavar="HOST[,HOST]",
                   help="hosts a subscription's hook URL may name without the admin key (SPEC 9)")
    p.add_argument("--hook-timeout", type=float, default=5.0,
                   help="seconds a hook's receiver has to answer a POST before it is retried")
    p.add_argument("--workers", type=int, default=1,
                   help="M > 1: M worker engines in processes behind a dispatcher (the local runtime of run)")
    p.add_argument("--partitioner", default=None, help="how --workers places subscriptions (default hash)")
    p.add_argument("--profile", default=None, metavar="FILE",
                   help="profile the server (cProfile, the event loop's thread) and write the stats to FILE at exit")
    p.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])


class _Server:
    """uvicorn's server, remembering which signal stopped it (exit 130/143, SPEC 7)."""

    def __init__(self, config) -> None:
        import uvicorn

        class Server(uvicorn.Server):
            signal_seen: int | None = None

            def handle_exit(self, sig, frame) -> None:
                # uvicorn's own handler also raises the signal again after the shutdown (the
                # process then dies by it); SPEC 7 wants one line and exit 128 + signal.
                self.signal_seen = sig
                if self.should_exit and sig == signal.SIGINT:
                    self.force_exit = True
                else:
                    self.should_exit = True

        self.server = Server(config)


def serve(a: argparse.Namespace) -> int:
    for module, name in (("starlette", "Starlette"), ("uvicorn", "uvicorn"), ("prometheus_client", "prometheus_client")):
        if importlib.util.find_spec(module) is None:
            raise ValueError(f"serve needs {name}: pip install 'skpubsub[service]'")
    for flag, v in (("--workers", a.workers), ("--keep", a.keep), ("--keep-total", a.keep_total), ("--max-events", a.max_events),
                    ("--max-batch", a.max_batch),
                    ("--snapshot-every", a.snapshot_every), ("--max-streams", a.max_streams),
                    ("--streams-per-token", a.streams_per_token)):
        if v < 1:
            raise ValueError(f"{flag} must be >= 1, got {v}")
    if not a.hook_timeout > 0:
        raise ValueError(f"--hook-timeout must be > 0, got {a.hook_timeout}")
    from ..runtime.engines import is_known

    if not is_known(a.index):
        from ..index.registry import unknown_index

        raise ValueError(unknown_index(a.index))
    if a.workers > 1 or a.partitioner is not None:  # as run: a partitioner means the local runtime
        from ..partition.registry import PLANNERS

        if a.partitioner is not None and a.partitioner not in PLANNERS:
            raise ValueError(f"unknown partitioner {a.partitioner!r}; known: {', '.join(PLANNERS)}")
        if a.index == "reference":
            raise ValueError("--workers needs an index with external expiry (not 'reference')")
    import asyncio

    import uvicorn

    from .app import Limits, build_app
    from .core import Core
    from .wal import Damaged

    params = {"grid": a.grid} if a.grid and a.index != "reference" else {}
    core = Core(Path(a.data), a.window, a.space, index=a.index, index_params=params, fsync=a.fsync,
                fsync_interval=a.fsync_interval, keep=a.keep, snapshot_every=a.snapshot_every,
                snapshot_seconds=a.snapshot_seconds, keep_ended=a.keep_ended, ended_seconds=a.ended_seconds,
                ended_lines=a.ended_notifications, workers=a.workers, keep_total=a.keep_total,
                partitioner=a.partitioner)
    from .cluster import WorkerDied

    try:
        core.open()
    except (Damaged, OSError, WorkerDied) as exc:
        core.close()
        raise ValueError(f"cannot open --data {a.data}: {exc}") from None
    try:  # compiled kernels ready before the first request (and before the banner says we listen)
        warm = core.warm_up()
    except Exception as exc:
        core.close()
        raise ValueError(f"warm-up of the {a.index} engine failed: {type(exc).__name__}: {exc}") from None
    limits = Limits(max_body=a.max_body, max_events=a.max_events, max_batch=a.max_batch,
                    max_streams=a.max_streams, streams_per_token=a.streams_per_token,
                    write_timeout=a.write_timeout, hook_timeout=a.hook_timeout,
                    hook_allow=frozenset(h.strip().lower().strip("[]") for h in a.hook_allow.split(",") if h.strip()))
    app = build_app(core, limits)
    family = socket.AF_INET6 if ":" in a.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it (Linux): without it a kept-alive client waits ~40 ms for
    # each answer (Nagle's algorithm against the client's delayed ACK).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((a.host, a.port))
    except OSError as exc:
        core.close()
        raise ValueError(f"cannot listen on {a.host}:{a.port}: {exc.strerror}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    host, port = sock.getsockname()[:2]
    url = f"http://{'[' + host + ']' if family == socket.AF_INET6 else host}:{port}"
    config = uvicorn.Config(app, log_level=a.log_level, access_log=False, lifespan="on",
                            timeout_graceful_shutdown=3, backlog=2048)
    server = _Server(config).server
    restored = (f", restored from snapshot {core.restored_from}" if core.restored_from is not None else "")
    print(f"skpubsub serve: listening on {url} (data {a.data}: {core.seq} events{restored}, "
          f"{core.replayed} replayed from the log; warmed up in {warm:.2f} s; admin key in "
          f"{Path(a.data) / 'admin.key'})", flush=True)
    gc.freeze()  # the restored state and the warm-up's compiled code: out of the collector's full passes
    prof = None
    if a.profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    try:
        # uvloop and httptools when installed (uvicorn's "auto"), else asyncio and h11
        with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
            runner.run(server.serve(sockets=[sock]))
    finally:
        if prof is not None:
            prof.disable()
            prof.dump_stats(a.profile)
    sig = server.signal_seen
    if sig is not None:
        print(f"skpubsub serve: stopped by {signal.Signals(sig).name}", file=sys.stderr, flush=True)
        return 128 + int(sig)
    return 0


