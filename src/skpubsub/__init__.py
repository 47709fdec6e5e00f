"""skpubsub: a spatial-keyword publish/subscribe engine (see README.md and SPEC.md)."""

import os as _os
import sys as _sys


# Ctrl-C (and SIGTERM) during start-up (SPEC section 7). ``skpubsub ...`` and ``python -m
# skpubsub`` both import this package first, and it imports Numba (below), then ``cli``
# imports more: about half a second before ``cli.main`` installs its handlers, in which
# Python's default would print a KeyboardInterrupt traceback. So when, and only when, the
# process was started as the command, the first thing done here is a handler that writes
# the one line and exits at once (nothing is open or written yet); ``cli.main`` replaces it.
# A plain ``import skpubsub`` (a library, a notebook, the tests) keeps Python's behaviour.
# Still uncovered: the few milliseconds of the interpreter's own start, before any of
# the package's code runs (Python prints its own error or dies of the signal there).
def _exit_at_start(signum: int, frame: object) -> None:
    line, code = ((b"interrupted (SIGINT)", 130) if signum == 2 else (b"terminated (SIGTERM)", 143))
    _os.write(2, b"skpubsub: error: " + line + b"; outputs left as they were\n")
    _os._exit(code)


def _started_as_command() -> bool:
    """``skpubsub ...`` (the console script: argv[0] its path while the script imports us) or
    ``python -m skpubsub[.cli]`` (argv[0] is ``-m`` while runpy imports the package), judged on the
    interpreter's own command line too: a ``--workers`` process spawned by the command gets
    the parent's ``sys.argv`` but runs ``python -c ...`` and keeps Python's behaviour (its
    pool ends it with SIGTERM, it must not say a word)."""
    argv0 = _sys.argv[0] if _sys.argv else ""
    orig = list(getattr(_sys, "orig_argv", []))
    if argv0 == "-m":
        names = ("skpubsub", "skpubsub.cli")
        return any(a in [f"-m{n}" for n in names] or (a == "-m" and orig[i + 1:i + 2] in [[n] for n in names])
                   for i, a in enumerate(orig))
    name = _os.path.basename(argv0).lower().removesuffix(".exe").removesuffix("-script.py")
    return name == "skpubsub" and argv0 in orig[1:]


if _started_as_command():
    import signal as _signal

    try:
        if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:  # not ignored (nohup, &)
            _signal.signal(_signal.SIGINT, _exit_at_start)
        if _signal.getsignal(_signal.SIGTERM) is _signal.SIG_DFL:
            _signal.signal(_signal.SIGTERM, _exit_at_start)
    except ValueError:  # not the main thread
        pass


def _code_key(here: str) -> str:
    """A key for the state of every module of the package: names, sizes and mtimes of its
    ``.py`` files (stat only, no reading)."""
    import hashlib

    h = hashlib.sha1()
    for root, dirs, files in _os.walk(here):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith(".py"):
                st = _os.stat(_os.path.join(root, f))
                h.update(f"{_os.path.relpath(root, here)}/{f}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:12]


def _usable_dir(path: str, private: bool = False) -> bool:
    """Create ``path`` if needed and tell whether this process can write in it; with
    ``private``, also that it belongs to this user and nobody else can write in it (a shared
    temp folder: Numba's cache files are pickles, loading another user's would run their
    code). Never raises."""
    try:
        _os.makedirs(path, mode=0o700 if private else 0o777, exist_ok=True)
        if not (_os.path.isdir(path) and _os.access(path, _os.W_OK | _os.X_OK)):
            return False
        if private and hasattr(_os, "getuid"):
            st = _os.stat(path)
            return st.st_uid == _os.getuid() and not st.st_mode & 0o022
        return True
    except (OSError, ValueError):
        return False


def _pick_cache_dir(key: str, base: str) -> "str | None":
    """The folder for Numba's cache of code state ``key``: ``base/numba-KEY`` (the package's
    ``__pycache__``), or when that cannot be created or written (a read-only install), a
    per-user temp folder ``TMP/skpubsub-numba-USER/numba-KEY``; None when neither can be
    written (SPEC section 7: the kernels are then compiled in memory). Folders of earlier
    states are left alone (other processes may be using them); ``make clean`` removes the
    in-tree ones."""
    name = "numba-" + key
    first = _os.path.join(base, name)
    if _usable_dir(first):
        return first
    try:
        import tempfile

        user = str(_os.getuid()) if hasattr(_os, "getuid") else _os.environ.get("USERNAME", "user")
        per_user = _os.path.join(tempfile.gettempdir(), f"skpubsub-numba-{user}")
        if _usable_dir(per_user, private=True) and _usable_dir(_os.path.join(per_user, name)):
            return _os.path.join(per_user, name)
    except (OSError, ValueError):  # gettempdir raises when no temp folder is writable
        pass
    return None


def _compile_in_memory() -> None:
    """No folder can be written: ``cache=True`` kernels compile in memory, once per process,
    instead of Numba raising "cannot cache function ... no locator available" on import."""
    import numba  # noqa: F401  (the dispatcher class below is Numba's, patched before any @njit runs)
    from numba.core import dispatcher

    dispatcher.Dispatcher.enable_caching = lambda self: None  # keeps the default NullCache


def _guard_cache() -> None:
    """A cache that stops working after start (a full disk, a folder made read-only, a
    damaged file) falls back silently (SPEC section 7): a failed write leaves the kernel
    compiled in memory, a failed read compiles it again, a function whose cache folder is
    no longer usable is not cached, never a traceback. Numba is not let fall back from the
    cache folder (the one chosen here, or the user's ``NUMBA_CACHE_DIR``) to the package's
    ``__pycache__`` or ``~/.cache``: those are keyed by each kernel's own file only (stale
    helpers) and HOME stays untouched; a folder that cannot be used means compiling in
    memory."""
    from numba.core import caching, dispatcher
    from numba.core.runtime import rtsys

    if getattr(caching.Cache, "_skpubsub_guarded", False):
        return
    save, enable = caching.Cache.save_overload, dispatcher.Dispatcher.enable_caching

    def save_overload(self, sig, data):
        try:
            save(self, sig, data)
        except Exception:  # the kernel stays compiled in memory; nothing else to do
            pass

    def load_overload(self, sig, target_context):
        # Numba's own refreshes the whole target first: 0.12 s of imports of the lowering
        # registries a run never uses unless something compiles (the compiler refreshes for
        # itself). A kernel read back needs the runtime (NRT) alone.
        try:
            rtsys.initialize(target_context)
            with self._guard_against_spurious_io_errors():
                return self._load_overload(sig, target_context)
        except Exception:  # unreadable or damaged: compile again
            return None

    def enable_caching(self):
        try:
            enable(self)
        except (OSError, RuntimeError):  # "no locator available": keep the NullCache
            pass

    caching.Cache.save_overload, caching.Cache.load_overload = save_overload, load_overload
    dispatcher.Dispatcher.enable_caching = enable_caching
    caching.Cache._skpubsub_guarded = True
    impl = getattr(caching, "CacheImpl", getattr(caching, "_CacheImpl", None))  # names of Numba >= 0.59 / before
    user = getattr(caching, "UserProvidedCacheLocator", getattr(caching, "_UserProvidedCacheLocator", None))
    if impl is not None and user is not None:
        impl._locator_classes = [user]


def _numba_cache_dir() -> None:
    """Numba keys a cached kernel by its own file only, so a kernel that calls a helper in
    another module keeps running the helper's old code after that file changes. Cache
    under a directory named for the state of every module instead: an edit anywhere
    starts a fresh cache. Nothing is deleted here (several processes may share the tree;
    ``make clean`` removes old caches). Once per process; a ``NUMBA_CACHE_DIR`` set by the
    user wins; when no folder is writable, kernels compile in memory (SPEC section 7), and a
    cache that fails later falls back silently (``_guard_cache``)."""
    if "NUMBA_CACHE_DIR" in _os.environ:
        _guard_cache()
        return
    try:
        here = _os.path.dirname(_os.path.abspath(__file__))
        cache = _pick_cache_dir(_code_key(here), _os.path.join(here, "__pycache__"))
    except OSError:  # the package's files cannot even be listed: compile in memory
        cache = None
    if cache is not None:
        import numba

        numba.config.CACHE_DIR = cache
        _guard_cache()
    else:
        _compile_in_memory()


_numba_cache_dir()
