"""Planners by name (``--partitioner``)."""

from __future__ import annotations

from .dkm import PLANNERS as _DKM
from .dskype import PLANNERS as _DSKYPE

PLANNERS = {**_DKM, **_DSKYPE}
