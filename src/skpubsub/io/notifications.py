"""Output notifications (SPEC section 4): their types, their one JSON line, their columns.

:class:`Match` (a range subscription receives an object) and :class:`Change` (a
kNN/top-k result set changed) are what subscribers receive. :func:`note_line` is
the one definition of a notification's line in ``notifications.jsonl``: the
record's keys in the order of ``MATCH_KEYS`` / ``CHANGE_KEYS``, encoded by
:func:`~skpubsub.io.encode.json_text`. Every writer goes through it (or
:func:`note_lines`, which also takes columns).

The compiled publish path writes one row per result change; a pub's rows for one
subscription net out to one notification (SPEC section 6). ``engine.netting`` does
that merge compiled, and :class:`Notes` keeps the outcome as columns of ids: the
engine's work ends there. Making one ``Match``/``Change`` object per notification
costs more than finding it when results change often (about 1.5 µs each), so
``Engine.apply_columnar`` hands the columns on and ``to_list`` builds the objects
for whoever wants them. ``Notes.json_lines`` writes the columns straight to text,
each distinct id encoded once, through the templates of :mod:`.templates` (made from
``note_line``'s own pieces: the keys and the encoder), so the bytes are the same.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Union

import numpy as np

from .encode import json_line, json_value
from .events import Id, Time
from .notewriter import block
from .templates import CHANGE_KEYS, CHANGE_LINE, LIST_CLOSE, LIST_OPEN, LIST_SEP, MATCH_KEYS, MATCH_LINE


@dataclass(frozen=True, slots=True)
class Match:
    """A range subscription receives a published object."""

    sub: Id
    t: Time
    object: Id

    def to_json(self) -> dict:
        return dict(zip(MATCH_KEYS, (self.sub, self.t, self.object)))


@dataclass(frozen=True, slots=True)
class Change:
    """A kNN/top-k result set changed: ``added`` in new rank order, ``removed`` in old."""

    sub: Id
    t: Time
    added: tuple[Id, ...]
    removed: tuple[Id, ...]

    def to_json(self) -> dict:
        return dict(zip(CHANGE_KEYS, (self.sub, self.t, list(self.added), list(self.removed))))


Notification = Union[Match, Change]
_TABLE_READ = threading.Lock()  # a subscription table read by slot, or a Notes resolved (``Notes.resolve``)


def note_line(n: Notification) -> str:
    """A notification's line in ``notifications.jsonl`` (with its newline)."""
    return json_line(n.to_json())


class Notes:
    """Notifications as columns: ``pub`` (index of the pub in its run, for tags), ``sub``
    and ``t`` per notification, ``match`` (a range match, ``added`` its one object), and
    the added / removed object ids as CSR lists (``add_off``/``added``, ``rem_off``/``removed``)."""

    __slots__ = ("pub", "_sub", "_t", "times", "match", "add_off", "added", "rem_off", "removed", "codes",
                 "table", "__weakref__")

    def __init__(self, pub, sub, t, match, add_off, added, rem_off, removed, codes=None, times=None,
                 table=None) -> None:
        self.pub, self._sub, self._t, self.match = pub, sub, t, match
        self.add_off, self.added, self.rem_off, self.removed = add_off, added, rem_off, removed
        self.codes = codes  # (sub slots, added object slots, removed object slots): json_block's keys
        # ``t`` None: the times are the run's, ``times[pub]``, boxed only when asked for (the
        # compiled writer encodes each pub's time once, never per notification).
        self.times = times
        # ``sub`` None: the ids are ``table[codes[0]]``, gathered only when asked for (one
        # random read of an id object a notification, a sixth of range_1m's object phase);
        # the table's owner resolves them before it changes a slot they name (``resolve``).
        self.table = table

    @property
    def sub(self):
        if self._sub is None:
            self.resolve()
        return self._sub

    def resolve(self) -> None:
        """Gather the subscription ids from the table now (its slots are about to change)."""
        with _TABLE_READ:
            if self._sub is None:
                self._sub = self.table[self.codes[0]]
            self.table = None

    def ids_at(self, slots: np.ndarray) -> list | None:
        """While unresolved: the subscription ids in ``slots`` of the table, read under the
        lock ``resolve`` takes (``run``'s writer thread asks while the engine, the table's
        owner, may resolve); else None."""
        if self.table is None:
            return None
        with _TABLE_READ:
            table = self.table
            return None if table is None else table[slots].tolist()

    @property
    def t(self):
        if self._t is None:
            boxed = np.empty(len(self.times), dtype=object)
            boxed[:] = self.times  # as given: an int stays an int (SPEC 6 "Times")
            self._t = boxed[self.pub]
        return self._t

    def __len__(self) -> int:
        return len(self.match)

    def to_list(self) -> list[Notification]:
        out: list[Notification] = []
        append = out.append
        ao, ro = self.add_off.tolist(), self.rem_off.tolist()
        added, removed = self.added.tolist(), self.removed.tolist()
        for j, (s, t, m) in enumerate(zip(self.sub.tolist(), self.t.tolist(), self.match.tolist())):
            a0, a1, r0, r1 = ao[j], ao[j + 1], ro[j], ro[j + 1]
            if m:
                append(Match(s, t, added[a0]))
            else:
                append(Change(s, t, tuple(added[a0:a1]), tuple(removed[r0:r1])))
        return out

    def json_block(self) -> str:
        """``"".join(json_lines())``."""
        return self.json_bytes().decode("utf-8")

    def json_bytes(self) -> bytes:
        """``json_block``'s UTF-8, by the compiled writer when the slots are known."""
        if self.codes is not None and len(self):
            data = block(self)
            if data is not None:
                return data
        return "".join(self.json_lines()).encode("utf-8")

    def json_lines(self) -> list[str]:
        """The notifications as output lines, ``note_line`` of each byte for byte, without
        making their objects (ids and times through ``json_value``)."""
        subs, times, added, removed = ([json_value(v) for v in a.tolist()]
                                       for a in (self.sub, self.t, self.added, self.removed))
        ao, ro = self.add_off.tolist(), self.rem_off.tolist()
        join = LIST_SEP.join
        lines = []
        append = lines.append
        for j, m in enumerate(self.match.tolist()):
            if m:
                append(MATCH_LINE % (subs[j], times[j], added[ao[j]]))
            else:
                append(CHANGE_LINE % (subs[j], times[j], LIST_OPEN + join(added[ao[j]:ao[j + 1]]) + LIST_CLOSE,
                                       LIST_OPEN + join(removed[ro[j]:ro[j + 1]]) + LIST_CLOSE))
        return lines


class NoteBatch:
    """The notifications of one ``apply``, in stream order: columnar runs from the
    compiled path between lists from the plain one."""

    def __init__(self) -> None:
        self.parts: list[Notes | list[Notification]] = []
        self.count = 0

    def extend(self, notes: list[Notification]) -> None:
        if not notes:
            return
        if self.parts and isinstance(self.parts[-1], list):
            self.parts[-1].extend(notes)
        else:
            self.parts.append(list(notes))
        self.count += len(notes)

    def add(self, notes: Notes) -> None:
        if len(notes):
            self.parts.append(notes)
            self.count += len(notes)

    def __len__(self) -> int:
        return self.count

    def to_list(self) -> list[Notification]:
        out: list[Notification] = []
        for p in self.parts:
            out.extend(p if isinstance(p, list) else p.to_list())
        return out

    def matches(self) -> np.ndarray:
        """Which notifications are range matches, in order (bool)."""
        return np.concatenate([np.zeros(0, dtype=np.bool_)] + [
            p.match.astype(np.bool_) if isinstance(p, Notes) else np.array([type(n) is Match for n in p], np.bool_)
            for p in self.parts])

    def json_block(self) -> str:
        """All the notifications' lines as one string, in order."""
        return self.json_bytes().decode("utf-8")

    def json_bytes(self) -> bytes:
        """``json_block``'s UTF-8 (what ``run`` writes: the compiled writer's bytes as they are)."""
        return b"".join(p.json_bytes() if isinstance(p, Notes) else "".join(map(note_line, p)).encode("utf-8")
                        for p in self.parts)

    def json_lines(self) -> list[str]:
        """The output lines of all the notifications, in order."""
        out: list[str] = []
        for p in self.parts:
            out.extend(note_lines(p))
        return out


class NoteLines:
    """Notifications as their finished lines (``data``: UTF-8, each line ending in a
    newline): what the multi-worker runtime's merge gives (``LocalCluster.apply_columnar``)."""

    def __init__(self, data: bytes, count: int) -> None:
        self.data, self.count = data, count

    def __len__(self) -> int:
        return self.count

    def json_bytes(self) -> bytes:
        return self.data

    def json_block(self) -> str:
        return self.data.decode("utf-8")

    def json_lines(self) -> list[str]:
        return self.json_block().splitlines(True)

    def to_list(self) -> list[Notification]:
        """The objects again, read from the lines (they hold every field, SPEC 4)."""
        out: list[Notification] = []
        for line in self.json_lines():
            r = json.loads(line)
            out.append(Match(r["sub"], r["t"], r["object"]) if "object" in r else
                       Change(r["sub"], r["t"], tuple(r["added"]), tuple(r["removed"])))
        return out


AnyNotes = Union[NoteBatch, Notes, NoteLines, Sequence[Notification]]


def note_lines(notes: AnyNotes) -> list[str]:
    """The output lines of what an engine returns: columns (``Notes``, ``NoteBatch``)
    format themselves, a list of notifications goes through ``note_line``."""
    if isinstance(notes, (Notes, NoteBatch, NoteLines)):
        return notes.json_lines()
    return [note_line(n) for n in notes]
