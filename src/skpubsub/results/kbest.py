"""k-best list operations on :class:`skpubsub.subscriptions.SubTable` (O(k) each)."""

from __future__ import annotations

import math

import numpy as np

from ..subscriptions import SubTable


def insert_newest(t: SubTable, s: int, obj: int, key: float) -> int:
    """Insert the newest object (it wins ties, so it goes before equal keys).

    The caller has checked ``key <= kth``. Returns the object slot pushed out of
    a full list, or -1.
    """
    c = t.cols
    off, n, k = int(c.res_off[s]), int(c.res_n[s]), int(c.k[s])
    keys, objs = t.res.key, t.res.obj
    pos = off + int(np.searchsorted(keys[off:off + n], key, side="left"))
    dropped = -1
    if n == k:
        dropped = int(objs[off + k - 1])
        end = off + k - 1
    else:
        end = off + n
        n += 1
        c.res_n[s] = n
    keys[pos + 1:end + 1] = keys[pos:end]
    objs[pos + 1:end + 1] = objs[pos:end]
    keys[pos], objs[pos] = key, obj
    c.kth[s] = keys[off + k - 1] if n == k else math.inf
    return dropped


def replace(t: SubTable, s: int, objs: np.ndarray, keys: np.ndarray) -> None:
    """Set the whole list (already ranked, at most k entries)."""
    c = t.cols
    off, k, n = int(c.res_off[s]), int(c.k[s]), len(objs)
    t.res.obj[off:off + n] = objs
    t.res.key[off:off + n] = keys
    c.res_n[s] = n
    c.kth[s] = keys[k - 1] if n == k else math.inf
