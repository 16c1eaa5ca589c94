"""Batched reports: a worker's reports of many attempts, written together.

`report_many` decides each (job, event, args) on the record the worker last saw and
writes them all in one `store.apply`. The reports whose record moved since (a
heartbeat renews a lease with a new version, so every job that ran past one has) are
decided again on the stored records and written in a second `store.apply`; what still
fails (a cancel, a recovery, a fence that moved) goes one by one through the
`transition` plan, which re-reads, decides again and records a stale report.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import BadInput, JobFSMError, StoreError, VersionConflict
from ..records import Decision, Job
from . import dependencies, plans
from .kernel import Kernel
from .writes import run

log = logging.getLogger(__name__)

Report = tuple[Job, str, Mapping[str, Any]]


def report_many(kernel: Kernel, reports: Sequence[Report]) -> list[Job | JobFSMError]:
    """Apply `reports`; results in order: the new record, or the error (LeaseLost,
    IllegalTransition, ...) for that report."""
    out: list[Job | JobFSMError | None] = [None] * len(reports)
    _batch(kernel, reports, list(range(len(reports))), out, reread=False)
    moved = [i for i, r in enumerate(out) if r is None]
    if moved:
        try:
            _batch(kernel, reports, moved, out, reread=True)
        except StoreError:
            if len(moved) == len(reports):
                raise  # nothing is written yet: the caller retries the whole batch
            # some are written: a retry would find those final and call their
            # reports refused, so the rest go one by one below instead
            log.warning("%d reports on moved records: one by one", len(moved))
    for i, (job, event, args) in enumerate(reports):
        if out[i] is None:
            out[i] = _alone(kernel, job, event, args)
    return [r for r in out if r is not None]


def _batch(
    kernel: Kernel,
    reports: Sequence[Report],
    indexes: list[int],
    out: list[Job | JobFSMError | None],
    *,
    reread: bool,
) -> None:
    """Decide the reports at `indexes` (on the records as given, or as stored now with
    `reread`) and write them in one `store.apply`; fill `out` with what was written,
    leave None where the decision or its compare-and-set failed."""
    now = kernel.clock.now()
    batch: list[int] = []
    decisions: list[Decision] = []
    for i in indexes:
        job, event, args = reports[i]
        try:
            seen = kernel.store.get(job.id) if reread else job
            if seen is None:
                continue  # gone: `transition` says so
            decisions.append(kernel.decide(seen, event, now, **args))
        except JobFSMError:
            continue  # decided again on the stored record, alone
        batch.append(i)
    if not decisions:
        return
    applied: Sequence[Job | VersionConflict | None]
    try:
        applied = kernel.apply(decisions)
    except StoreError:
        raise  # the store is away: the caller retries the batch, bounded
    except Exception as err:  # one report the store cannot take: each alone
        log.warning("a batch of %d reports failed (%s); one by one", len(decisions), err)
        applied = [None] * len(decisions)
    for i, written in zip(batch, applied, strict=True):
        if isinstance(written, Job):
            out[i] = written
    dependencies.settled(kernel, [j for j in applied if isinstance(j, Job)])


def _alone(kernel: Kernel, job: Job, event: str, args: Mapping[str, Any]) -> Job | JobFSMError:
    """One report, decided on the stored record; its failure is its own."""
    try:
        return run(kernel, plans.transition(kernel, job.id, event, args))
    except JobFSMError as err:
        return err
    except Exception as err:
        log.exception("job %s: report %s failed", job.id, event)
        return BadInput(f"job {job.id}: report {event!r} could not be stored: {err}")
