"""Reading ahead (io/ahead.py): the blocks ``run`` takes from the reading thread are the ones
the Gate gives read in turn, an error of the reader reaches the consumer, and leaving early
(an error of the consumer, Ctrl-C) leaves no thread behind."""

from __future__ import annotations

import io
import sys
import threading

import pytest

from skpubsub.io.ahead import ReadAhead
from skpubsub.io.events import events_of
from skpubsub.io.lines import stream_blocks
from skpubsub.io.validate import Gate


def _stream(n: int) -> bytes:
    """Subscriptions, objects and hostile lines mixed, over many 512 KiB blocks."""
    lines = []
    for i in range(n):
        if i % 97 == 5:
            lines.append(b'{"op": "pub", "id": 1, "t": "late"}')  # rejected
        elif i % 3 == 0:
            lines.append(b'{"op":"sub","id":"s%d","t":%d,"kind":"range","rect":[0,0,%d,1],"keywords":["a","b%d"]}'
                         % (i, i, 1 + i % 7, i % 11))
        else:
            lines.append(b'{"op":"pub","id":"o%d","t":%d,"x":0.5,"y":0.5,"keywords":["a","b%d","w%d"]}'
                         % (i, i, i % 11, i))
    return b"\n".join(lines) + b"\n"


def _shape(evs) -> list:
    return [(type(e).__name__, getattr(e, "seq", None), getattr(e, "line", None)) for e in events_of(evs)]


def test_the_blocks_are_the_gates_in_order() -> None:
    data = _stream(30_000)
    direct = Gate()
    expect = [(_shape(direct.admit_block(first, lines, n)), direct.block_label)
              for first, n, lines in stream_blocks(io.BytesIO(data))]
    assert len(expect) > 4  # more blocks than the queue holds
    with ReadAhead(io.BytesIO(data), Gate()) as blocks:
        got = [(_shape(out), label) for out, label, _ in blocks]
    assert got == expect
    assert any(t == "Rejection" for shape, _ in got for t, _, _ in shape)


class _Broken(io.BytesIO):
    def read(self, *a):
        if self.tell() > 600_000:
            raise OSError("disk gone")
        return super().read(*a)


def test_an_error_of_the_reader_reaches_the_consumer_after_the_blocks_before_it() -> None:
    seen = 0
    with pytest.raises(OSError, match="disk gone"):
        with ReadAhead(_Broken(_stream(30_000)), Gate()) as blocks:
            for out, _, _ in blocks:
                seen += len(out)
    assert seen > 0
    assert not [t for t in threading.enumerate() if t.name == "skpubsub-gate"]


def test_leaving_early_stops_the_reader_and_restores_the_switch_interval() -> None:
    before = sys.getswitchinterval()
    with pytest.raises(KeyboardInterrupt):
        with ReadAhead(io.BytesIO(_stream(60_000)), Gate(), depth=1) as blocks:
            for _ in blocks:
                raise KeyboardInterrupt  # the reader is blocked on a full queue now
    assert not [t for t in threading.enumerate() if t.name == "skpubsub-gate"]
    assert sys.getswitchinterval() == before
