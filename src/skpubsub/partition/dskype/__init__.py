"""DSkype's distribution mechanisms (Skype paper, Section 7.3), one module each: ``location``
(Eq. 15, Algorithm 3), ``keyword`` (Eqs. 16-17, Algorithm 4), ``prefix`` (Eq. 18, Definition 12).

Every planner is ``plan_NAME(subs, stats, m, **params) -> DSkypePlan`` placing each subscription on
one worker, with ``plan.loads()`` the paper's cost model per worker.  Where and why we depart from
the paper: NOTES.md next to this file.
"""

from __future__ import annotations

from .keyword import KeywordPlan, plan_keyword
from .location import LocationPlan, plan_location, sub_point
from .loose import loose_prefix
from .plan import DSkypePlan
from .prefix import PrefixPlan, plan_prefix

__all__ = ["PLANNERS", "DSkypePlan", "LocationPlan", "KeywordPlan", "PrefixPlan",
           "plan_location", "plan_keyword", "plan_prefix", "sub_point", "loose_prefix"]

PLANNERS = {"location": plan_location, "keyword": plan_keyword, "prefix": plan_prefix}
