"""The asyncio executor: `async def` handlers on one event loop, sync handlers on threads.

One event loop runs on its own thread ("jobfsm-loop") for the whole worker
process; each attempt of an `async def` handler is a task on it, so one worker
runs hundreds of I/O-bound attempts at once. The worker's concurrency is the one
bound on everything in flight, async tasks and sync threads together. A sync
handler in the same registry runs on a `ThreadExecutor` made on first use.

How an async attempt is stopped:

- a cancel request, a timeout, a lost lease or a shutdown cancels its task:
  `asyncio.CancelledError` is raised at the handler's next `await` (it may clean
  up in `except`/`finally`); `ctx.cancelled` is set too, and
  `ctx.check_cancelled()` raises as it does in a thread;
- a task that does not end within `stop_grace` of its timeout, or when a hard
  stop is asked, is *abandoned*, as a thread is: the worker leaves the job to
  recovery and drops the task's late result.

Heartbeats run on the worker's own thread, never on this loop. A handler that
blocks the loop (a sync call without `await`) stalls every task on it, but the
leases are still renewed: nothing is lost silently. The watchdog thread logs a
warning naming the stalled jobs once the loop is late by `block_warning`
seconds, and still enforces timeouts from outside the loop: an attempt blocked
past its timeout and the grace is abandoned and its job left to recovery.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from typing import Any

from fsm.ports import Attempt, ExecutorFull, Outcome

from .executors import DEFAULT_STOP_GRACE, TICK, ThreadExecutor
from .in_flight import Done, Generations, InFlight, Slots, settle

log = logging.getLogger(__name__)

#: seconds the loop may be late before the watchdog warns that a handler blocks it
DEFAULT_BLOCK_WARNING = 1.0
#: how often the loop proves it is turning
BEAT = 0.1
#: at shutdown, how long cancelled tasks get to unwind before the loop closes
CLOSE_WAIT = 1.0


class _Task(InFlight):
    __slots__ = ("task",)

    def __init__(self, attempt: Attempt, done: Done) -> None:
        super().__init__(attempt, done)
        self.task: asyncio.Task[Outcome] | None = None


class AsyncioExecutor(Generations):
    """Runs `async def` attempts as tasks on one loop; others on threads; one bound."""

    def __init__(
        self,
        slots: int | None = None,
        *,
        stop_grace: float = DEFAULT_STOP_GRACE,
        block_warning: float = DEFAULT_BLOCK_WARNING,
    ) -> None:
        self._lock = threading.Lock()
        self._slots_n = slots or 1
        self._gen = Slots(0)
        self.stop_grace = stop_grace
        self.block_warning = block_warning
        self._abandoned_alive = 0
        self._threads: ThreadExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._watchdog: threading.Thread | None = None
        self._closed = threading.Event()
        self._beat = time.monotonic()
        self._blocked_since: float | None = None

    # --- lifecycle ---------------------------------------------------------------

    def start(self, slots: int) -> None:
        self._slots_n = slots
        if self._loop is None:
            loop = asyncio.new_event_loop()
            ready = threading.Event()
            self._loop = loop
            self._loop_thread = threading.Thread(
                target=self._serve, args=(loop, ready), name="jobfsm-loop", daemon=True
            )
            self._loop_thread.start()
            ready.wait(5.0)
            self._watchdog = threading.Thread(
                target=self._watch, name="jobfsm-loop-watchdog", daemon=True
            )
            self._watchdog.start()

    def _serve(self, loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)

        def beat() -> None:
            self._beat = time.monotonic()
            if not self._closed.is_set():
                loop.call_later(BEAT, beat)

        loop.call_soon(beat)
        loop.call_soon(ready.set)
        try:
            loop.run_forever()
        finally:
            with contextlib.suppress(Exception):
                tasks = asyncio.all_tasks(loop)
                for task in tasks:
                    task.cancel()
                if tasks:  # let them unwind (their `finally` blocks), bounded
                    loop.run_until_complete(asyncio.wait(tasks, timeout=CLOSE_WAIT))
            loop.close()

    @property
    def generation(self) -> int:
        return self._gen.number

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The worker's event loop (for tests and for handlers that need it)."""
        return self._loop

    def _busy_threads(self) -> int:
        threads = self._threads
        return 0 if threads is None else self._slots_n - threads.free

    @property
    def free(self) -> int:
        """Free slots: one bound for tasks and threads; stubborn abandoned tasks eat into it."""
        with self._lock:
            excess = max(0, self._abandoned_alive - self._slots_n)
            used = len(self._gen.records) + excess
        return max(0, self._slots_n - used - self._busy_threads())

    # --- attempts ----------------------------------------------------------------

    def submit(self, attempt: Attempt, done: Done) -> None:
        if self.free <= 0:
            raise ExecutorFull(f"no free slot for job {attempt.job.id}")
        if attempt.arun is None:
            if self._threads is None:
                self._threads = ThreadExecutor(stop_grace=self.stop_grace)
                self._threads.start(self._slots_n)
            self._threads.submit(attempt, done)
            return
        loop = self._loop
        if loop is None or self._closed.is_set():
            raise ExecutorFull(f"the event loop is not running; job {attempt.job.id} not taken")
        record = _Task(attempt, done)
        with self._lock:
            gen = self._gen
            token = gen.add(record)
        loop.call_soon_threadsafe(self._begin, loop, gen, token, record)

    def _begin(
        self, loop: asyncio.AbstractEventLoop, gen: Slots, token: int, record: _Task
    ) -> None:
        arun = record.attempt.arun
        assert arun is not None
        task: asyncio.Task[Outcome] = loop.create_task(
            _outcome_of(arun), name=f"jobfsm-job-{record.attempt.job.id}"
        )
        record.task = task
        if record.attempt.cancelled.is_set():
            task.cancel()  # cancelled or timed out before it began
        task.add_done_callback(lambda t: self._ended(gen, token, record, t))

    def _ended(self, gen: Slots, token: int, record: _Task, task: asyncio.Task[Outcome]) -> None:
        if task.cancelled():  # cancelled before its first step
            outcome = Outcome(status="cancelled", error="handler task cancelled before it began")
        else:
            outcome = task.result()
        self._deliver(gen, token, record, outcome, stopped="task cancelled")

    def _cancel_task(self, record: _Task) -> None:
        """Cancel the attempt's task from any thread (it is made on the loop, in order)."""
        record.attempt.cancelled.set()
        loop = self._loop
        if loop is None or loop.is_closed():
            return

        def cancel() -> None:
            if record.task is not None:
                record.task.cancel()

        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(cancel)

    def cancel(
        self,
        job_id: str,
        *,
        fence: int | None = None,
        hard: bool = False,
        reason: str = "cancelled",
    ) -> None:
        with self._lock:
            token = self._gen.find(job_id, fence)
            record = None if token is None else self._gen.records.get(token)
        if record is None or token is None:
            if self._threads is not None:
                self._threads.cancel(job_id, fence=fence, hard=hard, reason=reason)
            return
        assert isinstance(record, _Task)
        self._cancel_task(record)
        if hard:
            self._abandon(self._gen, token, f"{reason}; its task was cancelled")

    def _abandon(self, gen: Slots, token: int, why: str) -> None:
        with self._lock:
            record = gen.pop(token) if gen is self._gen else None
            if record is None:
                return
            record.abandoned = True
            self._abandoned_alive += 1
        log.warning("job %s: async attempt abandoned: %s", record.attempt.job.id, why)
        settle(record, Outcome(status="abandoned", error=why))

    # --- the watchdog: timeouts and a blocked loop, seen from outside the loop ---------

    def _watch(self) -> None:
        while not self._closed.wait(TICK):
            now = time.monotonic()
            with self._lock:
                gen = self._gen
                items = list(gen.records.items())
            self._check_loop(now, items)
            for token, record in items:
                assert isinstance(record, _Task)
                if record.stop_by is None and now >= record.deadline:
                    record.timed_out = True
                    record.stop_by = now + self.stop_grace
                    self._cancel_task(record)
                elif record.stop_by is not None and now >= record.stop_by:
                    self._abandon(
                        gen,
                        token,
                        f"timed out after {record.attempt.timeout}s and did not stop "
                        f"within {self.stop_grace}s",
                    )

    def _check_loop(self, now: float, items: list[tuple[int, Any]]) -> None:
        late = now - self._beat
        if late < self.block_warning:
            if self._blocked_since is not None:
                log.warning("event loop turning again after %.1fs", now - self._blocked_since)
                self._blocked_since = None
            return
        if self._blocked_since is None:
            self._blocked_since = self._beat
            jobs = ", ".join(r.attempt.job.id for _, r in items[:10]) or "none"
            log.warning(
                "event loop blocked for %.1fs: a handler runs blocking code without await; "
                "%d async attempts stalled (jobs %s); their leases are still renewed",
                late,
                len(items),
                jobs,
            )

    # --- restart and shutdown ------------------------------------------------------

    def restart(self, reason: str) -> None:
        """New generation; tasks in flight are cancelled and abandoned (late results dropped)."""
        with self._lock:
            old = self._gen
            self._gen = Slots(old.number + 1)
            records = list(old.records.values())
            old.records.clear()
            old.by_run.clear()
            for record in records:
                record.abandoned = True
                self._abandoned_alive += 1
        for record in records:
            assert isinstance(record, _Task)
            self._cancel_task(record)
            settle(record, Outcome(status="abandoned", error=f"executor restarted: {reason}"))
        if self._threads is not None:
            self._threads.restart(reason)

    def shutdown(self, wait: float) -> None:
        """Stop the loop (tasks still running are cancelled) and the threads."""
        self._closed.set()
        loop, thread = self._loop, self._loop_thread
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(timeout=wait)
        if self._threads is not None:
            self._threads.shutdown(wait)


async def _outcome_of(arun: Any) -> Outcome:
    """Await the attempt; it classifies its own end, so this only catches what escaped."""
    try:
        outcome: Outcome = await arun()
    except asyncio.CancelledError:
        return Outcome(status="cancelled", error="handler task cancelled")
    except Exception as err:  # run_attempt_async catches Exception; this is a bug's net
        return Outcome(status="failed", error=f"{type(err).__name__}: {err}")
    return outcome
