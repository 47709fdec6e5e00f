"""Subscription indexes, chosen by name (``--index``)."""

from .grid import GridIndex

INDEXES = {"grid": GridIndex}
