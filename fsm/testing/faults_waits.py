"""The `waits` fault model: callers wait for outcomes while jobs move, time passes and
(PostgreSQL) the store's listener loses its connection.

`Engine.wait` (`fsm.service.waiting`) reads a job until it is final. On a store that
`WatchesJobs` (PostgreSQL: LISTEN/NOTIFY) the store wakes it when the job becomes
final, with a re-read every `WAIT_RECHECK` seconds; on any other store it polls, its
pauses doubling from `WAIT_POLL_FIRST` up to `WAIT_POLL_MAX`. Each example opens a
fresh database, an engine whose handle serves the waits and another, on a handle of
its own (as another process holds one), that moves the jobs. Every wait runs on a
thread of its own, through the production `wait`.

The waits' clock is the model's: `fsm.service.waiting`'s `time` (monotonic, sleep)
and its `threading.Event` are swapped, while the model runs, for a simulated clock
that moves only with the model's steps, so every pause and every timeout is checked
to the instant, and a wait can only leave a pause early because its store woke it
(that wake-up comes on the store's own thread, in real time). Steps, drawn: waits
(timeouts from a sliver to a minute, on a job or on one that does not exist, and
timeouts out of range), jobs made final (succeeded, failed, investigate, cancelled)
or moved without becoming final (leased, running, retry_wait), the clock moving, and,
on a store whose adapter offers it (`jobfsm.wait_faults` entry points), a listener
outage: the listening connection breaks (its socket shut down) and its reconnect is
held while a job becomes final.

Promises, checked after every step once every wait has paused or ended:

- O1 a wait returns only a job in a final state, as stored;
- O2 once a job's final state is committed, every wait on it returns: on a watching
  store within `NOTIFY_BOUND` real seconds while the model's clock stands still (woken
  by the store, not by its re-read), after a listener outage as soon as the listener
  is back; on any other store by its next read, `WAIT_POLL_MAX` later at most;
- O3 a wait that has not ended read its job within the last `WAIT_POLL_MAX` (polled)
  or `WAIT_RECHECK` (watched) seconds of its clock;
- O4 a wait raises `WaitTimeout` at its timeout, not before, and only on a job that
  was not final; no wait outlives its timeout; a wait on a job that does not exist
  raises `JobNotFound`, one with a timeout out of range `BadInput`;
- O5 the store's listener holds exactly one watcher per wait that has not ended.
"""

from __future__ import annotations

import math
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any, ClassVar, Protocol

import attrs
from hypothesis import example, given
from hypothesis import strategies as st

from ..clock import FakeClock
from ..errors import BadInput, JobNotFound, WaitTimeout
from ..inputs import KindPolicy
from ..ports import Store, WatchesJobs
from ..records import Job, Owner
from ..registry import offered
from ..service import waiting
from ..service.engine import Engine
from ..service.waiting import MAX_WAIT, WAIT_POLL_MAX, WAIT_RECHECK
from .faults_machine import suite_policy
from .faults_models import ModelRun

KIND = "waits.job"
#: real seconds a store's wake-up may take to end a wait (the model's clock stands still)
NOTIFY_BOUND = 10.0
#: real seconds every wait gets to pause or end after a step (store calls are real)
SETTLE_BOUND = 30.0
#: real seconds a listener back from an outage may take to reconnect, on top of
#: NOTIFY_BOUND (its backoff between attempts: at most 5 s in the PostgreSQL adapter)
RECONNECT_BOUND = 5.0
#: where the store adapters offer a listener's faults (`WaitFaults`)
WAIT_FAULTS_GROUP = "jobfsm.wait_faults"
OPERATOR = {"actor": "waits-model", "reason": "the waits fault model"}
OWNER = Owner(host="waits-sim", pid=7, incarnation="waits-engine")

#: a sliver of the recheck, exact in binary, so sums of steps land on the bounds exactly
SLIVER = WAIT_RECHECK / 64
TIMEOUTS = (0.0, SLIVER, WAIT_POLL_MAX, WAIT_RECHECK, 2.5, 60.0)
BAD_TIMEOUTS = (-1.0, math.nan, math.inf, MAX_WAIT * 2)
STEPS = (SLIVER, WAIT_POLL_MAX / 2, WAIT_POLL_MAX, WAIT_RECHECK - SLIVER, WAIT_RECHECK, 3.0)
HOW = ("succeed", "fail", "ambiguous", "cancel")


class WaitFaults(Protocol):
    """A store's listener, seen by the model (an adapter's `wait_faults(store)`): its
    watchers, and an outage of its connection."""

    def watchers(self, job_id: str) -> int:
        """How many wake-ups the listener holds for `job_id`."""
        ...

    def outage(self) -> AbstractContextManager[None]:
        """Break the listening connection and hold its reconnect until the block ends;
        entered once the listener has met the break and is reconnecting."""
        ...


def wait_faults(store: object) -> WaitFaults | None:
    """The listener faults an installed adapter offers for `store`, or None."""
    if not isinstance(store, WatchesJobs):
        return None
    made: WaitFaults | None = offered(WAIT_FAULTS_GROUP, store)
    return made


_step = st.one_of(
    st.tuples(st.just("wait"), st.integers(0, 3), st.sampled_from(TIMEOUTS)),
    st.tuples(st.just("wait"), st.integers(0, 3), st.sampled_from(TIMEOUTS)),
    st.tuples(st.just("finish"), st.integers(0, 3), st.sampled_from(HOW)),
    st.tuples(st.just("touch"), st.integers(0, 3)),
    st.tuples(st.just("advance"), st.sampled_from(STEPS)),
    st.tuples(st.just("outage"), st.integers(0, 3)),
    st.tuples(st.just("unknown")),
    st.tuples(st.just("bad"), st.integers(0, 3), st.sampled_from(BAD_TIMEOUTS)),
)
_plan = st.tuples(st.integers(1, 3), st.lists(_step, min_size=3, max_size=16))

Plan = tuple[int, list[tuple[Any, ...]]]

#: explicit examples: each promise's edge, whatever the draws
TWO_WAITS_ONE_LEAVES: Plan = (
    1,
    [
        ("wait", 0, SLIVER),  # O4/O5: it leaves at its timeout, the other stays watched
        ("wait", 0, 60.0),
        ("advance", SLIVER),
        ("finish", 0, "succeed"),  # O2: the one left is still woken
    ],
)
LONG_POLL: Plan = (
    2,
    [
        ("wait", 0, 60.0),
        ("wait", 1, 2.5),
        ("advance", 3.0),  # O3/O4: the pauses stay capped; the short wait times out
        ("touch", 0),
        ("advance", WAIT_RECHECK),
        ("finish", 0, "fail"),  # O2: read again within WAIT_POLL_MAX
        ("advance", WAIT_POLL_MAX),
    ],
)
OUTAGE: Plan = (
    2,
    [
        ("wait", 0, 60.0),
        ("wait", 1, 60.0),
        ("outage", 0),  # O2: made final while the listener is away
        ("finish", 1, "cancel"),
    ],
)
AT_THE_TIMEOUT: Plan = (
    1,
    [
        ("wait", 0, WAIT_RECHECK),
        ("advance", WAIT_RECHECK - SLIVER),
        ("finish", 0, "ambiguous"),  # O2: final just before the timeout: the job, not a timeout
        ("wait", 0, 0.0),  # a job already final: returned at once
        ("unknown",),
        ("bad", 0, math.nan),
    ],
)


class _Sim:
    """The waits' clock: monotonic time that moves only with `advance`; sleeps and
    event waits block until it reaches them (an event also when it is set). It knows
    which wait threads are running, so the model can wait until each paused or ended."""

    def __init__(self) -> None:
        self.now = 1_000.0
        self.cond = threading.Condition()
        self.starting = 0
        self.running: set[int] = set()
        self.paused: dict[int, tuple[float, _SimEvent | None]] = {}
        self.reads: dict[int, float] = {}
        self.gaps: dict[int, float] = {}

    # --- what `fsm.service.waiting` calls ----------------------------------------------

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pause(seconds, None)

    def Event(self) -> _SimEvent:  # stands in for threading.Event
        return _SimEvent(self)

    def pause(self, seconds: float, event: _SimEvent | None) -> bool:
        me = threading.get_ident()
        with self.cond:
            until = self.now + seconds
            while True:
                if event is not None and event.flag:
                    return True
                if self.now >= until:
                    return False
                self.paused[me] = (until, event)
                self.running.discard(me)
                self.cond.notify_all()
                while me in self.paused:  # `advance` or `set` ends the pause
                    self.cond.wait()

    # --- the model's side ----------------------------------------------------------------

    def advance(self, seconds: float) -> None:
        """Move the clock `seconds` on, in the order of the pauses it ends: each pause
        that ends on the way ends at its own instant, and its wait reads and pauses
        again (or ends) before the clock moves on."""
        target = self.now + seconds
        while True:
            with self.cond:
                due = [until for until, _ in self.paused.values() if until <= target]
                self.now = min(due) if due else target
                for ident, (until, _) in list(self.paused.items()):
                    if until <= self.now:
                        self._wake(ident)
                self.cond.notify_all()
            self.settle()
            if not due:
                return

    def jump(self, seconds: float) -> None:
        """Move the clock `seconds` on at once, ending every pause it passes (the
        model's clean-up: whatever state a failure left, each wait ends)."""
        with self.cond:
            self.now += seconds
            for ident, (until, _) in list(self.paused.items()):
                if until <= self.now:
                    self._wake(ident)
            self.cond.notify_all()

    def _wake(self, ident: int) -> None:
        del self.paused[ident]
        self.running.add(ident)

    def read(self) -> None:
        """A wait read its job: note the time, and the longest gap between its reads."""
        me = threading.get_ident()
        with self.cond:
            last = self.reads.get(me)
            if last is not None:
                self.gaps[me] = max(self.gaps.get(me, 0.0), self.now - last)
            self.reads[me] = self.now

    def begin(self) -> None:
        """A wait thread starts (its reads counted afresh: thread ids are reused)."""
        me = threading.get_ident()
        with self.cond:
            self.reads.pop(me, None)
            self.gaps.pop(me, None)
            self.running.add(me)
            self.starting -= 1

    def settle(self, bound: float = SETTLE_BOUND) -> None:
        """Return once every wait thread has paused or ended (O0 past `bound` seconds)."""
        with self.cond:
            if not self.cond.wait_for(lambda: not self.running and not self.starting, bound):
                raise AssertionError(
                    f"O0 {len(self.running) + self.starting} wait(s) neither paused nor "
                    f"ended within {bound:g}s"
                )


class _SimEvent:
    def __init__(self, sim: _Sim) -> None:
        self.sim = sim
        self.flag = False

    def set(self) -> None:
        sim = self.sim
        with sim.cond:
            self.flag = True
            for ident, (_, event) in list(sim.paused.items()):
                if event is self:
                    sim._wake(ident)
            sim.cond.notify_all()

    def clear(self) -> None:
        with self.sim.cond:
            self.flag = False

    def is_set(self) -> bool:
        return self.flag

    def wait(self, timeout: float | None = None) -> bool:
        return self.sim.pause(math.inf if timeout is None else timeout, self)


@contextmanager
def _waiting_on(sim: _Sim) -> Iterator[None]:
    """Run `fsm.service.waiting` on `sim` (its `time` and `threading`), then restore."""
    real = (vars(waiting)["time"], vars(waiting)["threading"])
    setattr(waiting, "time", sim)  # noqa: B010 (module attributes, for mypy)
    setattr(waiting, "threading", sim)  # noqa: B010
    try:
        yield
    finally:
        setattr(waiting, "time", real[0])  # noqa: B010
        setattr(waiting, "threading", real[1])  # noqa: B010


class _Reads:
    """The waits' store handle: each read of a job is noted on the model's clock (O3)."""

    def __init__(self, store: Store, sim: _Sim) -> None:
        self._store = store
        self._sim = sim

    def get(self, job_id: str) -> Job | None:
        job = self._store.get(job_id)
        self._sim.read()
        return job

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@attrs.define
class _Wait:
    job_id: str
    timeout: float
    started: float
    ident: int = 0
    ended: float | None = None
    outcome: Job | BaseException | None = None

    @property
    def deadline(self) -> float:
        return self.started + self.timeout


class WaitsModel:
    name: ClassVar[str] = "waits"
    about: ClassVar[str] = "callers wait for outcomes while jobs move and listeners break"
    examples: ClassVar[dict[str, int]] = {"quick": 6, "default": 30, "thorough": 300}

    def run(self, ctx: ModelRun) -> None:
        sim = _Sim()

        @ctx.settings(self.examples[ctx.size])
        @given(plan=_plan)
        @example(plan=TWO_WAITS_ONE_LEAVES)
        @example(plan=LONG_POLL)
        @example(plan=OUTAGE)
        @example(plan=AT_THE_TIMEOUT)
        def one(plan: Plan) -> None:
            with ctx.database() as opener:
                _Example(ctx, opener, sim, plan).run()

        with _waiting_on(sim):
            one()


def run_example(ctx: ModelRun, plan: Plan) -> None:
    """One example on `ctx`'s database and a clock of its own (the model's tests)."""
    sim = _Sim()
    with _waiting_on(sim), ctx.database() as opener:
        _Example(ctx, opener, sim, plan).run()


class _Example:
    def __init__(self, ctx: ModelRun, opener: Callable[[], Store], sim: _Sim, plan: Plan) -> None:
        self.ctx = ctx
        self.sim = sim
        n_jobs, self.steps = plan
        queue = f"waits-{uuid.uuid4().hex[:10]}"
        kinds = {KIND: KindPolicy(queue=queue, max_attempts=100)}
        self.clock = FakeClock()
        served = opener()
        self.faults = wait_faults(served)  # before the first watch: it sees every connect
        self.waiter = Engine(
            _Reads(served, sim), clock=self.clock, policy=suite_policy(), kinds=kinds
        )
        self.mover = Engine(opener(), clock=self.clock, policy=suite_policy(), kinds=kinds)
        self.watched = isinstance(served, WatchesJobs)
        self.queue = queue
        self.n_jobs = n_jobs
        self.jobs: list[str] = []
        self.final_at: dict[str, float] = {}  # job -> the model's time its final state committed
        self.waits: list[_Wait] = []
        self.threads: list[threading.Thread] = []

    def run(self) -> None:
        stats = self.ctx.stats
        self.jobs = [
            j.id for j in self.mover.submit_many([(KIND, {"i": i}, {}) for i in range(self.n_jobs)])
        ]
        try:
            for step in self.steps:
                self._step(step)
                self._check()
                stats.steps += 1
            for job_id in self.jobs:  # every wait ends: its job final, the clock past it
                if job_id not in self.final_at:
                    self._finish(job_id, "succeed")
            self.sim.advance(max(WAIT_RECHECK, WAIT_POLL_MAX))
            self.sim.settle()
            self._check()
            live = [w for w in self.waits if w.ended is None]
            if live:
                raise AssertionError(
                    f"O2 {len(live)} wait(s) on final jobs had not returned at the end "
                    f"(first on job {live[0].job_id})"
                )
        finally:
            self._end_threads()
        for job_id in self.jobs:
            self.ctx.coverage.trail(self.mover.history(job_id))
        stats.examples += 1

    def _end_threads(self) -> None:
        """Make every wait end (final jobs, the clock far ahead), then join them."""
        for job_id in self.jobs:
            if job_id not in self.final_at:
                # a job a failure left mid-way: the clock ends its waits
                with suppress(Exception):
                    self.mover.cancel(job_id, **OPERATOR)
        self.sim.jump(3_600.0)
        for thread in self.threads:
            thread.join(NOTIFY_BOUND)

    # --- steps ---------------------------------------------------------------------------

    def _step(self, step: tuple[Any, ...]) -> None:
        faults = self.ctx.stats.faults
        what = step[0]
        if what == "wait":
            self._wait(self.jobs[step[1] % len(self.jobs)], step[2])
        elif what == "finish":
            job_id = self.jobs[step[1] % len(self.jobs)]
            if job_id not in self.final_at:
                self._finish(job_id, step[2])
                faults[f"waits: a waited job ends ({step[2]})"] += 1
        elif what == "touch":
            job_id = self.jobs[step[1] % len(self.jobs)]
            if job_id not in self.final_at:
                self._touch(job_id)
                faults["waits: a waited job moves, not to a final state"] += 1
        elif what == "advance":
            self.sim.advance(step[1])
            faults["waits: the clock moves"] += 1
        elif what == "outage":
            self._outage(self.jobs[step[1] % len(self.jobs)])
        elif what == "unknown":
            self._unknown()
        else:
            self._bad(self.jobs[step[1] % len(self.jobs)], step[2])

    def _wait(self, job_id: str, timeout: float) -> None:
        sim = self.sim
        w = _Wait(job_id, timeout, sim.now)
        self.waits.append(w)

        def run() -> None:
            w.ident = threading.get_ident()
            sim.begin()
            try:
                w.outcome = self.waiter.wait(job_id, timeout=timeout)
            except BaseException as err:  # judged by the model's checks
                w.outcome = err
            finally:
                with sim.cond:
                    w.ended = sim.now
                    sim.running.discard(w.ident)
                    sim.cond.notify_all()

        with sim.cond:
            sim.starting += 1
        thread = threading.Thread(target=run, name="waits-model-wait", daemon=True)
        self.threads.append(thread)
        thread.start()
        sim.settle()
        self.ctx.stats.faults["waits: a wait starts"] += 1

    def _to_running(self, job_id: str) -> Job:
        """The job leased and started (from queued or retry_wait)."""
        job = self.mover.get(job_id)
        if job.state == "retry_wait":
            self.clock.advance(max(0.0, job.run_after - self.clock.now()))
        if job.state in ("queued", "retry_wait"):
            got = self.mover.claim(OWNER, [self.queue], limit=1, ids=[job_id])
            if [j.id for j in got] != [job_id]:
                raise AssertionError(f"O0 the model could not lease job {job_id} ({job.state})")
            job = got[0]
        if job.state == "leased":
            job = self.mover.start(job_id, job.fence)
        return job

    def _finish(self, job_id: str, how: str) -> None:
        if how == "cancel":
            job = self.mover.cancel(job_id, **OPERATOR)
            if job.state == "cancelling":
                job = self.mover.cancelled_ack(job_id, job.fence)
        else:
            job = self._to_running(job_id)
            if how == "succeed":
                job = self.mover.succeed(job_id, job.fence, {"ok": True})
            elif how == "fail":
                job = self.mover.fail(job_id, job.fence, "the waits model fails it", permanent=True)
            else:
                job = self.mover.ambiguous(job_id, job.fence, "the waits model cannot tell")
        if job.state not in self.waiter.final_states:
            raise AssertionError(f"O0 the model's {how} left job {job_id} {job.state}")
        self.final_at[job_id] = self.sim.now
        self._returned(job_id, NOTIFY_BOUND)

    def _touch(self, job_id: str) -> None:
        job = self.mover.get(job_id)
        if job.state == "queued":
            self.mover.claim(OWNER, [self.queue], limit=1, ids=[job_id])
        elif job.state == "retry_wait":
            self._to_running(job_id)
        elif job.state == "leased":
            self.mover.start(job_id, job.fence)
        elif job.state == "running":
            self.mover.fail(job_id, job.fence, "the waits model retries it", delay=1.0)
        self.sim.settle()

    def _returned(self, job_id: str, bound: float) -> None:
        """O2: every wait on `job_id` returns (the model's clock standing still on a
        watching store; on any other store after WAIT_POLL_MAX of it)."""
        sim = self.sim
        if not self.watched:
            sim.settle()
            return  # read by the next poll: O2/O3 are checked after the clock moves

        def done() -> bool:
            return all(w.ended is not None for w in self.waits if w.job_id == job_id)

        with sim.cond:
            if not sim.cond.wait_for(done, bound):
                left = sum(1 for w in self.waits if w.job_id == job_id and w.ended is None)
                raise AssertionError(
                    f"O2 job {job_id} is final, yet {left} wait(s) on it had not returned "
                    f"{bound:g}s later while the waits' clock stood still: the store's "
                    "wake-up did not reach them"
                )
        sim.settle()
        self.ctx.stats.checks["O2 every wait on a job made final returned, woken by the store"] += 1

    def _outage(self, job_id: str) -> None:
        if self.faults is None or job_id in self.final_at:
            return
        with self.faults.outage():
            self.sim.settle()  # the waits woken by the break have read and paused again
            job = self._to_running(job_id)
            job = self.mover.succeed(job_id, job.fence, {"ok": "while the listener was away"})
            self.final_at[job_id] = self.sim.now
            self.ctx.stats.faults["waits: a job ends while the listener is away"] += 1
        self._returned(job_id, NOTIFY_BOUND + RECONNECT_BOUND)

    def _unknown(self) -> None:
        missing = f"waits-missing-{uuid.uuid4().hex[:8]}"
        try:
            self.waiter.wait(missing, timeout=60.0)
        except JobNotFound:
            self.ctx.stats.checks["O4 a wait on a job that does not exist: JobNotFound"] += 1
        else:
            raise AssertionError(f"O4 a wait on job {missing}, which does not exist, returned")
        self._watchers(missing, 0)

    def _bad(self, job_id: str, timeout: float) -> None:
        try:
            self.waiter.wait(job_id, timeout=timeout)
        except BadInput:
            self.ctx.stats.checks["O4 a timeout out of range: BadInput"] += 1
        else:
            raise AssertionError(f"O4 a wait with timeout {timeout!r} was taken")

    # --- checks --------------------------------------------------------------------------

    def _check(self) -> None:
        sim = self.sim
        checks = self.ctx.stats.checks
        poll = WAIT_RECHECK if self.watched else WAIT_POLL_MAX
        for w in self.waits:
            final_at = self.final_at.get(w.job_id)
            if w.ended is None:
                if sim.now >= w.deadline:
                    raise AssertionError(
                        f"O4 a wait on job {w.job_id} with timeout {w.timeout:g}s had not "
                        f"ended {sim.now - w.started:g}s after it started"
                    )
                last = sim.reads.get(w.ident, w.started)
                gap = max(sim.gaps.get(w.ident, 0.0), sim.now - last)
                if gap > poll:
                    raise AssertionError(
                        f"O3 a wait on job {w.job_id} went {gap:g}s without reading it "
                        f"(at most {poll:g}s between reads)"
                    )
                if (
                    final_at is not None
                    and sim.now - final_at >= WAIT_POLL_MAX
                    and not self.watched
                ):
                    raise AssertionError(
                        f"O2 job {w.job_id} has been final for {sim.now - final_at:g}s of the "
                        f"waits' clock, yet a wait on it had not returned (it polls every "
                        f"{WAIT_POLL_MAX:g}s at most)"
                    )
                continue
            if isinstance(w.outcome, Job):
                self._answer(w, w.outcome)
                if not self.watched:
                    checks["O2 every wait on a job made final returned by its next read"] += 1
            elif isinstance(w.outcome, WaitTimeout):
                if w.ended < w.deadline:
                    raise AssertionError(
                        f"O4 a wait on job {w.job_id} timed out {w.ended - w.started:g}s "
                        f"after it started, before its timeout of {w.timeout:g}s"
                    )
                if final_at is not None and final_at < w.ended:
                    raise AssertionError(
                        f"O4 a wait on job {w.job_id} timed out at {w.ended - w.started:g}s, "
                        f"though the job had been final since {final_at - w.started:g}s"
                    )
                checks["O4 a wait times out at its timeout, on a job not final"] += 1
            else:
                raise AssertionError(
                    f"O4 a wait on job {w.job_id} raised {type(w.outcome).__name__}: {w.outcome}"
                )
        for job_id in self.jobs:
            self._watchers(
                job_id, sum(1 for w in self.waits if w.job_id == job_id and w.ended is None)
            )
        checks["O3 every wait that has not ended read its job within its pause"] += 1

    def _answer(self, w: _Wait, job: Job) -> None:
        checks = self.ctx.stats.checks
        if job.state not in self.waiter.final_states or w.job_id not in self.final_at:
            raise AssertionError(f"O1 a wait on job {w.job_id} returned it {job.state}")
        stored = self.mover.get(w.job_id)
        if job != stored:
            raise AssertionError(
                f"O1 a wait on job {w.job_id} returned it as {job.state} version "
                f"{job.version}; stored: {stored.state} version {stored.version}"
            )
        checks["O1 a wait returns its job final, as stored"] += 1

    def _watchers(self, job_id: str, live: int) -> None:
        if self.faults is None:
            return
        held = self.faults.watchers(job_id)
        if held != live:
            raise AssertionError(
                f"O5 the store's listener holds {held} wake-up(s) for job {job_id}, "
                f"with {live} wait(s) on it not ended"
            )
        self.ctx.stats.checks["O5 one watcher per wait not ended"] += 1
