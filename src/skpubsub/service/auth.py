"""Keys and tokens (SPEC section 8): random, stored hashed, compared in constant time.

``DIR/admin.key`` (mode 0600) is written once at first start; a request bearing it may
do anything. ``DIR/publish.keys`` holds one publish key a line (read again when the file
changes). Each subscription gets a token (``secrets.token_urlsafe``); only its SHA-256
is kept (in the write-ahead log and the snapshots), so the data directory never holds a
usable subscription token.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from pathlib import Path

ADMIN_KEY = "admin.key"
PUBLISH_KEYS = "publish.keys"
HOOK_KEY = "hook.key"  # derives hooked subscriptions' tokens (hooks.py): never sent anywhere


def new_secret() -> str:
    """A fresh key or token: 256 random bits, URL-safe."""
    return secrets.token_urlsafe(32)


def digest(secret: str) -> str:
    """What is stored of a secret: its SHA-256, hex."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def same(secret: str | None, stored_digest: str | None) -> bool:
    """Does ``secret`` hash to ``stored_digest``? Constant time in the digest."""
    if not secret or not stored_digest:
        return False
    return hmac.compare_digest(digest(secret), stored_digest)


def admin_key(data: Path, name: str = ADMIN_KEY) -> str:
    """The admin key of ``data`` (or another secret of it: ``HOOK_KEY``), written (mode 0600)
    at first start."""
    path = data / name
    if not path.exists():
        key = new_secret()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key + "\n")
            f.flush()
            os.fsync(f.fileno())
        return key
    key = path.read_text().strip()
    if not key:
        raise ValueError(f"{path} is empty: delete it to have a new admin key written")
    return key


class PublishKeys:
    """The digests of ``DIR/publish.keys``, reread at most once a second when it changed."""

    def __init__(self, data: Path) -> None:
        self.path = data / PUBLISH_KEYS
        self._stamp: tuple[int, int] | None = None
        self._checked = 0.0
        self._digests: list[str] = []

    def _reload(self) -> None:
        now = time.monotonic()
        if now - self._checked < 1.0:
            return
        self._checked = now
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._stamp, self._digests = None, []
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            self._stamp = stamp
            lines = self.path.read_text(encoding="utf-8", errors="replace").splitlines()
            self._digests = [digest(k.strip()) for k in lines if k.strip() and not k.startswith("#")]

    def valid(self, secret: str | None) -> bool:
        if not secret:
            return False
        self._reload()
        d = digest(secret)
        ok = False
        for stored in self._digests:  # every key compared: the time does not tell which matched
            ok |= hmac.compare_digest(d, stored)
        return ok
