"""Streaming line reader: never loads a whole file, never a whole over-long line."""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from .validate import MAX_LINE

_CHUNK = 1 << 16
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
        line = f.readline(limit + 2)  # room for the content and "\r\n"
        if not line:
            return
        if bom:
            bom = False
            if line.startswith(BOM):
                line = line[len(BOM):]
                if not line:
                    return
                if not line.endswith(b"\n"):  # the mark took room from this read: read on
                    line += f.readline(len(BOM))
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
