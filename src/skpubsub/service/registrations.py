"""The service's registrations: one life of a subscription id each (:class:`Reg`), and the
book that holds them (:class:`Book`): the live ones by id, the ended ones still readable by
their clients, and the order of every kept notification across all of them, from whose
front the total cap (``keep_total``) takes the oldest (SPEC section 8, NOTES.md).
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Iterator
from typing import Any

from .wal import SVC


class Reg:
    """One life of a subscription id: token digest, numbered notifications, end."""

    __slots__ = ("id", "seq", "kind", "record", "token", "ring", "keep", "next", "ended", "ended_at", "streams",
                 "wake", "stale")

    def __init__(self, record: dict, token: str | None, keep: int) -> None:
        self.id = record["id"]
        self.seq: int = record[SVC]["seq"]
        self.kind: str = record["kind"]
        self.record = record
        self.token = token
        self.ring: deque[tuple[int, str]] | None = None  # made at the first notification (most have none)
        self.keep = keep
        self.next = 1  # number of the next notification
        self.ended: str | None = None  # "unsub" or "expired" once ended
        self.ended_at = 0.0  # when (time.time())
        self.streams = 0  # open SSE streams (the app counts them)
        self.wake: set | None = None  # the app's waiting streams (asyncio.Event each)
        self.stale = 0  # its oldest entries in Core.kept_order that name notifications no longer kept

    def add(self, line: str) -> int:
        """Keep a notification; 1 if the ring grew, 0 if its oldest went (``keep`` reached)."""
        ring = self.ring
        if ring is None:
            ring = self.ring = deque(maxlen=self.keep)
        elif len(ring) == self.keep:
            ring.append((self.next, line))
            self.next += 1
            self.stale += 1
            return 0
        ring.append((self.next, line))
        self.next += 1
        return 1

    def kept(self) -> list[tuple[int, str]]:
        return list(self.ring) if self.ring else []

    def restore(self, next_n: int, kept: list) -> None:
        self.next = next_n
        if kept:
            self.ring = deque(((n, line) for n, line in kept), maxlen=self.keep)

    def after(self, n: int, limit: int = 1000) -> list[tuple[int, str]]:
        """Kept notifications numbered above ``n`` (oldest kept first when ``n`` is older)."""
        ring = self.ring
        if not ring or ring[-1][0] <= n:
            return []
        start = max(0, n - ring[0][0] + 1)
        return [ring[i] for i in range(start, min(len(ring), start + limit))]

    @property
    def first_kept(self) -> int:
        return self.ring[0][0] if self.ring else self.next


class Book:
    """Registrations and their kept notifications, within the bounds: ``keep`` a
    registration, ``keep_total`` in all; ended registrations at most ``keep_ended`` of them,
    for ``ended_seconds`` after their end, ``ended_lines`` notifications among them."""

    def __init__(self, keep: int, keep_total: int, keep_ended: int, ended_seconds: float,
                 ended_lines: int) -> None:
        self.keep, self.keep_total = keep, keep_total
        self.keep_ended, self.ended_seconds, self.ended_lines = keep_ended, ended_seconds, ended_lines
        self.regs: dict[Any, Reg] = {}  # live registrations by subscription id
        self.ended: dict[int, Reg] = {}  # ended registrations still readable, by seq, oldest end first
        self.ended_by_id: dict[Any, list[Reg]] = {}
        self.ended_kept = 0  # notifications kept by the ended registrations
        # Every kept notification's registration, oldest first, across all registrations: the
        # total cap drops from its front (a registration's own entries are in its ring's order;
        # ``Reg.stale`` counts its leading entries that name notifications already gone).
        self.kept_order: deque[Reg] = deque()
        self.kept_total = 0

    def add(self, rec: dict) -> Reg:
        """A new live registration of the accepted subscription record ``rec``."""
        reg = Reg(rec, rec[SVC].get("token"), self.keep_of(rec))
        self.regs[reg.id] = reg
        return reg

    def keep_of(self, rec: dict) -> int:
        """A hooked registration keeps what its hook has not acknowledged beyond ``keep``, up to
        ``keep_total`` (SPEC 9); its hook lets the acknowledged ones go (``let_go``)."""
        return self.keep_total if "hook" in rec else self.keep

    def let_go(self, reg: Reg, upto: int) -> None:
        """Drop a hooked registration's kept notifications numbered up to ``upto`` (acknowledged)
        beyond the last ``keep`` (its order entries go stale, as in ``release``)."""
        ring = reg.ring
        while ring and len(ring) > self.keep and ring[0][0] <= upto:
            ring.popleft()
            reg.stale += 1
            self.kept_total -= 1
            if reg.ended is not None:
                self.ended_kept -= 1

    def hand(self, rs: list[Reg], lines: list[str]) -> None:
        """Each notification line to its registration (``rs[i]`` gets ``lines[i]``), which
        numbers and keeps it. The hot loop (one pass per notification, ~10 per object at
        100,000 subscriptions): ``Reg.add`` inlined, the order filled at once."""
        grew = 0
        for reg, line in zip(rs, lines):
            ring = reg.ring
            if ring is None:
                ring = reg.ring = deque(maxlen=reg.keep)
                grew += 1
            elif len(ring) == reg.keep:  # its oldest goes (its order entry goes stale)
                reg.stale += 1
            else:
                grew += 1
            ring.append((reg.next, line))
            reg.next += 1
        order = self.kept_order
        order.extend(rs)
        self.kept_total += grew
        while order and order[0].stale:  # entries of notifications --keep let go: off the front as they come
            order.popleft().stale -= 1
        if self.kept_total > self.keep_total or len(order) > 2 * self.keep_total + 1024:
            self.cap_kept()

    def end(self, reg: Reg, why: str, touched: set, at: float | None = None) -> None:
        reg.ended = why
        reg.ended_at = time.time() if at is None else at
        if self.regs.get(reg.id) is reg:
            del self.regs[reg.id]
        touched.add(reg)
        self.bury(reg)

    def cap_kept(self) -> None:
        """At most ``keep_total`` notifications kept in all: the oldest go first, whichever
        registration holds them (a stream asked to resume before its oldest kept one gets
        ``event: gap`` first, SPEC section 8 and NOTES.md); the order's entries of
        notifications already gone are skipped, and compacted when they pile up."""
        order = self.kept_order
        while self.kept_total > self.keep_total:
            reg = order.popleft()
            if reg.stale:
                reg.stale -= 1
                continue
            reg.ring.popleft()
            self.kept_total -= 1
            if reg.ended is not None:
                self.ended_kept -= 1
        if len(order) > 2 * self.keep_total + 1024:
            stale = {id(r): r for r in order if r.stale}
            self.kept_order = deque(self.live_order())
            for reg in stale.values():
                reg.stale = 0

    def live_order(self) -> Iterator[Reg]:
        """The order without its stale entries (each registration's leading ``stale`` ones)."""
        skip: dict[int, int] = {}
        for reg in self.kept_order:
            if reg.stale:
                n = skip.get(id(reg), reg.stale)
                if n:
                    skip[id(reg)] = n - 1
                    continue
            yield reg

    def rebuild_order(self, order: list | None) -> None:
        """After a restore: the order of the kept notifications as the snapshot recorded it
        (registration seqs, oldest first; without it, registration by registration)."""
        by_seq = {r.seq: r for r in self.regs.values()}
        by_seq.update(self.ended)
        holders = sorted((r for r in by_seq.values() if r.ring), key=lambda r: r.seq)
        if order is None:
            order = [r.seq for r in holders for _ in r.ring]
        q: deque[Reg] = deque(r for s in order if (r := by_seq.get(s)) is not None and r.ring)
        counts = Counter(order)
        for r in holders:
            c = counts.get(r.seq, 0)
            r.stale = max(0, c - len(r.ring))  # the ring kept fewer (a smaller --keep now)
            q.extendleft([r] * (len(r.ring) - c))  # (not expected) entries the order lacks: oldest
        self.kept_order = q
        self.kept_total = sum(len(r.ring) for r in holders)
        self.cap_kept()

    def release(self, reg: Reg) -> None:
        """A registration forgotten: its kept notifications go (its order entries are stale)."""
        n = len(reg.ring or ())
        reg.stale += n
        self.kept_total -= n
        reg.ring = None

    def bury(self, reg: Reg) -> None:
        """Keep an ended registration readable (its last notifications, then ``end``) by its
        token, within the bounds: count, age, notifications kept in all."""
        if self.keep_ended <= 0:
            self.release(reg)
            return
        self.ended[reg.seq] = reg
        self.ended_by_id.setdefault(reg.id, []).append(reg)
        self.ended_kept += len(reg.ring or ())
        self.trim_ended()

    def trim_ended(self, now: float | None = None) -> None:
        now = time.time() if now is None else now
        ended = self.ended
        while ended:
            seq, reg = next(iter(ended.items()))
            if (len(ended) <= self.keep_ended and self.ended_kept <= self.ended_lines
                    and now - reg.ended_at < self.ended_seconds):
                return
            del ended[seq]
            self.ended_kept -= len(reg.ring or ())
            self.release(reg)
            lst = self.ended_by_id[reg.id]
            lst.remove(reg)
            if not lst:
                del self.ended_by_id[reg.id]

    def lookup(self, ident: str, ended: bool = False) -> list[Reg]:
        """Live registrations a path segment may name: the string id, or the integer one;
        with ``ended``, then the ended ones still kept (newest first)."""
        keys: list[Any] = [ident]
        try:
            n = int(ident)
        except ValueError:
            pass
        else:
            if str(n) == ident:
                keys.append(n)
        out = [reg for k in keys if (reg := self.regs.get(k)) is not None]
        if ended and self.ended:
            self.trim_ended()
            for k in keys:
                out.extend(reversed(self.ended_by_id.get(k, ())))
        return out
