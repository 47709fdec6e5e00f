"""``run``'s input, read and judged by the Gate (``Gate.admit_block``) block by block, in
this process or in a second one beside the engine (io/NOTES.md, "Reading in a second
process").

Either way the run loop gets the same items in the same order: ``(out, label, pos)``, the
Gate's output for a block of lines (``label`` its ``block_label``: a ``SubBlock`` or
``PubBlock`` of one kind, else None and a list of events and rejections) and the file
offset read so far (for the progress bar). The Gate is the only state the items depend on,
and it lives whole in the one process that reads.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import threading
from collections.abc import Iterator
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

from ..core.config import Space, Window
from .failure import RunFailure
from ..io import rawsubs, rawwords
from ..io.lexicon import Lexicon, Words
from ..io.lines import stream_blocks
from ..io.validate import Gate

_dumps = ForkingPickler.dumps  # as ``Connection.send`` pickles

APART = 4 << 20  # bytes of input from which a second process reads (below, its start costs more than it saves)
AHEAD = 16  # messages the reading process keeps ready beyond the pipe's (io/NOTES.md, "Reading in a second process")


def judged(path: Path, window: Window, space: Space, apart: bool | None = None) -> Iterator[tuple]:
    """The Gate's items for the file at ``path``; ``apart``: in a second process (None: when
    the file has ``APART`` bytes or more and the platform forks)."""
    return _apart(path, window, space) if reads_apart(path, apart) else _here(path, window, space)


def reads_apart(path: Path, apart: bool | None = None) -> bool:
    """Does ``judged(path, ..., apart)`` read in a second process?"""
    if apart is None:
        return (path.stat().st_size >= APART and "fork" in mp.get_all_start_methods()
                and len(os.sched_getaffinity(0)) > 1)  # (one core: the two would take turns)
    return apart


def _here(path: Path, window: Window, space: Space) -> Iterator[tuple]:
    gate = Gate(window, space, coded=True)  # a SubBlock's keywords numbered here (io/lexicon.py)
    with open(path, "rb") as f:
        for first, n_lines, lines in stream_blocks(f):
            out = gate.admit_block(first, lines, n_lines)
            yield out, gate.block_label, f.tell()


def _apart(path: Path, window: Window, space: Space) -> Iterator[tuple]:
    """``_here`` run by a forked child (started at once: the caller may start threads after)
    that sends each item through a pipe, pickled by the connection as the worker processes'
    messages are; then None, or the exception that ended it. The pipe bounds what is read
    ahead: the child waits while the run is a message behind. The child opens the file
    itself, so an error opening or reading it reaches the run as the exception ``_here``
    raises."""
    ctx = mp.get_context("fork")  # the Gate's modules are loaded here already: no start-up
    rawwords.warm()  # and its kernels: Numba's target once, here, where the engine needs it too
    rawsubs.warm()
    recv, send = ctx.Pipe(duplex=False)
    _widen(send)
    child = ctx.Process(target=_child, args=(send, path, window, space), daemon=True)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:  # blocked across the fork: the child sets its own handlers before it can take one
        child.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    send.close()
    return _received(recv, child, path)


def _widen(conn) -> None:
    """The pipe's buffer at its largest allowed (``/proc/sys/fs/pipe-max-size``, 1 MB by
    default, against 64 KB): the child reads a few blocks ahead while the run is busy."""
    try:
        import fcntl

        with open("/proc/sys/fs/pipe-max-size") as f:
            fcntl.fcntl(conn.fileno(), fcntl.F_SETPIPE_SZ, int(f.read()))
    except (OSError, ValueError, AttributeError, ImportError):
        pass


def _received(recv, child, path: Path) -> Iterator[tuple]:
    mirror = Lexicon()  # the child's lexicon, as far as its messages told
    try:
        while True:
            try:
                msg = recv.recv()
            except (EOFError, OSError):  # the child died (killed), maybe mid-message: one line (SPEC 7)
                child.join(1)
                raise RunFailure(f"the process reading {path} ended unexpectedly (exit code {child.exitcode})"
                                 ) from None
            if type(msg) is tuple:
                out, label, pos, gen, fresh = msg
                if fresh is not None:  # a coded block (``_lexicon_news``): its lexicon, as the child's
                    if gen != mirror.gen:
                        mirror = Lexicon(gen)
                    mirror.words.extend(fresh)
                    out.keywords.lex = mirror
                yield out, label, pos
            elif msg is None:
                return
            else:
                raise msg
    finally:  # the run's end, an error or an interrupt: the child goes too
        recv.close()
        if child.is_alive():
            child.terminate()
        child.join()


def _child(send, path: Path, window: Window, space: Space) -> None:
    """The reading process. Ctrl-C reaches the whole process group, and the run answers it
    (one line, exit 130; SPEC 7): ignored here. SIGTERM kills it (the run's ``terminate``),
    without the run's handler. It ends at the input's end or when the run closes the pipe.

    Each message is pickled here and written by a second thread, up to ``AHEAD`` of them
    queued: while the run is in a long engine call and the pipe is full, the Gate goes on
    with the next blocks instead of waiting in ``send`` (the write releases the GIL)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())
    ready: queue.Queue = queue.Queue(AHEAD)
    gone = threading.Event()  # the run closed the pipe

    def write() -> None:
        while (buf := ready.get()) is not None:
            try:
                send.send_bytes(buf)
            except (EOFError, OSError):
                gone.set()
                return

    def put(buf) -> bool:  # False once the run is gone
        while not gone.is_set():
            try:
                ready.put(buf, timeout=0.1)
                return True
            except queue.Full:
                pass
        return False

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        for out, label, pos in _here(path, window, space):
            if not put(_dumps((out, label, pos) + _lexicon_news(out))):
                return
        last: BaseException | None = None
    except Exception as exc:  # raised in the run as it would be here
        last = exc
    try:
        buf = _dumps(last)
    except Exception:  # an exception that does not pickle: its line
        buf = _dumps(RunFailure(f"{type(last).__name__}: {last}"))
    if put(buf) and put(None):
        writer.join()


def _lexicon_news(out) -> tuple[int, list[str] | None]:
    """What the run needs to read a block's coded keywords: its lexicon's ``gen`` and the
    words it learnt since the last message (None: no coded column)."""
    kws = getattr(out, "keywords", None)
    if type(kws) is not Words:
        return 0, None
    return kws.lex.gen, kws.lex.fresh()
