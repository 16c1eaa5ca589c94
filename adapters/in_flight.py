"""Attempts in flight, by executor generation: what the in-process executors share.

Every executor keeps the attempts it runs in `Slots`, one per generation, keyed by a
token. A restart starts a new generation; an attempt of an old one that ends late
finds its token gone and its result is dropped (`Generations`). The thread,
process and asyncio executors (`adapters.executors`, `adapters.asyncio_executor`)
build on these.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable

from fsm.ports import Attempt, Outcome

log = logging.getLogger(__name__)

#: what an executor calls with an attempt and its outcome when the attempt ends
Done = Callable[[Attempt, Outcome], None]

_tokens = itertools.count(1)


class InFlight:
    """One attempt in flight: its callback, its deadline, and how it is being stopped."""

    __slots__ = ("abandoned", "attempt", "deadline", "done", "kill", "stop_by", "timed_out")

    def __init__(self, attempt: Attempt, done: Done) -> None:
        self.attempt = attempt
        self.done = done
        self.deadline = time.monotonic() + attempt.timeout
        self.stop_by: float | None = None  # thread: abandon if still running by then
        self.timed_out = False
        self.abandoned = False  # thread: left running; its thread retires when it ends
        self.kill: tuple[str, str] | None = None  # process: (status, reason) of a kill we did


class Slots:
    """In-flight records by token, for one generation; all access under the lock."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.records: dict[int, InFlight] = {}
        #: (job id, fence) -> token: two runs of one job (a late one, a new one) stay apart
        self.by_run: dict[tuple[str, int], int] = {}

    def add(self, record: InFlight) -> int:
        token = next(_tokens)
        self.records[token] = record
        self.by_run[_run_key(record.attempt)] = token
        return token

    def pop(self, token: int) -> InFlight | None:
        record = self.records.pop(token, None)
        if record is not None and self.by_run.get(_run_key(record.attempt)) == token:
            del self.by_run[_run_key(record.attempt)]
        return record

    def find(self, job_id: str, fence: int | None) -> int | None:
        """The token of run (job id, fence); without a fence, the job's newest run."""
        if fence is not None:
            return self.by_run.get((job_id, fence))
        fences = [f for (j, f) in self.by_run if j == job_id]
        return self.by_run[(job_id, max(fences))] if fences else None


def _run_key(attempt: Attempt) -> tuple[str, int]:
    return (attempt.job.id, attempt.job.fence)


def settle(record: InFlight, outcome: Outcome) -> None:
    """Call the attempt's callback with `outcome`; a failing callback is logged, never raised."""
    try:
        record.done(record.attempt, outcome)
    except Exception:
        log.exception("job %s: outcome callback failed", record.attempt.job.id)


class Generations:
    """What the in-process executors share: settling an ended attempt, unless a restart or
    a hard stop left it behind (then its late result is dropped)."""

    _lock: threading.Lock
    _gen: Slots
    _abandoned_alive: int

    def _deliver(
        self, gen: Slots, token: int, record: InFlight, outcome: Outcome, *, stopped: str
    ) -> None:
        """Settle `record` with `outcome` if it is still live in the current generation;
        a timed-out attempt settles as `timeout` (`stopped` says how it was stopped)."""
        with self._lock:
            live = gen is self._gen and gen.pop(token) is not None
            if not live and record.abandoned:
                self._abandoned_alive -= 1
        if not live:
            log.info("job %s: late result of an abandoned attempt dropped", record.attempt.job.id)
            return
        if record.timed_out:
            outcome = Outcome(
                status="timeout",
                error=f"attempt timed out after {record.attempt.timeout}s; {stopped}",
                seconds=outcome.seconds,
            )
        settle(record, outcome)
