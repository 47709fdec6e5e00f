"""How much of the arrivals' time goes to Numba's reference counting.

``python -m skpubsub.bench.nrt [--rounds R] -- BENCH ARGS`` runs ``skpubsub bench BENCH ARGS``
in fresh processes, alternating: once compiled as usual, once with every reference-count
operation compiled out (Numba's ``NRTContext.incref``/``decref`` emit nothing, so no kernel
ever frees what it allocates: a measurement run can afford that, a real one cannot). Each
process starts from its own empty Numba cache, so the two builds never mix; the bench's
first round, untimed, fills each cache. It prints, per index, the arrivals objects/s of both
(medians over the rounds) and the share of time the reference counting costs,
``1 - (objects/s counted) / (objects/s uncounted)``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median


def _no_refcounts() -> None:
    from numba.core.runtime import context

    context.NRTContext.incref = lambda self, builder, typ, value: None
    context.NRTContext.decref = lambda self, builder, typ, value: None


def _child(mode: str, args: list[str]) -> int:
    if mode == "off":
        _no_refcounts()
    from ..cli import main

    return main(["bench", *args])


def _run(mode: str, args: list[str], cache: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "NUMBA_CACHE_DIR": str(cache / mode)}
        out = Path(tmp) / "out"
        subprocess.run([sys.executable, "-m", "skpubsub.bench.nrt", "--child", mode, "--", *args, "--out", str(out)],
                       env=env, check=True, stdout=subprocess.DEVNULL)
        rep = json.loads((out / "bench.json").read_text())
    return {r["index"]: r["objects_per_second"] for r in rep["indexes"]}  # bench's stable JSON


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        return _child(argv[1], argv[3:])
    rounds = 3
    if argv[:1] == ["--rounds"]:
        rounds, argv = int(argv[1]), argv[2:]
    args = argv[1:] if argv[:1] == ["--"] else argv
    runs: dict[str, list[dict[str, float]]] = {"on": [], "off": []}
    with tempfile.TemporaryDirectory() as cache:
        for r in range(rounds + 1):
            for mode in ("on", "off"):
                got = _run(mode, args, Path(cache))
                if r:  # the first round compiles
                    runs[mode].append(got)
    for index in runs["on"][0]:
        on = median(r[index] for r in runs["on"])
        off = median(r[index] for r in runs["off"])
        print(f"{index}: {on:,.0f} objects/s with reference counting, {off:,.0f} without "
              f"(runs {[round(r[index]) for r in runs['on']]} / {[round(r[index]) for r in runs['off']]}): "
              f"share {1 - on / off:+.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
