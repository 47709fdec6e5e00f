"""The JSON encoder of every output record (SPEC section 4): compact, UTF-8 kept as is.

Every runtime and every output file formats with these two, so the local and the
Spark runs write the same bytes.
"""

from __future__ import annotations

import json
from typing import Any


def json_text(obj: Any) -> str:
    """One output record (or value) as JSON without a newline."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def json_line(obj: Any) -> str:
    """One output record as a line of a JSON Lines file."""
    return json_text(obj) + "\n"
