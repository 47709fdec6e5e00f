"""What a cold run compiles (issue 57): a range-only stream never compiles the code of kNN
and top-k buffers (``kernel.publish_run``'s specialisation with ``kbest`` None,
``driver.Publisher.kbest``), a stream with a kNN subscription does; neither compiles Numba's
shape-mismatch error of a slice assignment (in the kernels compiled cold, below).

The runs are made by a fresh process that records every Numba compile (``numba:compile``
events name the dispatcher compiled, callees included: a caller's typing compiles them) of
``skpubsub run``. Its ``NUMBA_CACHE_DIR`` is a copy of this process's kernel cache without the
``engine/`` and ``results/`` folders, where ``KBEST`` and every caller of theirs live (checked
below): those compile cold, the rest loads (an empty cache made the test compile everything,
~100 CPU s against ~43 under the suite's load; a cached callee is loaded, not compiled, so
only the callers' folders must be cold).
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Kernels only kNN and top-k subscriptions need (compiled apart, not inlined into a caller)
KBEST = ("skpubsub.results.refill.refill", "skpubsub.engine.kernel._follow", "skpubsub.engine.kernel._remove")
# Numba's message for an array assigned to a slice of another shape: with the str and unicode
# code it needs, ~5 % of a cold run's compile for an error our kernels never raise (they copy
# with loops; engine/NOTES.md, "A cold run's compile")
SHAPE_ERROR = "numba.np.arrayobj.ol_raise_with_shape_context_cpu.<locals>.impl"

CODE = """
import json, sys
from numba.core import event
names = []
class Rec(event.Listener):
    def on_start(self, ev):
        f = ev.data["dispatcher"].py_func
        names[-1].append(f"{f.__module__}.{f.__qualname__}")
    def on_end(self, ev):
        pass
event.register("numba:compile", Rec())
from skpubsub.cli import main
for events, out in zip(sys.argv[1::2], sys.argv[2::2]):
    names.append([])
    assert main(["run", events, "--out", out, "--window", "count:2"]) == 0
print(json.dumps(names))
"""


def _events(path: Path, knn: bool) -> Path:
    """Subscriptions (one ended), objects leaving a count:2 window, a subscription after them."""
    lines = [{"op": "sub", "id": "r1", "t": 0, "kind": "range", "rect": [0, 0, 10, 10], "keywords": ["a"]},
             {"op": "sub", "id": "r2", "t": 0, "kind": "range", "rect": [5, 5, 20, 20], "keywords": ["a", "b"],
              "match": "all"}]
    if knn:
        lines.append({"op": "sub", "id": "k1", "t": 0, "kind": "knn", "x": 1, "y": 1, "k": 1, "keywords": ["a"]})
    for t in range(1, 6):
        lines.append({"op": "pub", "id": f"o{t}", "t": t, "x": 2.0 * t, "y": 2.0 * t, "keywords": ["a", "b"]})
    lines.append({"op": "unsub", "id": "r1", "t": 6})
    lines.append({"op": "sub", "id": "r3", "t": 7, "kind": "range", "rect": [0, 0, 30, 30], "keywords": ["b"]})
    lines.append({"op": "pub", "id": "o7", "t": 8, "x": 12, "y": 12, "keywords": ["b"]})
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    return path


COLD = ("engine", "results")  # the packages of KBEST and of every kernel calling them


def _cache_without_callers(dest: Path) -> Path:
    """This process's kernel cache (the package's, warmed by tests/warm_kernels.py under
    ``-n 2``), its ``COLD`` packages' folders left out (Numba names them ``<package>_<hash>``)."""
    import numba

    import skpubsub  # noqa: F401  (picks the package's cache folder)

    src = Path(numba.config.CACHE_DIR) if numba.config.CACHE_DIR else None
    if src is None or not src.is_dir():
        dest.mkdir()  # nothing cached: everything compiles
        return dest
    return Path(shutil.copytree(src, dest, ignore=lambda d, names: [
        n for n in names if Path(d) == src and n.startswith(tuple(c + "_" for c in COLD))]))


def test_only_the_cold_packages_call_the_kbest_kernels() -> None:
    """What lets the test below load the other packages' kernels: no module outside ``COLD``
    imports ``engine.kernel`` or ``results.refill`` (a cached kernel calling a ``KBEST`` one
    would hold its code without compiling it)."""
    import skpubsub

    root = Path(skpubsub.__file__).parent
    for path in root.rglob("*.py"):
        rel = path.relative_to(root)
        if rel.parts[0] in COLD:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                names = [f"{node.module}.{a.name}" for a in node.names] + [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            assert not any(n.endswith(("engine.kernel", "results.refill", ".refill.refill")) or
                           n in ("kernel", "refill") for n in names), (str(rel), names)


@pytest.mark.slow
def test_range_only_run_compiles_no_kbest_kernel(tmp_path: Path) -> None:
    """A range-only run, ``COLD``'s kernels not cached, then (same process) a run with a kNN subscription:
    the first compiles none of ``KBEST``, the second compiles them all (so the recorder
    would have named them)."""
    args = []
    for knn in (False, True):
        args += [str(_events(tmp_path / f"events-{knn}.jsonl", knn)), str(tmp_path / f"out-{knn}")]
    env = dict(os.environ, NUMBA_CACHE_DIR=str(_cache_without_callers(tmp_path / "cache")))
    r = subprocess.run([sys.executable, "-c", CODE, *args], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    ranges, knns = (set(c) for c in json.loads(r.stdout.strip().splitlines()[-1]))
    assert "skpubsub.engine.kernel.publish_run" in ranges
    assert not ranges & set(KBEST), sorted(ranges & set(KBEST))
    assert set(KBEST) <= knns, sorted(set(KBEST) - knns)
    assert SHAPE_ERROR not in ranges | knns
