"""Issue 18, class 4 / SPEC section 7: the package runs where neither its install folder
nor ``$HOME`` is writable (Numba's cache then lives in a private temp folder), and, with no
writable folder at all, compiles its kernels in memory instead of failing on import.

Each case runs in a subprocess on a read-only copy of the package with a read-only
``$HOME``; as root (where permissions do not stop writes) the subprocess first drops
CAP_DAC_OVERRIDE from its capability bounding set, so the folders are read-only for it.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import skpubsub

CODE = """
import tempfile, sys
if sys.argv[1] != "-":
    tempfile.tempdir = sys.argv[1]  # what gettempdir() answers: TMPDIR, TEMP, TMP, /tmp...
import skpubsub, numba
from skpubsub.index.prefix import size_class  # a cache=True kernel, compiled here
assert size_class(4) == 2
from skpubsub.runtime.engines import make_engine
from skpubsub.io.validate import Gate
g = Gate("none")
e = make_engine("grid", "none")
e.apply([g.admit({"op": "sub", "t": 0, "id": "s", "kind": "knn", "k": 1, "x": 0, "y": 0, "keywords": ["a"]})])
print(e.apply([g.admit({"op": "pub", "t": 1, "id": "o", "x": 1, "y": 1, "keywords": ["a"]})]))
print("CACHE", numba.config.CACHE_DIR)
"""


def _drop_dac() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH (PR_CAPBSET_DROP = 24)
        if libc.prctl(24, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _read_only(root: Path) -> None:
    for d, _, files in os.walk(root):
        os.chmod(d, 0o555)
        for f in files:
            os.chmod(os.path.join(d, f), 0o444)


def _run(tmp_path: Path, temp: str) -> subprocess.CompletedProcess:
    if not sys.platform.startswith("linux"):
        pytest.skip("read-only folders are simulated with Linux permissions")
    site, home = tmp_path / "site", tmp_path / "home"
    shutil.copytree(Path(skpubsub.__file__).parent, site / "skpubsub",
                    ignore=shutil.ignore_patterns("__pycache__"))
    home.mkdir()
    (tmp_path / "ro-tmp").mkdir()
    _read_only(site)
    _read_only(home)
    _read_only(tmp_path / "ro-tmp")
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env.update(HOME=str(home), PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1")
    if temp != "-":
        env["TMPDIR"] = temp
    try:
        return subprocess.run([sys.executable, "-c", CODE, temp], env=env, capture_output=True, text=True,
                              cwd=str(home), timeout=600, preexec_fn=_drop_dac if os.getuid() == 0 else None)
    finally:
        for d, _, _ in os.walk(tmp_path):
            os.chmod(d, 0o755)


def _check_read_only_for_child(tmp_path: Path) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    probe.chmod(0o555)
    r = subprocess.run([sys.executable, "-c", f"open({str(probe / 'x')!r}, 'w')"], capture_output=True,
                       preexec_fn=_drop_dac if os.getuid() == 0 else None)
    probe.chmod(0o755)
    if r.returncode == 0:
        pytest.skip("cannot make a folder read-only for a child process here")


def test_read_only_install_and_home_cache_in_private_temp(tmp_path: Path) -> None:
    _check_read_only_for_child(tmp_path)
    temp = tmp_path / "tmp"
    temp.mkdir()
    r = _run(tmp_path, str(temp))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Match(sub='s'" in r.stdout or "added=('o',)" in r.stdout, r.stdout
    assert f"CACHE {temp}" in r.stdout  # TMP/skpubsub-numba-USER/numba-KEY
    assert list((temp).glob("skpubsub-numba-*/numba-*/*"))  # the kernels were cached there


def test_nothing_writable_compiles_in_memory(tmp_path: Path) -> None:
    """Before: RuntimeError "cannot cache function ...: no locator available" on import."""
    _check_read_only_for_child(tmp_path)
    r = _run(tmp_path, str(tmp_path / "ro-tmp"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "added=('o',)" in r.stdout, r.stdout


def test_unusable_numba_cache_dir_compiles_in_memory(tmp_path: Path) -> None:
    """A ``NUMBA_CACHE_DIR`` of the user's that cannot be made (under a file: even root cannot)
    with a writable package and HOME (issue 57 item 5). Before: Numba fell back to the
    package's ``__pycache__`` (or ``~/.cache`` when that was read-only), caches keyed by each
    kernel's own file (stale helpers). Now the kernel compiles in memory and nothing is
    written."""
    site, home = tmp_path / "site", tmp_path / "home"
    shutil.copytree(Path(skpubsub.__file__).parent, site / "skpubsub", ignore=shutil.ignore_patterns("__pycache__"))
    home.mkdir()
    (tmp_path / "a-file").write_text("")
    env = {k: v for k, v in os.environ.items() if k != "XDG_CACHE_HOME"}
    env.update(HOME=str(home), PYTHONPATH=str(site), PYTHONDONTWRITEBYTECODE="1",
               NUMBA_CACHE_DIR=str(tmp_path / "a-file" / "cache"))
    code = "from skpubsub.index.prefix import size_class\nassert size_class(4) == 2\nprint('ok')"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and r.stdout == "ok\n" and r.stderr == "", r.stderr[-3000:]
    assert not [p for p in tmp_path.rglob("*") if p.suffix in (".nbi", ".nbc")]
    assert not list(home.iterdir())


# -- a cache that fails after start (issue 18, SPEC 7): a real tmpfs, full or remounted read-only --
LATE = """
import sys, skpubsub, numba
print("CACHE", numba.config.CACHE_DIR, flush=True)
sys.stdin.readline()  # the parent fills the file system or remounts it read-only meanwhile
from skpubsub.index.prefix import size_class  # cache=True kernels, compiled and saved from here
assert size_class(4) == 2
from skpubsub.runtime.engines import make_engine
from skpubsub.io.validate import Gate
g = Gate("none")
e = make_engine("grid", "none")
e.apply([g.admit({"op": "sub", "t": 0, "id": "s", "kind": "knn", "k": 1, "x": 0, "y": 0, "keywords": ["a"]})])
print(e.apply([g.admit({"op": "pub", "t": 1, "id": "o", "x": 1, "y": 1, "keywords": ["a"]})]))
"""


def _fill(path: Path) -> None:
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 65536)
        except OSError:
            pass
        try:
            while True:
                f.write(b"\0" * 512)
        except OSError:
            pass


@pytest.mark.parametrize("how", ["full", "read-only"])
def test_cache_failing_after_start_falls_back_silently(tmp_path: Path, how: str) -> None:
    """The package and HOME on a small tmpfs; the cache folder is chosen and usable at import,
    then the file system fills up (ENOSPC on the kernels' cache writes) or is remounted
    read-only (EROFS). Before: OSError / "no locator available" tracebacks, or (with HOME
    writable) the kernels cached under ~/.cache keyed by their own file only. Now: the kernels
    compile in memory, the run's answer is right, nothing on stderr."""
    if not sys.platform.startswith("linux") or os.getuid() != 0:
        pytest.skip("mounting a tmpfs needs root on Linux")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        shutil.copytree(Path(skpubsub.__file__).parent, mnt / "site" / "skpubsub",
                        ignore=shutil.ignore_patterns("__pycache__"))
        (mnt / "home").mkdir()
        (mnt / "tmp").mkdir()
        env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
        env.update(HOME=str(mnt / "home"), TMPDIR=str(mnt / "tmp"), PYTHONPATH=str(mnt / "site"),
                   PYTHONDONTWRITEBYTECODE="1")
        p = subprocess.Popen([sys.executable, "-c", LATE], env=env, cwd=str(tmp_path), text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        first = p.stdout.readline()
        assert first.startswith(f"CACHE {mnt}/site/skpubsub/__pycache__/numba-"), (first, p.stderr.read())
        if how == "full":
            _fill(mnt / "filler")
        else:
            subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        out, err = p.communicate("go\n", timeout=600)
        assert p.returncode == 0 and err == "", err[-3000:]
        assert "added=('o',)" in out, out
        assert not list(mnt.rglob("*.nbi")) and not (mnt / "home" / ".cache").exists()
    finally:
        subprocess.run(["umount", "-l", str(mnt)])
