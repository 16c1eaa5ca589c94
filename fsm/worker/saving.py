"""Storing the latest progress of the runs a worker holds (`ctx.progress(...)`).

A handler may call `ctx.progress` as often as it likes: the value lives in memory
(on a process executor it crosses from the child as JSON, at most
`adapters.child_pipe.PROGRESS_EVERY` apart). The worker writes only the latest value:

- with its heartbeat, for the runs whose lease the heartbeat just renewed and whose
  progress changed since the last write: at most one write per job per heartbeat
  interval, one statement for all of them;
- once more when the attempt ends, before its outcome is reported, so the last
  value a handler gave is the one kept: that write is tried again with the report,
  under the report's bound (`Shared.with_retries`), when the store fails it.

Each write is fenced (`Engine.save_progress`): a stale owner's write changes nothing.
It bumps no version and appends no audit entry, so reports and heartbeats keep
their compare-and-set races exactly as before, and the audit trail stays one entry
per transition. A run's progress counts as saved only once the store wrote it: a
failed write is logged and retried with the next heartbeat (or, at the end, with
the report); it never fails a run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ..errors import StoreError
from ..service.progress import envelope
from .runs import Run
from .state import Shared

log = logging.getLogger(__name__)


def save_progress(s: Shared, runs: Iterable[Run], *, retried: bool = False) -> int:
    """Write the latest unsaved progress of `runs`; return how many jobs were written.

    `retried`: the caller retries a retryable store error (the reporter, which writes
    the last values and the report under one bound), so it is raised, not logged."""
    items: dict[str, tuple[int, str]] = {}
    taken: dict[str, tuple[Run, int]] = {}
    for run in runs:
        if run.ctx.progress_seq == run.progress_saved:
            continue  # nothing new (the count only grows): no lock taken for most runs
        seq, text, at = run.ctx.latest_progress()
        if text is None or seq == run.progress_saved:
            continue
        items[run.job.id] = (run.job.fence, envelope(run.job, text, at or 0.0))
        taken[run.job.id] = (run, seq)
    if not items:
        return 0
    try:
        written = s.engine.save_progress(s.identity.owner, items)
    except Exception as err:
        if retried and isinstance(err, StoreError) and err.retryable:
            raise
        log.warning("worker %s: progress of %d jobs not stored: %s", s.owner_name, len(items), err)
        return 0
    for job_id in written:
        run, seq = taken[job_id]
        run.progress_saved = seq
    return len(written)
