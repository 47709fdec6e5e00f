"""`skpubsub run` end to end: output files, bad input, flags (SPEC sections 4-5)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from skpubsub.cli import main, parser

VALID = [
    {"op": "sub", "id": "s1", "t": 0, "kind": "knn", "x": 2.35, "y": 48.85, "k": 2, "keywords": ["cafe", "wifi"]},
    {"op": "sub", "id": "s2", "t": 0, "kind": "range", "rect": [2.2, 48.8, 2.5, 48.9], "keywords": ["Concert"]},
    {"op": "sub", "id": 3, "t": 1, "kind": "topk", "x": 2.35, "y": 48.85, "k": 2, "alpha": 0.3,
     "keywords": ["jazz", "bar"], "weights": {"JAZZ": 2}},
    {"op": "pub", "id": "o1", "t": 2, "x": 2.34, "y": 48.86, "text": "Late jazz at the corner cafe"},
    {"op": "pub", "id": "o2", "t": 3, "x": 2.3, "y": 48.85, "keywords": ["concert", "bar"]},
    {"op": "pub", "id": "o3", "t": 3, "x": 2.36, "y": 48.85, "keywords": ["wifi"]},
    {"op": "sub", "id": "s4", "t": 4, "kind": "knn", "x": 2.3, "y": 48.8, "k": 1, "keywords": ["bar", "concert"],
     "match": "all", "expires": 7},
    {"op": "pub", "id": "o1", "t": 5, "x": 2.31, "y": 48.81, "keywords": ["bar", "concert", "cafe"]},
    {"op": "unsub", "id": "s1", "t": 6},
    {"op": "pub", "id": "o5", "t": 8, "x": 2.3, "y": 48.8, "keywords": ["bar", "concert"]},
]

# (raw line, expected reason prefix): every case of SPEC section 5, as met after VALID[:k].
BAD = [
    (b"{not json", "not JSON"),
    (b"", "not JSON"),
    (b"\xff\xfe{}", "not JSON"),
    (b"NaN", "not JSON"),
    (b'{"op":"pub","id":"x","t":9,"x":NaN,"y":0,"keywords":["a"]}', "not JSON"),
    (b"[1, 2]", "not an object"),
    (b'"pub"', "not an object"),
    (b'{"op":"PUB","id":"x","t":9,"x":0,"y":0,"keywords":["a"]}', "unknown op"),
    (b'{"op":"sub","id":"x","t":9,"kind":"KNN","x":0,"y":0,"k":1,"keywords":["a"]}', "unknown kind"),
    (b'{"op":"pub","id":"x","t":9,"y":0,"keywords":["a"]}', "missing field"),
    (b'{"op":"sub","id":"x","t":9,"kind":"knn","x":0,"y":0,"k":5.0,"keywords":["a"]}', "mistyped field"),
    (b'{"op":"sub","id":"x","t":9,"kind":"knn","x":0,"y":0,"k":"5","keywords":["a"]}', "mistyped field"),
    (b'{"op":"sub","id":"x","t":9,"kind":"knn","x":0,"y":0,"k":true,"keywords":["a"]}', "mistyped field"),
    (b'{"op":"pub","id":true,"t":9,"x":0,"y":0,"keywords":["a"]}', "mistyped field"),
    (b'{"op":"pub","id":"x","t":9,"x":1e999,"y":0,"keywords":["a"]}', "non-finite number"),
    (b'{"op":"pub","id":"x","t":9,"x":181,"y":0,"keywords":["a"]}', "out of space"),
    (b'{"op":"pub","id":"x","t":9,"x":0,"y":0,"keywords":["  ", ""]}', "no keywords after normalisation"),
    (b'{"op":"pub","id":"x","t":9,"x":0,"y":0,"text":"!!! ..."}', "no keywords after normalisation"),
    (b'{"op":"sub","id":"x","t":9,"kind":"knn","x":0,"y":0,"k":0,"keywords":["a"]}', "k out of range"),
    (b'{"op":"sub","id":"x","t":9,"kind":"knn","x":0,"y":0,"k":1001,"keywords":["a"]}', "k out of range"),
    (b'{"op":"sub","id":"x","t":9,"kind":"topk","x":0,"y":0,"k":1,"alpha":1.5,"keywords":["a"]}', "alpha outside"),
    (b'{"op":"sub","id":"x","t":9,"kind":"range","rect":[1,0,0,1],"keywords":["a"]}', "inverted rect"),
    (b'{"op":"sub","id":"x","t":9,"kind":"topk","x":0,"y":0,"k":1,"alpha":0.5,"keywords":["a"],"weights":{"a":0}}',
     "non-positive weight"),
    (b'{"op":"sub","id":"x","t":9,"kind":"topk","x":0,"y":0,"k":1,"alpha":0.5,"keywords":["a"],"weights":{"a":1e999}}',
     "non-finite weight"),
    (b'{"op":"pub","id":"x","t":-1,"x":0,"y":0,"keywords":["a"]}', "time going backwards"),
    (b'{"op":"sub","id":"s2","t":9,"kind":"range","rect":[0,0,1,1],"keywords":["a"]}',
     "duplicate active subscription id"),
    (b'{"op":"unsub","id":"nobody","t":9}', "unknown unsub id"),
    (b'{"op":"sub","id":"x","t":9,"kind":"range","rect":[0,0,1,1],"keywords":["a"],"expires":9}', "expires not after t"),
    (b'{"op":"pub","id":"x","t":9,"x":0,"y":0,"keywords":["a"],"expires":20}', "object expires without a time window"),
    (b'{"op":"sub","id":"x","t":9,"kind":"knn","x":0,"y":0,"k":1,"keywords":["a"],"match":"some"}', "bad match"),
    (b'{"op":"pub","id":"x","t":9,"x":0,"y":0,"text":"' + b"a" * (1 << 21) + b'"}', "line longer than"),
]


def _valid_lines() -> list[bytes]:
    return [json.dumps(e).encode() for e in VALID]


def _read(out: Path) -> dict[str, object]:
    return {
        "results": sorted((out / "results.jsonl").read_text().splitlines()),
        "notifications": (out / "notifications.jsonl").read_text().splitlines(),
    }


def _run(tmp: Path, name: str, lines: list[bytes], *flags: str) -> Path:
    src = tmp / f"{name}.jsonl"
    src.write_bytes(b"\n".join(lines) + b"\n")
    out = tmp / name
    assert main(["run", str(src), "--out", str(out), *flags]) == 0
    return out


@pytest.mark.parametrize("index", ["reference", "grid"])
def test_malformed_lines_are_rejected_one_each_and_nothing_valid_is_lost(tmp_path: Path, index: str) -> None:
    valid = _valid_lines()
    mixed: list[bytes] = []
    expected: list[tuple[int, str]] = []
    for i, line in enumerate(valid):
        mixed.append(line)
        for raw, reason in BAD[i * 4:(i + 1) * 4] if i < len(valid) - 1 else BAD[i * 4:]:
            mixed.append(raw)
            expected.append((len(mixed), reason))
    assert len(expected) == len(BAD)
    clean = _run(tmp_path, "clean", valid, "--index", "reference")
    dirty = _run(tmp_path, "dirty", mixed, "--index", index)
    rejected = [json.loads(x) for x in (dirty / "rejected.jsonl").read_text().splitlines()]
    assert [(r["line"], r["error"][: len(reason)]) for r, (_, reason) in zip(rejected, expected)] == expected
    assert len(rejected) == len(BAD)
    assert _read(dirty) == _read(clean)
    m = json.loads((dirty / "metrics.json").read_text())
    assert m["rejected_total"] == len(BAD) and m["accepted_total"] == len(VALID)
    assert m["accepted"] == {"pub": 5, "sub:knn": 2, "sub:range": 1, "sub:topk": 1, "unsub": 1}


def test_run_writes_the_four_files_with_spec_shapes(tmp_path: Path) -> None:
    out = _run(tmp_path, "ex", _valid_lines())
    results = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    # s1 unsubscribed, s4 expired at t=7 (before the event at t=8): only topk sub 3 remains.
    assert results == [{"id": 3, "results": ["o1", "o2"]}]
    notes = [json.loads(x) for x in (out / "notifications.jsonl").read_text().splitlines()]
    assert {"sub": "s2", "t": 3, "object": "o2"} in notes
    assert notes[0] == {"sub": "s1", "t": 2, "added": ["o1"], "removed": []}
    m = json.loads((out / "metrics.json").read_text())
    for key in ("accepted", "rejected", "wall_seconds", "objects_per_second", "candidates_per_object",
                "affected_per_object"):
        assert key in m
    assert (out / "rejected.jsonl").read_text() == ""


def test_unknown_names_are_errors_listing_the_known_ones(tmp_path: Path, capsys) -> None:
    src = tmp_path / "e.jsonl"
    src.write_text("")
    assert main(["run", str(src), "--out", str(tmp_path / "o"), "--index", "nope"]) == 2
    assert "unknown index 'nope'; known: reference, grid" in capsys.readouterr().err
    assert main(["run", str(src), "--out", str(tmp_path / "o"), "--partitioner", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown partitioner 'nope'" in err and "dkm" in err
    assert main(["run", str(src), "--out", str(tmp_path / "o"), "--window", "count:0"]) == 2
    assert "bad window" in capsys.readouterr().err
    assert main(["run", str(src), "--out", str(tmp_path / "o"), "--engine", "storm"]) == 2
    assert "unknown engine 'storm'; known: local, spark" in capsys.readouterr().err


def test_console_script_runs_in_a_fresh_process(tmp_path: Path) -> None:
    src = tmp_path / "e.jsonl"
    src.write_bytes(b"\n".join(_valid_lines()) + b"\n")
    exe = Path(sys.executable).with_name("skpubsub")
    proc = subprocess.run([str(exe), "run", str(src), "--out", str(tmp_path / "o"), "--window", "count:3"],
                          capture_output=True, text=True, check=True)
    assert "10 events accepted, 0 rejected" in proc.stdout
    assert "\r" not in proc.stderr  # no progress bar when not on a terminal


@pytest.mark.slow
@pytest.mark.parametrize("partitioner", ["hash", "dkm"])
def test_run_with_workers_writes_the_single_engine_files(tmp_path: Path, partitioner: str) -> None:
    """--workers M --partitioner NAME: worker processes, same files line for line (SPEC section 4)."""
    from skpubsub.testing.streams import random_stream

    lines = []
    for seed in (5, 6):
        s = random_stream(seed, windows=("count",))
        lines = [json.dumps(r).encode() for r in s.events]
        if len(lines) > 40:
            break
    flags = ["--window", s.window] + (["--space", str(s.space)] if s.space else [])
    single = _run(tmp_path, "single", lines, *flags, "--index", "reference")
    multi = _run(tmp_path, "multi", lines, *flags, "--workers", "3", "--partitioner", partitioner,
                 "--init-objects", "5")
    assert (single / "notifications.jsonl").read_text()  # the stream does produce notifications
    assert _read(multi) == _read(single)
    assert (multi / "rejected.jsonl").read_text() == (single / "rejected.jsonl").read_text()
    m = json.loads((multi / "metrics.json").read_text())
    assert m["workers"] == 3 and m["partitioner"] == partitioner
    assert m["batches"] and all(len(b["worker_cpu_seconds"]) == 3 for b in m["batches"])


@pytest.mark.slow
def test_run_with_rebalancing_writes_the_single_engine_files(tmp_path: Path) -> None:
    """--rebalance moves subscriptions between worker processes; the files stay the same."""
    from skpubsub.testing.streams import random_stream

    s = random_stream(9, n_events=300, windows=("count",))
    lines = [json.dumps(r).encode() for r in s.events]
    flags = ["--window", s.window] + (["--space", str(s.space)] if s.space else [])
    single = _run(tmp_path, "single", lines, *flags, "--index", "reference")
    multi = _run(tmp_path, "multi", lines, *flags, "--workers", "3", "--partitioner", "hash", "--init-objects",
                 "5", "--batch", "8", "--rebalance", "--sigma", "1.05", "--rebalance-period", "1")
    assert _read(multi) == _read(single)
    m = json.loads((multi / "metrics.json").read_text())
    assert m["adjustments"] and m["migrated_subscriptions"] > 0  # CPU loads of 3 workers differ by > 5 %


def test_an_error_raised_after_sigint_is_the_interrupt() -> None:
    """A terminal's Ctrl-C reaches the Spark JVM and workers too, and the run may first see
    their failure (a library that swallows the KeyboardInterrupt and raises its own error):
    once SIGINT has arrived, that error is reported as the interrupt (exit 130, SPEC 7)."""
    import argparse
    import os
    import signal
    import time

    from skpubsub import cli

    def swallowing(_: argparse.Namespace) -> int:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(10)  # the handler runs at once; never reached
        except KeyboardInterrupt:
            raise RuntimeError("Py4JNetworkError: answer from Java side is empty") from None
        return 0

    def failing(_: argparse.Namespace) -> int:
        raise RuntimeError("a real failure")

    before = signal.signal(signal.SIGINT, cli._on_sigint)
    try:
        cli._SIGINT_SEEN.clear()
        with pytest.raises(RuntimeError, match="a real failure"):  # no SIGINT: the error stays itself
            cli._dispatch(argparse.Namespace(func=failing))
        with pytest.raises(KeyboardInterrupt):
            cli._dispatch(argparse.Namespace(func=swallowing))
    finally:
        signal.signal(signal.SIGINT, before)
        cli._SIGINT_SEEN.clear()



def _in_fresh_process(code: str) -> str:
    return subprocess.run([sys.executable, "-c", "import sys, argparse; from skpubsub import cli\n" + code],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_the_service_and_load_generator_parsers_are_built_only_when_named() -> None:
    """``run`` imports none of the service's, the load generator's or the workload generator's
    modules to build its parser; the help lists every command all the same, and a lazily
    listed command has its own flags when named."""
    loaded = _in_fresh_process("cli.parser('run'); print(*(m for m in ('skpubsub.service.command', "
                               "'skpubsub.service.loadgen', 'skpubsub.bench.workload') if m in sys.modules))")
    assert loaded == ""

    def commands(p: argparse.ArgumentParser) -> list[str]:
        return sorted(next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices)

    assert commands(parser("run")) == commands(parser(None))
    assert parser("loadgen").parse_args(["loadgen", "--clients", "3"]).clients == 3
    assert parser("serve").parse_args(["serve", "--data", "d"]).data == "d"
