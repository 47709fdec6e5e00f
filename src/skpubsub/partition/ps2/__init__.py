"""PS2Stream's hybrid space/text partitioning, the ``ps2`` planner (Chen, Cong, Zhang, Fu, Chen,
"Distributed Publish/Subscribe Query Processing on the Spatio-Textual Data Stream", Section IV).

``plan_ps2(subs, stats, m, **params) -> PS2Plan``: the kd^t-tree of Algorithm 1 (``tree``), its units
divided among the workers (``merge``), new subscriptions placed by the grid^t (``grid``).  Where and
why we depart from the paper: NOTES.md next to this file.
"""

from __future__ import annotations

from .data import clamp_point, clip_rect, posting  # noqa: F401  (public, outside __all__ as before)
from .grid import GridT
from .merge import partition_counts
from .plan import PS2Plan
from .planner import DEFAULTS, plan_ps2  # noqa: F401  (DEFAULTS: public, outside __all__ as before)
from .tree import cosine

__all__ = ["PLANNERS", "PS2Plan", "GridT", "plan_ps2", "partition_counts", "cosine"]

PLANNERS = {"ps2": plan_ps2}
