"""The `unique` fault model: unique submits (`fsm.inputs.Unique`, docs/uniqueness.md)
under concurrent submitters, batches, crashes and jobs moving through the lifecycle.

Each example opens a fresh database and submits jobs of one kind on two unique keys
with scopes drawn from four (the live states; the live states and succeeded; every
state within a window; the live states within a window), returning or refusing
duplicates. Between submits it moves the jobs along (claim, start, succeed, fail into
retry_wait, cancel, lose the owner so a lease goes back to queued), moves the clock
across windows, races 2-6 submitters on their own store handles, and crashes a
submitter's connection before the Nth statement of its insert (stores with a
connection seam: SQLite and PostgreSQL).

The model keeps its own account of each new job's scope and decides duplicates with
its own oracle, never with `UniqueScope`, from the records read back and each job's
audit trail:

- N1 at most one job per key in its scope: no job was stored anew while another job
  of its key was in the new job's scope (the other job's state at that instant, read
  from its trail; two jobs created by one race are always in each other's scope);
- N2 a duplicate submit returns the existing job (the newest in scope), or refusing
  raises DuplicateJob naming it; either way nothing is written;
- N3 a submit with no job of its key in its scope stores a new job, and a crashed
  submit stores its job with its audit entry or nothing.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import attrs
from hypothesis import example, given
from hypothesis import strategies as st

from ..clock import FakeClock
from ..errors import DuplicateJob, TransientStoreError
from ..inputs import KindPolicy, Unique
from ..lifecycle.spec import lifecycle
from ..ports import ScanRequest, Store
from ..records import AuditEntry, Job, Owner
from ..service.engine import Engine
from .faults_crash import CrashPlan, install
from .faults_machine import suite_policy
from .faults_models import ModelRun

KEYS = ("a", "b")
#: every step starts this much after the one before, so each trail orders them
TICK = 2.0**-10
WINDOW = 8.0
#: clock moves, in seconds (an advance step takes no TICK of its own): the next step
#: is then inside the window of a job made just before, exactly at its end, or past it
ADVANCES = (1.0, WINDOW - 2 * TICK, WINDOW - TICK, 2 * WINDOW)
#: how the model drives a waiting job (queued or retry_wait) on
PATHS: dict[str, tuple[str, ...]] = {
    "leased": ("claim",),
    "running": ("claim", "start"),
    "retry_wait": ("claim", "start", "fail"),
    "succeeded": ("claim", "start", "succeed"),
    "cancelling": ("claim", "start", "cancel"),
    "cancelled": ("cancel",),
    "queued again": ("claim", "lose"),
    "lost run": ("claim", "start", "lose"),
}
OWNER = Owner(host="unique-sim", pid=11, incarnation="unique-a")
ACTOR, REASON = "unique-model", "fault model"

_scope = st.sampled_from(("live", "live", "live+succeeded", "window", "live window"))
_step = st.one_of(
    st.tuples(st.just("submit"), st.sampled_from(KEYS), _scope, st.booleans()),
    st.tuples(st.just("batch"), st.lists(st.tuples(st.sampled_from(KEYS), _scope), max_size=4)),
    st.tuples(st.just("race"), st.integers(2, 6), st.sampled_from(KEYS), _scope),
    st.tuples(st.just("crash"), st.sampled_from(KEYS), _scope, st.integers(1, 6)),
    st.tuples(st.just("drive"), st.integers(0, 31), st.sampled_from(sorted(PATHS))),
    st.tuples(st.just("drive"), st.integers(0, 31), st.sampled_from(sorted(PATHS))),
    st.tuples(st.just("advance"), st.sampled_from(ADVANCES)),
    st.tuples(st.just("clear"), st.sampled_from(KEYS)),
)
_steps = st.lists(_step, min_size=3, max_size=25)
#: the edges every run tries first: a window's exact end (a job made just before the
#: advance is out of the window then, not a moment later), a job in each live state
#: with a submit of its key (the live scope must hold every one), a refusal
EDGES: list[tuple[Any, ...]] = [
    ("submit", "a", "window", False),
    ("advance", WINDOW - 2 * TICK),
    ("submit", "a", "window", True),
    ("advance", 0.0),
    ("submit", "a", "window", False),
    *(
        step
        for target in ("leased", "running", "retry_wait", "cancelling", "queued again")
        for step in (
            ("submit", "b", "live", False),
            ("drive", -1, target),  # the newest job: b's
            ("submit", "b", "live", False),
            ("submit", "b", "live", True),
            ("clear", "b"),
        )
    ),
]


@attrs.frozen
class Scope:
    """The model's own account of a unique submit's scope (`name`: one of SCOPES)."""

    name: str
    key: str
    states: frozenset[str]
    period: float | None
    refuse: bool = False

    def holds(self, state: str, created_at: float, now: float) -> bool:
        """Does a job of the key, in `state` and created at `created_at`, count at `now`?"""
        return state in self.states and (self.period is None or created_at > now - self.period)


class UniqueModel:
    name: ClassVar[str] = "unique"
    about: ClassVar[str] = (
        "unique submits: racing submitters, batches, crashed inserts, jobs leaving and "
        "re-entering states, time windows"
    )
    examples: ClassVar[dict[str, int]] = {"quick": 10, "default": 60, "thorough": 500}

    def run(self, ctx: ModelRun) -> None:
        @ctx.settings(self.examples[ctx.size])
        @given(steps=_steps)
        @example(steps=EDGES)
        def one(steps: list[tuple[Any, ...]]) -> None:
            with ctx.database() as opener:
                _Example(ctx, opener).run(steps)

        one()


class _Example:
    def __init__(self, ctx: ModelRun, opener: Callable[[], Store]) -> None:
        self.ctx = ctx
        self.opener = opener
        self.clock = FakeClock()
        spec = lifecycle()
        self.live = frozenset(s for s in spec.states if not spec.is_final(s))
        self.all = frozenset(spec.states)
        # the examples of a PostgreSQL run share its schema: a kind of their own
        self.kind = f"unique-{uuid.uuid4().hex[:10]}"
        self.engine = self._engine(opener())
        self.scopes: dict[str, Scope] = {}  # job id -> the scope it was stored with
        self.ids: list[str] = []

    def _engine(self, store: Store) -> Engine:
        return Engine(
            store,
            clock=self.clock,
            policy=suite_policy(),
            kinds={self.kind: KindPolicy(retry_safe=True)},
            spec=lifecycle(),
        )

    def _scope(self, key: str, name: str, refuse: bool = False) -> Scope:
        states = {
            "live": self.live,
            "live+succeeded": self.live | {"succeeded"},
            "window": self.all,
            "live window": self.live,
        }[name]
        period = WINDOW if "window" in name else None
        return Scope(name, key, frozenset(states), period, refuse)

    def _option(self, scope: Scope) -> Unique:
        """The production option for `scope`: the defaults where they mean it (the live
        states without a window, every state with one), the states named otherwise."""
        named = scope.name in ("live+succeeded", "live window")
        return Unique(
            scope.key,
            states=tuple(sorted(scope.states)) if named else None,
            period=scope.period,
            on_duplicate="refuse" if scope.refuse else "return",
        )

    def run(self, steps: Sequence[tuple[Any, ...]]) -> None:
        for step in steps:
            if step[0] != "advance":
                self.clock.advance(TICK)
            getattr(self, f"_{step[0]}")(*step[1:])
            self.ctx.stats.steps += 1
            self._check_n1()
        self.ctx.stats.examples += 1
        for job_id in self.ids:
            self.ctx.coverage.trail(self.engine.history(job_id))

    # --- what the store holds ------------------------------------------------------

    def _jobs(self, store: Store | None = None) -> list[Job]:
        s = store or self.engine.store
        found = s.scan(ScanRequest(states=tuple(self.all), kinds=(self.kind,), limit=10_000))
        return sorted(found, key=lambda j: (j.created_at, j.id))

    def _in_scope(self, scope: Scope, now: float) -> list[Job]:
        return [
            j
            for j in self._jobs()
            if j.unique_key == scope.key and scope.holds(j.state, j.created_at, now)
        ]

    def _stored_anew(self, job: Job, scope: Scope) -> None:
        self.scopes[job.id] = scope
        self.ids.append(job.id)

    # --- steps -----------------------------------------------------------------------

    def _submit(self, key: str, name: str, refuse: bool) -> None:
        scope = self._scope(key, name, refuse)
        now = self.clock.now()
        expected = self._in_scope(scope, now)
        before = len(self._jobs())
        got: Job | None = None
        named: str | None = None
        try:
            got = self.engine.submit(self.kind, {"key": key}, unique=self._option(scope))
        except DuplicateJob as err:
            named = err.job.id
        if got is None or (scope.refuse and expected):
            newest = expected[-1].id if expected else None
            assert named == newest, (
                f"N2 a refused submit of key {key!r} named job {named}, not the newest "
                f"in its scope ({newest})"
            )
            assert len(self._jobs()) == before, f"N2 a refused submit of key {key!r} wrote a job"
            self.ctx.stats.checks["N2 refused duplicate"] += 1
            return
        self._check_answer(got, scope, expected, "submit")
        assert not scope.refuse or not expected

    def _check_answer(self, got: Job, scope: Scope, expected: list[Job], what: str) -> None:
        if expected:
            assert got.id == expected[-1].id, (
                f"N2 a {what} of key {scope.key!r} got job {got.id} ({got.state}); the "
                f"newest job in its scope is {expected[-1].id} ({expected[-1].state})"
            )
            assert not scope.refuse, f"N2 a refusing {what} of key {scope.key!r} returned"
            self.ctx.stats.checks["N2 duplicate returned"] += 1
        else:
            assert got.id not in self.scopes, (
                f"N3 a {what} of key {scope.key!r} got job {got.id} ({got.state}), which "
                "is outside its scope, instead of a new job"
            )
            self._stored_anew(got, scope)
            self.ctx.stats.checks["N3 new job stored"] += 1

    def _batch(self, items: list[tuple[str, str]]) -> None:
        if not items:
            return
        now = self.clock.now()
        scopes = [self._scope(key, name) for key, name in items]
        stored = self._jobs()
        got = self.engine.submit_many(
            [(self.kind, {"key": s.key}, {"unique": self._option(s)}) for s in scopes]
        )
        new_in_batch: dict[str, Job] = {}  # a job the batch stored is in every scope
        for scope, job in zip(scopes, got, strict=True):
            if scope.key in new_in_batch:
                expected = [new_in_batch[scope.key]]
            else:
                expected = [
                    j
                    for j in stored
                    if j.unique_key == scope.key and scope.holds(j.state, j.created_at, now)
                ]
            self._check_answer(job, scope, expected, "batch item")
            if not expected:
                new_in_batch[scope.key] = job
        self.ctx.stats.faults["a batch of unique submits"] += 1

    def _race(self, submitters: int, key: str, name: str) -> None:
        scope = self._scope(key, name)
        expected = self._in_scope(scope, self.clock.now())
        engines = [self._engine(self.opener()) for _ in range(submitters)]
        got: list[Job] = []
        errors: list[BaseException] = []
        lock = threading.Lock()
        barrier = threading.Barrier(submitters)

        def submit(n: int) -> None:
            try:
                barrier.wait(timeout=30)
                job = engines[n].submit(self.kind, {"n": n}, unique=self._option(scope))
                with lock:
                    got.append(job)
            except BaseException as err:  # reported below, in this thread
                errors.append(err)

        threads = [threading.Thread(target=submit, args=(n,)) for n in range(submitters)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        ids = {j.id for j in got}
        assert len(ids) == 1, (
            f"N1 {submitters} submitters racing on key {key!r} got {len(ids)} jobs: {sorted(ids)}"
        )
        self._check_answer(got[0], scope, expected, f"race of {submitters} submitters")
        self.ctx.stats.faults[f"{submitters} submitters racing on one key"] += 1

    def _crash(self, key: str, name: str, nth: int) -> None:
        store = self.opener()
        plan = CrashPlan()
        if not install(store, plan):
            self.ctx.stats.faults["crash (no connection seam: not exercised)"] += 1
            return
        scope = self._scope(key, name)
        before = {j.id for j in self._jobs()}
        plan.arm(nth)
        try:
            job: Job | None = self._engine(store).submit(
                self.kind, {"crash": nth}, unique=self._option(scope)
            )
        except TransientStoreError:
            job = None
        plan.arm(0)
        after = [j for j in self._jobs() if j.id not in before]
        assert len(after) <= 1, f"N1 a crashed submit of key {key!r} stored {len(after)} jobs"
        for new in after:
            trail = self.engine.history(new.id)
            assert trail, f"N3 a crashed submit stored job {new.id} without its audit entry"
            assert trail[0].event == "submit", f"N3 job {new.id}'s trail starts with {trail[0]}"
            if new.id not in self.scopes:
                self._stored_anew(new, scope)
        if job is not None and job.id not in self.scopes:
            raise AssertionError(f"N3 a submit returned job {job.id}, which is not stored")
        if plan.fired:
            self.ctx.stats.faults[f"crash before the {plan.fired[-1]} of a unique submit"] += 1

    def _drive(self, pick: int, target: str) -> None:
        """Drive the first waiting job from index `pick` on (wrapping) along the path to
        `target`: out of its scope and back into it (a lost lease returns to queued)."""
        job = None
        for k in range(len(self.ids)):
            found = self.engine.store.get(self.ids[(pick + k) % len(self.ids)])
            if found is not None and found.state in ("queued", "retry_wait"):
                job = found
                break
        if job is None:
            return
        engine = self.engine
        for action in PATHS[target]:
            if action == "claim":
                self.clock.advance(max(0.0, job.run_after - self.clock.now()))
                (job,) = engine.claim(OWNER, queues=[job.queue], ids=[job.id])
            elif action == "start":
                job = engine.start(job.id, job.fence)
            elif action == "succeed":
                job = engine.succeed(job.id, job.fence, None)
            elif action == "fail":
                job = engine.fail(job.id, job.fence, "boom", delay=1.0)
            elif action == "cancel":
                job = engine.cancel(job.id, actor=ACTOR, reason=REASON)
            else:  # lose: a leased job goes back to queued, a running one to retry_wait
                lost = engine.expire_seen(job, verdict="dead", reason="owner gone")
                assert lost is not None, f"the lost lease of job {job.id} was not expired"
                job = lost
        self.ctx.stats.faults[f"a unique job driven to {target}"] += 1

    def _clear(self, key: str) -> None:
        """End every live job of `key` (a running or cancelling one succeeds)."""
        for job in self._jobs():
            if job.unique_key != key or job.state not in self.live:
                continue
            if job.state in ("running", "cancelling"):
                self.engine.succeed(job.id, job.fence, None)
            else:
                self.engine.cancel(job.id, actor=ACTOR, reason=REASON)
        self.ctx.stats.faults["every live job of a key ended"] += 1

    def _advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    # --- N1, from the trails ---------------------------------------------------------

    def _check_n1(self) -> None:
        jobs = [j for j in self._jobs() if j.id in self.scopes]
        trails = {j.id: self.engine.history(j.id) for j in jobs}
        for new in jobs:
            scope = self.scopes[new.id]
            for other in jobs:
                if other.id == new.id or other.unique_key != new.unique_key:
                    continue
                if (other.created_at, other.id) > (new.created_at, new.id):
                    continue
                state = _state_at(trails[other.id], new.created_at)
                if state is not None and scope.holds(state, other.created_at, new.created_at):
                    raise AssertionError(
                        f"N1 job {new.id} of key {new.unique_key!r} was stored while job "
                        f"{other.id} was {state!r}, in its scope"
                    )
        self.ctx.stats.checks["N1 one job per key in its scope"] += 1


def _state_at(trail: Sequence[AuditEntry], at: float) -> str | None:
    """The job's state at `at`, from its applied entries (None: not created yet)."""
    state: str | None = None
    for e in trail:
        if e.outcome == "applied" and e.at <= at:
            state = e.to_state
    return state
