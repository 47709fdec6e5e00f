"""Output files of ``skpubsub run`` (SPEC section 4), written as JSON Lines.

SPEC section 7: the outputs appear atomically. Each file is written under a temporary name
in ``DIR`` (``.NAME.PID.tmp``, created new: never through a symlink or over another file)
and the four are put in place only when the run has ended successfully, with SIGINT and
SIGTERM held off meanwhile. Until then ``DIR`` keeps the previous complete set, or none; a
run that fails or is interrupted removes its temporary files (``abort``, also for every
writer still open: ``abort_open``), and the next run into ``DIR`` removes those a killed run
left behind. A rename replaces a symlink planted at a final name, it does not write through
it.

Four renames cannot be one atomic step, and SIGKILL cannot be held off, so the switch is a
small journal (``_install``): once the four temporary files are complete, a marker
``.commit.PID`` is created (the set is now committed); the previous run's files are removed,
``metrics.json`` first, then the new ones are renamed into place, ``metrics.json`` last; the
marker is removed. Killed at any point, ``DIR`` holds files of one run only: the previous
set, then a part of it without its ``metrics.json``, then a part of the new set without
``metrics.json``, then the new set (``metrics.json`` present: a complete set). The next run
into ``DIR`` (``_recover``, before anything else) finds the marker of a run no longer alive
and completes its set the same way (every step can be repeated), so the files a killed run
committed are never mixed with another run's nor lost half-way.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable, Iterator

from .encode import json_line, json_text, json_value
from .events import Rejection
from .notewriter import Results, results_block
from .notifications import NoteBatch, NoteLines, Notes, note_lines
from .templates import RESULT_LINE, RESULT_SEP

__all__ = ["OUTPUTS", "RunWriter", "abort_open", "json_line", "json_text", "rejection_record", "result_line", "result_record"]

# The four files of a run, in the order they are renamed into place (metrics last: a set
# with its metrics is complete).
OUTPUTS = ("notifications.jsonl", "rejected.jsonl", "results.jsonl", "metrics.json")
_TMP = re.compile(r"^\.(?:notifications\.jsonl|rejected\.jsonl|results\.jsonl|metrics\.json)\.(\d+)\.tmp$")
_MARK = re.compile(r"^\.commit\.(\d+)$")
_OPEN: "weakref.WeakSet[RunWriter]" = weakref.WeakSet()


def rejection_record(line: int, error: str, raw: str) -> dict:
    """A line of ``rejected.jsonl``."""
    return {"line": line, "error": error, "raw": raw}


def result_record(sid: Any, ids: list[Any]) -> dict:
    """A line of ``results.jsonl``: a subscription's result in rank order."""
    return {"id": sid, "results": ids}


def result_line(sid: Any, ids: list[Any]) -> str:
    """``json_line(result_record(sid, ids))`` from the values' own encodings (what
    ``json.dumps`` writes for an id), without an encoder a line: 100,000 results took 0.5 s."""
    return RESULT_LINE % (json_value(sid), RESULT_SEP.join(map(json_value, ids)))


BEHIND_MIN = 10_000  # notifications from which a batch is written on the writer thread


class RunWriter:
    """Opens ``notifications.jsonl`` and ``rejected.jsonl`` for streaming writes;
    ``results.jsonl`` and ``metrics.json`` are written once at the end; all four under
    temporary names until ``finish`` (module docstring)."""

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        _recover(self.out)
        _sweep(self.out)
        pid = os.getpid()
        self._tmp = _temporaries(self.out, pid)
        self._mark = self.out / f".commit.{pid}"
        self._files: list = []
        self._behind: ThreadPoolExecutor | None = None  # the notifications' writer thread
        self._pending: Future | None = None
        _OPEN.add(self)
        try:
            self._notes = self._create("notifications.jsonl", binary=True)  # the writer's UTF-8 as it is
            self._rejected = self._create("rejected.jsonl")
        except BaseException:
            self.abort()
            raise
        self.n_notifications = 0

    def _create(self, name: str, binary: bool = False):
        path = self._tmp[name]
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # ours from an earlier writer of this process
        # O_EXCL | O_NOFOLLOW: a new file, never one a symlink planted here points to
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(path, flags, 0o666)
        f = open(fd, "wb") if binary else open(fd, "w", encoding="utf-8")
        self._files.append(f)
        return f

    def notifications(self, notes: Notes) -> None:
        """Write ``notes`` (what an engine's ``apply`` returns, see ``note_lines``). Many
        (``BEHIND_MIN``) are formatted and written by a second thread while the run goes on
        (the compiled kernels on both sides let go of the GIL), one call behind at most: the
        call before is finished first, and its error raised here, or by ``finish``."""
        if isinstance(notes, (Notes, NoteBatch, NoteLines)):  # columns: one block by the compiled writer
            job, n = notes.json_bytes, len(notes)
        else:
            lines = note_lines(notes)
            data, n = "".join(lines).encode("utf-8"), len(lines)
            job = lambda: data  # noqa: E731
        self.n_notifications += n
        self._settle()
        if n < BEHIND_MIN:  # little to format: here, without handing the GIL to and fro
            self._write_notes(job)
            return
        if self._behind is None:
            self._behind = ThreadPoolExecutor(1, thread_name_prefix="skpubsub-notes")
        self._pending = self._behind.submit(self._write_notes, job)

    def _write_notes(self, job) -> None:
        data = job()
        try:
            self._notes.write(data)
        except OSError as exc:
            raise self._named(exc, "notifications.jsonl") from None

    def _settle(self) -> None:
        """The last ``notifications`` written (its error raised)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def rejection(self, r: Rejection) -> None:
        try:
            self._rejected.write(json_line(rejection_record(r.line, r.error, r.raw)))
        except OSError as exc:
            raise self._named(exc, "rejected.jsonl") from None

    def _named(self, exc: OSError, name: str) -> OSError:
        """A write error with the file it was writing (a full disk says only 'No space left')."""
        if exc.filename is not None or exc.errno is None:
            return exc
        return type(exc)(exc.errno, exc.strerror, str(self.out / name))

    def finish(self, results: Iterable[tuple[Any, list[Any]]] | Results | bytes, metrics: dict) -> None:
        try:
            self._settle()
            self._stop()
            name = "results.jsonl"
            if isinstance(results, Results):  # a single engine's columns: one compiled pass
                with self._create(name, binary=True) as f:
                    f.write(results_block(results))
            elif isinstance(results, bytes):  # lines made already (the fleet's workers, merged)
                with self._create(name, binary=True) as f:
                    f.write(results)
            else:
                with self._create(name) as f:
                    f.writelines(result_line(sid, ids) for sid, ids in results)
            name = "metrics.json"
            with self._create(name) as f:
                json.dump(metrics, f, indent=2)
                f.write("\n")
            for name, f in (("notifications.jsonl", self._notes), ("rejected.jsonl", self._rejected)):
                f.close()  # flushes: a full disk fails here, before anything is renamed
        except OSError as exc:
            self.abort()
            raise self._named(exc, name) from None
        except BaseException:
            self.abort()
            raise
        committed = False
        try:
            with _signals_held():
                _create_new(self._mark)
                committed = True
                _install(self.out, self._tmp, self._mark)
        except BaseException:
            if not committed:
                self.abort()
            _OPEN.discard(self)  # committed: the next run into DIR completes the set
            raise
        _OPEN.discard(self)

    def abort(self) -> None:
        """Close and remove the temporary files: ``DIR`` keeps what it had. Idempotent."""
        with contextlib.suppress(Exception):
            self._settle()  # (a write under way ends before its file is closed)
        self._stop()
        for f in self._files:
            with contextlib.suppress(OSError, ValueError):
                f.close()
        for path in self._tmp.values():
            with contextlib.suppress(OSError):
                path.unlink()
        _OPEN.discard(self)

    def _stop(self) -> None:
        if self._behind is not None:
            self._behind.shutdown()
            self._behind = None


def _temporaries(out: Path, pid: int) -> dict[str, Path]:
    return {name: out / f".{name}.{pid}.tmp" for name in OUTPUTS}


def _create_new(path: Path) -> None:
    """An empty file that did not exist (not through a symlink)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666))


def _install(out: Path, tmp: dict[str, Path], mark: Path) -> None:
    """Put a committed set in place (module docstring); every step can be repeated after a
    kill: a name whose temporary file is gone was already renamed (its final file is the new
    one, kept). The previous files go first, ``metrics.json`` first; the new ones are renamed
    in, ``metrics.json`` last; then the marker goes."""
    left = [name for name in OUTPUTS if tmp[name].exists()]
    for name in reversed(left):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(out / name)
    for name in left:
        os.replace(tmp[name], out / name)
    os.unlink(mark)


def _recover(out: Path) -> None:
    """Complete the set of a run killed while putting its outputs in place (its marker is
    still there and it is not alive: the marker is written only once its four files are)."""
    try:
        names = os.listdir(out)
    except OSError:
        return
    for name in names:
        m = _MARK.match(name)
        if not m:
            continue
        pid = int(m.group(1))
        if pid != os.getpid() and _alive(pid):
            continue  # a run still putting its files in place
        _install(out, _temporaries(out, pid), out / name)


def abort_open() -> None:
    """``abort`` every writer not finished (the command line, on an error or a signal)."""
    for w in list(_OPEN):
        w.abort()


def _sweep(out: Path) -> None:
    """Remove temporary outputs that runs no longer alive left in ``out`` (SIGKILL)."""
    try:
        names = os.listdir(out)
    except OSError:
        return
    for name in names:
        m = _TMP.match(name)
        if m and int(m.group(1)) != os.getpid() and not _alive(int(m.group(1))):
            with contextlib.suppress(OSError):
                os.unlink(out / name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # someone else's process: alive
        return True
    return True


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block is done (the main thread's renames)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
