"""Streaming line reader: never loads a whole file, never a whole over-long line."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count
from typing import BinaryIO

from .validate import MAX_LINE

_CHUNK = 1 << 16
_BLOCK = 1 << 19  # what ``stream_lines`` reads at a time: under MAX_LINE, so that a block
# with the short tail of the one before is whole as read (``stream_blocks``)
BOM = b"\xef\xbb\xbf"  # UTF-8 byte-order mark


def read_lines(f: BinaryIO, limit: int = MAX_LINE) -> Iterator[tuple[int, bytes | None]]:
    """Yield ``(line_number, bytes without newline)`` from 1; ``None`` for a line over ``limit``.

    Memory is O(limit): an over-long line is skipped in chunks, never held whole. A UTF-8
    byte-order mark at the very start of the input is dropped (SPEC section 6, "Text"); a
    reader that starts mid-file (Spark's offsets) keeps the bytes it finds.
    """
    n = 0
    try:
        bom = f.tell() == 0
    except (OSError, ValueError, AttributeError):  # a pipe: this is the start
        bom = True
    while True:
        # room for the content and "\r\n", and the mark's first (a longer read changes no verdict)
        line = f.readline(limit + 2 + len(BOM) if bom else limit + 2)
        if bom:
            bom = False
            line = line.removeprefix(BOM)
        if not line:
            return
        n += 1
        if line.endswith(b"\n"):
            body = line[:-1].removesuffix(b"\r")
            yield n, (body if len(body) <= limit else None)
            continue
        if len(line) <= limit:  # last line of the file, no newline
            yield n, line
            return
        # Longer than the limit: skip to the end of the line.
        while True:
            rest = f.readline(_CHUNK)
            if not rest or rest.endswith(b"\n"):
                break
        yield n, None


def stream_lines(f: BinaryIO, limit: int = MAX_LINE) -> Iterator[tuple[int, bytes | None]]:
    """:func:`read_lines` of a whole stream, read by blocks: the same pairs, a fifth of the
    cost a line (one ``split`` per MiB instead of a ``readline`` per line). ``f.tell()`` is
    ahead of the lines given, so a reader that resumes at an offset uses ``read_lines``.
    Memory is O(block + limit)."""
    for first, _, lines in stream_blocks(f, limit):
        yield from zip(count(first), lines.split(b"\n") if type(lines) is bytes else lines)


def stream_blocks(f: BinaryIO, limit: int = MAX_LINE) -> Iterator[tuple[int, int, bytes | list[bytes | None]]]:
    """The lines of :func:`stream_lines` a block read at a time: ``(number of the first line,
    how many, the lines)``, the same bytes (or None) in the same order, for a Gate that takes lines by
    blocks (``Gate.admit_block``). The lines come as a list, or, when the block has no
    carriage return and no room for an over-long line (the common case), as the bytes of
    the lines joined by ``\n`` (``lines.split(b"\n")`` is the list): no split, no work a
    line, and a buffer msgspec decodes in one call."""
    n = 0
    try:
        bom = f.tell() == 0
    except (OSError, ValueError, AttributeError):
        bom = True
    tail = b""
    while True:
        chunk = f.read(_BLOCK)
        if bom:
            while chunk and len(chunk) < len(BOM) and BOM.startswith(chunk):  # a pipe's short read
                more = f.read(_BLOCK)
                if not more:
                    break
                chunk += more
            bom = False
            if chunk.startswith(BOM):
                chunk = chunk[len(BOM):]
                if not chunk:  # the mark filled this read, not the end
                    continue
        if not chunk:
            break
        data = tail + chunk if tail else chunk
        cut = data.rfind(b"\n")
        if 0 <= cut <= limit and b"\r" not in data:  # no line in data[:cut] can be over the limit
            body, tail = data[:cut], data[cut + 1:]
            k = body.count(b"\n") + 1
            yield n + 1, k, body
            n += k
            continue
        lines = data.split(b"\n")
        tail = lines.pop()
        if lines:
            if b"\r" in data:
                lines = [line[:-1] if line[-1:] == b"\r" else line for line in lines]
            if len(data) > limit and max(map(len, lines)) > limit:
                lines = [line if len(line) <= limit else None for line in lines]
            yield n + 1, len(lines), lines
            n += len(lines)
        if len(tail) > limit + 1:  # an over-long line (room for its "\r"): skip to its end
            while True:
                rest = f.read(_CHUNK)
                if not rest:
                    yield n + 1, 1, [None]
                    return
                cut = rest.find(b"\n")
                if cut >= 0:
                    tail = b""
                    n += 1
                    yield n, 1, [None]
                    remainder = rest[cut + 1:]
                    if remainder:  # the lines after it, then the next blocks
                        f = _Prefixed(remainder, f)
                    break
    if tail:  # the last line, without a newline (kept as it is, like read_lines)
        yield n + 1, 1, [tail if len(tail) <= limit else None]


class _Prefixed:
    """``f`` with ``head`` put back in front of it (``read`` only)."""

    def __init__(self, head: bytes, f: BinaryIO) -> None:
        self.head, self.f = head, f

    def read(self, size: int) -> bytes:
        if self.head:
            out, self.head = self.head, b""
            return out
        return self.f.read(size)
