"""The `pauses` fault model: queues paused and resumed while engines claim from them.

An operator pauses a queue (`Engine.pause`, `jobfsm pause`) to stop every worker of
the store from leasing its jobs; each engine leaves paused queues out of its claims,
re-reading the pauses at most every `PAUSE_SEEN_WITHIN` seconds
(`fsm.service.pausing`, docs/operations.md "Pausing a queue"). Each example opens a
fresh database, two or three engines on their own store handles (as worker processes
hold them; a worker may join later, on a fresh handle), jobs in two queues of the
example's own, and runs a drawn sequence of: claims by any engine (of one queue or
both, up to a limit, or by ids as a wake-up names them, paused queues' jobs
included), pauses and resumes by any engine, more submits, the clock moving
(1/64 s to 1.5 s, just under the bound and exactly it), and a claim whose read of the pauses is
held while its own engine pauses or resumes the queue from another thread (an
operator's call through an engine a worker shares), after which that engine claims
again.

The cache's time is `time.monotonic` in `fsm.service.pausing`; the model runs it on
a fake monotonic clock that moves only with the model's steps (the module's `time`
is swapped for the model's while it runs), so the bound is checked to the
instant. Promises, with the truth read from the model's own record of who changed
which queue when (never from the engine's cache):

- H1 once an engine's pause of a queue returned, no claim of that engine started
  after it leases a job of the queue (until a resume), and once its resume
  returned, its next claim sees the queue claimable: an engine sees its own pause
  or resume at once;
- H2 once a pause committed, no claim of any engine started `PAUSE_SEEN_WITHIN`
  seconds later or more leases a job of the queue (until a resume);
- H3 a claim leases at least min(limit, due jobs of its queues that must be seen as
  not paused): a queue never paused, resumed by the claiming engine, or resumed at
  least `PAUSE_SEEN_WITHIN` seconds before the claim (so a resume makes the queue
  claimable again within the bound), and never a job of another queue;
- H4 a job no claim returned is unchanged: still queued, with no attempt charged,
  its fence and version as submitted (submits are taken while a queue is paused).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

import attrs
from hypothesis import example, given
from hypothesis import strategies as st

from ..clock import FakeClock
from ..inputs import KindPolicy
from ..ports import PausesQueues, Store
from ..records import Job, Owner
from ..service import pausing
from ..service.engine import Engine
from ..service.pausing import PAUSE_SEEN_WITHIN
from .faults_machine import suite_policy
from .faults_models import ModelRun

KIND = "pauses.job"
N_QUEUES = 2
MAX_ENGINES = 4
WAIT = 10.0  # bound on the model's waits for its own helper thread
OPERATOR = {"actor": "pauses-model", "reason": "the pauses fault model"}
#: a sliver of the bound, exact in binary: sums of these steps from the fake start land
#: exactly on the bound (no rounding hides an off-by-a-hair comparison)
SLIVER = PAUSE_SEEN_WITHIN / 64
#: clock steps: a sliver, under the bound, just under it, exactly it, past it
STEPS = (
    SLIVER,
    PAUSE_SEEN_WITHIN / 4,
    PAUSE_SEEN_WITHIN / 2,
    PAUSE_SEEN_WITHIN - SLIVER,
    PAUSE_SEEN_WITHIN,
    1.5 * PAUSE_SEEN_WITHIN,
)

_claim = st.tuples(
    st.just("claim"),
    st.integers(0, MAX_ENGINES - 1),  # engine (modulo those there are)
    st.lists(st.integers(0, N_QUEUES - 1), min_size=1, max_size=N_QUEUES, unique=True),
    st.integers(1, 3),  # limit
    st.booleans(),  # by ids (a wake-up's), paused queues' jobs included
)
_step = st.one_of(
    _claim,
    _claim,
    st.tuples(st.just("pause"), st.integers(0, MAX_ENGINES - 1), st.integers(0, N_QUEUES - 1)),
    st.tuples(st.just("resume"), st.integers(0, MAX_ENGINES - 1), st.integers(0, N_QUEUES - 1)),
    st.tuples(st.just("advance"), st.sampled_from(STEPS)),
    st.tuples(st.just("submit"), st.integers(0, N_QUEUES - 1), st.integers(1, 3)),
    st.tuples(st.just("join")),
    st.tuples(
        st.just("change_during_read"),
        st.integers(0, MAX_ENGINES - 1),
        st.integers(0, N_QUEUES - 1),
        st.sampled_from(("pause", "resume")),
    ),
)
_plan = st.tuples(
    st.integers(2, 3),  # engines at the start
    st.lists(st.integers(1, 3), min_size=N_QUEUES, max_size=N_QUEUES),  # jobs per queue
    st.lists(_step, min_size=4, max_size=24),
)

Plan = tuple[int, list[int], list[tuple[Any, ...]]]

#: explicit examples: each promise's edge, whatever the draws
OWN_PAUSE: Plan = (
    2,
    [3, 2],
    [
        ("claim", 0, [0], 1, False),  # engine 0 reads the pauses: none
        ("pause", 0, 0),
        ("claim", 0, [0], 1, False),  # H1: at the same instant, its own pause is seen
        ("claim", 0, [0, 1], 3, True),  # by ids too
        ("resume", 0, 0),
        ("claim", 0, [0], 1, False),  # H1/H3: its own resume is seen at once
    ],
)
AT_THE_BOUND: Plan = (
    2,
    [3, 2],
    [
        ("claim", 1, [0], 1, False),  # engine 1 reads the pauses: none
        ("pause", 0, 0),
        ("claim", 1, [0], 1, False),  # within the bound: it may still lease
        ("advance", PAUSE_SEEN_WITHIN - SLIVER),
        ("claim", 1, [0, 1], 1, False),  # just under the bound: it may still lease
        ("advance", SLIVER),
        ("claim", 1, [0], 1, False),  # H2: exactly the bound after the pause: none
        ("claim", 1, [0], 2, True),
        ("resume", 0, 0),
        ("claim", 1, [0, 1], 2, False),  # within the bound: it may see either
        ("advance", PAUSE_SEEN_WITHIN),
        ("claim", 1, [0], 2, False),  # H3: a bound after the resume: claimable again
    ],
)
RACED_READ: Plan = (
    3,
    [3, 3],
    [
        ("change_during_read", 0, 0, "pause"),  # H1: a read older than its pause
        ("claim", 0, [0], 2, True),
        ("advance", PAUSE_SEEN_WITHIN),  # its cache is due for a read again
        ("change_during_read", 0, 0, "resume"),  # H1/H3: a read older than its resume
        ("join",),
        ("pause", 2, 1),
        ("claim", 3, [0, 1], 3, False),  # a worker that joins after the pause
        ("advance", PAUSE_SEEN_WITHIN),
        ("claim", 1, [0, 1], 3, True),
    ],
)


class _Monotonic:
    """A monotonic clock that moves only when the model says: `pausing`'s `time`."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now


@contextmanager
def _pausing_time(fake: _Monotonic) -> Iterator[None]:
    """Run `fsm.service.pausing` on `fake` (its module-level `time`), then restore it."""
    real = vars(pausing)["time"]
    setattr(pausing, "time", fake)  # noqa: B010 (a module attribute, for mypy)
    try:
        yield
    finally:
        setattr(pausing, "time", real)  # noqa: B010


class _HeldReads:
    """An engine's store handle whose next read of the pauses can be held: the read
    is made, then waits until released (another thread changes the pauses meanwhile)."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.hold = False
        self.read = threading.Event()
        self.release = threading.Event()

    def paused_queues(self) -> Any:
        assert isinstance(self._store, PausesQueues)
        seen = self._store.paused_queues()
        if self.hold:
            self.hold = False
            self.read.set()
            self.release.wait(WAIT)
        return seen

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@attrs.define
class _Change:
    """The last pause or resume of a queue: when (fake monotonic), which, by whom."""

    at: float
    paused: bool
    engine: int


class PausesModel:
    name: ClassVar[str] = "pauses"
    about: ClassVar[str] = "engines claim while queues are paused and resumed"
    examples: ClassVar[dict[str, int]] = {"quick": 10, "default": 60, "thorough": 600}

    def run(self, ctx: ModelRun) -> None:
        fake = _Monotonic()

        @ctx.settings(self.examples[ctx.size])
        @given(plan=_plan)
        @example(plan=OWN_PAUSE)
        @example(plan=AT_THE_BOUND)
        @example(plan=RACED_READ)
        def one(plan: Plan) -> None:
            with ctx.database() as opener:
                _Example(ctx, opener, fake, plan).run()

        with _pausing_time(fake):
            one()


def run_example(ctx: ModelRun, plan: Plan) -> None:
    """One example of the model on `ctx`'s database and a fake clock of its own (the
    model's tests run its explicit examples one at a time)."""
    fake = _Monotonic()
    with _pausing_time(fake), ctx.database() as opener:
        _Example(ctx, opener, fake, plan).run()


class _Example:
    def __init__(
        self, ctx: ModelRun, opener: Callable[[], Store], fake: _Monotonic, plan: Plan
    ) -> None:
        self.ctx = ctx
        self.opener = opener
        self.fake = fake
        self.n_engines, self.per_queue, self.steps = plan
        tag = uuid.uuid4().hex[:10]
        self.queues = [f"pauses-{tag}-{q}" for q in range(N_QUEUES)]
        self.clock = FakeClock()
        self.kinds = {KIND: KindPolicy(queue=self.queues[0])}
        self.engines: list[Engine] = []
        self.handles: list[_HeldReads] = []
        self.changes: dict[str, _Change] = {}  # per queue, its last pause or resume
        self.submitted: dict[str, Job] = {}  # every job as submitted
        self.claimed: set[str] = set()

    def _join(self) -> None:
        handle = _HeldReads(self.opener())
        self.handles.append(handle)
        self.engines.append(
            Engine(handle, clock=self.clock, policy=suite_policy(), kinds=self.kinds)
        )

    def _owner(self, e: int) -> Owner:
        return Owner(host="pauses-sim", pid=100 + e, incarnation=f"pauses-engine-{e}")

    def _submit(self, q: int, n: int) -> None:
        jobs = self.engines[0].submit_many(
            [(KIND, {"i": len(self.submitted) + i}, {"queue": self.queues[q]}) for i in range(n)]
        )
        for job in jobs:
            self.submitted[job.id] = job

    def run(self) -> None:
        stats = self.ctx.stats
        for _ in range(self.n_engines):
            self._join()
        if not isinstance(self.engines[0].store, PausesQueues):
            self.ctx.notes.append("pauses: the store cannot pause queues; not exercised")
            return
        for q, n in enumerate(self.per_queue):
            self._submit(q, n)
        try:
            for step in self.steps:
                self._step(step)
                stats.steps += 1
            self._unchanged()
        finally:
            for queue in self.queues:  # the pauses table stays small (a shared schema)
                self.engines[0].resume(queue, **OPERATOR)
        stats.examples += 1

    def _step(self, step: tuple[Any, ...]) -> None:
        faults = self.ctx.stats.faults
        what = step[0]
        if what == "claim":
            _, e, qs, limit, by_ids = step
            self._claim(e % len(self.engines), [self.queues[q] for q in qs], limit, by_ids)
        elif what in ("pause", "resume"):
            _, e, q = step
            self._change(e % len(self.engines), self.queues[q], what == "pause")
            faults[f"pauses: a queue {what}d"] += 1
        elif what == "advance":
            self.fake.now += step[1]
            self.clock.advance(step[1])
            faults["pauses: the clock moves"] += 1
        elif what == "submit":
            self._submit(step[1], step[2])
        elif what == "join":
            if len(self.engines) < MAX_ENGINES:
                self._join()
                faults["pauses: a worker joins on a fresh handle"] += 1
        else:
            _, e, q, change = step
            self._change_during_read(e % len(self.engines), self.queues[q], change == "pause")

    def _change(self, e: int, queue: str, paused: bool) -> None:
        engine = self.engines[e]
        if paused:
            engine.pause(queue, **OPERATOR)
        else:
            engine.resume(queue, **OPERATOR)
        self.changes[queue] = _Change(self.fake.now, paused, e)

    def _change_during_read(self, e: int, queue: str, paused: bool) -> None:
        """Engine `e` claims `queue` from a thread whose read of the pauses is held;
        meanwhile the same engine pauses (or resumes) the queue; the read returns;
        then the engine claims again: its own change must be seen (H1)."""
        handle = self.handles[e]
        handle.hold = True
        handle.read.clear()
        handle.release.clear()
        seen = self._seen(e, [queue])  # as of the held claim's start
        got: list[list[Job]] = []
        errors: list[BaseException] = []

        def claim() -> None:
            try:
                got.append(self.engines[e].claim(self._owner(e), [queue], limit=1))
            except BaseException as err:  # re-raised by the model's thread
                errors.append(err)

        thread = threading.Thread(target=claim, name="pauses-held-read", daemon=True)
        thread.start()
        try:
            while not handle.read.wait(0.005) and thread.is_alive():
                pass
            if handle.read.is_set():
                self.ctx.stats.faults["pauses: a pause or resume while its engine reads"] += 1
            else:  # its cache was fresh: the claim read nothing and is done
                handle.hold = False
            self._change(e, queue, paused)
        finally:
            handle.release.set()
            thread.join(WAIT)
        if errors:
            raise errors[0]
        if thread.is_alive() or not got:
            raise AssertionError("H0 the held claim did not return")
        self._check(e, [queue], 1, ids=None, seen=seen, got=got[0])
        self._claim(e, [queue], 1, False)

    def _seen(self, e: int, queues: Sequence[str]) -> dict[str, bool | None]:
        """Per queue, how a claim of engine `e` starting now must see it: True paused,
        False claimable, None either (a change by another engine within the bound)."""
        out: dict[str, bool | None] = {}
        for q in queues:
            change = self.changes.get(q)
            if change is None:
                out[q] = False
            elif change.engine == e or self.fake.now - change.at >= PAUSE_SEEN_WITHIN:
                out[q] = change.paused
            else:
                out[q] = None
        return out

    def _claim(self, e: int, queues: list[str], limit: int, by_ids: bool) -> None:
        ids = None
        if by_ids:  # a wake-up names jobs of these queues, taken or not, paused or not
            ids = [j for j, job in self.submitted.items() if job.queue in queues]
        seen = self._seen(e, queues)
        got = self.engines[e].claim(self._owner(e), queues, limit=limit, ids=ids)
        self._check(e, queues, limit, ids=ids, seen=seen, got=got)

    def _check(
        self,
        e: int,
        queues: Sequence[str],
        limit: int,
        *,
        ids: Sequence[str] | None,
        seen: dict[str, bool | None],
        got: list[Job],
    ) -> None:
        checks = self.ctx.stats.checks
        for job in got:
            if job.id in self.claimed or job.id not in self.submitted:
                raise AssertionError(f"H3 engine {e} leased job {job.id} that was not due")
            if job.queue not in queues:
                raise AssertionError(f"H3 engine {e} leased job {job.id} of another queue")
            if seen[job.queue]:
                change = self.changes[job.queue]
                code = "H1" if change.engine == e else "H2"
                raise AssertionError(
                    f"{code} engine {e} leased job {job.id} of queue {job.queue} "
                    f"{self.fake.now - change.at:g}s after engine {change.engine} paused it "
                    f"(bound {PAUSE_SEEN_WITHIN:g}s; {'its own pause' if code == 'H1' else ''})"
                )
            self.claimed.add(job.id)
        checks["H1/H2 no claim leases a job of a queue it must see paused"] += 1
        due = [
            j
            for j, job in self.submitted.items()
            if j not in self.claimed or j in {g.id for g in got}
        ]
        must = [
            j
            for j in due
            if seen.get(self.submitted[j].queue) is False and (ids is None or j in ids)
        ]
        if len(got) < min(limit, len(must)):
            raise AssertionError(
                f"H3 engine {e} leased {len(got)} of {len(must)} due jobs (limit {limit}) of "
                f"queues it must see claimable: "
                + ", ".join(f"{q} {self._told(q, e)}" for q, s in seen.items() if s is False)
            )
        checks["H3 a claim leases what it must see claimable"] += 1

    def _told(self, queue: str, e: int) -> str:
        change = self.changes.get(queue)
        if change is None:
            return "(never paused)"
        by = "itself" if change.engine == e else f"engine {change.engine}"
        did = "paused" if change.paused else "resumed"
        return f"({did} by {by} {self.fake.now - change.at:g}s ago)"

    def _unchanged(self) -> None:
        """H4: a job no claim returned is as submitted: no attempt charged."""
        engine = self.engines[0]
        for job_id, submitted in self.submitted.items():
            if job_id in self.claimed:
                self.ctx.coverage.trail(engine.history(job_id))
                continue
            job = engine.get(job_id)
            if (job.state, job.attempt, job.fence, job.version) != (
                submitted.state,
                submitted.attempt,
                submitted.fence,
                submitted.version,
            ):
                raise AssertionError(
                    f"H4 job {job_id} of queue {job.queue} was never leased, yet it is "
                    f"{job.state}, attempt {job.attempt}, fence {job.fence}, version "
                    f"{job.version} (submitted {submitted.state}, attempt {submitted.attempt})"
                )
        self.ctx.stats.checks["H4 a job no claim returned is unchanged"] += 1
