"""Reconcile before investigate: ask the outside system what a lost run did.

A kind may declare a reconciler with its handler
(`@handlers.handler(kind, reconcile=fn, reconcile_timeout=10, final_check=False)`).
When the rescuer (`fsm.service.maintenance.rescue`) finds a lost run of that kind whose outside
call may have begun (the kind is not retry-safe and the attempt has marks, or does
not declare its marks), the `expire` transition claims the reconcile: the job moves
to `reconciling` with a new fence and the sweeping process as its owner, in one
compare-and-set, so two sweepers never both call the reconciler for one job. The
winner (`fsm.service.maintenance.lost_runs`) then calls `fn(LostRun)` and records its
answer as the fenced `reconcile` event:

- `done(result)`: the run finished outside; the job succeeds with `result`;
- `not_started()`: the outside call never happened; the job runs again;
- `still_running(until=t)`: ask again at `t` (at most an hour away); each such
  answer spends one recovery of the budget, and over it the job is investigated;
- `unknown(why)`: an operator decides (investigate).

A reconciler that raises, runs past its timeout or returns anything but an `Answer`
is recorded as `unknown` with the failure (code `reconciler_failed`). A sweeper that
dies between the claim and the answer leaves a claim whose lease lapses: the next
sweep moves the job to investigate (`reconciler_lost`), never asks twice at once.

A sweep that does not have the kind's reconciler leaves such a lost run alone for
`fsm.service.maintenance.rescue.RECONCILE_DEFER` seconds past its lease (the record's
`reconciler` flag, set at start, says the kind has one), time for a worker that has it
to ask.

A worker asks in the background (`Asker`: at most RECONCILES_PER_SWEEP calls in
flight), so its sweeps never wait on a reconciler; `sweep()` without an asker (the
CLI, tests, the fault suite) waits for each answer.

Bounds: at most RECONCILES_PER_SWEEP reconciler calls per sweep (the other lost runs
of reconciled kinds wait for the next sweep, still lost); each call at most its
timeout; at most MAX_HUNG reconciler threads left running past their timeout in a
process (then no new reconcile is claimed until they end).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import threading
from collections.abc import Callable
from typing import Any

import attrs

from ..lifecycle.outside import ANSWERS
from ..records import Job
from ..text import clean_text
from .kernel import Kernel

log = logging.getLogger(__name__)

#: most reconciler calls one recovery sweep makes
RECONCILES_PER_SWEEP = 4
#: a reconciler's default timeout (seconds)
DEFAULT_RECONCILE_TIMEOUT = 10.0
#: seconds a reconcile claim outlives its reconciler's timeout before it counts as lost
CLAIM_MARGIN = 5.0
#: most reconciler threads of one process left running past their timeout
MAX_HUNG = 4

_hung_lock = threading.Lock()
_hung = 0


@attrs.frozen
class Answer:
    """What a reconciler says a lost run did (build one with the functions below)."""

    answer: str
    result: Any = None
    until: float | None = None
    why: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.answer not in ANSWERS:
            raise ValueError(f"a reconcile answer is one of {ANSWERS}, got {self.answer!r}")


def done(result: Any = None) -> Answer:
    """The lost run finished outside; `result` (JSON) becomes the job's result."""
    return Answer("done", result=result)


def not_started() -> Answer:
    """The lost run's outside call never happened: safe to run again."""
    return Answer("not_started")


def still_running(until: float) -> Answer:
    """The outside call is still in progress: check again at `until` (epoch seconds)."""
    return Answer("still_running", until=until)


def unknown(why: str = "the outside system cannot tell") -> Answer:
    """Nobody can tell: an operator decides."""
    return Answer("unknown", why=why)


@attrs.frozen
class Mark:
    """One mark of the lost attempt, as its audit entry recorded it."""

    label: str
    external_id: str | None
    at: float
    #: the attempt's fence when it marked (what its fenced outside writes carried)
    fence: int


@attrs.frozen
class LostRun:
    """What a reconciler is given: the job, the lost attempt's number and its marks."""

    job: Job
    attempt: int
    marks: tuple[Mark, ...]


Reconcile = Callable[[LostRun], Any]


@attrs.frozen
class Reconciler:
    """A kind's reconciler: `fn` (sync or async), its timeout, and whether a run over its
    recovery budget gets one final check before investigate."""

    fn: Reconcile = attrs.field(repr=False)
    timeout: float = DEFAULT_RECONCILE_TIMEOUT
    final_check: bool = False

    def __attrs_post_init__(self) -> None:
        if not callable(self.fn):
            raise TypeError(f"reconcile must be callable, got {self.fn!r}")
        if not (isinstance(self.timeout, int | float) and 0 < self.timeout <= 3600):
            raise ValueError(f"reconcile_timeout must be in (0, 3600] seconds: {self.timeout!r}")


def lost_run(kernel: Kernel, job: Job) -> LostRun:
    """The job, its last attempt and that attempt's marks, from its audit trail."""
    marks = tuple(
        Mark(str(e.data.get("label")), e.data.get("external_id"), e.at, e.fence)
        for e in kernel.store.history(job.id)
        if e.event == "mark" and e.outcome == "applied" and e.attempt == job.attempt
    )
    return LostRun(job=job, attempt=job.attempt, marks=marks)


def _call(fn: Reconcile, run: LostRun) -> Any:
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - a callable object's method
    ):
        return asyncio.run(fn(run))
    return fn(run)


def ask(reconciler: Reconciler, run: LostRun) -> tuple[Answer, str | None]:
    """Call the reconciler in a thread of its own, bounded by its timeout.

    Returns the answer and, when it failed (raised, hung, returned nonsense), the
    failure text with an `unknown` answer. Never raises.
    """
    global _hung
    box: dict[str, Any] = {}

    def target() -> None:
        global _hung
        try:
            box["value"] = _call(reconciler.fn, run)
        except BaseException as err:  # a reconciler's failure is an answer: unknown
            box["error"] = err
        finally:
            with _hung_lock:
                if box.get("hung"):
                    _hung -= 1

    thread = threading.Thread(target=target, name=f"jobfsm-reconcile-{run.job.id}", daemon=True)
    thread.start()
    thread.join(reconciler.timeout)
    with _hung_lock:
        if thread.is_alive():
            box["hung"] = True
            _hung += 1
            return unknown(), f"hung past its {reconciler.timeout:g}s timeout"
    if "error" in box:
        err = box["error"]
        return unknown(), clean_text(f"raised {type(err).__name__}: {err}")[:500]
    value = box.get("value")
    if not isinstance(value, Answer):
        return unknown(), f"returned {type(value).__name__}, not a reconcile answer"
    if value.answer == "still_running" and (
        isinstance(value.until, bool)
        or not isinstance(value.until, int | float)
        or not math.isfinite(value.until)
    ):
        return unknown(), f"still_running with no finite time (until={value.until!r})"
    return value, None


def hung() -> int:
    """Reconciler threads of this process still running past their timeout."""
    with _hung_lock:
        return _hung


class Asker:
    """Runs reconciler calls on threads of their own, at most `limit` at once.

    A worker's sweep claims a lost run and moves on: its start-up, its other
    recoveries and its deadlines never wait on a reconciler. A call still running
    when the worker exits leaves its claim to lapse (`reconciler_lost`).
    """

    def __init__(self, limit: int = RECONCILES_PER_SWEEP) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._busy = 0
        self._idle = threading.Condition(self._lock)

    def free(self) -> int:
        with self._lock:
            return self.limit - self._busy

    def start(self, name: str, call: Callable[[], object]) -> None:
        with self._lock:
            self._busy += 1

        def run() -> None:
            try:
                call()
            except Exception:  # recorded as lost by the next sweep
                log.exception("reconcile %s failed", name)
            finally:
                with self._lock:
                    self._busy -= 1
                    self._idle.notify_all()

        threading.Thread(target=run, name=f"jobfsm-ask-{name}", daemon=True).start()

    def wait_idle(self, timeout: float) -> bool:
        """Wait (at most `timeout` s) until no call is in flight; False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._busy == 0, timeout)
