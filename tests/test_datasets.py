"""Real-data loaders: GeoNames cities and postal codes, read from installed packages."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest

from skpubsub.datasets import DATASETS, MAX_KEYWORDS, Places, data_path, load
from skpubsub.datasets import geonames
from skpubsub.io.keywords import normalise, split_text


@pytest.fixture(scope="module", params=DATASETS)
def small(request) -> Places:
    return load(request.param, limit=500)


def test_known_datasets():
    assert set(DATASETS) == {"geonames-cities", "geonames-postal"}
    for name in DATASETS:
        assert data_path(name).is_file()


def test_unknown_dataset_lists_known_names():
    with pytest.raises(ValueError) as exc:
        load("geonames-nowhere", limit=1)
    msg = str(exc.value)
    assert "unknown dataset" in msg
    for name in DATASETS:
        assert name in msg
    with pytest.raises(ValueError):
        data_path("nope")


def test_limit_and_columns(small: Places):
    assert len(small) == 500
    assert small.name in DATASETS
    assert small.x.dtype == np.float64 and small.y.dtype == np.float64
    assert small.x.shape == small.y.shape == (500,)
    assert len(small.keywords) == len(small.source_ids) == 500


def test_coordinates_in_range(small: Places):
    assert np.isfinite(small.x).all() and np.isfinite(small.y).all()
    assert ((small.x >= -180) & (small.x <= 180)).all()
    assert ((small.y >= -90) & (small.y <= 90)).all()


def test_keywords_normalised(small: Places):
    for kws in small.keywords:
        assert isinstance(kws, tuple)
        assert 1 <= len(kws) <= MAX_KEYWORDS
        assert len(set(kws)) == len(kws)
        for w in kws:
            assert w and normalise(w) == w and split_text(w) == (w,)
    assert small.mean_keywords() >= 1


def test_country_code_is_a_keyword():
    cities = load("geonames-cities", limit=50)
    assert all("ad" in k for k in cities.keywords[:5])  # the file starts with Andorra
    postal = load("geonames-postal", limit=3)
    assert postal.keywords[0] == ("canillo", "ad", "ad100")
    assert postal.source_ids.tolist() == [0, 1, 2]


def test_limit_is_a_prefix():
    for name in DATASETS:
        a, b = load(name, limit=40), load(name, limit=300)
        assert a.keywords == b.keywords[:40]
        assert np.array_equal(a.x, b.x[:40]) and np.array_equal(a.y, b.y[:40])
        assert np.array_equal(a.source_ids, b.source_ids[:40])
        assert len(load(name, limit=0)) == 0


def test_max_keywords_cap():
    p = load("geonames-cities", limit=300, max_keywords=3)
    assert max(map(len, p.keywords)) == 3
    full = load("geonames-cities", limit=300)
    for short, long in zip(p.keywords, full.keywords):
        assert short == long[:3]  # name tokens come first
    with pytest.raises(ValueError):
        load("geonames-cities", limit=1, max_keywords=0)
    with pytest.raises(ValueError):
        load("geonames-cities", limit=-1)


def test_postal_json_fallback_matches_fast_path(monkeypatch):
    fast = load("geonames-postal", limit=2000)
    monkeypatch.setattr(geonames, "_postal_block_fast", lambda lines: None)
    slow = load("geonames-postal", limit=2000)
    assert slow.keywords == fast.keywords
    assert np.array_equal(slow.x, fast.x) and np.array_equal(slow.y, fast.y)
    assert np.array_equal(slow.source_ids, fast.source_ids)


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 1 << 20])
def test_streaming_object_parser(chunk: int):
    doc = {"1": {"a": [1, 2.5e3, 'x"y}'], "b": None}, "2": 12345678, "k3": {}, "4": "}{,"}
    for text in (json.dumps(doc), json.dumps(doc, indent=2)):
        got = list(geonames._iter_object_items(io.StringIO(text), chunk=chunk))
        assert got == list(doc.items())
    assert list(geonames._iter_object_items(io.StringIO(" { } "), chunk=chunk)) == []
    with pytest.raises(ValueError):
        list(geonames._iter_object_items(io.StringIO('["not", "an object"]'), chunk=chunk))


def test_bad_records_are_skipped(tmp_path, monkeypatch):
    recs = {
        "1": {"name": "Good Place", "latitude": 10.0, "longitude": 20.0, "countrycode": "XX",
              "alternatenames": ["Bon Endroit"]},
        "2": {"name": "Nan", "latitude": math.nan, "longitude": 0.0, "countrycode": "XX"},
        "3": {"name": "Far", "latitude": 91.0, "longitude": 0.0, "countrycode": "XX"},
        "4": {"name": "West", "latitude": 0.0, "longitude": -180.5, "countrycode": "XX"},
        "5": {"name": "None", "latitude": None, "longitude": 1.0, "countrycode": "XX"},
        "6": {"name": "!!!", "latitude": 1.0, "longitude": 1.0, "countrycode": "", "alternatenames": ["--"]},
        "7": {"name": "Edge", "latitude": -90, "longitude": 180, "countrycode": "YY"},
    }
    path = tmp_path / "cities.json"
    path.write_text(json.dumps(recs))  # json.dumps writes NaN; the parser accepts it
    monkeypatch.setattr(geonames, "data_path", lambda name: path)
    for limit in (None, 10):
        p = load("geonames-cities", limit=limit)
        assert p.keywords == [("good", "place", "xx", "bon", "endroit"), ("edge", "yy")]
        assert p.source_ids.tolist() == [1, 7]
        assert p.x.tolist() == [20.0, 180.0] and p.y.tolist() == [10.0, -90.0]


def test_places_checks_lengths():
    with pytest.raises(ValueError):
        Places("x", np.zeros(2), np.zeros(3), [("a",), ("b",)])
    p = Places("x", np.zeros(2), np.zeros(2), [("a",), ("b", "c")])
    assert len(p) == 2 and p.source_ids.tolist() == [0, 1] and p.mean_keywords() == 1.5
