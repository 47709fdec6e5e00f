"""The JSON encoder of every output record (SPEC section 4): compact, UTF-8 kept as is.

Every runtime and every output file formats with these two, so the local and the
Spark runs write the same bytes.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring
from typing import Any


def json_text(obj: Any) -> str:
    """One output record (or value) as JSON without a newline."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def json_line(obj: Any) -> str:
    """One output record as a line of a JSON Lines file."""
    return json_text(obj) + "\n"


def json_value(v: Any) -> str:
    """``json_text`` of one id or time, without building an encoder for the common types:
    the same functions ``json.dumps`` calls for them (a string's escaping with
    ``ensure_ascii=False``, an int's and a finite float's repr; times and ids are finite)."""
    t = type(v)
    if t is str:
        return encode_basestring(v)
    if t is int:
        return int.__repr__(v)
    if t is float and v - v == 0.0:  # finite
        return float.__repr__(v)
    return json_text(v)
