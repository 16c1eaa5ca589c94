"""Waiting for a job's outcome: one loop, written once, for `Engine.wait` (blocking)
and `AsyncEngine.wait` (awaited).

A store that `WatchesJobs` (PostgreSQL: LISTEN/NOTIFY) wakes a wait when the job
reaches a final state, with a re-read every WAIT_RECHECK seconds as a safety net;
any other store is polled, from WAIT_POLL_FIRST up to WAIT_POLL_MAX seconds apart.
`wait_plan` yields `Read` (answer: the job or None) and `Pause` (answer: None, once
the pause is over or the watched job changed); the drivers here carry them out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Generator
from typing import Any

import attrs

from ..errors import BadInput, JobNotFound, WaitTimeout
from ..inputs import seconds
from ..ports import WatchesJobs
from ..records import Job
from .kernel import Kernel
from .plans import Read, drive

#: `wait`: the longest timeout accepted (seconds)
MAX_WAIT = 24 * 3600.0
#: `wait` on a watching store: a re-read at least this often, in case a wake-up was lost
WAIT_RECHECK = 1.0
#: `wait` on any other store: the first and the longest pause between reads (doubling)
WAIT_POLL_FIRST = 0.01
WAIT_POLL_MAX = 0.25


@attrs.frozen
class Pause:
    """Wait `seconds`, or less if the watched job may have changed. Answer: None."""

    seconds: float


def wait_timeout(timeout: float) -> float:
    """A `wait` timeout, checked (`fsm.inputs.seconds`): at most MAX_WAIT seconds."""
    limit = seconds("wait timeout", timeout)
    if limit > MAX_WAIT:
        raise BadInput(f"wait timeout must be at most {MAX_WAIT} seconds; got {timeout!r}")
    return limit


def wait_plan(
    kernel: Kernel, job_id: str, limit: float, *, watched: bool
) -> Generator[Read | Pause, Any, Job]:
    """Read until the job is final; WaitTimeout after `limit` seconds (checked by
    `wait_timeout`). `watched`: a change wakes the pauses (then they are rechecks)."""
    deadline = time.monotonic() + limit
    pause = WAIT_POLL_FIRST
    while True:
        job: Job | None = yield Read(job_id)
        if job is None:
            raise JobNotFound(job_id)
        if job.state in kernel.final_states:
            return job
        left = deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(job_id, job.state, limit)
        if watched:
            yield Pause(min(left, WAIT_RECHECK))
        else:
            yield Pause(min(left, pause))
            pause = min(WAIT_POLL_MAX, pause * 2)


def wait(kernel: Kernel, job_id: str, *, timeout: float) -> Job:
    """Block until the job is in a final state and return it (see `wait_plan`)."""
    limit = wait_timeout(timeout)
    store = kernel.store
    changed = threading.Event()
    unwatch = store.watch(job_id, changed.set) if isinstance(store, WatchesJobs) else None

    def perform(request: Read | Pause) -> Job | None:
        if isinstance(request, Read):
            return store.get(request.job_id)
        if unwatch is None:
            time.sleep(request.seconds)
        elif changed.wait(request.seconds):
            changed.clear()
        return None

    try:
        return drive(wait_plan(kernel, job_id, limit, watched=unwatch is not None), perform)
    finally:
        if unwatch is not None:
            unwatch()
