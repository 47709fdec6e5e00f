"""Output files of ``skpubsub run`` (SPEC section 4), written as JSON Lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from .encode import json_line, json_text
from .events import Rejection
from .notifications import Notes, note_lines

__all__ = ["RunWriter", "json_line", "json_text", "rejection_record", "result_record"]


def rejection_record(line: int, error: str, raw: str) -> dict:
    """A line of ``rejected.jsonl``."""
    return {"line": line, "error": error, "raw": raw}


def result_record(sid: Any, ids: list[Any]) -> dict:
    """A line of ``results.jsonl``: a subscription's result in rank order."""
    return {"id": sid, "results": ids}


class RunWriter:
    """Opens ``notifications.jsonl`` and ``rejected.jsonl`` for streaming writes;
    ``results.jsonl`` and ``metrics.json`` are written once at the end."""

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self._notes = open(self.out / "notifications.jsonl", "w", encoding="utf-8")
        self._rejected = open(self.out / "rejected.jsonl", "w", encoding="utf-8")
        self.n_notifications = 0

    def notifications(self, notes: Notes) -> None:
        """Write ``notes`` (what an engine's ``apply`` returns, see ``note_lines``)."""
        lines = note_lines(notes)
        self.n_notifications += len(lines)
        self._notes.writelines(lines)

    def rejection(self, r: Rejection) -> None:
        self._rejected.write(json_line(rejection_record(r.line, r.error, r.raw)))

    def finish(self, results: Iterable[tuple[Any, list[Any]]], metrics: dict) -> None:
        self._notes.close()
        self._rejected.close()
        with open(self.out / "results.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json_line(result_record(sid, ids)) for sid, ids in results)
        with open(self.out / "metrics.json", "w", encoding="utf-8") as f:
            json.dump(metrics, f, indent=2)
            f.write("\n")
