"""Subscription indexes by name (``--index``): every one subclasses ``SubscriptionIndex``,
and its parameters are checked when it is made."""

from __future__ import annotations

import inspect
from typing import Any

from .base import SubscriptionIndex

INDEXES: dict[str, type[SubscriptionIndex]] = {}


def register(name: str, cls: type[SubscriptionIndex]) -> None:
    if not (isinstance(cls, type) and issubclass(cls, SubscriptionIndex)):
        raise TypeError(f"index {name!r}: {cls!r} does not subclass SubscriptionIndex")
    INDEXES[name] = cls


def parameters(name: str) -> list[str]:
    """The parameters index ``name`` takes (beyond the table, vocabulary and space)."""
    sig = inspect.signature(INDEXES[name].__init__)
    return [p for p in sig.parameters if p not in ("self", "subs", "vocab", "space")]


def check_parameters(name: str, params: dict[str, Any]) -> None:
    """A parameter the index does not take is an error, never silently dropped."""
    if name not in INDEXES:
        raise ValueError(unknown_index(name))
    known = parameters(name)
    wrong = [p for p in params if p not in known]
    if wrong:
        raise ValueError(f"index {name!r} takes no parameter {wrong[0]!r}; it takes: {', '.join(known) or 'none'}")


def make_index(name: str, subs, vocab, space, **params: Any) -> SubscriptionIndex:
    check_parameters(name, params)
    return INDEXES[name](subs, vocab, space, **params)


def unknown_index(name: str, known: list[str] | None = None) -> str:
    return f"unknown index {name!r}; known: {', '.join(known if known is not None else ['reference', *INDEXES])}"
