"""The sink: merges the workers' output rows of one micro-batch into files.

Each micro-batch writes its own files, named by batch id, atomically (write a
temporary file, then rename), so a batch Spark replays after a failure rewrites
the same bytes: no notification is lost or duplicated. ``assemble`` joins the
batch files into the four outputs of SPEC section 4.

The batch files live in ``OUT/batches/<run id>/``, the id the checkpoint was created
with (``run.json``), and only that run's folder is joined: an output folder that still
holds another checkpoint's batches (``_checkpoint`` removed, as the refusal message
says) never mixes them into the new outputs; ``clear_other_runs`` removes them.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .codec import unpack_notes
from .fs import Loc

BATCH_DIR = "batches"


def _write_atomic(path: Loc, text: str) -> None:
    path.write_atomic(text.encode("utf-8"))


def merge(pdf: pd.DataFrame) -> dict[str, Any]:
    """One batch's rows -> notification lines, rejection lines, results, stats, meta.

    Notifications of one event are put in subscription registration order (what a
    single engine does); a range match of a subscription replicated on several
    workers is kept once. O(rows log rows).
    """
    out: dict[str, Any] = {}
    lines: list[str] = []
    parts: list[tuple] = []
    notes = pdf[pdf["kind"] == "notes"]
    for n, text, blob in zip(notes["seq"], notes["line"], notes["blob"]):
        lines += text.split("\n")
        parts.append(unpack_notes(bytes(blob), int(n)))
    if parts:
        seq, reg, match = (np.concatenate([p[i] for p in parts]) for i in range(3))
        order = np.lexsort((reg, seq))  # stable: a worker's own order stays
        seq, reg, match = seq[order], reg[order], match[order]
        dup = np.zeros(len(order), bool)
        dup[1:] = match[1:] & (seq[1:] == seq[:-1]) & (reg[1:] == reg[:-1])
        out["notifications"] = [lines[i] for i in order[~dup]]
    else:
        out["notifications"] = []
    rej = pdf[pdf["kind"] == "rejected"].sort_values("seq", kind="stable")
    out["rejected"] = rej["line"].tolist()
    res = pdf[pdf["kind"] == "result"]
    if len(res):
        res = res.sort_values("reg", kind="stable").drop_duplicates(["reg"])
        out["results"] = res["line"].tolist()
    out["stats"] = [json.loads(x) for x in pdf.loc[pdf["kind"] == "stat", "line"]]
    out["source"] = [json.loads(x) for x in pdf.loc[pdf["kind"] == "source", "line"]]
    meta = pdf.loc[pdf["kind"] == "meta", "line"].tolist()
    if meta:
        out["meta"] = json.loads(meta[-1])
    return out


def batch_dir(out: Path | Loc, run: str) -> Loc:
    return Loc(out) / BATCH_DIR / run


def clear_other_runs(out: Path | Loc, run: str) -> None:
    """Remove batch files that belong to no run or to another run (another checkpoint)."""
    top = Loc(out) / BATCH_DIR
    if top.is_symlink() or (top.exists() and not top.is_dir()):
        top.unlink()
    if not top.is_dir():
        return
    for p in top.iterdir():
        if p.name == run and p.is_dir() and not p.is_symlink():
            continue
        if p.is_dir() and not p.is_symlink():
            p.rmtree()
        else:
            p.unlink()


def write_batch(out: Path | Loc, batch_id: int, merged: dict[str, Any], extra: dict | None = None,
                run: str = "run") -> None:
    """Write one batch's files (idempotent per ``batch_id``) into ``batch_dir(out, run)``."""
    d = batch_dir(out, run)
    d.mkdir()
    name = f"{batch_id:010d}"
    _write_atomic(d / f"notifications-{name}.jsonl", "".join(x + "\n" for x in merged["notifications"]))
    if merged["rejected"]:
        _write_atomic(d / f"rejected-{name}.jsonl", "".join(x + "\n" for x in merged["rejected"]))
    if "results" in merged:
        _write_atomic(d / f"results-{name}.jsonl", "".join(x + "\n" for x in merged["results"]))
    info = {"batch": batch_id, "notifications": len(merged["notifications"]),
            "workers": merged["stats"], "source": merged["source"], **(extra or {})}
    if "meta" in merged:
        info["meta"] = merged["meta"]
    _write_atomic(d / f"batch-{name}.json", json.dumps(info))


def _batch_files(d: Loc, prefix: str, suffix: str = ".jsonl") -> list[Loc]:
    if not d.is_dir():
        return []
    return [p for p in d.iterdir() if p.name.startswith(prefix + "-") and p.name.endswith(suffix)]  # by name


def _join(dst: Loc, parts: list[Loc]) -> None:
    """``dst`` = the parts one after the other, streamed (never whole in memory), then renamed."""
    tmp = dst.parent / f".{dst.name}.tmp{os.getpid()}"
    with tmp.open_write() as f:
        for p in parts:
            with p.open_read() as src:
                shutil.copyfileobj(src, f, 1 << 20)
    dst.replace_with(tmp)


def assemble(out: Path | Loc, run: str = "run") -> dict:
    """Join run ``run``'s batch files into ``notifications.jsonl``, ``rejected.jsonl`` and
    ``results.jsonl``; returns the per-batch info records in batch order."""
    out = Loc(out)
    d = batch_dir(out, run)
    for prefix in ("notifications", "rejected"):
        _join(out / f"{prefix}.jsonl", _batch_files(d, prefix))
    _join(out / "results.jsonl", _batch_files(d, "results")[-1:])
    batches = [json.loads(p.read_text()) for p in _batch_files(d, "batch", ".json")]
    return {"batches": batches}
