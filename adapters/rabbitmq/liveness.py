"""The delivery's liveness bound, as its fault model checks it (promise A4).

A committed job's wake-up is published, or the repair sweep finds the job, within a
stated bound: the model's worker (which claims only the jobs its wake-ups name) leases
each job within `LIVENESS_BOUND` seconds of its commit or of the end of the last fault
that kept the broker away (its connections closed, the broker down, a partition),
whichever is later.

The bound holds because the outbox keeps the ids of a batch whose publish failed
(`Outbox.lost`) and the next repair sweep that reaches the broker republishes them at
once. The model's `repair_after` (`REPAIR_AFTER`, the sweep's rule for wake-ups lost
without a trace) is well past the bound, so a wake-up the outbox forgot is found late,
and the bound is broken.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

#: seconds within which each committed job is leased, from its commit or the broker's return
LIVENESS_BOUND = 8.0
#: the model's `repair_after`: a wake-up lost without a trace is republished only after it
REPAIR_AFTER = 20.0


class Liveness:
    """Commit and lease times of a run's jobs, and the faults that kept the broker away."""

    def __init__(self, bound: float = LIVENESS_BOUND) -> None:
        self.bound = bound
        self._lock = threading.Lock()
        self._committed: dict[str, float] = {}
        self._lateness: dict[str, float] = {}
        self._calm = 0.0  # monotonic time a broker fault last began or ended
        #: the slowest lease seen, seconds past its commit or the broker's return
        self.slowest = 0.0

    def committed(self, job_ids: Iterable[str]) -> None:
        """Jobs whose submit returned (their wake-ups are due from now)."""
        now = time.monotonic()
        with self._lock:
            for job_id in job_ids:
                self._committed.setdefault(job_id, now)

    def disturbed(self) -> None:
        """A fault that keeps the broker away begins or ends: leases are judged from now."""
        with self._lock:
            self._calm = time.monotonic()

    def leased(self, job_ids: Iterable[str]) -> None:
        now = time.monotonic()
        with self._lock:
            for job_id in job_ids:
                since = self._committed.get(job_id)
                if since is None or job_id in self._lateness:
                    continue  # not submitted by the model, or leased before
                late = now - max(since, self._calm)
                self._lateness[job_id] = late
                self.slowest = max(self.slowest, late)

    def violations(self) -> list[str]:
        with self._lock:
            late = sorted(
                ((s, j) for j, s in self._lateness.items() if s > self.bound), reverse=True
            )
        return [
            f"job {job_id} was leased {seconds:.1f} s after its commit or the broker's "
            f"return (bound {self.bound:g} s; a wake-up lost without a trace waits "
            f"repair_after={REPAIR_AFTER:g} s)"
            for seconds, job_id in late
        ]


__all__ = ["LIVENESS_BOUND", "REPAIR_AFTER", "Liveness"]
