"""Snapshots of the service's state, as data (JSON), never pickles (SPEC section 7).

A file ``DIR/snapshots/snapshot-<seq>.json`` is two lines: a header
``{"format": "skpubsub-service-snapshot", "version": 1, "seq": S, "run": ID, "bytes": n,
"sha256": ...}`` and the body (JSON, ``n`` bytes, hashed). It holds what the state
after event ``S`` is a function of: the live subscriptions and the objects some result
may still need (the window's alive objects; under ``none`` the objects in a kNN/top-k
result), each as its logged record with its seq, plus the Gate's last time, every live
registration (token digest, next notification number, its last notifications) and the
kNN/top-k results, which the restore checks after re-applying the records.
A damaged, foreign (another data directory's run id) or future-version file is refused
with the reason.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from .wal import Damaged, fsync_dir

FORMAT = "skpubsub-service-snapshot"
VERSION = 1


def snapshot_path(directory: Path, seq: int) -> Path:
    return directory / f"snapshot-{seq:012d}.json"


def list_snapshots(directory: Path) -> list[tuple[int, Path]]:
    out = []
    for p in directory.glob("snapshot-*.json"):
        try:
            out.append((int(p.name[9:-5]), p))
        except ValueError:
            continue
    return sorted(out)


def write_snapshot(directory: Path, seq: int, run: str, body: dict[str, Any]) -> Path:
    """Write atomically (temporary file, fsync, rename, fsync of the directory)."""
    directory.mkdir(parents=True, exist_ok=True)
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    head = {"format": FORMAT, "version": VERSION, "seq": seq, "run": run, "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest()}
    path = snapshot_path(directory, seq)
    tmp = path.with_suffix(".tmp")
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
        f.write(json.dumps(head).encode() + b"\n")
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(directory)
    return path


def read_snapshot(path: Path, run: str) -> tuple[int, dict[str, Any]]:
    """(seq, body) of a snapshot file, or Damaged with the reason."""
    try:
        with open(path, "rb") as f:
            head_line = f.readline(4096)
            data = f.read()
        head = json.loads(head_line)
    except (OSError, ValueError) as exc:
        raise Damaged(f"{path}: unreadable header ({exc})") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise Damaged(f"{path}: not a skpubsub service snapshot")
    if head.get("version") != VERSION:
        raise Damaged(f"{path}: snapshot version {head.get('version')!r}, this program reads {VERSION}")
    if head.get("run") != run:
        raise Damaged(f"{path}: written by another service (run {head.get('run')!r}, this directory's is {run!r})")
    if head.get("bytes") != len(data) or head.get("sha256") != hashlib.sha256(data).hexdigest():
        raise Damaged(f"{path}: damaged (size or checksum differs)")
    try:
        body = json.loads(data)
    except ValueError as exc:
        raise Damaged(f"{path}: body is not JSON ({exc})") from None
    if not isinstance(head.get("seq"), int) or not isinstance(body, dict):
        raise Damaged(f"{path}: malformed")
    return head["seq"], body
