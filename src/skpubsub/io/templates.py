"""The output lines' templates: one module that every writer of ``notifications.jsonl`` and
``results.jsonl`` takes them from (``notifications`` formats columns with them, ``sinks``
writes results, ``notewriter`` cuts its compiled pieces from them), so none of those
imports another for its pieces.

A notification's record has its keys in the order of ``MATCH_KEYS`` / ``CHANGE_KEYS``; the
templates are made by the formatter from placeholders rather than written out: a record's
line with a %s slot per value, and a list's brackets and separator. A placeholder encodes
as "\\u0000", which no key and no syntax contains.
"""

from __future__ import annotations

from .encode import json_line, json_text

MATCH_KEYS = ("sub", "t", "object")
CHANGE_KEYS = ("sub", "t", "added", "removed")

_SLOT = "\x00"


def _slotted(value) -> str:
    """``json_line`` of ``value`` with each placeholder value a ``%s`` slot."""
    return json_line(value).replace("%", "%%").replace(json_text(_SLOT), "%s")


MATCH_LINE = _slotted(dict.fromkeys(MATCH_KEYS, _SLOT))
CHANGE_LINE = _slotted(dict.fromkeys(CHANGE_KEYS, _SLOT))
LIST_OPEN, LIST_SEP, LIST_CLOSE = json_text([_SLOT, _SLOT]).split(json_text(_SLOT))
# A line of ``results.jsonl`` (``sinks.result_line``): ``json_line({"id": ..., "results": [...]})``.
RESULT_LINE, RESULT_SEP = '{"id":%s,"results":[%s]}\n', ","
