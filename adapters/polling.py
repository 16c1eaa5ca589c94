"""Polling delivery: "claim any due job" wake-ups, at least every poll interval.

`poll(capacity, timeout)` returns `[Wakeup(None)]` after at most `timeout`
seconds, or earlier when woken: by `publish` (a submit in this process), by
`wake()`, or by the store's `wait_for_jobs(queues, timeout)` where the store has
one (PostgreSQL LISTEN/NOTIFY). Wake-ups are hints; the store stays the truth, so
`settle` has nothing to do.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from fsm.ports import WaitsForJobs, Wakeup
from fsm.records import Job

log = logging.getLogger(__name__)

#: Default longest wait between claims when nothing wakes the worker.
DEFAULT_POLL_INTERVAL = 1.0
#: Bounds a caller may choose for the poll interval.
MIN_POLL_INTERVAL = 0.01
MAX_POLL_INTERVAL = 60.0
#: Longest single wait on the store's notifications, so `wake()` is seen this soon.
WAKE_SLICE = 0.1


class PollingDelivery:
    """Wake-ups from a clock, local publishes and (if the store has it) store notifications."""

    def __init__(self, store: Any = None, *, poll_interval: float = DEFAULT_POLL_INTERVAL) -> None:
        if not MIN_POLL_INTERVAL <= poll_interval <= MAX_POLL_INTERVAL:
            raise ValueError(
                f"poll_interval must be between {MIN_POLL_INTERVAL} and {MAX_POLL_INTERVAL}s, "
                f"got {poll_interval!r}"
            )
        self.poll_interval = poll_interval
        self._store = store
        self._queues: tuple[str, ...] = ("default",)
        self._woken = threading.Event()
        self._waiter = store if isinstance(store, WaitsForJobs) else None

    def start(self, queues: Sequence[str]) -> None:
        self._queues = tuple(queues)

    def publish(self, jobs: Sequence[Job]) -> None:
        if any(job.queue in self._queues for job in jobs):
            self._woken.set()

    def wake(self) -> None:
        self._woken.set()

    def poll(self, capacity: int, timeout: float) -> list[Wakeup]:
        if capacity < 1:
            return []
        timeout = max(0.0, min(timeout, self.poll_interval))
        if timeout > 0 and not self._woken.is_set():
            if self._waiter is not None:
                self._wait_store(timeout)
            else:
                self._woken.wait(timeout)
        self._woken.clear()
        return [Wakeup(None)]

    def _wait_store(self, timeout: float) -> None:
        """Wait for a store notification in slices, so a local wake is seen too."""
        assert self._waiter is not None
        until = time.monotonic() + timeout
        while not self._woken.is_set() and (left := until - time.monotonic()) > 0:
            try:
                if self._waiter.wait_for_jobs(self._queues, min(left, WAKE_SLICE)):
                    return
            except Exception as err:  # a broken listener only costs latency
                log.warning("waiting for store notifications failed: %s", err)
                self._woken.wait(left)
                return

    def settle(self, wakeup: Wakeup, claimed: bool = False) -> None:
        """Nothing to acknowledge: a polling wake-up carries no message."""

    @property
    def ready(self) -> bool:
        return True

    def check(self) -> None:
        """A polling delivery cannot fail for good."""

    def close(self) -> None:
        self._woken.set()
