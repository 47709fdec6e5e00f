"""k-best buffer operations on :class:`skpubsub.subscriptions.SubTable` (O(kb) each).

See ``SubTable`` for the buffer invariant; ``threshold`` restates its entry rule.
"""

from __future__ import annotations

import math

import numpy as np

from ..subscriptions import SubTable


def threshold(t: SubTable, s: int) -> float:
    """Key an arriving object must not exceed to enter the buffer."""
    c = t.cols
    n = int(c.res_n[s])
    if n and (n == c.kb[s] or not c.complete[s]):
        return float(t.res.key[int(c.res_off[s]) + n - 1])
    return math.inf


def insert_newest(t: SubTable, s: int, obj: int, key: float) -> int:
    """Insert the newest object (it wins ties, so it goes before equal keys).

    The caller has checked ``key <= kth``. Returns the object slot pushed out of
    a full buffer, or -1.
    """
    c = t.cols
    off, n, kb = int(c.res_off[s]), int(c.res_n[s]), int(c.kb[s])
    keys, objs = t.res.key, t.res.obj
    pos = off + int(np.searchsorted(keys[off:off + n], key, side="left"))
    dropped = -1
    if n == kb:
        dropped = int(objs[off + kb - 1])
        end = off + kb - 1
    else:
        end = off + n
        c.res_n[s] = n + 1
    if c.res_n[s] == kb:  # full: from now on objects may pass it by unseen
        c.complete[s] = False
    keys[pos + 1:end + 1] = keys[pos:end]
    objs[pos + 1:end + 1] = objs[pos:end]
    keys[pos], objs[pos] = key, obj
    c.kth[s] = threshold(t, s)
    return dropped


def remove(t: SubTable, s: int, obj: int) -> None:
    """Take ``obj`` (a member) out of the buffer; the rest stays exact."""
    c = t.cols
    off, n = int(c.res_off[s]), int(c.res_n[s])
    objs, keys = t.res.obj, t.res.key
    i = off + int(np.flatnonzero(objs[off:off + n] == obj)[0])
    objs[i:off + n - 1] = objs[i + 1:off + n]
    keys[i:off + n - 1] = keys[i + 1:off + n]
    c.res_n[s] = n - 1
    c.kth[s] = threshold(t, s)
