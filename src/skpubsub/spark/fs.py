"""Locations on any file system: a plain path, ``file:``, ``hdfs:``, ``s3a:`` ... (issue 21).

``pathlib`` on a URL loses it (``hdfs://nn:8020/ckpt`` became ``hdfs:/nn:8020/ckpt``), so
the Spark runtime names its input, outputs and checkpoint with :class:`Loc`: a file system
and a path in it, with the URL Spark itself is given (``uri``). A plain path or a
``file:`` URL is the local file system (plain ``os`` calls: the fast path, and symlinks
are seen); any other scheme goes through ``pyarrow.fs`` (``s3a``/``s3n`` are its ``s3``).
The Python processes that need it (driver, source) open it themselves: nothing assumes
the driver's disk is the executors'.
"""

from __future__ import annotations

import io
import os
import posixpath
import shutil
import uuid
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Iterator
from urllib.parse import urlparse

_ALIASES = {"s3a": "s3", "s3n": "s3"}


def _is_url(s: str) -> bool:
    scheme = urlparse(s).scheme
    return len(scheme) > 1 and ("://" in s or s.startswith(scheme + ":/"))  # "C:\\" is no URL


def _discard(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class _Raw(io.RawIOBase):
    """A pyarrow input file as a raw stream, so that ``io.BufferedReader`` gives readline."""

    def __init__(self, f: Any) -> None:
        self.f = f

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        data = self.f.read(len(b))
        b[: len(data)] = data
        return len(data)

    def seek(self, pos: int, whence: int = 0) -> int:
        return self.f.seek(pos, whence)

    def tell(self) -> int:
        return self.f.tell()

    def close(self) -> None:
        self.f.close()
        super().close()


class Loc:
    """A file or directory on some file system; ``/`` joins like ``Path``.

    Local: ``path`` is the absolute path. Otherwise ``url`` names it, and its
    ``pyarrow.fs`` file system is opened only when a file operation needs it (Spark may
    reach an ``hdfs:`` checkpoint that this Python cannot: then only Spark touches it)."""

    def __init__(self, where: "str | os.PathLike | Loc") -> None:
        if isinstance(where, Loc):
            self.__dict__.update(where.__dict__)
            return
        self.given = s = os.fspath(where)
        self.url = ""
        self._fs: Any = None
        if not _is_url(s):
            self.path = os.path.abspath(s)
            return
        u = urlparse(s)
        if u.scheme == "file":
            if u.netloc not in ("", "localhost"):
                raise ValueError(f"{s}: a file: URL names no host (file:///path)")
            self.path = os.path.abspath(u.path)  # as Hadoop reads it: no percent-decoding
            return
        self.url = s.rstrip("/")
        self.path = u.path

    # -- naming ------------------------------------------------------------------------
    @property
    def local(self) -> bool:
        return not self.url

    @property
    def uri(self) -> str:
        """The URL Spark is given (Hadoop's own scheme kept)."""
        return "file://" + self.path if self.local else self.url  # Hadoop's form: not percent-encoded

    @property
    def name(self) -> str:
        return posixpath.basename(self.path.rstrip("/"))

    def _derive(self, given: str, path: str, url: str) -> "Loc":
        loc = object.__new__(Loc)
        loc.given, loc.path, loc.url, loc._fs = given, path, url, None
        return loc

    def __truediv__(self, name: str) -> "Loc":
        if self.local:
            given = f"{self.given.rstrip('/')}/{name}" if _is_url(self.given) else os.path.join(self.given, name)
            return self._derive(given, os.path.join(self.path, name), "")
        loc = self._derive(f"{self.given.rstrip('/')}/{name}", posixpath.join(self.path, name), f"{self.url}/{name}")
        if self._fs is not None:  # one file system object for the tree (a connection, a mock)
            loc._fs = (self._fs[0], posixpath.join(self._fs[1], name))
        return loc

    @property
    def parent(self) -> "Loc":
        given = self.given.rstrip("/").rsplit("/", 1)[0] if _is_url(self.given) else os.path.dirname(self.given)
        if self.local:
            return self._derive(given, os.path.dirname(self.path), "")
        loc = self._derive(given, posixpath.dirname(self.path), self.url.rsplit("/", 1)[0])
        if self._fs is not None:
            loc._fs = (self._fs[0], posixpath.dirname(self._fs[1].rstrip("/")))
        return loc

    def __str__(self) -> str:
        return self.given

    def __repr__(self) -> str:
        return f"Loc({self.given!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Loc) and self.uri == other.uri

    def __hash__(self) -> int:
        return hash(self.uri)

    @property
    def fs(self) -> Any:
        """(pyarrow file system, its path) of a non-local location, opened on first use."""
        if self._fs is None:
            import pyarrow.fs as pafs

            scheme = urlparse(self.url).scheme
            url = _ALIASES.get(scheme, scheme) + self.url[len(scheme):]
            try:
                self._fs = pafs.FileSystem.from_uri(url)
            except Exception as exc:  # noqa: BLE001 - pyarrow raises several kinds; one line for the user
                raise ValueError(f"cannot open the file system of {self.given}: "
                                 f"{(str(exc).splitlines() or [type(exc).__name__])[0]}") from None
        return self._fs

    # -- queries ---------------------------------------------------------------------
    def _info(self):
        fs, path = self.fs
        return fs.get_file_info(path)

    def exists(self) -> bool:
        if self.local:
            return os.path.exists(self.path)
        import pyarrow.fs as pafs

        return self._info().type != pafs.FileType.NotFound

    def is_file(self) -> bool:
        if self.local:
            return os.path.isfile(self.path)
        import pyarrow.fs as pafs

        return self._info().type == pafs.FileType.File

    def is_dir(self) -> bool:
        if self.local:
            return os.path.isdir(self.path)
        import pyarrow.fs as pafs

        return self._info().type == pafs.FileType.Directory

    def is_symlink(self) -> bool:
        return self.local and os.path.islink(self.path)

    def size(self) -> int:
        return os.path.getsize(self.path) if self.local else self._info().size

    def iterdir(self) -> Iterator["Loc"]:
        """Entries of a directory, by name."""
        if self.local:
            names = sorted(os.listdir(self.path))
        else:
            import pyarrow.fs as pafs

            fs, path = self.fs
            names = sorted(posixpath.basename(i.path) for i in
                           fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)))
        for n in names:
            yield self / n

    def rglob_suffix(self, suffix: str) -> list["Loc"]:
        """Every file below whose name ends with ``suffix``."""
        if not self.is_dir():
            return []
        if self.local:
            return [self / os.path.relpath(p, self.path) for p in sorted(map(str, Path(self.path).rglob(f"*{suffix}")))]
        import pyarrow.fs as pafs

        fs, path = self.fs
        infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
        out = []
        for i in sorted(infos, key=lambda i: i.path):
            if i.type == pafs.FileType.File and i.path.endswith(suffix):
                rel = i.path[len(path.rstrip("/")) + 1:]
                out.append(self / rel)
        return out

    # -- reading ---------------------------------------------------------------------
    def open_read(self) -> BinaryIO:
        """A seekable binary file with ``readline`` and ``tell``."""
        if self.local:
            return open(self.path, "rb")
        fs, path = self.fs
        return io.BufferedReader(_Raw(fs.open_input_file(path)), 1 << 16)  # type: ignore[return-value]

    def read_bytes(self) -> bytes:
        with self.open_read() as f:
            return f.read()

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    # -- writing ---------------------------------------------------------------------
    def mkdir(self) -> None:
        if self.local:
            os.makedirs(self.path, exist_ok=True)
        else:
            fs, path = self.fs
            fs.create_dir(path, recursive=True)

    def open_write(self) -> BinaryIO:
        if self.local:
            return open(self.path, "wb")
        fs, path = self.fs
        return fs.open_output_stream(path)

    def write_atomic(self, data: "bytes | Iterable[bytes]") -> None:
        """A temporary name, then a rename (fsync'd locally): a reader sees all or nothing.
        ``data`` may be chunks (written as they come: a part file is never joined whole).
        The temporary name is unique per writer: two attempts of one Spark task, on any
        hosts, never write into each other's file, and the rename is last-writer-wins."""
        tmp = self.parent / f".{self.name}.tmp{os.getpid()}-{uuid.uuid4().hex[:8]}"
        chunks = (data,) if isinstance(data, (bytes, bytearray, memoryview)) else data
        if self.local:
            try:
                with open(tmp.path, "wb") as f:
                    for c in chunks:
                        f.write(c)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp.path, self.path)
            except BaseException:
                _discard(tmp.path)
                raise
            return
        fs, path = self.fs
        with fs.open_output_stream(tmp.fs[1]) as f:
            for c in chunks:
                f.write(c)
        fs.move(tmp.fs[1], path)

    def replace_with(self, src: "Loc") -> None:
        """Move ``src`` onto this location."""
        if self.local:
            os.replace(src.path, self.path)
        else:
            fs, path = self.fs
            fs.move(src.fs[1], path)

    def unlink(self) -> None:
        if self.local:
            os.unlink(self.path)
        else:
            fs, path = self.fs
            fs.delete_file(path)

    def rmtree(self) -> None:
        if self.local:
            shutil.rmtree(self.path, ignore_errors=True)
        elif self.exists():
            fs, path = self.fs
            fs.delete_dir(path)
