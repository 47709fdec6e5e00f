"""Issue 18: a hostile-input fuzzer (SPEC sections 5-7).

Valid seeded streams (``testing.streams``) are mutated at the byte level (flips, cuts,
inserted bytes, a BOM, a lone-surrogate escape, an over-long line), the JSON level (bare
NaN/Infinity, 1e999, nesting, wrong types, duplicated and dropped lines) and the field
level (edge values in every field: huge and 64-bit integers, -0.0, booleans, null, empty
and non-string keywords). For each mutated stream:

* the Gate never raises; every line is accepted or rejected with a reason;
* nothing valid is lost: the accepted lines alone, given again, are all accepted as the
  same events (a rejected line changed nothing);
* the engine (dkm, compiled) gives exactly the reference's notifications and results on
  the accepted events (``compare``), and the engine's invariants hold at the end.

The quick test runs a few hundred streams; the soak test 100,000 mutated lines. Findings on
the way (fixed, with tests of their own): a lone surrogate crashed the output, a BOM cost
the first event, integer times above 2**53 expired early.

Outside the suite, ``python tests/test_hardening_fuzz.py FIRST COUNT OUTDIR`` runs COUNT
mutated streams (seeds FIRST.., 10-40 events, rate 0.3) through ``fuzz_any``: the Gate's
checks, then ``compare`` with one index configuration per seed, rotating through every
index and conformance variant (``_check()`` after every event on every 7th seed, batches
on every other). Findings go to OUTDIR/findings.jsonl, progress to OUTDIR/progress.txt.
Issue 18's run (at 45e7c97, ``nice -n 10``, 44 min on one core): seeds 0..149,999, 150,000
streams, 3,758,290 lines (2,642,358 accepted); the Gate never failed; 15 findings, two bugs,
both outside these rooms, kept as strict xfails, since fixed (all 15 seeds replay clean): 14
times an object at t = 1e308 whose expiry float(t) + float(T) is its own time (the compiled
path, end of this file), once integer expiries 2**64 apart in a k-skyband
(test_hardening_numbers.py).
"""

from __future__ import annotations

import json
import random

import pytest

from skpubsub.core.config import Space, Window
from skpubsub.io.events import Rejection
from skpubsub.io.validate import Gate
from skpubsub.testing.conformance import compare, engine_factory
from skpubsub.testing.streams import random_stream

EDGE = [0, -0.0, 1, -1, 2 ** 53 + 1, 2 ** 63 - 1, -(2 ** 63), 2 ** 64, 10 ** 30, 1e308, 5e-324, 1e-200,
        True, False, None, "", "a", "\u00e9", [], [1], {}, {"a": 1}, 0.5, 1000, 1001]
RAW_EDGE = [b"NaN", b"Infinity", b"-Infinity", b"1e999", b'"\\ud800"', b'"\\udc00x"', b"[[[[[[[[]]]]]]]]",
            b'"\\u0000"', b"00", b"-", b"1.", b".5", b"+1"]


def _mutate(rng: random.Random, line: bytes) -> list[bytes]:
    """One mutation of a line (a list: a line may vanish or be doubled)."""
    r = rng.random()
    if r < 0.12 and line:  # flip a byte
        i = rng.randrange(len(line))
        return [line[:i] + bytes([rng.randrange(256)]) + line[i + 1:]]
    if r < 0.2:  # cut
        return [line[: rng.randrange(len(line) + 1)]]
    if r < 0.25:  # inserted bytes, a BOM, a stray escape
        i = rng.randrange(len(line) + 1)
        return [line[:i] + rng.choice([b"\xef\xbb\xbf", b"\\", b"\x00", b"\xff\xfe", b'"', b"}", b"\r"]) + line[i:]]
    if r < 0.3:
        return [] if rng.random() < 0.5 else [line, line]
    if r < 0.33:
        return [b'{"op":"pub","id":"big","t":0,"x":0,"y":0,"text":"' + b"a " * 600_000 + b'"}']
    try:
        rec = json.loads(line)
    except ValueError:
        return [line]
    if not isinstance(rec, dict):
        return [line]
    field = rng.choice(sorted(rec) + ["t", "id", "keywords", "weights", "expires", "extra"])
    if r < 0.55:  # a raw token in a field (NaN, 1e999, a lone surrogate, ...)
        body = json.dumps({k: v for k, v in rec.items() if k != field}).encode()[:-1]
        sep = b", " if len(body) > 1 else b""
        return [body + sep + json.dumps(field).encode() + b": " + rng.choice(RAW_EDGE) + b"}"]
    if r < 0.8:
        rec[field] = rng.choice(EDGE)
    elif r < 0.9:
        rec.pop(field, None)
    else:
        rec[field] = [rng.choice(EDGE)] if field != "keywords" else [rng.choice(["", " ", "\u00e9", "A", "a"]), 1]
    return [json.dumps(rec).encode()]


def _fuzz(seed: int, n_events, rate: float, engine: bool = True) -> tuple[int, int]:
    st = random_stream(seed, n_events=n_events, junk=False)
    w = Window.parse(st.window)
    sp = st.space or Space()
    rng = random.Random(f"fuzz-{seed}")
    lines: list[bytes] = []
    for rec in st.events:
        line = json.dumps(rec).encode()
        lines.extend(_mutate(rng, line) if rng.random() < rate else [line])
    gate = Gate(w, sp)
    accepted: list = []
    kept: list[bytes] = []
    for i, raw in enumerate(lines, 1):
        raw = None if len(raw) > 1_048_576 else raw
        ev = gate.admit_line(raw, i)
        if not isinstance(ev, Rejection):
            accepted.append(ev)
            kept.append(raw)
        else:
            assert ev.error and json.dumps(ev.raw, ensure_ascii=False).encode("utf-8")
    again = Gate(w, sp)  # nothing valid lost: the valid lines alone are all valid, as the same events
    for i, raw in enumerate(kept):
        ev = again.admit_line(raw, accepted[i].seq)
        assert ev == accepted[i], (raw, ev, accepted[i])
    if engine:
        compare(accepted, w, sp, engine_factory("dkm"), check_every_event=False, batches=False)
    return len(lines), len(accepted)


def test_fuzzed_streams_quick() -> None:
    n = a = 0
    for seed in range(10):
        dn, da = _fuzz(seed, (30, 60), rate=0.3)
        n, a = n + dn, a + da
    assert 0 < a < n


@pytest.mark.soak
def test_fuzzed_streams_100k_lines() -> None:
    """100,000 mutated lines (soak): the Gate on every one, the engine against the
    reference on every third stream (the reference's cost bounds the run to ~30 s)."""
    n = 0
    seed = 1000
    while n < 100_000:
        dn, _ = _fuzz(seed, 400, rate=0.2, engine=seed % 3 == 0)
        n += dn
        seed += 1


# A finding of the 150,000-stream run (/work/fuzz/run.py), once a strict xfail: an object
# published at t = 1e308 under time:2.5 expires at float(t) + float(T) == t (SPEC 6), at its
# own time. The reference (and the plain path) keep it for its own event and remove it before
# the next one; the compiled path marked it dead at once but left it in the top-k result
# (Engine._check: "result holds a dead object"). Fixed in WindowClock.plan: a run's object
# never leaves before the pub after its own.
ZERO_LIFE = [
    {"op": "sub", "id": "s", "t": 0, "kind": "topk", "keywords": ["c"], "x": 0, "y": 0, "k": 2, "alpha": 0.0},
    {"op": "pub", "id": "o1", "t": 1e308, "x": 1, "y": 1, "keywords": ["c"]},
    {"op": "pub", "id": "o2", "t": 1e308, "x": 2, "y": 2, "keywords": ["c"]},
    {"op": "sub", "id": "k", "t": 1e308, "kind": "knn", "keywords": ["c"], "x": 0, "y": 0, "k": 2},
]


def test_zero_life_object_on_the_plain_path() -> None:
    compare(ZERO_LIFE, "time:2.5", None, engine_factory("grid"), batches=False)


@pytest.mark.parametrize("index", ["dkm", "igpt", "aoiq", "auto"])
def test_zero_life_object_on_the_compiled_path(index: str) -> None:
    compare(ZERO_LIFE, "time:2.5", None, engine_factory(index), batches=False)


def fuzz_any(seed: int) -> tuple[int, int, str]:
    """One small mutated stream (10-40 events, rate 0.3) through the Gate's checks, then
    ``compare`` against the reference on index configuration ``seed % len(configs)``.
    Returns (lines, accepted lines, configuration)."""
    from skpubsub.testing.conformance import index_configs

    configs = index_configs()
    st = random_stream(seed, n_events=(10, 40), junk=False)
    w = Window.parse(st.window)
    sp = st.space or Space()
    rng = random.Random(f"fuzz-{seed}")
    lines: list[bytes] = []
    for rec in st.events:
        line = json.dumps(rec).encode()
        lines.extend(_mutate(rng, line) if rng.random() < 0.3 else [line])
    gate = Gate(w, sp)
    accepted: list = []
    kept: list[bytes] = []
    for i, raw in enumerate(lines, 1):
        raw = None if len(raw) > 1_048_576 else raw
        ev = gate.admit_line(raw, i)
        if not isinstance(ev, Rejection):
            accepted.append(ev)
            kept.append(raw)
        else:
            assert ev.error and json.dumps(ev.raw, ensure_ascii=False).encode("utf-8")
    again = Gate(w, sp)
    for i, raw in enumerate(kept):
        ev = again.admit_line(raw, accepted[i].seq)
        assert ev == accepted[i], (raw, ev, accepted[i])
    name, params = configs[seed % len(configs)]
    compare(accepted, w, sp, engine_factory(name, **params), check_every_event=seed % 7 == 0,
            batches=seed % 2 == 0, batch_seed=seed)
    return len(lines), len(accepted), f"{name}{params}"


def _main(argv: list[str]) -> None:
    import time
    import traceback

    first, count, out = int(argv[0]), int(argv[1]), argv[2]
    t0, n, lines, acc, found = time.time(), 0, 0, 0, 0
    with open(f"{out}/findings.jsonl", "a") as fo, open(f"{out}/progress.txt", "a") as fp:
        for seed in range(first, first + count):
            try:
                dl, da, _ = fuzz_any(seed)
                lines, acc = lines + dl, acc + da
            except Exception as exc:  # a finding: recorded, the run goes on
                found += 1
                fo.write(json.dumps({"seed": seed, "error": f"{type(exc).__name__}: {str(exc)[:3000]}",
                                     "tb": traceback.format_exc()[-3000:]}) + "\n")
                fo.flush()
            n += 1
            if n % 500 == 0 or n == count:
                fp.write(json.dumps({"streams": n, "last_seed": seed, "lines": lines, "accepted": acc,
                                     "findings": found, "s": round(time.time() - t0)}) + "\n")
                fp.flush()


if __name__ == "__main__":
    import sys

    _main(sys.argv[1:])
