"""The service's state machine: Gate, engine, registrations, log and snapshots.

Synchronous and free of the web stack, so that it is the same code whether events come
from HTTP (:mod:`.app`) or from the log at restart. One ``Core`` applies events in
arrival order; :meth:`Core.process` takes a micro-batch of parsed records and

1. fills what the service may fill (``op`` implied by the route, ``t`` omitted =
   ``max(last t, now)``, a missing subscription ``id``), validates each record through the
   one Gate (SPEC section 5; a rejected record changes nothing),
2. writes the accepted ones to the write-ahead log in one write (group commit),
3. applies them to the engine and hands each notification to its registration, which
   numbers it (per-subscription sequence numbers, the SSE ``id:``) and keeps the last
   ``keep`` of them,
4. answers one ``{"seq": n}`` (plus ``id`` and ``token`` for a subscription) or
   ``{"error": reason}`` per record.

A *registration* is one life of a subscription id (ids come back after an ``unsub`` or an
``expires``): its token digest, its notifications, whether it ended. Notifications of one
engine call are routed by id, so a batch is cut before a ``sub`` whose id had a
registration in it (the old and the new life never share a call).

Restart (:meth:`Core.open`) = newest readable snapshot + the log after it; a snapshot is
re-applied with its notifications suppressed, and the kNN/top-k results it recorded must
come out equal or it is refused (then an older one is tried).
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import hashlib
import hmac
import json
import os
import secrets
import signal

import msgspec
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.clock import WindowClock
from ..core.config import Space, Window
from ..io.events import RANGE, Pub, Rejection, Sub, Unsub
from ..io.notifications import Notes, note_lines
from ..io.validate import Gate
from ..runtime.engines import DEFAULT_INDEX, make_engine
from . import auth
from .registrations import Book, Reg
from .snapshot import list_snapshots, read_snapshot, write_snapshot
from .wal import SVC, Damaged, WriteAheadLog

SERVICE_FILE = "service.json"
FORMAT = "skpubsub-service"
KEEP = 10_000  # notifications kept per registration (SPEC section 8)
KEEP_TOTAL = 1_000_000  # notifications kept in all, live and ended registrations together
ROUTE_OPS = {"objects": "pub", "subscriptions": "sub", "events": None}


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


# A record's log line: msgspec's compact UTF-8 JSON (a lone surrogate raises UnicodeEncodeError,
# as json.dumps(...).encode() does); read back by the log's json.loads as the same values.
_encode = msgspec.json.Encoder().encode
_SVC_KEY = f',"{SVC}":'.encode()


@dataclass
class Outcome:
    """What one micro-batch did, for the answers, the metrics and the SSE streams."""

    results: list[dict]
    accepted: Counter = field(default_factory=Counter)
    rejected: Counter = field(default_factory=Counter)
    notifications: int = 0
    touched: set = field(default_factory=set)
    feed: deque = field(default_factory=deque)  # the last feed items (``feed_item`` makes them dicts)
    feed_count: int = 0  # feed items made, the ones pushed out of ``feed`` included
    wal_seconds: float = 0.0
    apply_seconds: float = 0.0


def _child_setup() -> None:
    """In a snapshot child: signals as by default (none reaches the parent's event loop
    through the inherited wakeup fd), and die with the parent (a SIGKILLed server leaves no
    writer behind to race its restart)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)
    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(-1)
    parent = os.getppid()
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG (Linux)
    if os.getppid() != parent:  # the parent died before prctl
        os._exit(1)


class ForkedSnapshot:
    """A snapshot being written by a child process; ``wait()`` (blocking: run it in a
    thread) reaps it and returns the path, or raises with the child's reason."""

    def __init__(self, core: Core, seq: int, pid: int, fd: int) -> None:
        self.core, self.seq, self.pid, self.fd = core, seq, pid, fd

    def wait(self) -> tuple[str, set | None]:
        with os.fdopen(self.fd, "rb") as f:
            report = f.read()
        _, status = os.waitpid(self.pid, 0)
        try:
            got = msgspec.json.decode(report) if report else {}
        except msgspec.DecodeError:
            got = {}
        if os.waitstatus_to_exitcode(status) != 0 or "path" not in got:
            raise RuntimeError(got.get("error") or f"snapshot child exited with status {status}")
        need = got["need"]
        return got["path"], set(need) if need is not None else None

    def finish(self, path_need: tuple[str, set | None]) -> str:
        """On the applier's thread, after ``wait``: prune, drop what the snapshot covers."""
        path, need = path_need
        self.core._prune(self.seq, need)
        self.core.snapshot_written()
        return path


def results_of(engine: Any, ids: list) -> dict:
    """id -> result ids of the active kNN/top-k subscriptions among ``ids`` (one message per
    worker under ``--workers``)."""
    query = getattr(engine, "query", None)
    if query is not None:
        return {sid: r for sid, (r, _) in query(list(ids)).items()}
    return {sid: r for sid in ids if (r := engine.results(sid)) is not None}


def result_seqs(engine: Any, sub_id: Any) -> list[int]:
    """Stream positions of the objects in a kNN/top-k subscription's result.

    Reads the engines' tables (the public ``subs``/``objs`` of :class:`Engine`, the
    reference engine's ``subs``): the engine API has no such call yet (see NOTES.md).
    """
    subs = engine.subs
    if isinstance(subs, dict):  # the reference engine
        return [o.seq for o in subs[sub_id].result]
    engine.flush()  # lone subscriptions held by ``apply`` registered before the tables are read
    s = subs.slot_of[sub_id]
    return engine.objs.cols.seq[subs.result(s)].tolist()


def _columnar(engine: Any, evs: list) -> tuple[Any, list]:
    """Apply ``evs``: (the notifications, as ``note_lines`` takes them; their subscription
    ids in the same order). The compiled engines' columns are formatted without making a
    Python object per notification (the lines ``skpubsub run`` writes, byte for byte)."""
    apply_columnar = getattr(engine, "apply_columnar", None)
    if apply_columnar is None:  # the reference engine
        notes = engine.apply(evs)
        return notes, [n.sub for n in notes]
    batch = apply_columnar(evs)
    subs: list = []
    for part in batch.parts:
        subs.extend(part.sub.tolist() if isinstance(part, Notes) else [n.sub for n in part])
    return batch, subs


def feed_item(item: tuple) -> dict:
    """A feed entry as the admin feed sends it: ``("e", event)`` or ``("n", line, registration
    seq, number, kind)`` (tuples while they wait: most are pushed out before anyone reads them)."""
    if item[0] == "e":
        return _feed_event(item[1])
    _, line, reg, n, kind = item
    return {"note": line, "reg": reg, "n": n, "kind": kind}


def _feed_event(ev: Any) -> dict:
    if isinstance(ev, Pub):
        return {"op": "pub", "seq": ev.seq, "id": ev.id, "t": ev.t, "x": ev.x, "y": ev.y,
                "keywords": list(ev.keywords)}
    if isinstance(ev, Sub):
        d = {"op": "sub", "seq": ev.seq, "id": ev.id, "t": ev.t, "kind": ev.kind, "keywords": list(ev.keywords)}
        if ev.kind == RANGE:
            d["rect"] = list(ev.rect)
        else:
            d.update(x=ev.x, y=ev.y, k=ev.k)
        return d
    return {"op": "unsub", "seq": ev.seq, "id": ev.id, "t": ev.t}


class Core:
    def __init__(self, data: Path | str, window: Window | str = "none", space: Space | None = None,
                 index: str = DEFAULT_INDEX, index_params: dict | None = None, fsync: str = "batch",
                 fsync_interval: float = 0.05, keep: int = KEEP, snapshot_every: int = 100_000,
                 snapshot_seconds: float = 60.0, feed: bool = True, keep_ended: int = 10_000,
                 ended_seconds: float = 3600.0, ended_lines: int = 1_000_000, workers: int = 1,
                 partitioner: str | None = None, processes: bool = True, keep_total: int = KEEP_TOTAL) -> None:
        self.data = Path(data)
        self.window = Window.parse(window) if isinstance(window, str) else window
        self.space = space or Space()
        self.index = index
        self.index_params = dict(index_params or {})
        self.workers = workers
        # the local multi-worker runtime (service/cluster.py) as run takes it: M > 1 or a partitioner
        self.multi = workers > 1 or partitioner is not None
        self.partitioner = partitioner or "hash"
        self.processes = processes
        self.engine: Any = None
        self.keep = keep
        self.keep_total = keep_total  # notifications kept in all (memory bound), oldest out first
        self.snapshot_every = snapshot_every
        self.snapshot_seconds = snapshot_seconds
        self.feed_on = feed
        self.feed_keep = 5_000  # feed items a micro-batch keeps (the app keeps as many)
        self.keep_ended = keep_ended  # ended registrations kept for their clients: at most this many,
        self.ended_seconds = ended_seconds  # for this long after their end (wall clock),
        self.ended_lines = ended_lines  # and this many kept notifications among them all
        self.wal = WriteAheadLog(self.data / "wal", fsync, fsync_interval)
        self.snap_dir = self.data / "snapshots"
        self.broken: str | None = None
        self.run_id = ""
        self.new_hooks: list[Reg] = []  # hooked registrations made since the hooks last looked (hooks.py)
        self._fresh()

    def _fresh(self) -> None:
        self.gate = Gate(self.window, self.space)
        if self.engine is not None and hasattr(self.engine, "close"):
            self.engine.close()  # a restore that failed: its workers go
        if self.multi:
            from .cluster import ClusterEngine

            self.engine = ClusterEngine(self.window, self.space, self.index, self.workers, self.partitioner,
                                        self.processes, **self.index_params)
        else:
            self.engine = make_engine(self.index, self.window, self.space, **self.index_params)
        self.seq = 0  # the last accepted event's stream position
        self.book = Book(self.keep, self.keep_total, self.keep_ended, self.ended_seconds, self.ended_lines)
        self.regs = self.book.regs  # live registrations by subscription id (the book's dict)
        self.sub_clock = WindowClock(self.window)  # when registrations end by ``expires``
        self.obj_clock = WindowClock(self.window)  # when kept object records leave
        self.objects: dict[int, dict] = {}  # seq -> record: objects a restart may need
        self.snap_seq = 0
        self.snap_time = time.monotonic()
        self.snapshots_written = 0
        self.restored_from: int | None = None
        self.replayed = 0

    def warm_up(self) -> float:
        """Apply a small stream of every kind to a throwaway engine of the same index, window
        and space, so that the compiled kernels (Numba: compiled on first call, or read from
        its cache) are ready before the first request; returns the seconds it took."""
        t0 = time.perf_counter()
        sp = self.space
        cx, cy = (sp.x1 + sp.x2) / 2, (sp.y1 + sp.y2) / 2
        d = min(sp.x2 - sp.x1, sp.y2 - sp.y1) / 100
        gate = Gate(self.window, sp)
        engine = make_engine(self.index, self.window, sp, **self.index_params)
        recs: list[dict] = [
            {"op": "sub", "id": "r", "kind": "range", "rect": [cx - d, cy - d, cx + d, cy + d], "keywords": ["a"]},
            {"op": "sub", "id": "r2", "kind": "range", "rect": [cx - d, cy - d, cx + d, cy + d],
             "keywords": ["a", "b"], "match": "any"},
            {"op": "sub", "id": "k", "kind": "knn", "x": cx, "y": cy, "k": 2, "keywords": ["a"]},
            {"op": "sub", "id": "k2", "kind": "knn", "x": cx, "y": cy, "k": 2, "keywords": ["a", "b"], "match": "all"},
            {"op": "sub", "id": "p", "kind": "topk", "x": cx, "y": cy, "k": 2, "alpha": 0.5, "keywords": ["a", "b"]},
        ]
        for i in range(8):
            recs.append({"op": "pub", "id": f"o{i}", "x": cx + (i - 4) * d / 8, "y": cy, "text": "a b" if i % 2 else "a"})
        recs.append({"op": "unsub", "id": "r"})
        evs = []
        for i, rec in enumerate(recs):
            rec["t"] = i // 4
            ev = gate.admit(rec, i + 1)
            if not isinstance(ev, Rejection):
                evs.append(ev)
        for lo in range(0, len(evs), 7):  # a batch of several, then the rest: both paths of the driver
            note_lines(_columnar(engine, evs[lo:lo + 7])[0])
        if self.multi and self.engine.cluster is None:  # the workers started before the first request
            self.engine.start([])
        return time.perf_counter() - t0

    # -- files -----------------------------------------------------------------------------
    def open(self) -> None:
        """Create or reopen the data directory: identity, admin key, snapshot + log tail."""
        self.data.mkdir(parents=True, exist_ok=True)
        self._identity()
        self.admin_key = auth.admin_key(self.data)
        self.hook_key = auth.admin_key(self.data, auth.HOOK_KEY)
        errors = []
        for seq, path in reversed(list_snapshots(self.snap_dir)):
            try:
                self._fresh()
                self._restore(path)
                self._replay()
                break
            except Damaged as exc:
                errors.append(str(exc))
        else:
            self._fresh()
            try:
                self._replay()
            except Damaged as exc:
                raise Damaged("; ".join(errors + [str(exc)])) from None
        self.wal.start(self.seq + 1)
        self.snap_time = time.monotonic()

    def _identity(self) -> None:
        path = self.data / SERVICE_FILE
        want = {"window": str(self.window), "space": str(self.space)}
        if path.exists():
            try:
                have = json.loads(path.read_text())
                assert have.get("format") == FORMAT
            except (ValueError, AssertionError):
                raise Damaged(f"{path}: not a skpubsub service file") from None
            for k, v in want.items():
                if have.get(k) != v:
                    raise ValueError(f"{self.data} holds a service with --{k} {have.get(k)}; start it with the "
                                     f"same --{k} (or give a new --data DIR)")
            self.run_id = have["run"]
            return
        if self.wal.segments() or list_snapshots(self.snap_dir):
            raise Damaged(f"{self.data}: a log or snapshots without {SERVICE_FILE}; refusing to guess its settings")
        self.run_id = secrets.token_hex(8)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"format": FORMAT, "version": 1, "run": self.run_id, **want}) + "\n")
        tmp.replace(path)

    def _restore(self, path: Path) -> None:
        seq, body = read_snapshot(path, self.run_id)
        evs = []
        try:
            for rec in body["events"]:
                ev = self.gate.admit(dict(rec), rec[SVC]["seq"])
                if isinstance(ev, Rejection):
                    raise Damaged(f"{path}: record {rec[SVC]['seq']} rejected on restore: {ev.error}")
                evs.append((ev, rec))
            self.engine.apply([ev for ev, _ in evs])
            got = json.loads(_dumps(self.engine.all_results()))
            if got != body["results"]:
                raise Damaged(f"{path}: the restored results differ from the snapshot's")
            rings = {r["seq"]: r for r in body["regs"]}
            for ev, rec in evs:
                if isinstance(ev, Sub):
                    reg = self._register(ev, rec)
                    r = rings[ev.seq]
                    reg.restore(r["next"], r["ring"])
                else:
                    self._keep_object(ev, rec)
            self.gate.last_t = body["last_t"]
            for r in body.get("ended", ()):  # ended registrations still readable by their clients
                rec = r["record"]
                reg = Reg(rec, rec[SVC].get("token"), self.book.keep_of(rec))
                reg.restore(r["next"], r["ring"])
                reg.ended, reg.ended_at = r["why"], r["at"]
                self.book.bury(reg)
            self.book.rebuild_order(body.get("order"))
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, Damaged):
                raise
            raise Damaged(f"{path}: malformed ({type(exc).__name__}: {exc})") from None
        self.seq = self.snap_seq = seq
        self.restored_from = seq

    def _replay(self) -> None:
        """Apply the log after the snapshot, notifications numbered as the first time."""
        chunk: list = []
        for rec in self.wal.records_after(self.seq):
            seq = rec[SVC]["seq"]
            if seq != self.seq + 1:
                raise Damaged(f"log starts at seq {seq}, but the state ends at {self.seq}")
            ev = self.gate.admit(rec, seq)
            if isinstance(ev, Rejection):
                raise Damaged(f"log record {seq} rejected on replay: {ev.error}")
            self.seq = seq
            chunk.append((ev, rec))
            if len(chunk) >= 4096:
                self._apply(chunk, Outcome([]))
                chunk = []
            self.replayed += 1
        if chunk:
            self._apply(chunk, Outcome([]))

    # -- the batch -------------------------------------------------------------------------
    def process(self, items: list[tuple[str, Any, str | None]]) -> Outcome:
        """``items``: (route, parsed record, or None with the parse error): validate, log
        (one write, fsync by the mode), apply. See the module docstring."""
        out, accepted, data = self.stage(items)
        if accepted and self.log(out, data, len(items)):
            self.commit(out, accepted)
        return out

    def stage(self, items: list[tuple[str, Any, str | None]]) -> tuple[Outcome, list, bytes]:
        """Validate and number a micro-batch: (outcome with the answers, accepted
        (event, record) pairs, their log lines). The Gate has taken them: ``log`` and
        ``commit`` must follow (or the service is broken)."""
        out = Outcome([{}] * len(items))
        if self.broken:
            out.results = [{"error": f"service unavailable: {self.broken}"}] * len(items)
            return out, [], b""
        accepted: list = []
        lines: list[str] = []
        tokens: dict[int, str] = {}
        gate = self.gate
        for i, (route, rec, err) in enumerate(items):
            if err is not None:
                out.results[i] = {"error": err}
                out.rejected["unreadable"] += 1
                continue
            if isinstance(rec, dict):
                implied = ROUTE_OPS[route]
                if implied is not None:
                    op = rec.setdefault("op", implied)
                    if op != implied:
                        out.results[i] = {"error": f"unknown op: {op!r} (this route takes {implied!r})"}
                        out.rejected[str(op) if isinstance(op, str) else "unreadable"] += 1
                        continue
                rec.pop(SVC, None)
                if rec.get("op") == "sub" and "id" not in rec:
                    rec["id"] = self._pick_id()
                if "t" not in rec:
                    now = time.time()
                    last = gate.last_t
                    rec["t"] = now if last is None or last < now else last
            try:
                text = _encode(rec)
            except UnicodeEncodeError:
                out.results[i] = {"error": "invalid unicode"}
                out.rejected["unreadable"] += 1
                continue
            seq = self.seq + 1
            ev = gate.admit(rec, seq, text)
            if isinstance(ev, Rejection):
                out.results[i] = {"error": ev.error}
                out.rejected[ev.label] += 1
                continue
            self.seq = seq
            svc: dict[str, Any] = {"seq": seq}
            if isinstance(ev, Sub):
                token = self.hook_token(seq) if "hook" in rec else auth.new_secret()
                svc["token"] = auth.digest(token)
                tokens[i] = token
                out.results[i] = {"seq": seq, "id": ev.id, "token": token}
            else:
                out.results[i] = {"seq": seq}
            rec[SVC] = svc
            lines.append(text[:-1] + _SVC_KEY + _encode(svc) + b"}\n")
            accepted.append((ev, rec))
            out.accepted[ev.label] += 1
        return out, accepted, b"".join(lines)

    def log(self, out: Outcome, data: bytes, n_items: int, sync: bool | None = None) -> bool:
        """Write a staged batch to the log (``sync``: fsync now; default: as the mode says)."""
        t0 = time.perf_counter()
        try:
            self.wal.write(data, sync)
        except OSError as exc:  # the Gate took them; nothing may be applied or acknowledged now
            self.broken = f"write-ahead log: {exc}"
            out.results = [{"error": f"service unavailable: {self.broken}"}] * n_items
            return False
        out.wal_seconds += time.perf_counter() - t0
        return True

    def commit(self, out: Outcome, accepted: list) -> None:
        """Apply a logged batch to the engine and the registrations."""
        t0 = time.perf_counter()
        self._apply(accepted, out)
        out.apply_seconds = time.perf_counter() - t0

    def _pick_id(self) -> str:
        while True:
            ident = "s-" + secrets.token_hex(6)
            if ident not in self.regs:
                return ident

    def _apply(self, accepted: list, out: Outcome) -> None:
        seg: list = []
        new_ids: set = set()
        for ev, rec in accepted:
            if seg and isinstance(ev, Sub) and (ev.id in self.regs or ev.id in new_ids):
                self._apply_segment(seg, out)
                seg, new_ids = [], set()
            seg.append((ev, rec))
            if isinstance(ev, Sub):
                new_ids.add(ev.id)
        if seg:
            self._apply_segment(seg, out)

    def _apply_segment(self, seg: list, out: Outcome) -> None:
        notes, subs = _columnar(self.engine, [ev for ev, _ in seg])
        feed = out.feed if self.feed_on else None
        if feed is not None and feed.maxlen != self.feed_keep:
            feed = out.feed = deque(feed, maxlen=self.feed_keep)
        for ev, rec in seg:
            if isinstance(ev, Sub):
                self._register(ev, rec)
            elif isinstance(ev, Pub):
                self._keep_object(ev, rec)
            if feed is not None:
                feed.append(("e", ev))
        regs, touched = self.regs, out.touched
        lines = note_lines(notes)
        rs = [regs[sub] for sub in subs]
        self.book.hand(rs, lines)
        touched.update(rs)
        if feed is not None:  # only the last feed_keep items stay: number just those
            k = min(len(rs), self.feed_keep)
            later: dict[Reg, int] = {}
            tail = []
            for j in range(len(rs) - 1, len(rs) - 1 - k, -1):
                reg = rs[j]
                c = later.get(reg, 0)
                later[reg] = c + 1
                tail.append(("n", lines[j], reg.seq, reg.next - 1 - c, reg.kind))
            tail.reverse()
            feed.extend(tail)
        out.notifications += len(lines)
        if feed is not None:
            out.feed_count += len(seg) + len(lines)
        for ev, _ in seg:
            if isinstance(ev, Unsub):
                self.book.end(regs[ev.id], "unsub", touched)
        for _, reg in self.sub_clock.subs_ending(seg[-1][0].t):
            if reg.ended is None:
                self.book.end(reg, "expired", touched)

    def hook_token(self, seq: int) -> str:
        """The token of the hooked subscription registered at ``seq``: derived from the
        directory's hook key, so that the server can sign its hook's requests after a restart
        (the directory keeps only token digests; hooks.py)."""
        mac = hmac.new(self.hook_key.encode(), f"{self.run_id}/{seq}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()

    def _register(self, ev: Sub, rec: dict) -> Reg:
        reg = self.book.add(rec)
        if "hook" in rec:
            self.new_hooks.append(reg)
        self.sub_clock.subscribe(ev.expires, ev.seq, reg)
        return reg

    def _keep_object(self, ev: Pub, rec: dict) -> None:
        """Track the records a snapshot may need: the alive objects of a retaining window
        (by the engine's own clock rule), every object since the last snapshot under none."""
        clock = self.obj_clock
        if self.window.kind == "time":
            for q in clock.leaving(ev.t):
                self.objects.pop(q, None)
        if self.window.retains:
            for q in clock.arrive(ev.seq, ev.seq, clock.expiry(ev.t, ev.expires, ev.seq)):
                self.objects.pop(q, None)
        self.objects[ev.seq] = rec

    # -- queries ---------------------------------------------------------------------------
    def describe(self, reg: Reg) -> dict:
        rec = {k: v for k, v in reg.record.items() if k not in (SVC, "op")}
        out = {"id": reg.id, "kind": reg.kind, "seq": reg.seq, "subscription": rec,
               "notifications": reg.next - 1}
        if reg.kind != RANGE:
            out["results"] = self.engine.results(reg.id)
        return out

    # -- snapshots -------------------------------------------------------------------------
    def snapshot_due(self) -> bool:
        if self.seq == self.snap_seq:
            return False
        return (self.seq - self.snap_seq >= self.snapshot_every
                or time.monotonic() - self.snap_time >= self.snapshot_seconds)

    def _asked(self) -> dict:
        """What a snapshot needs from the worker processes (``--workers``), asked before a fork
        (a forked child must not talk on the parent's pipes)."""
        if not hasattr(self.engine, "query"):
            return {}
        pre: dict = {"results": json.loads(_dumps(self.engine.all_results()))}
        if not self.window.retains:
            ids = [reg.id for reg in self.regs.values() if reg.kind != RANGE]
            pre["need"] = {q for _, seqs in self.engine.query(ids).values() for q in seqs}
        return pre

    def _body(self, pre: dict) -> tuple[dict, set | None]:
        """The snapshot body of the state now, and under ``none`` the seqs of the objects
        some result holds (the only objects a restart needs)."""
        subs = sorted(self.regs.values(), key=lambda r: r.seq)
        objects = self.objects
        need = None
        if not self.window.retains:  # keep only the objects a result holds
            need = pre.get("need")
            if need is None:
                need = set()
                for reg in subs:
                    if reg.kind != RANGE:
                        need.update(result_seqs(self.engine, reg.id))
            missing = need - objects.keys()
            if missing:
                raise AssertionError(f"result objects without a record: {sorted(missing)[:5]}")
            objects = {q: objects[q] for q in need}
        events = sorted([r.record for r in subs] + list(objects.values()), key=lambda r: r[SVC]["seq"])
        results = pre.get("results")
        body = {"window": str(self.window), "space": str(self.space), "last_t": self.gate.last_t,
                "events": events,
                "results": results if results is not None else json.loads(_dumps(self.engine.all_results())),
                "regs": [{"seq": r.seq, "next": r.next, "ring": r.kept()} for r in subs],
                "ended": [{"record": r.record, "next": r.next, "ring": r.kept(), "why": r.ended, "at": r.ended_at}
                          for r in self.book.ended.values()],
                "order": [r.seq for r in self.book.live_order()]}
        return body, need

    def _covered(self, seq: int) -> None:
        """A snapshot of ``seq`` starts: the log switches to a new segment (a snapshot covers
        whole segments)."""
        self.snap_seq, self.snap_time = seq, time.monotonic()
        self.wal.start(seq + 1)

    def _prune(self, seq: int, need: set | None) -> None:
        """Under ``none``: forget the object records no result held at ``seq`` (those that
        came later stay: the next snapshot decides about them)."""
        if need is not None:
            self.objects = {q: r for q, r in self.objects.items() if q in need or q > seq}

    def capture(self) -> tuple[int, dict]:
        """The snapshot body of the state now, on the caller's thread (shutdown, the admin
        route, tests; the applier forks: ``fork_snapshot``)."""
        body, need = self._body(self._asked())
        seq = self.seq
        self._prune(seq, need)
        self._covered(seq)
        return seq, body

    def fork_snapshot(self) -> ForkedSnapshot | None:
        """Start a snapshot of the state now in a forked child: the child holds a frozen
        copy of the whole state (copy on write) and builds, encodes and writes the body
        while this process goes on applying events; nothing is copied or encoded here
        (json.dumps holds the GIL: in a thread it stalled the event loop for seconds at
        100,000 subscriptions). None where fork is unavailable (the caller writes in a
        thread). SPEC section 8: snapshots bound the replay; the log holds everything."""
        if not hasattr(os, "fork"):
            return None
        pre = self._asked()
        seq = self.seq
        r, w = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            return None
        if pid == 0:  # the child: write, report the objects needed, exit without cleanup
            code = 1
            try:
                os.close(r)
                _child_setup()
                body, need = self._body(pre)
                path = write_snapshot(self.snap_dir, seq, self.run_id, body)
                with os.fdopen(w, "wb") as f:
                    f.write(_encode({"path": str(path), "need": sorted(need) if need is not None else None}))
                code = 0
            except BaseException as exc:  # noqa: BLE001 (the child exits whatever happens) one line for the parent
                with contextlib.suppress(Exception):
                    os.write(w, _encode({"error": f"{type(exc).__name__}: {exc}"}))
            finally:
                os._exit(code)
        os.close(w)
        self._covered(seq)
        return ForkedSnapshot(self, seq, pid, r)

    def write_snapshot(self, seq: int, body: dict) -> Path:
        """Write a captured snapshot (may run in a thread); then drop what it covers."""
        path = write_snapshot(self.snap_dir, seq, self.run_id, body)
        self.snapshot_written()
        return path

    def snapshot_written(self) -> None:
        """A snapshot is on disk: drop log segments before the previous snapshot, and
        snapshots older than that (two are kept: a damaged newest falls back)."""
        snaps = list_snapshots(self.snap_dir)
        if len(snaps) >= 2:
            keep_from = snaps[-2][0]
            self.wal.drop_before(keep_from)
            for q, p in snaps[:-2]:
                p.unlink(missing_ok=True)
        self.snapshots_written += 1

    def snapshot_now(self) -> Path:
        return self.write_snapshot(*self.capture())

    def close(self) -> None:
        self.wal.close()
        if hasattr(self.engine, "close"):
            self.engine.close()

