"""A running job's latest progress, as stored with the job (`Job.progress_json`).

The owner stores the value its handler last gave `ctx.progress(...)` inside a small
envelope that says which attempt reported it and when, so a reader never takes an
earlier attempt's progress for the current one's:

    {"at": 1767225600.5, "attempt": 2, "fence": 3, "progress": {"done": 40, "of": 100}}

Writing it is the worker's (`fsm.worker.saving`); reading it is for `jobfsm
inspect`, `jobfsm status`, the dashboard and any process that opens the store.
"""

from __future__ import annotations

import math
from typing import Any

import attrs

from ..errors import PayloadError
from ..jsonio import decode
from ..records import Job


@attrs.frozen
class Progress:
    """The latest progress of a job: its value and who reported it when."""

    value: Any
    attempt: int
    fence: int
    at: float


def envelope(job: Job, progress_json: str, at: float) -> str:
    """The stored form of `progress_json` (JSON text already checked by `ctx.progress`),
    reported by attempt `job.attempt` under fence `job.fence` at `at` (time.time())."""
    when = at if math.isfinite(at) else 0.0
    return (
        f'{{"at":{when!r},"attempt":{int(job.attempt)},"fence":{int(job.fence)},'
        f'"progress":{progress_json}}}'
    )


def progress_of(job: Job) -> Progress | None:
    """The job's latest stored progress, or None (none reported, or unreadable)."""
    if job.progress_json is None:
        return None
    try:
        data = decode(job.progress_json, what=f"progress of job {job.id}")
    except PayloadError:
        return None
    if not isinstance(data, dict) or "progress" not in data:
        return None
    try:
        return Progress(
            value=data["progress"],
            attempt=int(data.get("attempt", 0)),
            fence=int(data.get("fence", 0)),
            at=float(data.get("at", 0.0)),
        )
    except (TypeError, ValueError):
        return None
