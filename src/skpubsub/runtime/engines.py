"""Engines by name (``--index``): the compiled and plain indexes, and engines registered
from where they live.

An engine that is not an index of ours registers itself under the entry-point group
``skpubsub.engines`` (``name = "module:factory"``, the factory taking ``(window, space,
**params)``): the brute-force ``reference`` oracle is one (pyproject.toml names it in
``skpubsub.testing.reference``), so the runtime never imports the test oracle and a user's
own engine plugs in the same way. An entry point is read only for a name that is not an
index (one scan of the installed packages' metadata, then kept).
"""

from __future__ import annotations

from functools import cache
from typing import Any, Callable

from ..core.config import Space, Window
from ..engine.engine import Engine
from ..index.registry import INDEXES, unknown_index

GROUP = "skpubsub.engines"


@cache
def registered() -> dict[str, Any]:
    """The engines registered as entry points: name -> entry point (loaded when made)."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=GROUP) if ep.name not in INDEXES}


def known_indexes() -> list[str]:
    return [*sorted(registered()), *INDEXES]


def is_known(index: str) -> bool:
    return index in INDEXES or index in registered()


# The index a run takes unless told: compiled, exact for every kind and window, each
# subscription in the structure best for its kind and match (index/auto.py). (The plain
# `grid` and the `reference` are baselines, by name.)
DEFAULT_INDEX = "auto"


def make_engine(index: str = DEFAULT_INDEX, window: Window | str = "none", space: Space | None = None,
                **params: Any):
    """An engine by index name, or a registered one (``reference``: the brute-force oracle)."""
    if index in INDEXES:
        return Engine(window, space, index=index, **params)  # it checks the index's parameters
    ep = registered().get(index)
    if ep is None:
        raise ValueError(unknown_index(index, known_indexes()))
    factory: Callable[..., Any] = ep.load()
    return factory(window, space, **params)
