"""Waiting for a job's outcome: `Engine.wait` (blocking) and `AsyncEngine.wait` share
the bounds here.

A store that `WatchesJobs` (PostgreSQL: LISTEN/NOTIFY) wakes a wait when the job
reaches a final state, with a re-read every WAIT_RECHECK seconds as a safety net;
any other store is polled, from WAIT_POLL_FIRST up to WAIT_POLL_MAX seconds apart.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from .errors import BadInput, WaitTimeout
from .inputs import seconds
from .ports import WatchesJobs
from .records import Job

if TYPE_CHECKING:
    from .engine import Engine

#: `wait`: the longest timeout accepted (seconds)
MAX_WAIT = 24 * 3600.0
#: `wait` on a watching store: a re-read at least this often, in case a wake-up was lost
WAIT_RECHECK = 1.0
#: `wait` on any other store: the first and the longest pause between reads (doubling)
WAIT_POLL_FIRST = 0.01
WAIT_POLL_MAX = 0.25


def wait_timeout(timeout: float) -> float:
    """A `wait` timeout, checked (`fsm.inputs.seconds`): at most MAX_WAIT seconds."""
    limit = seconds("wait timeout", timeout)
    if limit > MAX_WAIT:
        raise BadInput(f"wait timeout must be at most {MAX_WAIT} seconds; got {timeout!r}")
    return limit


def wait(engine: Engine, job_id: str, *, timeout: float) -> Job:
    """Block until the job is in a final state and return it; WaitTimeout after `timeout`.

    A store that `WatchesJobs` (PostgreSQL: LISTEN/NOTIFY) wakes the wait when the
    job finishes, with a re-read every WAIT_RECHECK seconds as a safety net; any
    other store is polled, from WAIT_POLL_FIRST up to WAIT_POLL_MAX seconds apart.
    `timeout` is at most MAX_WAIT seconds.
    """
    limit = wait_timeout(timeout)
    deadline = time.monotonic() + limit
    changed = threading.Event()
    unwatch = (
        engine.store.watch(job_id, changed.set) if isinstance(engine.store, WatchesJobs) else None
    )
    pause = WAIT_POLL_FIRST
    try:
        while True:
            job = engine.get(job_id)
            left = deadline - time.monotonic()
            if job.state in engine.final_states:
                return job
            if left <= 0:
                raise WaitTimeout(job_id, job.state, limit)
            if unwatch is not None:
                changed.wait(min(left, WAIT_RECHECK))
                changed.clear()
            else:
                time.sleep(min(left, pause))
                pause = min(WAIT_POLL_MAX, pause * 2)
    finally:
        if unwatch is not None:
            unwatch()
