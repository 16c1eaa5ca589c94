"""The runs a worker has in flight, keyed by (job id, fence).

One run is one attempt of one job under one lease. Two runs of the same job can
be in flight at once in one process: a thread that was abandoned after its lease
was lost still finishes later, while this worker runs the job again under a new
fence. Keying by (job id, fence) keeps the two apart everywhere: in this table,
in the identity's registry of held runs (`fsm.service.identity.Identity`) and so in the
recovery sweep's verdicts, which never judge a run this process still holds.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from ..handling.attempt import Context, Marker
from ..records import Job
from ..service.identity import Identity, RunKey
from .handlers import HandlerSpec

#: guards the first build of a token's condition (`Token._condition`)
_BUILDING = threading.Lock()


class Token(threading.Event):
    """A `threading.Event` whose condition is built by the first `set`, `clear` or `wait`.

    A worker makes two per run (`cancelled`, `lease_lost`), and most runs end without
    either being set or waited on. `threading.Event()` builds `Condition(Lock())` at
    once: a lock, a condition, its waiters' deque and five bound methods, a dozen
    objects for the collector to scan, and three AttributeErrors raised and caught
    (a plain lock has no `_release_save`, `_acquire_restore`, `_is_owned`). Here the
    flag alone is set up; the condition (over a reentrant lock, which has them) is
    made under one module lock when first needed, so every change of the flag and
    every wait still happens under it as in `Event`, and `is_set` reads the flag.
    """

    def __init__(self) -> None:  # Event.__init__ is skipped on purpose (see above)
        self._flag = False
        self._cond: threading.Condition | None = None

    def _condition(self) -> threading.Condition:
        cond = self._cond
        if cond is None:
            with _BUILDING:
                cond = self._cond
                if cond is None:
                    cond = self._cond = threading.Condition(threading.RLock())
        return cond

    def set(self) -> None:
        self._condition()
        super().set()

    def clear(self) -> None:
        self._condition()
        super().clear()

    def wait(self, timeout: float | None = None) -> bool:
        self._condition()
        return super().wait(timeout)

    def _at_fork_reinit(self) -> None:
        if self._cond is not None:
            self._cond._at_fork_reinit()  # type: ignore[attr-defined]


class Run:
    """The worker's bookkeeping for one attempt in flight."""

    __slots__ = (
        "cancel_seen",
        "cancelled",
        "ctx",
        "dropped",
        "ended",
        "hard",
        "job",
        "key",
        "lease_lost",
        "lost",
        "progress_saved",
        "reporting",
        "spec",
    )

    def __init__(self, job: Job, spec: HandlerSpec | None, marker: Marker | None = None) -> None:
        self.job = job
        #: (job id, fence): which run of the job this is (a run's job never changes)
        self.key: RunKey = (job.id, job.fence)
        self.spec = spec
        self.cancelled = Token()
        self.lease_lost = Token()
        typed = None if spec is None else spec.policy.payload_type
        self.ctx = Context(job, self.cancelled, self.lease_lost, marker=marker, payload_type=typed)
        self.cancel_seen: float | None = None  # monotonic time the cancel request was seen
        self.hard = False  # a hard stop was asked of the executor
        self.lost = False  # the lease is gone: the result is discarded
        self.dropped: str | None = None  # left to recovery at shutdown, with the reason
        self.ended = False  # its handler returned: the outcome waits for its report
        self.reporting = False
        self.progress_saved = 0  # the ctx.progress_seq last stored with the job


class Runs:
    """The table of runs in flight; every method is thread-safe.

    Adding a run registers it with the identity as held; finishing it drops
    exactly that run (job id and fence), never a newer run of the same job.
    """

    def __init__(self, identity: Identity) -> None:
        self.identity = identity
        self._lock = threading.Lock()
        self._runs: dict[RunKey, Run] = {}
        # kept with the table (under its lock) so the claim loop and the reporter
        # read them without a scan of hundreds of runs per look
        self._running = 0  # runs whose handler has not returned
        self._unreported = 0  # runs not yet handed to the reporter
        self.freed = threading.Event()  # set whenever a run finishes (a slot is free)

    def _counted(self, run: Run, sign: int) -> None:
        self._running += sign * (not run.ended)
        self._unreported += sign * (not run.reporting)

    def add(self, run: Run) -> None:
        with self._lock:
            replaced = self._runs.get(run.key)
            if replaced is not None:
                self._counted(replaced, -1)
            self._runs[run.key] = run
            self._counted(run, +1)

    def finish(self, run: Run, *, abandoned: str | None = None) -> None:
        """Forget `run` (idempotent) and tell the identity it no longer holds it."""
        self.finish_many((run,), abandoned=abandoned)

    def finish_many(self, runs: Sequence[Run], *, abandoned: str | None = None) -> None:
        """`finish` for each of `runs`, under one take of each lock (a report batch)."""
        if not runs:
            return
        with self._lock:
            table = self._runs
            for run in runs:
                if table.get(run.key) is run:
                    del table[run.key]
                    self._running -= not run.ended
                    self._unreported -= not run.reporting
        self.identity.drop_many([run.key for run in runs], abandoned=abandoned)
        self._free()

    def end(self, run: Run) -> None:
        """`run`'s handler returned (its outcome is queued for the reporter): its slot
        is free for the next claim while the report is written."""
        with self._lock:
            if not run.ended:
                run.ended = True
                if self._runs.get(run.key) is run:
                    self._running -= 1
        self._free()

    def _free(self) -> None:
        # set only when clear: the claim loop clears `freed` before it counts free
        # slots again, so a set already pending covers this change too (and set()
        # takes a lock and notifies, once per job otherwise)
        if not self.freed.is_set():
            self.freed.set()

    def start_reporting(self, run: Run) -> bool:
        """Mark `run` as being reported; False if its result must be discarded."""
        return self.start_reporting_many((run,))[0]

    def start_reporting_many(self, runs: Sequence[Run]) -> list[bool]:
        """`start_reporting` for each of `runs`, under one take of the lock."""
        out: list[bool] = []
        with self._lock:
            table = self._runs
            for run in runs:
                report = not run.lost and run.dropped is None
                if report != run.reporting and table.get(run.key) is run:
                    self._unreported -= 1 if report else -1
                run.reporting = report
                out.append(report)
        return out

    def is_reporting(self, run: Run) -> bool:
        with self._lock:
            return run.reporting

    def lose(self, run: Run) -> bool:
        """Mark `run`'s lease as lost; True the first time only."""
        with self._lock:
            if run.lost:
                return False
            run.lost = True
        return True

    def drop_at_shutdown(self, run: Run, reason: str) -> None:
        with self._lock:
            run.dropped = reason

    def live(self) -> list[Run]:
        """Runs whose handler is still running under a lease we believe we hold."""
        with self._lock:
            return [r for r in self._runs.values() if not r.reporting and not r.lost]

    def unreported(self) -> list[Run]:
        with self._lock:
            return [r for r in self._runs.values() if not r.reporting]

    def all(self) -> list[Run]:
        with self._lock:
            return list(self._runs.values())

    def jobs(self) -> dict[str, Job]:
        with self._lock:
            return {r.job.id: r.job for r in self._runs.values()}

    def count(self) -> int:
        with self._lock:
            return len(self._runs)

    def load(self) -> tuple[int, int]:
        """(runs whose handler has not returned, runs held until their report is written)."""
        with self._lock:
            return self._running, len(self._runs)

    def in_flight(self) -> int:
        """Runs not yet handed to the reporter."""
        with self._lock:
            return self._unreported
