"""Event files in CSV and Parquet, read by Spark and turned into SPEC JSON lines.

JSON Lines is the format every tool reads (SPEC section 3); a CSV or Parquet
event file is converted once, in order, into a JSONL file that the streaming
source then replays. Each row becomes one event record with its null fields left
out, so validation (and every rejection reason) is the same as for JSONL.

CSV: a header of SPEC field names; ``keywords`` and ``rect`` are ``;``-separated,
``weights`` is a JSON object; ``t``, ``x``, ``y``, ``alpha``, ``expires`` are
numbers, ``k`` an integer, ``id`` a string. Parquet: the same names with native
types (``keywords`` a list of strings, ``rect`` a list of 4 numbers, ``weights``
a map or a JSON string).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .fs import Loc

NUMBERS = ("t", "x", "y", "alpha", "expires")


def _number(text: str) -> Any:
    try:
        v = int(text)
    except ValueError:
        try:
            v = float(text)
        except ValueError:
            return text  # left as given: the Gate says "mistyped field"
    return v


def csv_record(row: dict[str, Any]) -> dict[str, Any]:
    """One CSV row (all strings) -> an event record."""
    rec: dict[str, Any] = {}
    for key, val in row.items():
        if val is None or val == "":
            continue
        if key in NUMBERS or key == "k":
            rec[key] = _number(val)
        elif key == "keywords":
            rec[key] = [w for w in val.split(";")]
        elif key == "rect":
            rec[key] = [_number(v) for v in val.split(";")]
        elif key == "weights":
            try:
                rec[key] = json.loads(val)
            except ValueError:
                rec[key] = val
        else:
            rec[key] = val
    return rec


def parquet_record(row: dict[str, Any]) -> dict[str, Any]:
    """One Parquet row (native types) -> an event record."""
    rec: dict[str, Any] = {}
    for key, val in row.items():
        if val is None:
            continue
        if key == "weights" and isinstance(val, str):
            try:
                val = json.loads(val)
            except ValueError:
                pass
        elif key == "weights" and isinstance(val, list):  # a map arrives as (key, value) pairs
            val = dict(val)
        elif isinstance(val, (list, tuple)):
            val = list(val)
        rec[key] = val
    return rec


def to_jsonl(spark, src: str | Path | Loc, dst: str | Path | Loc) -> Loc:
    """Convert a ``.csv`` or ``.parquet`` event file (or directory) into JSONL at ``dst``,
    keeping the row order (partitions follow the file; ``coalesce(1)`` keeps theirs)."""
    src, dst = Loc(src), Loc(dst)
    name = src.name.lower()
    if name.endswith(".csv"):
        df = spark.read.options(header=True, inferSchema=False, escape='"').csv(src.uri)  # RFC 4180 quotes
        conv = csv_record
    elif name.endswith(".parquet"):
        df = spark.read.parquet(src.uri)
        conv = parquet_record
    else:
        raise ValueError(f"not a CSV or Parquet event file: {src}")

    def line(row) -> str:
        d = row.asDict()
        if "weights" in d and isinstance(d["weights"], dict):
            d["weights"] = dict(d["weights"])
        return json.dumps(conv(d), ensure_ascii=False, allow_nan=True)

    tmp = dst.parent / f".{dst.name}.parts"
    tmp.rmtree()
    df.rdd.map(line).coalesce(1).saveAsTextFile(tmp.uri)
    part = next(p for p in tmp.iterdir() if p.name.startswith("part-"))
    dst.replace_with(part)
    tmp.rmtree()
    return dst


def is_tabular(path: str | Path) -> bool:
    return Path(path).name.lower().endswith((".csv", ".parquet"))
