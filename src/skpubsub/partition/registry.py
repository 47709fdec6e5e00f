"""Planners by name (``--partitioner``)."""

from __future__ import annotations

from .dkm import PLANNERS as _DKM
from .dskype import PLANNERS as _DSKYPE
from .ps2 import PLANNERS as _PS2

PLANNERS = {**_DKM, **_DSKYPE, **_PS2}
