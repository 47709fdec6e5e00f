"""Run-wide settings: the window policy and the space (SPEC sections 1-2)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Window:
    """One window policy for a whole run: ``none``, ``count:N`` or ``time:T``."""

    kind: str = "none"
    n: int = 0  # count:N
    span: int | float = 0.0  # time:T (an int when given as one: exact expiry)

    @classmethod
    def parse(cls, text: str) -> "Window":
        text = text.strip()
        if text == "none":
            return cls()
        kind, _, arg = text.partition(":")
        if kind == "count":
            try:
                n = int(arg)
            except ValueError:
                n = 0
            if n < 1:
                raise ValueError(f"bad window {text!r}: count:N needs an integer N >= 1")
            return cls("count", n=n)
        if kind == "time":
            span: int | float
            try:  # an integer T stays an int: expiry is then exact (SPEC section 6)
                span = int(arg, 10) if arg.strip().lstrip("+-").isdigit() else float(arg)
                ok = math.isfinite(span) and span > 0
            except (ValueError, OverflowError):
                ok = False
            if not ok:
                raise ValueError(f"bad window {text!r}: time:T needs a finite T > 0")
            return cls("time", span=span)
        raise ValueError(f"bad window {text!r}: use none, count:N or time:T")

    def __str__(self) -> str:
        if self.kind == "count":
            return f"count:{self.n}"
        if self.kind == "time":
            return f"time:{self.span!r}"  # parses back to the same value and type
        return "none"

    def expiry(self, t: int | float, expires: int | float | None = None) -> int | float:
        """When an object published at ``t`` leaves a time window (SPEC section 6): its own
        ``expires``, else ``t + T``, in exact integer arithmetic when ``t`` and ``T`` are both
        integers (nanosecond stamps), else ``float(t) + float(T)``. O(1)."""
        if expires is not None:
            return expires
        span = self.span
        if isinstance(t, int) and not isinstance(t, bool) and isinstance(span, int):
            return t + span
        return float(t) + float(span)

    @property
    def retains(self) -> bool:
        """True when objects stay alive after publication (count and time)."""
        return self.kind != "none"


# The space's sides (SPEC section 6, numbers at the edges). Up to MAX_SIDE, squared
# distances, the diagonal and the area stay finite; below MIN_SIDE the indexes' cell
# geometry (float32 bounds) no longer tells nearby points apart (1e-25: dkm, gi2, aoiq and
# igpt lost kNN matches), so such a space is refused with a reason instead.
MIN_SIDE = 1e-15
MAX_SIDE = 1e100


@dataclass(frozen=True, slots=True)
class Space:
    """The closed rectangle all points lie in; ``maxdist`` is its diagonal."""

    x1: float = -180.0
    y1: float = -90.0
    x2: float = 180.0
    y2: float = 90.0

    def __post_init__(self) -> None:
        vals = (self.x1, self.y1, self.x2, self.y2)
        if not all(math.isfinite(v) for v in vals) or self.x1 >= self.x2 or self.y1 >= self.y2:
            raise ValueError(f"bad space {self._show()}: need finite x1<x2, y1<y2")
        # Every engine squares distances, divides by the diagonal and cuts the sides into
        # cells: sides between MIN_SIDE and MAX_SIDE keep the squared diagonal, the area and
        # the cell sizes finite and normal (no OverflowError, no division by zero).
        w, h = self.x2 - self.x1, self.y2 - self.y1
        if not (MIN_SIDE <= w <= MAX_SIDE and MIN_SIDE <= h <= MAX_SIDE):
            raise ValueError(f"bad space {self._show()}: each side must be between "
                             f"{MIN_SIDE:g} and {MAX_SIDE:g} long (x2-x1={w:g}, y2-y1={h:g})")

    def _show(self) -> str:
        return ",".join(_num(v) if isinstance(v, (int, float)) else repr(v)
                        for v in (self.x1, self.y1, self.x2, self.y2))


    @classmethod
    def parse(cls, text: str) -> "Space":
        parts = text.split(",")
        if len(parts) != 4:
            raise ValueError(f"bad space {text!r}: use x1,y1,x2,y2")
        try:
            vals = [float(p) for p in parts]
        except ValueError as exc:
            raise ValueError(f"bad space {text!r}: {exc}") from None
        return cls(*vals)  # its own errors name the space

    @property
    def maxdist(self) -> float:
        return math.sqrt((self.x2 - self.x1) ** 2 + (self.y2 - self.y1) ** 2)

    def contains(self, x: float, y: float) -> bool:
        return self.x1 <= x <= self.x2 and self.y1 <= y <= self.y2

    def __str__(self) -> str:
        """``x1,y1,x2,y2``, exact: ``Space.parse(str(s)) == s`` (Spark hands it on as text)."""
        return ",".join(_num(v) for v in (self.x1, self.y1, self.x2, self.y2))


def _num(v: float) -> str:
    """The shortest text that parses back to ``float(v)`` (``-180``, ``0.1``, ``1e+20``)."""
    r = repr(float(v))
    return r[:-2] if r.endswith(".0") else r
