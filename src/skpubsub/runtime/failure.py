"""The one error a runtime raises for a run that failed for a reason outside the input."""

from __future__ import annotations


class RunFailure(RuntimeError):
    """A run failed inside its runtime (Spark's tasks, jobs or query): the message names
    the cause on one line, for the command line's ``skpubsub: error: ...`` (SPEC 7). Here,
    not beside the runtime, so the command line catches it without importing an optional
    package."""
