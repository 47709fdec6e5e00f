"""The DkM-SKS family of planners: ``hash`` (DSkype Eq. 14), ``kop`` (DkM-SKS Section 3.1), ``sop``
(Section 3.2) and ``dkm`` (Section 4), one module each.

Every planner is ``plan_NAME(subs, stats, m, **params) -> AssignedPlan`` placing each subscription
on one worker; defaults are the paper's (Section 5.1).  Where and why we depart from the paper:
NOTES.md next to this file.
"""

from __future__ import annotations

from .dkm import most_overlap, plan_dkm
from .hash import hash_worker, plan_hash
from .kop import eq1_cost, plan_kop
from .params import PAPER_GAMMA1, PAPER_GAMMA2, PAPER_THETA
from .sample import Regions, SampleIndex
from .sop import plan_sop

__all__ = ["PLANNERS", "PAPER_THETA", "PAPER_GAMMA1", "PAPER_GAMMA2", "SampleIndex", "Regions", "hash_worker",
           "eq1_cost", "most_overlap", "plan_hash", "plan_kop", "plan_sop", "plan_dkm"]

PLANNERS = {"hash": plan_hash, "kop": plan_kop, "sop": plan_sop, "dkm": plan_dkm}
