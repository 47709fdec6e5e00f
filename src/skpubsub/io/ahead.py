"""Reading and judging the next blocks of an event file on a second thread, while the
engine works on the ones before (``skpubsub run``, single engine).

The Gate's decode and checks are Python (about 2 us a line); the engine's kernels release
the GIL (``nogil``), so on a machine with a second core the Gate's work for the next
blocks overlaps the engine's for this one. The Gate is used by the reading thread alone,
and blocks come out in the file's order: the engine sees exactly the events it saw
before, so the outputs are the same bytes (io/NOTES.md, "Reading ahead").
"""

from __future__ import annotations

import queue
import sys
import threading
from collections.abc import Iterator
from typing import Any, BinaryIO

from .lines import stream_blocks
from .validate import Gate

DEPTH = 4  # blocks read ahead (512 KiB of lines each): bounded memory
_END = object()


class ReadAhead:
    """``with ReadAhead(f, gate) as blocks: for events, label, pos in blocks: ...``: each
    block of ``f`` as ``gate.admit_block`` admits it, with ``gate.block_label`` and the file
    position after it. An error of the reader (an unreadable file, a bug) is raised in the
    consumer at the point the stream reached; leaving the ``with`` (an error of the
    consumer, Ctrl-C) stops the reader within a block."""

    def __init__(self, f: BinaryIO, gate: Gate, depth: int = DEPTH) -> None:
        self._f, self._gate = f, gate
        self._q: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, name="skpubsub-gate", daemon=True)
        self._switch = sys.getswitchinterval()

    def __enter__(self) -> Iterator[tuple[Any, str | None, int]]:
        # A thread coming back from a kernel waits for the GIL up to the switch interval
        # (5 ms by default) while the reader holds it: once per engine call, too long.
        sys.setswitchinterval(min(self._switch, 0.0005))
        self._thread.start()
        return self._blocks()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        sys.setswitchinterval(self._switch)

    def _offer(self, item: object) -> bool:
        """Put ``item`` for the consumer; False if it has gone (``_stop``)."""
        while not self._stop.is_set():
            try:
                self._q.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def _read(self) -> None:
        f, gate = self._f, self._gate
        try:
            tell = f.tell if f.seekable() else int  # a pipe has no position: 0 (the progress bar's)
            for first, n_lines, lines in stream_blocks(f):
                if not self._offer((gate.admit_block(first, lines, n_lines), gate.block_label, tell())):
                    return
            self._offer(_END)
        except BaseException as e:  # noqa: BLE001 - handed over, raised by the consumer
            self._offer(e)

    def _blocks(self) -> Iterator[tuple[Any, str | None, int]]:
        get = self._q.get
        while True:
            item = get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
