"""Output files of ``skpubsub run`` (SPEC section 4), written as JSON Lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from .events import Notification, Rejection


def json_text(obj: Any) -> str:
    """One output record as JSON without its newline (every runtime formats alike)."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def json_line(obj: Any) -> str:
    """One output record as a line of a JSON Lines file."""
    return json_text(obj) + "\n"


class RunWriter:
    """Opens ``notifications.jsonl`` and ``rejected.jsonl`` for streaming writes;
    ``results.jsonl`` and ``metrics.json`` are written once at the end."""

    def __init__(self, out: Path) -> None:
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self._notes = open(self.out / "notifications.jsonl", "w", encoding="utf-8")
        self._rejected = open(self.out / "rejected.jsonl", "w", encoding="utf-8")
        self.n_notifications = 0

    def notifications(self, notes: Iterable[Notification]) -> None:
        """Write ``notes``: Notification objects, or a batch that formats itself
        (``notes.NoteBatch.json_lines``, columns straight to text)."""
        lines = notes.json_lines() if hasattr(notes, "json_lines") else [json_line(n.to_json()) for n in notes]
        self.n_notifications += len(lines)
        self._notes.writelines(lines)

    def rejection(self, r: Rejection) -> None:
        self._rejected.write(json_line({"line": r.line, "error": r.error, "raw": r.raw}))

    def finish(self, results: Iterable[tuple[Any, list[Any]]], metrics: dict) -> None:
        self._notes.close()
        self._rejected.close()
        with open(self.out / "results.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json_line({"id": sid, "results": ids}) for sid, ids in results)
        with open(self.out / "metrics.json", "w", encoding="utf-8") as f:
            json.dump(metrics, f, indent=2)
            f.write("\n")
