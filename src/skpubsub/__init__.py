"""skpubsub: a spatial-keyword publish/subscribe engine (see README.md and SPEC.md)."""

import os as _os


def _numba_cache_dir() -> None:
    """Numba keys a cached kernel by its own file only, so a kernel that calls a helper in
    another module keeps running the helper's old code after that file changes. Cache
    under a directory named for the state of every module instead: an edit anywhere
    starts a fresh cache (and drops the old ones). Stat only (no reading), once per process; a
    ``NUMBA_CACHE_DIR`` set by the user wins."""
    if "NUMBA_CACHE_DIR" in _os.environ:
        return
    import hashlib

    import numba

    here = _os.path.dirname(_os.path.abspath(__file__))
    h = hashlib.sha1()
    for root, dirs, files in _os.walk(here):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                st = _os.stat(_os.path.join(root, f))
                h.update(f"{_os.path.relpath(root, here)}/{f}:{st.st_size}:{st.st_mtime_ns};".encode())
    cache = _os.path.join(here, "__pycache__")
    mine = "numba-" + h.hexdigest()[:12]
    if not _os.path.isdir(_os.path.join(cache, mine)) and _os.path.isdir(cache):
        import shutil

        for d in _os.listdir(cache):  # caches of earlier states of the code: never read again
            if d.startswith("numba-") and d != mine:
                shutil.rmtree(_os.path.join(cache, d), ignore_errors=True)
    numba.config.CACHE_DIR = _os.path.join(cache, mine)


_numba_cache_dir()
