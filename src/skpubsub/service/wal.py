"""The write-ahead log: JSON lines of the accepted events, in segments, in ``DIR/wal/``.

Each line is the event as it was accepted (``t`` and a picked ``id`` filled in) plus a
``"_svc"`` member: ``{"seq": n}`` (its position in the stream) and, for a subscription,
``"token"`` (the SHA-256 of its token). The Gate ignores unknown fields, so a segment is
itself an event file ``skpubsub run`` reads.

A micro-batch is one ``os.write`` of all its lines (group commit), done before any of
its events is applied or acknowledged: a process killed at any moment loses only events
nobody was told about. ``fsync`` decides what a power loss or kernel crash may lose:

- ``always``: ``fsync`` before the answer (one per micro-batch): nothing acknowledged;
- ``batch`` (default): ``fsync`` at most ``interval`` seconds after a write, by a
  background thread: up to ``interval`` seconds of acknowledged events;
- ``off``: never (the kernel writes back in its own time, ~30 s on Linux by default).

Segments are named by their first seq (``wal-000000000001.jsonl``); a new one starts at
every snapshot, and segments wholly covered by a snapshot that is on disk are deleted.
A line cut short by a crash at the end of the last segment is cut off at open (nobody was
acknowledged for it); any other damage refuses the directory with the line that is wrong.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FSYNC_MODES = ("always", "batch", "off")
SVC = "_svc"


class Damaged(ValueError):
    """A log or snapshot that cannot be read back; the message says where and why."""


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _seg_name(first: int) -> str:
    return f"wal-{first:012d}.jsonl"


class WriteAheadLog:
    def __init__(self, directory: Path, fsync: str = "batch", interval: float = 0.05) -> None:
        if fsync not in FSYNC_MODES:
            raise ValueError(f"unknown --fsync {fsync!r}; known: {', '.join(FSYNC_MODES)}")
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)
        self.mode = fsync
        self.interval = interval
        self._fd: int | None = None
        self.path: Path | None = None
        self.bytes_written = 0
        self.syncs = 0
        self._dirty = threading.Event()
        self._lock = threading.Lock()  # the fd is closed (rotation) only under it
        self._stop = False
        self._thread: threading.Thread | None = None

    # -- reading -------------------------------------------------------------------------
    def segments(self) -> list[tuple[int, Path]]:
        out = []
        for p in self.dir.glob("wal-*.jsonl"):
            try:
                out.append((int(p.name[4:-6]), p))
            except ValueError:
                raise Damaged(f"{p}: not a log segment name") from None
        return sorted(out)

    def records_after(self, seq: int) -> Iterator[dict[str, Any]]:
        """The logged records with ``_svc.seq > seq``, in order; checks the seqs follow on
        and cuts off a torn last line of the last segment."""
        segs = self.segments()
        expect = None
        for i, (first, path) in enumerate(segs):
            if i + 1 < len(segs) and segs[i + 1][0] <= seq + 1:
                continue  # wholly before what is wanted
            last = i == len(segs) - 1
            good = 0
            with open(path, "rb") as f:
                for n, line in enumerate(f, 1):
                    if not line.endswith(b"\n"):
                        if last:
                            break  # torn by a crash: never acknowledged
                        raise Damaged(f"{path} line {n}: cut short")
                    try:
                        rec = json.loads(line)
                        s = rec[SVC]["seq"]
                    except (ValueError, KeyError, TypeError):
                        raise Damaged(f"{path} line {n}: not a log record") from None
                    if expect is None:
                        expect = first
                        if s != first:
                            raise Damaged(f"{path} line {n}: seq {s}, expected {first}")
                    elif s != expect:
                        raise Damaged(f"{path} line {n}: seq {s}, expected {expect}")
                    expect = s + 1
                    good += len(line)
                    if s > seq:
                        yield rec
            if last and good != path.stat().st_size:
                with open(path, "r+b") as f:
                    f.truncate(good)
        if expect is not None and expect <= seq and segs:
            pass  # the snapshot covers the whole log

    def last_seq(self) -> int | None:
        """The seq of the last complete record (None if the log is empty)."""
        last = None
        for rec in self.records_after(-(1 << 62)):
            last = rec[SVC]["seq"]
        return last

    # -- writing -------------------------------------------------------------------------
    def start(self, first_seq: int) -> None:
        """Append from now on to a new segment whose first record will be ``first_seq``."""
        path = self.dir / _seg_name(first_seq)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        if os.fstat(fd).st_size:
            os.close(fd)
            raise Damaged(f"{path}: a new segment exists already")
        with self._lock:
            old = self._fd
            if old is not None:
                os.fsync(old)
                os.close(old)
            self._fd, self.path = fd, path
        fsync_dir(self.dir)
        if self.mode == "batch" and self._thread is None:
            self._thread = threading.Thread(target=self._syncer, name="wal-fsync", daemon=True)
            self._thread.start()

    def write(self, data: bytes, sync: bool | None = None) -> None:
        """One micro-batch's lines, in one write (group commit); then ``fsync`` if ``always``
        (``sync=False``: the caller syncs, e.g. from a thread)."""
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        self.bytes_written += len(data)
        if self.mode == "always":
            if sync is not False:
                self.sync()
        elif self.mode == "batch":
            self._dirty.set()

    def sync(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.fsync(self._fd)
                self.syncs += 1

    def _syncer(self) -> None:
        while not self._stop:
            self._dirty.wait()
            if self._stop:
                return
            time.sleep(self.interval)  # what arrives meanwhile shares the fsync
            self._dirty.clear()
            try:
                self.sync()
            except OSError:
                pass  # reported by the next write

    def drop_before(self, seq: int) -> None:
        """Delete the segments whose records all have seq <= ``seq`` (a snapshot holds them)."""
        segs = self.segments()
        for i, (first, path) in enumerate(segs):
            if i + 1 < len(segs) and segs[i + 1][0] <= seq + 1 and path != self.path:
                path.unlink(missing_ok=True)

    def close(self) -> None:
        self._stop = True
        self._dirty.set()
        with self._lock:
            if self._fd is not None:
                os.fsync(self._fd)
                os.close(self._fd)
                self._fd = None
