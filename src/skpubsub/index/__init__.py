"""Subscription indexes, chosen by name (``--index``; :mod:`.registry`)."""

from .aoiq import AOIQIndex
from .auto import AutoIndex
from .base import SubscriptionIndex
from .cgrid import CompiledGrid
from .grid import GridIndex
from .igpt import IGPTIndex
from .registry import INDEXES, make_index, register

# One compiled grid inverted file is both DkM-SKS's worker index (kNN) and
# PS2Stream's GI² (range); the plain ``grid`` is the uncompiled baseline.
# ``aoiq`` is CkQST's: the same grid, `all` subscriptions under ordered keyword pairs and blocks.
# ``igpt`` is Skype's: top-k subscriptions in the cell of their location, pruned by groups and cells.
# ``auto`` (the default) puts each subscription in the one of these best for its kind and match.
for _name, _cls in (("grid", GridIndex), ("dkm", CompiledGrid), ("gi2", CompiledGrid), ("aoiq", AOIQIndex),
                    ("igpt", IGPTIndex), ("auto", AutoIndex)):
    register(_name, _cls)

__all__ = ["INDEXES", "SubscriptionIndex", "make_index", "register"]
