"""Engines by index name, the reference oracle among them (``--index``)."""

from __future__ import annotations

from typing import Any

from ..core.config import Space, Window
from ..engine.engine import Engine
from ..index.registry import INDEXES, unknown_index


def known_indexes() -> list[str]:
    return ["reference", *INDEXES]


# The index a run takes unless told: compiled, exact for every kind and window, each
# subscription in the structure best for its kind and match (index/auto.py). (The plain
# `grid` and the `reference` are baselines, by name.)
DEFAULT_INDEX = "auto"


def make_engine(index: str = DEFAULT_INDEX, window: Window | str = "none", space: Space | None = None,
                **params: Any):
    """An engine by index name; ``reference`` is the brute-force oracle (it takes no parameters)."""
    if index == "reference":
        if params:
            raise ValueError(f"index 'reference' takes no parameter {next(iter(params))!r}")
        from ..testing.reference import ReferenceEngine
        return ReferenceEngine(window, space)
    if index not in INDEXES:
        raise ValueError(unknown_index(index))
    return Engine(window, space, index=index, **params)  # it checks the index's parameters
