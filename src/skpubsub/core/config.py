"""Run-wide settings: the window policy and the space (SPEC sections 1-2)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Window:
    """One window policy for a whole run: ``none``, ``count:N`` or ``time:T``."""

    kind: str = "none"
    n: int = 0  # count:N
    span: float = 0.0  # time:T

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
            try:
                span = float(arg)
            except ValueError:
                span = math.nan
            if not (math.isfinite(span) and span > 0):
                raise ValueError(f"bad window {text!r}: time:T needs a finite T > 0")
            return cls("time", span=span)
        raise ValueError(f"bad window {text!r}: use none, count:N or time:T")

    def __str__(self) -> str:
        if self.kind == "count":
            return f"count:{self.n}"
        if self.kind == "time":
            return f"time:{self.span:g}"
        return "none"

    @property
    def retains(self) -> bool:
        """True when objects stay alive after publication (count and time)."""
        return self.kind != "none"


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
            raise ValueError(f"bad space {vals}: need finite x1<x2, y1<y2")

    @classmethod
    def parse(cls, text: str) -> "Space":
        parts = text.split(",")
        if len(parts) != 4:
            raise ValueError(f"bad space {text!r}: use x1,y1,x2,y2")
        try:
            return cls(*(float(p) for p in parts))
        except ValueError as exc:
            raise ValueError(f"bad space {text!r}: {exc}") from None

    @property
    def maxdist(self) -> float:
        return math.sqrt((self.x2 - self.x1) ** 2 + (self.y2 - self.y1) ** 2)

    def contains(self, x: float, y: float) -> bool:
        return self.x1 <= x <= self.x2 and self.y1 <= y <= self.y2

    def __str__(self) -> str:
        return f"{self.x1:g},{self.y1:g},{self.x2:g},{self.y2:g}"
