"""The fault suite's hypothesis state machine (specs/invariants.md, specs/scenarios.md).

Simulated workers (each an `Owner` with a memory of the leases it holds and the
reports it sent) drive real jobs through the Engine over the store under test,
on a `FakeClock`, while rules inject faults: crashes, pauses (zombies), clock
jumps, duplicate and reordered reports, duplicate deliveries, store errors before
and after commit, concurrent writers, operator actions and recovery sweeps. After
every step the invariants are read back from the store; at the end faults stop,
time advances, sweeps run and live workers finish, and every job must be
terminal or parked in investigate.

Progress (on a store that keeps it, `StoresProgress`): a worker holding a running
job saves its handler's progress through `Engine.save_progress`, as
`fsm.worker.saving` does, then maybe heartbeats or reports its running jobs in one
batch decided on the records it saw before the save (`save_progress`); a zombie
one fence behind saves after its run was taken over by another worker or leased
again by its own process (the same owner, an older fence: `progress_taken_over_once`);
a concurrent writer may save the holder's progress between a decision's read and
its write (`concurrent_write`). Checked after every step, U2: the stored progress
is the current holder's latest save; nothing writes an older one back, and a
refused save changes nothing.

Every bound is explicit: MAX_JOBS jobs and N_WORKERS workers per example, at
most SENT_LOG remembered reports per worker, SETTLE_ROUNDS rounds to settle.
"""

from __future__ import annotations

import contextlib
import json
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, ClassVar, NoReturn

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from .. import jsonio
from ..clock import FakeClock
from ..errors import BadInput, IllegalTransition, JobFSMError, LeaseLost, TransientStoreError
from ..inputs import KindPolicy
from ..lifecycle.core import decide
from ..lifecycle.invariants import (
    dependency_problems,
    owned_states,
    rejection_problems,
    requeues,
    trail_problems,
)
from ..lifecycle.rules import ERASED
from ..lifecycle.spec import lifecycle
from ..policies import Backoff, LeasePolicy, Limits, Policy, RecoveryPolicy, RetryPolicy
from ..ports import (
    Erasable,
    PruneRequest,
    ScanRequest,
    Store,
    StoresProgress,
    TracksDependencies,
)
from ..records import Job, Owner
from ..registry import offered
from ..service import maintenance as recovery
from ..service.engine import Engine
from ..service.identity import Identity
from ..service.progress import envelope
from ..service.reconcile import Asker
from ..worker.claims import kind_policy_arg
from ..worker.runs import Run, Runs
from .faults_async import AsyncClient, ErasingFaultyTwinStore, FaultyTwinStore
from .faults_outside import LOSS_MODES, MODES, UNKNOWN_ANSWERS, OutsideSystem
from .faults_store import FAULTABLE, ErasingFaultyStore, FaultyStore
from .hosts import SimulatedLiveness, SimulatedProcesses

OUTCOMES = ("succeed", "fail", "retry_after", "permanent", "ambiguous")
#: where the store adapters offer to delete one queue's jobs (`_forget_queue`)
QUEUE_FORGETTERS = "jobfsm.queue_forgetters"
MAX_JOBS = 8
N_WORKERS = 3
SENT_LOG = 16
SETTLE_ROUNDS = 40
#: seconds per settle round: past the lease TTL (30 s) and the backoff cap (60 s)
SETTLE_STEP = 100.0
#: jobs deleted per prune batch when an example clears its queue (`_clear_queue`)
CLEAR_BATCH = 500
#: each example works in its own queue, so a store shared between examples (or one
#: holding other jobs) is fine: the suite looks only at its own queue
QUEUE_PREFIX = "fault-suite"
HOSTS = ("fault-sim-a", "fault-sim-b")
MAX_ATTEMPTS = 3
#: what a zombie whose lease was taken over once reports (`lease_taken_over_once`)
ONE_BEHIND_EVENTS = ("start", "release", "succeed", "fail", "ambiguous", "mark")
#: the outcomes a worker's reporter writes (in batches, through `Engine.report_many`)
REPORTED = ("succeed", "fail", "ambiguous")


def _weights(value: Mapping[str, int]) -> dict[str, int]:
    out = dict(value)
    unknown = set(out) - set(OUTCOMES)
    if unknown:
        raise ValueError(f"unknown handler outcomes {sorted(unknown)}; known: {OUTCOMES}")
    if any(isinstance(w, bool) or not isinstance(w, int) or w < 0 for w in out.values()):
        raise ValueError("outcome weights must be non-negative integers")
    if sum(out.values()) <= 0:
        raise ValueError("at least one outcome needs a positive weight")
    return out


@attrs.frozen
class KindSpec:
    """A handler kind the simulated workers run: its retry safety and outcome weights.

    Outcomes: succeed, fail (retryable), retry_after (`Retry(after=)`), permanent,
    ambiguous (the outside effect is unknown). Weights are relative integers.
    """

    name: str
    retry_safe: bool = True
    outcomes: Mapping[str, int] = attrs.field(
        factory=lambda: {"succeed": 6, "fail": 2, "retry_after": 1, "permanent": 1},
        converter=_weights,
    )
    #: the handler marks before its outside effect (`ctx.mark`), and the kind has a
    #: reconciler that asks the outside system (`faults_outside`)
    marks: bool = attrs.field(default=False, kw_only=True)

    def pick(self, roll: int) -> str:
        """The outcome for `roll` (any non-negative integer), by cumulative weight."""
        total = sum(self.outcomes.values())
        r = roll % total
        for name in OUTCOMES:
            weight = self.outcomes.get(name, 0)
            if r < weight:
                return name
            r -= weight
        raise AssertionError("unreachable: weights sum to total")


DEFAULT_KINDS: tuple[KindSpec, ...] = (
    KindSpec("fast", True, {"succeed": 8, "fail": 1, "retry_after": 1}),
    KindSpec("flaky", True, {"succeed": 3, "fail": 4, "retry_after": 2, "permanent": 1}),
    KindSpec("unsafe", False, {"succeed": 6, "fail": 2, "ambiguous": 2}),
    KindSpec("charge", False, {"succeed": 6, "fail": 2, "ambiguous": 1}, marks=True),
)


def suite_policy(seed: int = 0) -> Policy:
    """The policy of the suite: small budgets so retries, recoveries and deadlines bite.

    The backoff has no jitter here: the jitter is a hash of the job id, which is random,
    so with it the machine's path would not follow hypothesis's choices alone (replays
    would differ: a Flaky report). The policy model checks jittered backoff instead.
    """
    return Policy.seeded(
        seed,
        retry=RetryPolicy(
            max_attempts=MAX_ATTEMPTS, backoff=Backoff(base=1.0, cap=60.0, jitter=False)
        ),
        lease=LeasePolicy(ttl=30.0, heartbeat_interval=5.0),
        recovery=RecoveryPolicy(max_recoveries=2),
        limits=Limits(
            retention={
                "succeeded": 3600.0,
                "cancelled": 3600.0,
                "failed": None,
                "investigate": None,
            }
        ),
    )


@attrs.define
class FaultStats:
    """What a run did: examples, steps, faults injected by type, invariant checks."""

    examples: int = 0
    steps: int = 0
    faults: Counter[str] = attrs.field(factory=Counter)
    checks: Counter[str] = attrs.field(factory=Counter)
    progress: Callable[[FaultStats], None] | None = attrs.field(default=None, eq=False)


@attrs.define
class Held:
    fence: int
    phase: str
    effect_done: bool = False
    #: the record the worker last saw (claimed, or read after a report): what its
    #: batched reports are decided on, however far heartbeats have moved it since
    seen: Job | None = None
    #: the production worker's bookkeeping of this run (`fsm.worker.runs.Run`)
    run: Run | None = None


@attrs.frozen
class Sent:
    job_id: str
    event: str
    fence: int


@attrs.define
class SimWorker:
    """A simulated worker process: its identity (the production `Identity`, over its
    simulated host's process table), what it believes it holds, and the production
    worker's table of runs in flight (`fsm.worker.runs.Runs`), which keeps the
    identity's registry of held runs exactly as a real worker keeps it: a run is held
    from its claim until that run (job id and fence) ends, and nothing re-registers
    runs behind the worker's back."""

    identity: Identity
    alive: bool = True
    paused: bool = False
    held: dict[str, Held] = attrs.field(factory=dict)
    sent: list[Sent] = attrs.field(factory=list)
    runs: Runs = attrs.field(init=False)
    #: older runs of jobs this worker leased again while they were still in flight
    #: (their threads end later; the worker's next heartbeat loses them)
    older: list[Run] = attrs.field(factory=list)

    def __attrs_post_init__(self) -> None:
        self.runs = Runs(self.identity)

    @property
    def owner(self) -> Owner:
        return self.identity.owner

    @property
    def active(self) -> bool:
        return self.alive and not self.paused

    def take(self, job: Job) -> None:
        """A claim returned `job`: held as `fsm.worker.claims.Claims` holds it (the
        identity's registry at the claim, the run table at launch)."""
        self.identity.hold(job.id, job.fence)
        run = Run(job, None)
        self.runs.add(run)
        old = self.held.get(job.id)
        if old is not None and old.run is not None and old.fence != job.fence:
            self.older.append(old.run)
        self.held[job.id] = Held(job.fence, job.state, seen=job, run=run)

    def let_go(self, jid: str) -> None:
        """The worker is done with its run of `jid` (reported, refused or lost): the
        production run table forgets exactly that run (`Runs.finish`)."""
        held = self.held.pop(jid, None)
        if held is not None and held.run is not None:
            self.runs.finish(held.run)

    def end_older(self) -> int:
        """The older runs end (their results discarded, `fsm.worker.leases`' newest-per-job
        rule): each is forgotten by (job id, fence). How many ended."""
        ended = len(self.older)
        for run in self.older:
            self.runs.finish(run)
        self.older.clear()
        return ended


W = st.integers(0, N_WORKERS - 1)
J = st.integers(0, 63)


class FaultMachine(RuleBasedStateMachine):
    """Workers, operators, sweeps and faults against one fresh store per example."""

    store_factory: ClassVar[Callable[[], Store]]
    kind_specs: ClassVar[tuple[KindSpec, ...]] = DEFAULT_KINDS
    stats: ClassVar[FaultStats]
    #: "async": submits and operator actions go through AsyncEngine (faults_async.py)
    engine_mode: ClassVar[str] = "sync"

    def __init__(self) -> None:
        super().__init__()
        self.spec = lifecycle()
        self.owned = owned_states(self.spec)
        self.lease_states = frozenset(self.spec.sources("lease"))
        self.cancel_states = frozenset(self.spec.sources("cancel"))
        self.requeue_states = frozenset(self.spec.sources("requeue"))
        self.erase_states = frozenset(self.spec.sources("erase"))
        self.queue = f"{QUEUE_PREFIX}-{uuid.uuid4().hex[:12]}"
        self.clock = FakeClock()
        self.policy = suite_policy()
        self.real: Store = type(self).store_factory()
        try:
            erasing = isinstance(self.real, Erasable)
            faulty: type[FaultyStore]
            if self.engine_mode == "async":
                faulty = ErasingFaultyTwinStore if erasing else FaultyTwinStore
            else:
                faulty = ErasingFaultyStore if erasing else FaultyStore
            self.store = faulty(self.real, racer=self._race)
        except BadInput:
            self.real.close()
            raise
        kinds = {
            k.name: KindPolicy(
                queue=self.queue,
                retry_safe=k.retry_safe,
                max_attempts=MAX_ATTEMPTS,
                marks_outside_calls=k.marks,
            )
            for k in self.kind_specs
        }
        self.engine = Engine(
            self.store, clock=self.clock, policy=self.policy, kinds=kinds, spec=self.spec
        )
        #: a second client on the same store, without faults: operators and racers
        self.direct = Engine(
            self.real, clock=self.clock, policy=self.policy, kinds=kinds, spec=self.spec
        )
        #: who submits and acts as operator: the Engine, or an AsyncEngine over it
        self.client: Engine | AsyncClient = (
            AsyncClient(self.engine) if self.engine_mode == "async" else self.engine
        )
        self.kinds_by_name = {k.name: k for k in self.kind_specs}
        self.incarnations = 0
        #: two simulated hosts; workers alternate between them, so the judge sees
        #: its own runs, other processes of its host and processes of another host
        self.hosts = {host: SimulatedProcesses() for host in HOSTS}
        self.liveness = SimulatedLiveness()
        self.workers = [self._new_worker() for _ in range(N_WORKERS)]
        self.jobs: list[str] = []
        self.index: dict[str, int] = {}
        #: job id -> its kind, as submitted (a job's kind never changes): the rules that
        #: only need the kind do not re-read the job for it
        self.kind_of: dict[str, str] = {}
        self.keys: dict[str, str] = {}
        self.seq = 0
        self.seen: dict[str, tuple[int, int, int]] = {}
        self.states: dict[str, str] = {}
        self.effects: dict[str, list[int]] = {}
        self.outside = OutsideSystem(self.effects, self.clock.now)
        self.marking = [k.name for k in self.kind_specs if k.marks]
        #: job id -> (version, trail length) last found sound: unchanged jobs are not replayed
        self.sound: dict[str, int] = {}
        #: dependent id -> (its version, its prerequisites' versions) last found sound
        self.deps_sound: dict[str, tuple[int, tuple[int | None, ...]]] = {}
        #: jobs a step addressed by id: their trails are re-read even if the version held
        #: (a rejected report is audited without a new version)
        self.touched: set[str] = set()
        self.requeued: dict[str, int] = {}
        #: job id -> the (event, fence) of every stale report the store refused
        #: (LeaseLost): each must be in its trail as rejected, once (I7)
        self.refused: dict[str, set[tuple[str, int]]] = {}
        #: does the store keep dependencies (then some jobs wait for others)?
        self.deps = isinstance(self.real, TracksDependencies)
        #: job id -> the prerequisites it was submitted with
        self.after: dict[str, list[str]] = {}
        #: does the store keep progress (then workers save it, U2)?
        self.saves = isinstance(self.real, StoresProgress)
        #: job id -> the progress last saved by its holder (U2: what the store must keep)
        self.progress: dict[str, str] = {}
        self.saved = 0
        #: the next armed race saves the holder's progress instead of a heartbeat
        self.race_saves = False
        self.broken = False
        self.stats.examples += 1

    # --- helpers -------------------------------------------------------------------

    def _new_worker(self) -> SimWorker:
        self.incarnations += 1
        n = self.incarnations
        host = HOSTS[n % len(HOSTS)]
        pid = 10_000 + n
        self.hosts[host].start(pid)
        worker = SimWorker(Identity(host, pid=pid, processes=self.hosts[host]))
        self.liveness.hold(worker.owner)
        return worker

    def _fail(self, text: str) -> NoReturn:
        self.broken = True
        raise AssertionError(text)

    def _fault(self, name: str) -> None:
        self.stats.faults[name] += 1

    def _active(self, w: int) -> SimWorker | None:
        active = [x for x in self.workers if x.active]
        return active[w % len(active)] if active else None

    def _has_held(self, phase: str | None = None) -> bool:
        return any(
            x.active and any(phase is None or h.phase == phase for h in x.held.values())
            for x in self.workers
        )

    def _pick_held(self, w: int, j: int, phase: str) -> tuple[SimWorker, str] | None:
        pairs = [
            (x, jid)
            for x in self.workers
            if x.active
            for jid in sorted(x.held, key=self.index.__getitem__)
            if x.held[jid].phase == phase
        ]
        if not pairs:
            return None
        return pairs[(w * 64 + j) % len(pairs)]

    def _job(self, j: int) -> str:
        return self.jobs[j % len(self.jobs)]

    def _applied_since(self, jid: str, version: int, event: str, fence: int) -> bool:
        return any(
            e.outcome == "applied" and e.version > version and e.event == event and e.fence == fence
            for e in self.real.history(jid)
        )

    def _track(self, job: Job) -> None:
        if job.id in self.index:
            return
        self.index[job.id] = len(self.jobs)
        self.jobs.append(job.id)
        self.kind_of[job.id] = job.kind
        if job.idempotency_key is not None:
            self.keys[job.idempotency_key] = job.id

    def _reconcile(self, w: SimWorker, jid: str) -> None:
        """After any report the worker re-reads the job: it never assumes an outcome."""
        held = w.held.get(jid)
        if held is None:
            return
        job = self.real.get(jid)
        if (
            job is None
            or job.fence != held.fence
            or job.owner != w.owner
            or job.state not in self.owned
        ):
            w.let_go(jid)
        else:
            held.phase = job.state
            held.seen = job

    def _report(
        self, w: SimWorker, jid: str, event: str, fence: int, call: Callable[[], Job]
    ) -> str:
        """Send one fenced report; check that a stale one changes nothing (I7)."""
        self.touched.add(jid)
        before = self.real.get(jid)
        if before is None:
            return "gone"
        try:
            call()
        except LeaseLost:
            outcome = "lost"
        except IllegalTransition:
            outcome = "illegal"
        except TransientStoreError:
            outcome = "unknown"
        else:
            outcome = "applied"
        return self._judge(w, Sent(jid, event, fence), before, outcome)

    def _judge(self, w: SimWorker, report: Sent, before: Job, outcome: str) -> str:
        """Check what a report did against the record `before` it was sent: one with
        the current fence is never refused as stale; a stale one changes nothing (I7)."""
        jid, event, fence = report.job_id, report.event, report.fence
        stale = before.fence != fence
        if stale:
            self._fault("stale report (zombie or late duplicate)")
        if outcome == "lost" and not stale:
            self._fail(f"I7 job {jid}: {event} with the current fence {fence} got LeaseLost")
        if outcome == "lost":
            self.refused.setdefault(jid, set()).add((event, fence))
        if stale and (
            outcome == "applied" or self._applied_since(jid, before.version, event, fence)
        ):
            self._fail(
                f"I7 job {jid}: stale report {event} with fence {fence} "
                f"(current {before.fence}) changed the job"
            )
        if outcome == "applied":
            w.sent.append(report)
            del w.sent[:-SENT_LOG]
        return outcome

    def _start(self, worker: SimWorker, jid: str, fence: int) -> None:
        self._report(worker, jid, "start", fence, partial(self._start_call, jid, fence))
        self._reconcile(worker, jid)

    def _start_call(self, jid: str, fence: int) -> Job:
        """`start`, with the kind policy a worker that runs the kind passes (the
        worker's own `kind_policy_arg`)."""
        name = self.kind_of.get(jid)
        kind = self.engine.kinds.get(name) if name is not None else None
        if name is None or kind is None:
            return self.engine.start(jid, fence)
        policy = kind_policy_arg(
            kind,
            default_recoveries=self.policy.recovery.max_recoveries,
            reconciler=name in self.marking,  # its kind has a reconciler
        )
        return self.engine.transition(jid, "start", fence=fence, kind_policy=policy)

    def _marks(self, jid: str) -> bool:
        return self.kind_of.get(jid) in self.marking

    def _mark(self, jid: str, fence: int) -> bool:
        """The handler's `ctx.mark` before its outside call; False: it must not call."""
        try:
            self.engine.mark(jid, fence, "calling the outside system", f"ext-{jid}")
        except (LeaseLost, IllegalTransition, TransientStoreError, BadInput):
            self._fault("mark refused: the handler does not call outside")
            return False
        return True

    def _commit_effect(self, jid: str, fence: int) -> None:
        """The handler's outside write, fenced: accepted only with the job's current fence."""
        job = self.real.get(jid)
        if job is not None and job.fence == fence and job.state in self.owned:
            self.effects.setdefault(jid, []).append(fence)
        else:
            self._fault("fenced effect refused (stale fence)")

    def _outcome_report(
        self, jid: str, held: Held, outcome: str, roll: int
    ) -> tuple[str, dict[str, Any]]:
        """The worker's report of how the handler ended: (event, arguments), as the
        reporter hands them to `Engine.report_many` (or one by one to `transition`)."""
        f = held.fence

        def fail(
            error: str, delay: float | None = None, permanent: bool = False
        ) -> tuple[str, dict[str, Any]]:
            return "fail", {"fence": f, "error": error, "delay": delay, "permanent": permanent}

        if outcome == "succeed":
            if not held.effect_done:
                if self._marks(jid) and not self._mark(jid, f):
                    return fail("ctx.mark raised")
                self._commit_effect(jid, f)
                held.effect_done = True
            return "succeed", {"fence": f, "result_json": jsonio.encode({"fence": f})}
        if outcome == "fail":
            return fail("handler raised")
        if outcome == "retry_after":
            return fail("Retry(after=)", delay=float(roll % 60))
        if outcome == "permanent":
            return fail("Permanent", permanent=True)
        return "ambiguous", {"fence": f, "error": "outside effect unknown"}

    def _outcome(self, worker: SimWorker, jid: str, roll: int) -> tuple[str, dict[str, Any]]:
        """How `jid`'s handler ends this time (its kind's mix), as a report."""
        held = worker.held[jid]
        name = self.kind_of.get(jid)
        kind = self.kinds_by_name.get(name) if name is not None else None
        outcome = (kind or self.kind_specs[0]).pick(roll)
        if held.effect_done and outcome != "ambiguous":
            outcome = "succeed"  # a handler past its outside call returns (or says unknown)
        return self._outcome_report(jid, held, outcome, roll)

    # --- normal work ---------------------------------------------------------------

    @initialize(kinds=st.lists(st.integers(0, 15), min_size=2, max_size=MAX_JOBS - 2))
    def submit_batch(self, kinds: list[int]) -> None:
        """Start every example with a few jobs of mixed kinds."""
        for kind in kinds:
            self.submit(kind, None, None, 0.0)

    @precondition(lambda self: len(self.jobs) < MAX_JOBS)
    @rule(
        kind=st.integers(0, 15),
        key=st.one_of(st.none(), st.integers(0, 2)),
        deadline=st.sampled_from((None, None, 45.0, 400.0)),
        delay=st.sampled_from((0.0, 0.0, 20.0)),
    )
    def submit(self, kind: int, key: int | None, deadline: float | None, delay: float) -> None:
        spec = self.kind_specs[kind % len(self.kind_specs)]
        self.seq += 1
        n = self.seq
        now = self.clock.advance(0.01)
        opts: dict[str, Any] = {"priority": n}
        if key is not None:
            opts["idempotency_key"] = f"{self.queue}:key-{key}"
        if deadline is not None:
            opts["deadline"] = now + deadline
        if delay:
            opts["delay"] = delay
        existing = self.keys.get(f"{self.queue}:key-{key}") if key is not None else None
        try:
            job: Job | None = self.client.submit(spec.name, {"n": n}, **opts)
        except TransientStoreError:
            job = self._find_submitted(n)  # did it commit? re-read, never assume
            if job is None:
                return
        assert job is not None
        if existing is not None and self.real.get(existing) is not None and job.id != existing:
            self._fail(f"I3 idempotency key key-{key} gave job {job.id}, not {existing}")
        if job.id not in self.index and job.payload != {"n": n}:
            self._fail(f"I3 submit returned a job it did not create: {job.id}")
        self._track(job)

    @precondition(lambda self: self.deps and self.jobs and len(self.jobs) < MAX_JOBS)
    @rule(
        kind=st.integers(0, 15),
        picks=st.lists(J, min_size=1, max_size=3),
        on_failed=st.sampled_from(("cancel", "run", "investigate")),
        deadline=st.sampled_from((None, None, 45.0)),
    )
    def submit_dependent(
        self, kind: int, picks: list[int], on_failed: str, deadline: float | None
    ) -> None:
        """A job that waits for up to three jobs already submitted (any state)."""
        spec = self.kind_specs[kind % len(self.kind_specs)]
        self.seq += 1
        n = self.seq
        now = self.clock.advance(0.01)
        after = sorted({self._job(j) for j in picks})
        opts: dict[str, Any] = {"priority": n, "after": after, "on_failed_dependency": on_failed}
        if deadline is not None:
            opts["deadline"] = now + deadline
        try:
            job: Job | None = self.client.submit(spec.name, {"n": n}, **opts)
        except TransientStoreError:
            job = self._find_submitted(n)
            if job is None:
                return
        assert job is not None
        self._track(job)
        self.after[job.id] = after
        self._fault("dependent job submitted")

    def _find_submitted(self, n: int) -> Job | None:
        every = self.real.scan(
            ScanRequest(states=self.spec.states, queues=(self.queue,), limit=10_000)
        )
        for job in every:
            if job.id not in self.index and job.payload == {"n": n}:
                return job
        return None

    @precondition(lambda self: any(x.active for x in self.workers) and self.jobs)
    @rule(w=W, limit=st.sampled_from((1, 2, 3, MAX_JOBS)))
    def claim(self, w: int, limit: int) -> None:
        worker = self._active(w)
        assert worker is not None
        self._claim(worker, limit)

    def _claim(self, worker: SimWorker, limit: int, ids: list[str] | None = None) -> list[Job]:
        try:
            with worker.identity.claiming():
                got = self.engine.claim(worker.owner, (self.queue,), limit=limit, ids=ids)
        except TransientStoreError:
            return []  # any lease it took is unknown to the worker: it lapses and is recovered
        for job in got:
            if job.state != "leased" or job.owner != worker.owner:
                self._fail(f"I1 job {job.id}: claim returned it {job.state} for {job.owner}")
            if job.id not in self.index:
                self._fail(f"I3 claim returned job {job.id} that was never submitted")
            worker.take(job)
        return got

    @precondition(lambda self: any(x.active for x in self.workers) and self.jobs)
    @rule(w=W, roll=st.integers(0, 999))
    def run_one(self, w: int, roll: int) -> None:
        """The happy path in one step: claim a due job, start it, report its outcome."""
        worker = self._active(w)
        assert worker is not None
        for job in self._claim(worker, 1):
            jid, f = job.id, job.fence
            self._start(worker, jid, f)
            if jid in worker.held and worker.held[jid].phase == "running":
                self._finish(worker, jid, roll)

    @precondition(lambda self: any(x.active for x in self.workers) and self.jobs)
    @rule(w=W, j=J)
    def duplicate_delivery(self, w: int, j: int) -> None:
        """A wake-up for a job that may already be leased: only a claimable job is leased."""
        worker = self._active(w)
        assert worker is not None
        jid = self._job(j)
        self.touched.add(jid)
        before = self.real.get(jid)
        if before is None:
            return
        now = self.clock.now()
        claimable = (
            before.state in self.lease_states
            and before.run_after <= now
            and (before.deadline is None or before.deadline > now)
        )
        if not claimable:
            self._fault("duplicate delivery of an unclaimable job")
        got = self._claim(worker, 1, ids=[jid])
        if got and not claimable:
            self._fail(f"I1 job {jid}: leased again from {before.state!r} by a duplicate delivery")

    @precondition(lambda self: self._has_held("leased"))
    @rule(w=W, j=J)
    def start(self, w: int, j: int) -> None:
        picked = self._pick_held(w, j, "leased")
        assert picked is not None
        worker, jid = picked
        fence = worker.held[jid].fence
        self._report(worker, jid, "start", fence, partial(self._start_call, jid, fence))
        self._reconcile(worker, jid)

    @precondition(lambda self: self._has_held("running"))
    @rule(w=W, j=J, roll=st.integers(0, 999))
    def finish(self, w: int, j: int, roll: int) -> None:
        picked = self._pick_held(w, j, "running")
        assert picked is not None
        worker, jid = picked
        self._finish(worker, jid, roll)

    def _finish(self, worker: SimWorker, jid: str, roll: int) -> None:
        fence = worker.held[jid].fence
        event, args = self._outcome(worker, jid, roll)
        call = partial(self.engine.transition, jid, event, **args)
        self._report(worker, jid, event, fence, call)
        self._reconcile(worker, jid)

    @precondition(lambda self: self._has_held("running"))
    @rule(w=W, roll=st.integers(0, 999))
    def finish_together(self, w: int, roll: int) -> None:
        """The worker's reporter: the outcomes of all a worker's running jobs in one
        `Engine.report_many`, each decided on the record the worker last saw.
        Heartbeats have moved some of those records since, another worker may hold
        others now (those reports are stale): each report must fare as it would alone."""
        worker = next(
            x
            for x in self.workers[w % len(self.workers) :] + self.workers
            if x.active and any(h.phase == "running" for h in x.held.values())
        )
        self._finish_all(worker, roll)

    def _finish_all(self, worker: SimWorker, roll: int) -> None:
        running = [
            jid
            for jid in sorted(worker.held, key=self.index.__getitem__)
            if worker.held[jid].phase == "running"
        ]
        batch: list[tuple[Sent, Job, dict[str, Any]]] = []
        for i, jid in enumerate(running):
            held = worker.held[jid]
            event, args = self._outcome(worker, jid, (roll + 7 * i) % 1000)
            if held.seen is not None:
                batch.append((Sent(jid, event, held.fence), held.seen, args))
        self._report_together(worker, batch)

    def _report_together(self, w: SimWorker, batch: list[tuple[Sent, Job, dict[str, Any]]]) -> None:
        """Send `batch` (each report with the record the worker decided it on) in one
        `Engine.report_many`, as the worker's reporter does, and judge each report as
        `_report` judges one sent alone."""
        reports: list[tuple[Job, str, Mapping[str, Any]]] = []
        sent: list[tuple[Sent, Job]] = []
        for report, seen, args in batch:
            self.touched.add(report.job_id)
            before = self.real.get(report.job_id)
            if before is None:
                continue  # gone (pruned): nothing to report on
            if seen.version != before.version:
                self._fault("batched report on a record a heartbeat or a writer moved")
            reports.append((seen, report.event, args))
            sent.append((report, before))
        if len(reports) > 1:
            self._fault("reports written in one batch")
        try:
            results: list[Any] = list(self.engine.report_many(reports))
        except TransientStoreError:
            results = [None] * len(reports)
        for (report, before), result in zip(sent, results, strict=True):
            self._judge(w, report, before, self._report_outcome(result))
            self._reconcile(w, report.job_id)

    @staticmethod
    def _report_outcome(result: Any) -> str:
        """How one report of `report_many` ended, as `_report` names it; an error no
        single report could end with fails the run (it is raised)."""
        if isinstance(result, Job):
            return "applied"
        if isinstance(result, LeaseLost):
            return "lost"
        if isinstance(result, IllegalTransition):
            return "illegal"
        if result is None or isinstance(result, TransientStoreError):
            return "unknown"
        raise result

    @precondition(lambda self: self._has_held("running"))
    @rule(w=W, j=J, commit=st.booleans())
    def outside_call(self, w: int, j: int, commit: bool) -> None:
        """A marking handler marks, then maybe commits its outside effect, and goes on
        running: a crash or a pause next loses the run before or after the effect."""
        picked = self._pick_held(w, j, "running")
        assert picked is not None
        self._call_outside(*picked, commit)

    @precondition(lambda self: any(x.active for x in self.workers) and self.jobs)
    @rule(w=W, commit=st.booleans())
    def run_to_outside_call(self, w: int, commit: bool) -> None:
        """Claim and start a due job and run its handler up to its outside call (marked,
        maybe committed): it is left running, to be finished, lost or taken back."""
        worker = self._active(w)
        assert worker is not None
        for job in self._claim(worker, 1):
            self._start(worker, job.id, job.fence)
            if job.id in worker.held and worker.held[job.id].phase == "running":
                self._call_outside(worker, job.id, commit)

    def _call_outside(self, worker: SimWorker, jid: str, commit: bool) -> bool:
        """The handler marks its outside call and maybe commits its effect: whether it
        marked (a refused mark stops it before the call)."""
        held = worker.held[jid]
        self.touched.add(jid)
        if not self._marks(jid) or held.effect_done or not self._mark(jid, held.fence):
            return False
        self._fault("handler marked its outside call")
        if commit:
            self._commit_effect(jid, held.fence)
            held.effect_done = True
        return True

    @precondition(lambda self: self.marking and any(x.active for x in self.workers))
    @rule(
        w=W,
        j=J,
        commit=st.booleans(),
        how=st.sampled_from(("crash", "stall")),
        mode=st.sampled_from(LOSS_MODES),
    )
    def lose_marked_run(self, w: int, j: int, commit: bool, how: str, mode: str) -> None:
        """A marking handler's run is lost after its outside call, and the production
        sweep asks the kind's reconciler, which answers (or fails) as `mode` says.

        A worker leases a job of a marking kind (a new one if none is due), starts it,
        marks (`ctx.mark`) and maybe commits its fenced outside effect; then the run is
        lost: the worker is killed (-9) and its new incarnation sweeps at once, or it
        stalls past its lease and another worker sweeps (`fsm.service.maintenance.sweep` with the
        reconcilers: the expire claims the reconcile, `fsm.service.reconcile.ask` calls the
        reconciler). Whatever the sweep left due is then leased again by the sweeper
        and run up to its outside call, as any worker would.

        Checked after the step (`_check_job`): I7, a not-retry-safe job's outside
        effect commits at most once per operator requeue. Only a reconciler that
        answers `not_started` truthfully may let a lost marked run run again; one that
        raises or returns nonsense is an unknown (investigate), never "not started".
        """
        worker = self._active(w)
        assert worker is not None
        jid = self._marking_run(worker, j)
        if jid is None:
            return
        marked = self._call_outside(worker, jid, commit)
        self.outside.mode = mode
        self._fault(f"marked run lost, reconciler {mode}")
        if how == "crash" or sum(x.active for x in self.workers) < 2:
            sweeper = self._killed_and_replaced(worker)
        else:
            worker.paused = True
            self._fault("worker pause")
            self.clock.advance(self.policy.lease.ttl + 1.0)
            self._fault("clock jump past leases")
            sweeper = next(x for x in self.workers if x.active)
        self._sweep(judged=True, by=sweeper)
        if marked and mode in UNKNOWN_ANSWERS:
            self._not_due_after(jid, mode)
        self._until_due(jid)
        for job in self._claim(sweeper, 1, ids=[jid]):
            self._start(sweeper, jid, job.fence)
            if jid in sweeper.held and sweeper.held[jid].phase == "running":
                self._call_outside(sweeper, jid, commit=True)

    def _not_due_after(self, jid: str, mode: str) -> None:
        """I7 right after the sweep: a marked run whose reconciler raised, answered
        nonsense or said unknown is never made due again by it (unknown: investigate,
        or left for a later pass), whether or not its effect committed."""
        job = self.real.get(jid)
        if job is not None and job.state in self.lease_states:
            self._fail(
                f"I7 job {jid}: its marked run was lost and its reconciler {mode!r}, yet the "
                f"sweep made it due again ({job.state}): an unknown was read as not started"
            )
        self.stats.checks["I7 a failed reconciler answer is never read as not started"] += 1

    def _until_due(self, jid: str) -> None:
        """If the sweep left `jid` due later (its retry's delay), the clock moves on to
        then: whatever the reconciler let run again runs in this step, so a lost run
        that is run again meets its effect check here, not only when a later step
        happens to lease it (the suite's fixed draws under CI then miss it)."""
        job = self.real.get(jid)
        if job is not None and job.state in self.lease_states and job.run_after > self.clock.now():
            self.clock.advance(job.run_after - self.clock.now())
            self._fault("clock on to a retry's delay")

    def _marking_run(self, worker: SimWorker, j: int) -> str | None:
        """`worker` leases a due job of a marking kind (`_lease_marking`) and starts it:
        the job id of the run, or None (none leased, or its start refused)."""
        jid = self._lease_marking(worker, j)
        if jid is None:
            return None
        self._start(worker, jid, worker.held[jid].fence)
        if jid not in worker.held or worker.held[jid].phase != "running":
            return None
        return jid

    def _lease_marking(self, worker: SimWorker, j: int) -> str | None:
        """Lease a due job of a marking kind for `worker` (submitting one if none is due
        and there is room); its id, or None."""
        now = self.clock.now()
        due = [
            job.id
            for job in self._tracked()
            if job.kind in self.marking
            and job.state in self.lease_states
            and job.run_after <= now
            and (job.deadline is None or job.deadline > now)
        ]
        if due:
            jid = due[j % len(due)]
            return jid if self._claim(worker, 1, ids=[jid]) else None
        if len(self.jobs) >= MAX_JOBS:
            return None
        kind = next(i for i, k in enumerate(self.kind_specs) if k.marks)
        known = len(self.jobs)
        self.submit(kind, None, None, 0.0)
        if len(self.jobs) == known:
            return None
        jid = self.jobs[-1]
        return jid if self._claim(worker, 1, ids=[jid]) else None

    @rule(mode=st.sampled_from(MODES))
    def reconciler_behaves(self, mode: str) -> None:
        """From now on the kinds' reconciler answers this way (truthful, unknown, raises,
        garbage, still_running, hangs past its timeout)."""
        self.outside.mode = mode

    @precondition(lambda self: self._has_held("cancelling"))
    @rule(w=W, j=J)
    def ack_cancel(self, w: int, j: int) -> None:
        picked = self._pick_held(w, j, "cancelling")
        assert picked is not None
        worker, jid = picked
        f = worker.held[jid].fence
        self._report(
            worker, jid, "cancelled_ack", f, lambda: self.engine.cancelled_ack(jid, f, "partial")
        )
        self._reconcile(worker, jid)

    @precondition(lambda self: self._has_held("leased"))
    @rule(w=W, j=J)
    def release(self, w: int, j: int) -> None:
        picked = self._pick_held(w, j, "leased")
        assert picked is not None
        worker, jid = picked
        f = worker.held[jid].fence
        self._report(worker, jid, "release", f, lambda: self.engine.release(jid, f))
        self._reconcile(worker, jid)

    @precondition(lambda self: self._has_held())
    @rule(w=W)
    def heartbeat(self, w: int) -> None:
        active = [x for x in self.workers if x.active and x.held]
        self._heartbeat(active[w % len(active)])

    def _heartbeat(self, worker: SimWorker) -> None:
        if worker.end_older():
            self._fault("older run of a job leased again ended")
        fences = {jid: h.fence for jid, h in worker.held.items()}
        if not fences:
            return
        try:
            renewed = self.engine.heartbeat(worker.owner, fences)
        except TransientStoreError:
            return  # unknown: the worker keeps its leases and tries again
        for jid, state in renewed.items():
            job = self.real.get(jid)
            if (
                jid not in fences
                or job is None
                or job.fence != fences[jid]
                or job.owner != worker.owner
                or job.state != state
            ):
                self._fail(
                    f"I1 job {jid}: a heartbeat of {worker.owner} with fence {fences.get(jid)} "
                    f"renewed a lease it does not hold ({job})"
                )
        for jid in fences:
            if jid in renewed:
                worker.held[jid].phase = renewed[jid]
            else:
                worker.let_go(jid)  # ctx.lease_lost: the result is discarded

    # --- progress (U2) -------------------------------------------------------------

    @precondition(lambda self: self.saves and self._has_held("running"))
    @rule(
        w=W,
        j=J,
        then=st.sampled_from(("nothing", "heartbeat", "report")),
        roll=st.integers(0, 999),
    )
    def save_progress(self, w: int, j: int, then: str, roll: int) -> None:
        """A handler's `ctx.progress`, written as the worker writes it
        (`fsm.worker.saving`: `Engine.save_progress`, fenced like a heartbeat, no new
        version); then the worker heartbeats, or its reporter sends the outcomes of its
        running jobs in one batch decided on the records it saw before the save (their
        compare-and-set holds, as the save moved no version: the write must keep the
        saved progress, U2)."""
        picked = self._pick_held(w, j, "running")
        assert picked is not None
        worker, jid = picked
        self._save(worker, jid, worker.held[jid].fence)
        if then == "heartbeat":
            self._heartbeat(worker)
        elif then == "report" and any(h.phase == "running" for h in worker.held.values()):
            self._finish_all(worker, roll)

    @precondition(lambda self: self.saves and self.jobs and sum(x.active for x in self.workers) > 1)
    @rule(w=W, j=J, roll=st.integers(0, 999), own=st.booleans())
    def progress_taken_over_once(self, w: int, j: int, roll: int, own: bool) -> None:
        """`lease_taken_over_once` with a progress save: the zombie, one fence behind,
        saves its run's progress after another worker leased and started the job, or
        (`own`) after the zombie's own process leased and started it again (its older
        run's thread ends late: the same owner, an older fence). The save must be
        refused and change nothing (U2): the owner alone does not make a save current."""
        taken = self._zombie_of_a_running_job(w, j, roll, own)
        if taken is None:
            return
        zombie, jid, fence = taken
        self._save(zombie, jid, fence)
        self._reconcile(zombie, jid)

    @precondition(lambda self: self.jobs and sum(x.active for x in self.workers) > 1)
    @rule(w=W, j=J, roll=st.integers(0, 999), own=st.booleans())
    def heartbeat_taken_over_once(self, w: int, j: int, roll: int, own: bool) -> None:
        """`lease_taken_over_once` with a heartbeat: the zombie, one fence behind, renews
        its run's lease after another worker leased and started the job, or (`own`)
        after the zombie's own process leased and started it again (its older run's
        thread heartbeats late: the same owner, an older fence).

        Checked here (I1): the renew does not name the job (the old run learns that its
        lease is lost, as `ctx.lease_lost`) and changes nothing; the owner alone does
        not make a renew current."""
        taken = self._zombie_of_a_running_job(w, j, roll, own)
        if taken is None:
            return
        zombie, jid, fence = taken
        self.touched.add(jid)
        before = self.real.get(jid)
        if before is None or before.fence == fence:
            return
        renewed = self.direct.heartbeat(zombie.owner, {jid: fence})
        after = self.real.get(jid)
        if jid in renewed or after != before:
            self._fail(
                f"I1 job {jid} ({before.state}, fence {before.fence}, owner {before.owner}): "
                f"a heartbeat of {zombie.owner} with the older fence {fence} "
                f"{'renewed it' if jid in renewed else 'was refused'} and left {after}"
            )
        self._fault("stale heartbeat of an older run" + (" of its own process" if own else ""))
        self.stats.checks["I1 a renew under an older fence is refused and changes nothing"] += 1
        self._reconcile(zombie, jid)

    def _save(self, worker: SimWorker, jid: str, fence: int) -> None:
        """`worker` saves progress of its run of `jid` under `fence`: written exactly
        when the fence, owner and state still match the store's record (the current
        holder's save, recorded as the progress to keep); a refused one changes nothing."""
        self.touched.add(jid)
        before = self.real.get(jid)
        if before is None:
            return
        held = worker.held.get(jid)
        self.saved += 1
        text = envelope(
            held.seen if held is not None and held.seen is not None else before,
            jsonio.encode({"done": self.saved}),
            self.clock.now(),
        )
        written = jid in self.direct.save_progress(worker.owner, {jid: (fence, text)})
        current = (
            before.fence == fence
            and before.owner == worker.owner
            and before.state in self.direct.kernel.heartbeat_states
        )
        after = self.real.get(jid)
        if written != current:
            self._fail(
                f"U2 job {jid} ({before.state}, fence {before.fence}, owner {before.owner}): "
                f"a progress save of {worker.owner} with fence {fence} was "
                f"{'written' if written else 'refused'}"
            )
        if current:
            self.progress[jid] = text
            self._fault("progress saved")
            if after is None or after.progress_json != text or after.version != before.version:
                self._fail(f"U2 job {jid}: a written progress save left {after}")
        else:
            self._fault("stale progress save refused")
            if after != before:
                self._fail(f"U2 job {jid}: a refused progress save changed {before} to {after}")

    # --- faults --------------------------------------------------------------------

    @precondition(lambda self: any(x.alive for x in self.workers))
    @rule(w=W)
    def crash_worker(self, w: int) -> None:
        """kill -9: the worker's memory is gone and its pid is dead."""
        alive = [x for x in self.workers if x.alive]
        self._crash(alive[w % len(alive)])

    def _crash(self, worker: SimWorker) -> None:
        worker.alive = False
        worker.held.clear()  # the process is gone, and its registry with it
        worker.older.clear()
        worker.sent.clear()
        self.hosts[worker.owner.host].kill(worker.owner.pid)
        self.liveness.release(worker.owner)  # the server drops a dead session's lock
        self._fault("worker crash")

    def _killed_and_replaced(self, worker: SimWorker) -> SimWorker:
        """`kill -9` of `worker` and a new incarnation in its place (not yet swept):
        the new worker."""
        i = self.workers.index(worker)
        self._crash(worker)
        self.workers[i] = fresh = self._new_worker()
        self._fault("worker restart")
        return fresh

    @precondition(lambda self: any(not x.alive for x in self.workers))
    @rule(w=W)
    def restart_worker(self, w: int) -> None:
        """A new incarnation takes the crashed one's place and reclaims its jobs at once."""
        crashed = [i for i, x in enumerate(self.workers) if not x.alive]
        i = crashed[w % len(crashed)]
        self.workers[i] = self._new_worker()
        self._fault("worker restart")
        self._sweep(judged=True, by=self.workers[i])

    @precondition(lambda self: any(x.active for x in self.workers))
    @rule(w=W)
    def pause_worker(self, w: int) -> None:
        """A GC pause or SIGSTOP: alive, silent, still believing it holds its leases."""
        worker = self._active(w)
        assert worker is not None
        worker.paused = True
        self._fault("worker pause")

    @precondition(lambda self: any(x.paused and x.alive for x in self.workers))
    @rule(w=W)
    def resume_worker(self, w: int) -> None:
        """The zombie wakes and goes on reporting with the fences it remembers."""
        paused = [x for x in self.workers if x.paused and x.alive]
        paused[w % len(paused)].paused = False
        self._fault("zombie wakes")

    @precondition(lambda self: self._has_held() and sum(x.active for x in self.workers) > 1)
    @rule(w=W, roll=st.integers(0, 999), swept=st.booleans())
    def zombie_returns(self, w: int, roll: int, swept: bool) -> None:
        """The classic zombie, in one step: a worker stalls past its lease, a sweep takes
        its jobs back, another worker leases them, and the zombie wakes to heartbeat
        and report with the fences it remembers. Every one of those must be refused.
        Without the sweep, nobody may take the lapsed jobs: the zombie goes on."""
        holders = [x for x in self.workers if x.active and x.held]
        zombie = holders[w % len(holders)]
        zombie.paused = True
        self._fault("worker pause")
        self.clock.advance(self.policy.lease.ttl + 1.0)
        self._fault("clock jump past leases")
        if swept:
            self._sweep(judged=False)
        for other in self.workers:
            if other.active:
                self._claim(other, MAX_JOBS)
        zombie.paused = False
        self._fault("zombie wakes")
        self._heartbeat(zombie)
        for jid in sorted(zombie.held, key=self.index.__getitem__):
            held = zombie.held[jid]
            if held.phase == "running":
                self._finish(zombie, jid, roll)
            elif held.phase == "leased":
                self._start(zombie, jid, held.fence)

    @precondition(lambda self: self.jobs and sum(x.active for x in self.workers) > 1)
    @rule(w=W, j=J, event=st.sampled_from(ONE_BEHIND_EVENTS), roll=st.integers(0, 999))
    def lease_taken_over_once(self, w: int, j: int, event: str, roll: int) -> None:
        """The commonest zombie: its lease is taken over exactly once, and it reports
        with the fence just before the current one.

        A worker holds a run (leased, for a `start` or `release`; running, for a
        `succeed`, `fail`, `ambiguous` or `mark`), leasing and starting a due job if
        it holds none that fits. It stalls past its lease; the production sweep
        (`fsm.service.maintenance.sweep`) expires the lapsed lease without moving the fence
        (leased -> queued, or a retry-safe running job -> retry_wait); another
        worker leases the job (fence + 1) and, unless the zombie's report is a
        `start` or `release`, starts it, so the report is legal in the job's state
        and only its fence is wrong. Then the zombie wakes and sends that report
        alone through the Engine, so it reaches `decide` with the fence one behind
        (`batch_taken_over_once` sends an outcome the way its reporter writes it).

        Checked in the step (`_report`): I7, a report carrying a fence other than the
        job's current one raises `LeaseLost` and no applied entry for it appears
        afterwards; one fence behind is as stale as ten.
        """
        zombie = self._active(w)
        assert zombie is not None
        needs = "leased" if event in ("start", "release") else "running"
        taken = self._take_over_once(zombie, j, needs, roll)
        if taken is None:
            return
        jid, fence = taken
        call = self._zombie_call(jid, event, fence, roll)
        self._report(zombie, jid, event, fence, call)
        self._reconcile(zombie, jid)

    @precondition(lambda self: self.jobs and sum(x.active for x in self.workers) > 1)
    @rule(w=W, j=J, event=st.sampled_from(REPORTED), roll=st.integers(0, 999))
    def batch_taken_over_once(self, w: int, j: int, event: str, roll: int) -> None:
        """`lease_taken_over_once` as the zombie's reporter writes it: the outcome of
        the run taken over (a `succeed`, `fail` or `ambiguous` with the fence one
        behind) goes in one `Engine.report_many` with the outcomes of the zombie's
        other running jobs, each decided on the record the zombie last saw.

        Every record in the batch moved since it was read (the sweep expired each
        lapsed lease; another worker leased and started the job taken over), so
        `report_many` writes none of them on its first pass and decides each again
        on the record as stored now: the stale report must be decided with its own
        fence there and refused, as it is alone, while the current one is leased
        to another worker under fence + 1.

        Checked in the step (`_report_together`, as `_report`): I7, a report carrying
        a fence other than the job's current one raises `LeaseLost` and no applied
        entry for it appears afterwards.
        """
        taken = self._zombie_of_a_running_job(w, j, roll, own=False)
        if taken is None:
            return
        zombie, stale, fence = taken
        batch: list[tuple[Sent, Job, dict[str, Any]]] = []
        for i, jid in enumerate(sorted(zombie.held, key=self.index.__getitem__)):
            held = zombie.held[jid]
            if held.seen is None or held.phase != "running":
                continue
            if jid == stale:
                event_i, args = event, self._zombie_args(event, fence, roll)
            else:
                event_i, args = self._outcome(zombie, jid, (roll + 7 * i) % 1000)
            batch.append((Sent(jid, event_i, held.fence), held.seen, args))
        self._report_together(zombie, batch)

    @precondition(lambda self: self.jobs and sum(x.active for x in self.workers) > 1)
    @rule(
        w=W,
        j=J,
        event=st.sampled_from(ONE_BEHIND_EVENTS),
        roll=st.integers(0, 999),
        own=st.booleans(),
    )
    def lease_taken_over_twice(self, w: int, j: int, event: str, roll: int, own: bool) -> None:
        """Two older runs of one job report the same event late, the older first.

        As `lease_taken_over_once`, the zombie's run (fence f) is taken over by
        another worker (with `own`, by the zombie's own process again, its older run
        still in flight); then that run (fence f + 1) lapses the same way and is
        taken over once more (fence f + 2). The run of fence f sends its report, then
        the run of fence f + 1 the same event.

        Checked in the step (`_report`) and after it (`_check_job`): I7, both reports
        are refused (`LeaseLost`) and change nothing, and each is audited as
        rejected: one entry per (event, fence), the second not taken for a repeat
        of the first.
        """
        zombie = self._active(w)
        assert zombie is not None
        needs = "leased" if event in ("start", "release") else "running"
        taken = self._take_over_once(zombie, j, needs, roll, own=own)
        if taken is None:
            return
        jid, first = taken
        job = self.real.get(jid)
        if job is None:
            return
        later = next(
            (
                x
                for x in self.workers
                if job.fence != first
                and x.active
                and jid in x.held
                and x.held[jid].fence == job.fence
            ),
            None,
        )
        reports = [(zombie, first)]
        if (
            later is not None
            and job.state == needs
            and self._lapse_requeues(job)
            and self._take_over(later, jid, needs, roll // 7)
        ):
            self._fault("lease taken over twice")
            reports.append((later, job.fence))
        for worker, fence in reports:
            self._report(worker, jid, event, fence, self._zombie_call(jid, event, fence, roll))
        for worker, _ in reports:
            self._reconcile(worker, jid)

    def _zombie_of_a_running_job(
        self, w: int, j: int, roll: int, own: bool
    ) -> tuple[SimWorker, str, int] | None:
        """`_take_over_once` of a running job of the `w`-th active worker: the zombie,
        the job id and the zombie's fence, or None."""
        zombie = self._active(w)
        assert zombie is not None
        taken = self._take_over_once(zombie, j, "running", roll, own=own)
        return None if taken is None else (zombie, *taken)

    def _take_over_once(
        self, zombie: SimWorker, j: int, needs: str, roll: int, *, own: bool = False
    ) -> tuple[str, int] | None:
        """`zombie` holds a run in phase `needs` (`_one_behind_run`) and stalls past its
        lease; the sweep expires it under the same fence; another worker (with `own`,
        the zombie's own process, awake again) leases it (fence + 1) and starts it if
        `needs` is running; the zombie wakes, still believing it holds the run (with
        `own`, its older run is still in flight). The run's job id and the zombie's
        fence, or None (the zombie holds no such run, or no other worker is active)."""
        picked = self._one_behind_run(zombie, j, needs)
        if picked is None:
            return None
        jid, fence = picked
        if not self._take_over(zombie, jid, needs, roll, own=own):
            return None
        return jid, fence

    def _take_over(
        self, zombie: SimWorker, jid: str, needs: str, roll: int, *, own: bool = False
    ) -> bool:
        """`_take_over_once` of the run of `jid` that `zombie` holds; False if no
        other worker is active to take it (the zombie stays paused)."""
        zombie.paused = True
        self._fault("worker pause")
        self.clock.advance(self.policy.lease.ttl + 1.0)
        self._fault("clock jump past leases")
        self._sweep(judged=False)
        if own:
            zombie.paused = False
            self._fault("zombie wakes")
            taker = zombie
        else:
            takers = [x for x in self.workers if x.active]
            if not takers:
                return False
            taker = takers[roll % len(takers)]
        for job in self._claim(taker, 1, ids=[jid]):
            self._fault("job leased again by its own worker" if own else "lease taken over once")
            if needs == "running":
                self._start(taker, jid, job.fence)
        if not own:
            zombie.paused = False
            self._fault("zombie wakes")
        return True

    def _one_behind_run(self, worker: SimWorker, j: int, phase: str) -> tuple[str, int] | None:
        """A run of `worker` in `phase` whose lapse the sweep turns back to a claimable
        state without moving the fence (`_lapse_requeues`; not a kind with a
        reconciler); if it holds none, it leases (and starts) a due job of a kind that
        may fit. The run's job id and fence, or None."""

        def fits(jid: str) -> bool:
            job = self.real.get(jid)
            return job is not None and job.kind not in self.marking and self._lapse_requeues(job)

        held = [
            jid
            for jid in sorted(worker.held, key=self.index.__getitem__)
            if worker.held[jid].phase == phase and fits(jid)
        ]
        if not held:
            jid = self._due_for(phase, j)
            if jid is None:
                return None
            for job in self._claim(worker, 1, ids=[jid]):
                if phase == "running":
                    self._start(worker, job.id, job.fence)
            h = worker.held.get(jid)
            held = [jid] if h is not None and h.phase == phase and fits(jid) else []
        if not held:
            return None
        jid = held[j % len(held)]
        return jid, worker.held[jid].fence

    def _due_for(self, phase: str, j: int) -> str | None:
        """A due job a worker may lease for a run in `phase` that `_one_behind_run` can
        use: not of a kind with a reconciler and, for a running one, of a retry-safe
        kind. Its id, or None."""
        now = self.clock.now()
        due = [
            job.id
            for job in self._tracked()
            if job.kind not in self.marking
            and (phase == "leased" or self.kinds_by_name[job.kind].retry_safe)
            and job.state in self.lease_states
            and job.run_after <= now
            and (job.deadline is None or job.deadline > now)
        ]
        return due[j % len(due)] if due else None

    def _lapse_requeues(self, job: Job) -> bool:
        """Whether the sweep, once `job`'s lease lapsed, puts it back due under the same
        fence: what `decide` says of its `expire` then (leased -> queued; running ->
        retry_wait only within its recovery budget, with attempts left and before its
        deadline, else investigate or failed), and its deadline still ahead."""
        later = self.clock.now() + self.policy.lease.ttl + 1.0
        try:
            back = decide(job, "expire", later, self.policy, spec=self.spec).job
        except JobFSMError:
            return False
        return (
            back.state in self.lease_states
            and back.fence == job.fence
            and back.run_after <= later
            and (back.deadline is None or back.deadline > later)
        )

    @staticmethod
    def _zombie_args(event: str, fence: int, roll: int) -> dict[str, Any]:
        """The arguments of a zombie's report of an outcome (an event in REPORTED)."""
        if event == "succeed":
            return {"fence": fence, "result_json": jsonio.encode({"fence": fence})}
        if event == "fail":
            return {"fence": fence, "error": "handler raised", "delay": float(roll % 60)}
        return {"fence": fence, "error": "outside effect unknown"}

    def _zombie_call(self, jid: str, event: str, fence: int, roll: int) -> Callable[[], Job]:
        e = self.engine
        if event in REPORTED:
            return partial(e.transition, jid, event, **self._zombie_args(event, fence, roll))
        calls: dict[str, Callable[[], Job]] = {
            "start": partial(self._start_call, jid, fence),
            "release": lambda: e.release(jid, fence),
            "mark": lambda: e.mark(jid, fence, "calling the outside system", f"ext-{jid}"),
        }
        return calls[event]

    @rule(seconds=st.sampled_from((1.0, 6.0, 31.0, 61.0, 400.0, 4000.0)))
    def advance_clock(self, seconds: float) -> None:
        self.clock.advance(seconds)
        if seconds >= self.policy.lease.ttl:
            self._fault("clock jump past leases")

    @precondition(lambda self: any(x.sent for x in self.workers if x.active))
    @rule(w=W, k=st.integers(0, SENT_LOG - 1))
    def duplicate_report(self, w: int, k: int) -> None:
        """A report delivered again, late: it must change nothing."""
        senders = [x for x in self.workers if x.active and x.sent]
        worker = senders[w % len(senders)]
        s = worker.sent[k % len(worker.sent)]
        e = self.engine
        calls: dict[str, Callable[[], Job]] = {
            "start": lambda: e.start(s.job_id, s.fence),
            "succeed": lambda: e.succeed(s.job_id, s.fence, {"fence": s.fence}),
            "fail": lambda: e.fail(s.job_id, s.fence, "handler raised"),
            "ambiguous": lambda: e.ambiguous(s.job_id, s.fence, "outside effect unknown"),
            "release": lambda: e.release(s.job_id, s.fence),
            "cancelled_ack": lambda: e.cancelled_ack(s.job_id, s.fence, "partial"),
            # a zombie's mark (lease_taken_over_once), delivered again
            "mark": lambda: e.mark(s.job_id, s.fence, "calling the outside system", "ext-dup"),
        }
        self._fault("duplicate report")
        before = self.real.get(s.job_id)
        if before is None:
            return
        if s.event == "mark" and before.fence == s.fence:
            return  # the run still holds the lease: a mark again is its own new mark
        outcome = self._report(worker, s.job_id, s.event, s.fence, calls[s.event])
        if outcome == "applied" or self._applied_since(s.job_id, before.version, s.event, s.fence):
            self._fail(f"I7 job {s.job_id}: a duplicate {s.event} (fence {s.fence}) was applied")
        self._reconcile(worker, s.job_id)

    @precondition(lambda self: self._has_held("leased"))
    @rule(w=W, j=J)
    def reordered_report(self, w: int, j: int) -> None:
        """A succeed that overtakes its start: illegal in leased, so nothing changes."""
        picked = self._pick_held(w, j, "leased")
        assert picked is not None
        worker, jid = picked
        f = worker.held[jid].fence
        self._fault("reordered report")
        before = self.real.get(jid)
        outcome = self._report(worker, jid, "succeed", f, lambda: self.engine.succeed(jid, f))
        if before is not None and before.state == "leased" and outcome == "applied":
            self._fail(f"I8 job {jid}: succeed was applied to a leased job")
        self._reconcile(worker, jid)

    @rule(method=st.sampled_from(FAULTABLE), when=st.sampled_from(("before", "after")))
    def store_fault(self, method: str, when: str) -> None:
        """Arm a one-shot store error for the next call of `method`."""
        self.store.arm(method, when)

    @rule(progress=st.booleans())
    def concurrent_write(self, progress: bool) -> None:
        """Arm a concurrent writer that changes the job just before the next apply
        (with `progress`, on a store that keeps it, a running job's holder saves its
        progress there instead of a heartbeat: no new version, so the decision read
        before it still applies, and must keep that progress, U2)."""
        self.race_saves = progress and self.saves
        self.store.arm_race()

    def _race(self, jid: str) -> str | None:
        job = self.real.get(jid)
        if job is None:
            return None
        if job.state in self.cancel_states:
            self.direct.cancel(jid, actor="racer", reason="concurrent cancel")
            return "operator cancel"
        if self.race_saves and job.state == "running" and job.owner is not None:
            self.saved += 1
            text = envelope(job, jsonio.encode({"done": self.saved}), self.clock.now())
            if jid in self.direct.save_progress(job.owner, {jid: (job.fence, text)}):
                self.progress[jid] = text
                return "progress save"
        if job.state in self.owned and job.owner is not None:
            self.direct.heartbeat(job.owner, {jid: job.fence})
            return "heartbeat"
        return None

    # --- operators and sweeps ------------------------------------------------------

    @rule()
    def probe_fault(self) -> None:
        """The store does not answer the next liveness probe: that proves nothing."""
        self.liveness.fail_next()
        self._fault("liveness probe failed")

    @precondition(lambda self: self.jobs)
    @rule(judged=st.booleans(), w=W)
    def sweep(self, judged: bool, w: int) -> None:
        self._sweep(judged, by=self._active(w))

    def _sweep(self, judged: bool, by: SimWorker | None = None, asker: Asker | None = None) -> None:
        """The production recovery sweep; judged, by a live worker's own identity (whose
        registry of held runs is the one its run table keeps); with `asker`, the
        reconcilers are asked through it (`fsm.service.reconcile.Asker`)."""
        sweeper = by if judged and by is not None and by.alive else None
        before = {j.id: j for j in self._tracked() if j.state in self.owned}
        # A store error leaves the sweep's work to the next sweep.
        with contextlib.suppress(TransientStoreError):
            if sweeper is None:
                recovery.sweep(self.engine)
            else:
                recovery.sweep(
                    self.engine,
                    sweeper.identity,
                    self.liveness.probe,
                    reconcilers=self.outside.reconcilers(self.marking),
                    asker=asker,
                )
        self._check_death_verdicts(before)

    def _check_death_verdicts(self, before: Mapping[str, Job]) -> None:
        """I1: a run taken back on a death verdict was really dead (its process gone, or
        not running that run): UNKNOWN is never read as DEAD."""
        for jid, job in before.items():
            taken = [
                e
                for e in self.real.history(jid)
                if e.version == job.version + 1 and e.event == "expire"
            ]
            if not taken or taken[0].data.get("verdict") != "dead":
                continue
            running = [
                x
                for x in self.workers
                if x.alive
                and x.owner == job.owner
                and jid in x.held
                and x.held[jid].fence == job.fence
            ]
            if running:
                self._fail(
                    f"I1 job {jid}: expired on a death verdict ({taken[0].data.get('reason')}) "
                    "while its "
                    f"owner {job.owner} was alive and running it (fence {job.fence})"
                )
        self.stats.checks["I1 death verdicts only on dead runs"] += 1

    @precondition(lambda self: self.jobs)
    @rule(j=J)
    def operator_cancel(self, j: int) -> None:
        jid = self._job(j)
        self.touched.add(jid)
        before = self.real.get(jid)
        if before is None:
            return
        if before.state == "running":
            self._fault("cancel of a running job")

        def cancel(engine: Engine | AsyncClient) -> Job:
            return engine.cancel(jid, actor="operator", reason="fault suite cancel")

        with contextlib.suppress(IllegalTransition, TransientStoreError):
            cancel(self.client)
        self._repeat_is_noop(jid, lambda j: j.state in ("cancelled", "cancelling"), cancel)

    def _repeat_is_noop(
        self, jid: str, settled: Callable[[Job], bool], again: Callable[[Engine], Job]
    ) -> None:
        """S04: repeating an operator action that took effect changes nothing."""
        before = self.real.get(jid)
        if before is None or not settled(before):
            return
        trail = len(self.real.history(jid))
        try:
            again(self.direct)
        except IllegalTransition as err:
            self._fail(f"S04 job {jid}: repeating a settled operator action raised {err}")
        after = self.real.get(jid)
        if after is None or after.version != before.version or len(self.real.history(jid)) != trail:
            self._fail(f"S04 job {jid}: repeating an operator action changed the job")
        self.stats.checks["S04 operator actions idempotent"] += 1

    @precondition(lambda self: any(s in self.requeue_states for s in self.states.values()))
    @rule(j=J, attempts=st.integers(1, 3))
    def operator_requeue(self, j: int, attempts: int) -> None:
        picks = [jid for jid in self.jobs if self.states.get(jid) in self.requeue_states]
        jid = picks[j % len(picks)]
        self.touched.add(jid)
        with contextlib.suppress(IllegalTransition, TransientStoreError):
            self.client.requeue(
                jid, actor="operator", reason="fault suite requeue", attempts=attempts
            )

    @precondition(lambda self: "investigate" in self.states.values())
    @rule(j=J, succeeded=st.booleans())
    def operator_resolve(self, j: int, succeeded: bool) -> None:
        picks = [jid for jid in self.jobs if self.states.get(jid) == "investigate"]
        jid = picks[j % len(picks)]
        self.touched.add(jid)
        outcome = "succeeded" if succeeded else "failed"

        def resolve(engine: Engine | AsyncClient) -> Job:
            return engine.resolve(jid, outcome=outcome, actor="operator", reason="checked by hand")

        with contextlib.suppress(IllegalTransition, TransientStoreError):
            resolve(self.client)
        self._repeat_is_noop(jid, lambda j: j.state == outcome, resolve)

    @precondition(lambda self: any(s in self.erase_states for s in self.states.values()))
    @rule(j=J)
    def operator_erase(self, j: int) -> None:
        """An operator erases a finished job's payload, result and progress
        (`Engine.erase`). F1: once it returns, none is left in the record nor in any
        entry of the trail, the state, fence and attempt are as they were (I4), and the erase is in
        the trail under its operator; a store that cannot erase refuses it and changes
        nothing."""
        picks = [jid for jid in self.jobs if self.states.get(jid) in self.erase_states]
        jid = picks[j % len(picks)]
        self.touched.add(jid)
        before = self.real.get(jid)
        if before is None:
            return
        trail = len(self.real.history(jid))
        try:
            self.client.erase(jid, actor="operator", reason="fault suite erase")
        except (TransientStoreError, IllegalTransition):
            return  # a fault of the machine's store (the erase may or may not have landed)
        except BadInput:
            if isinstance(self.real, Erasable):
                raise
            after = self.real.get(jid)
            if after != before or len(self.real.history(jid)) != trail:
                self._fail(f"F1 job {jid}: an erase the store refused changed the job")
            return
        self.progress.pop(jid, None)  # erased with the payload and result (U2)
        after = self.real.get(jid)
        history = self.real.history(jid)
        if after is None or (after.state, after.fence, after.attempt) != (
            before.state,
            before.fence,
            before.attempt,
        ):
            self._fail(f"F1 job {jid}: an erase of a {before.state} job made it {after}")
        assert after is not None
        if (after.payload, after.result, after.progress_json) != (None, None, None):
            self._fail(f"F1 job {jid}: erased, yet its record keeps payload, result or progress")
        kept = [
            e.event
            for e in history
            for field in ERASED
            if json.loads(e.data_json or "{}").get(field) not in (None, "null")
        ]
        if kept:
            self._fail(f"F1 job {jid}: erased, yet its trail keeps a copy in {kept}")
        last = history[-1]
        if (last.event, last.outcome, last.actor) != ("erase", "applied", "operator"):
            self._fail(f"F1 job {jid}: an erase left no audit entry (last: {last.event})")
        self.stats.checks["F1 an erase blanks the record and the whole trail"] += 1

    @precondition(lambda self: self.jobs)
    @rule(late=st.booleans())
    def prune(self, late: bool) -> None:
        """Retention: only finished jobs past their retention may disappear.

        `late`: the pass comes after the longest retention has passed (the clock moves
        on first), so every job of the example, finished or not, is old enough for a
        prune that ignores the state to take it: without it, a pass met such jobs in
        few examples (a store that pruned any old job survived 200 examples of 1 seed
        in 10). The example's jobs are read in one scan before and one after (not one
        `get` each); a job the second scan misses is gone only if `get` agrees."""
        if late:
            kept = [k for k in self.policy.limits.retention.values() if k is not None]
            self.clock.advance(max(kept, default=0.0) + 1.0)
        before = self._stored()
        with contextlib.suppress(TransientStoreError):
            self.engine.prune()
        now = self.clock.now()
        retention = self.policy.limits.retention
        after = self._stored()
        for jid in list(self.jobs):
            job = before.get(jid)
            if job is None or jid in after or self.real.get(jid) is not None:
                continue
            keep = retention.get(job.state)
            if (
                job.state not in self.spec.terminal
                or keep is None
                or job.finished_at is None
                or job.finished_at >= now - keep
            ):
                self._fail(f"I3 job {jid}: pruned while {job.state!r} (finished {job.finished_at})")
            self._forget(jid)
            self._fault("finished job pruned")

    def _stored(self) -> dict[str, Job]:
        """The example's jobs as stored, by id, in one read."""
        listed = self.real.scan(
            ScanRequest(states=self.spec.states, queues=(self.queue,), limit=10_000)
        )
        return {j.id: j for j in listed}

    def _forget(self, jid: str) -> None:
        self.jobs.remove(jid)
        self.kind_of.pop(jid, None)
        self.index = {x: i for i, x in enumerate(self.jobs)}
        self.seen.pop(jid, None)
        self.states.pop(jid, None)
        self.progress.pop(jid, None)
        self.refused.pop(jid, None)
        for w in self.workers:
            w.let_go(jid)
            w.sent = [s for s in w.sent if s.job_id != jid]

    # --- invariants ----------------------------------------------------------------

    @invariant()
    def invariants_hold(self) -> None:
        self.outside.release()  # a hang outlives its timeout, not its step
        self.stats.steps += 1
        checks = self.stats.checks
        listed = self.real.scan(
            ScanRequest(states=self.spec.states, queues=(self.queue,), limit=10_000)
        )
        by_id: dict[str, Job] = {}
        for job in listed:
            if job.id in by_id:
                self._fail(
                    f"I3 job {job.id} is listed twice (states {by_id[job.id].state}, {job.state})"
                )
            by_id[job.id] = job
        checks["I3 every job in exactly one state"] += 1
        for jid in self.jobs:
            if jid not in by_id:
                self._fail(f"I3 job {jid} is lost: the store no longer has it")
        extra = set(by_id) - set(self.index)
        if extra:
            self._fail(f"I3 the store holds jobs nobody submitted: {sorted(extra)}")
        tally: Counter[tuple[str, str]] = Counter((j.queue, j.state) for j in listed)
        counts = {k: v for k, v in self.real.counts().items() if v and k[0] == self.queue}
        if counts != dict(tally):
            self._fail(f"I3 counts() {counts} disagree with the jobs listed {dict(tally)}")
        checks["I3 counts agree"] += 1
        # the prerequisites the store keeps, of every dependent, in one read
        dependents = [jid for jid in self.jobs if jid in self.after]
        stored = (
            self.real.prerequisites(dependents)
            if dependents and isinstance(self.real, TracksDependencies)
            else {}
        )
        for jid in self.jobs:
            self._check_job(by_id[jid], by_id, stored)
        self._check_owners(by_id)
        self.states = {jid: by_id[jid].state for jid in self.jobs}
        self.touched.clear()

    def _check_job(
        self, job: Job, by_id: Mapping[str, Job], stored: Mapping[str, Mapping[str, Any]]
    ) -> None:
        checks = self.stats.checks
        # An unchanged record that no step addressed keeps its (already checked) trail.
        if self.sound.get(job.id) != job.version or job.id in self.touched:
            history = self.real.history(job.id)
            problems = trail_problems(job, history, self.spec, self.policy)
            problems += rejection_problems(job.id, history, self.refused.get(job.id, ()))
            if problems:
                self._fail("; ".join(problems))
            self.sound[job.id] = job.version
            self.requeued[job.id] = requeues(history)
        checks["I2/I4/I5/I6/I8 audit trail and replay"] += 1
        checks["I7 refused reports audited as rejected once per (event, fence)"] += 1
        if job.id in self.after:
            self._check_dependencies(job, by_id, stored)
        last = self.seen.get(job.id)
        now = (job.fence, job.version, job.recoveries)
        if last is not None and any(a < b for a, b in zip(now, last, strict=True)):
            self._fail(f"I2 job {job.id}: (fence, version, recoveries) went from {last} to {now}")
        self.seen[job.id] = now
        checks["I2 fences, versions and recoveries only grow"] += 1
        fences = self.effects.get(job.id, [])
        if len(set(fences)) != len(fences):
            self._fail(f"I7 job {job.id}: a fenced effect committed twice under one fence {fences}")
        granted = self.requeued.get(job.id, 0)
        if not job.retry_safe and len(fences) > 1 + granted:
            self._fail(
                f"I7 job {job.id} (not retry-safe): its outside effect committed "
                f"{len(fences)} times with {granted} operator requeues"
            )
        checks["I7 fenced effects at most once"] += 1
        if self.saves:
            if job.progress_json != self.progress.get(job.id):
                self._fail(
                    f"U2 job {job.id} ({job.state}): the store holds progress "
                    f"{job.progress_json}, the holder's latest save was "
                    f"{self.progress.get(job.id)}"
                )
            checks["U2 stored progress is the holder's latest save"] += 1

    def _check_dependencies(
        self, job: Job, by_id: Mapping[str, Job], stored: Mapping[str, Mapping[str, Any]]
    ) -> None:
        """D1/D2: a dependent is leased only as its prerequisites and its rule allow.

        The trails are read again only when the dependent or one of its prerequisites
        moved (a new version) or a step addressed one of them: unchanged records keep
        their already checked answer, as `_check_job` keeps unchanged trails."""
        if isinstance(self.real, TracksDependencies) and set(stored.get(job.id, {})) != set(
            self.after[job.id]
        ):
            self._fail(f"D0 job {job.id}: the store lost its prerequisites {self.after[job.id]}")
        pres = self.after[job.id]
        now = (job.version, tuple(by_id[p].version if p in by_id else None for p in pres))
        if self.deps_sound.get(job.id) == now and not self.touched & {job.id, *pres}:
            self.stats.checks["D1/D2 dependents leased only as their prerequisites allow"] += 1
            return
        found: dict[str, tuple[Job, list[Any]] | None] = {}
        for pid in pres:
            pre = by_id.get(pid) or self.real.get(pid)
            found[pid] = None if pre is None else (pre, self.real.history(pid))
        problems = dependency_problems(job, self.real.history(job.id), found, self.spec)
        if problems:
            self._fail("; ".join(problems))
        self.deps_sound[job.id] = now
        self.stats.checks["D1/D2 dependents leased only as their prerequisites allow"] += 1

    def _check_owners(self, by_id: Mapping[str, Job]) -> None:
        for jid in self.jobs:
            job = by_id[jid]
            if job.state not in self.owned:
                continue
            holders = [
                x
                for x in self.workers
                if x.alive and jid in x.held and x.held[jid].fence == job.fence
            ]
            if len(holders) > 1 or (holders and holders[0].owner != job.owner):
                names = [str(x.owner) for x in holders]
                self._fail(
                    f"I1 job {jid} ({job.state}, fence {job.fence}, owner {job.owner}) "
                    f"is held by {names}"
                )
        self.stats.checks["I1 at most one live owner"] += 1

    # --- the end: stop faults, let time pass, settle, check liveness ---------------

    def teardown(self) -> None:
        try:
            if sys.exc_info()[1] is None and not self.broken:
                self._settle()
        finally:
            self.outside.release()
            self.stats.faults.update(self.store.fired)
            try:
                if isinstance(self.client, AsyncClient):
                    self.client.close()
                self._forget_queue()
            finally:
                self.store.close()
            if self.stats.progress is not None:
                self.stats.progress(self.stats)

    def _forget_queue(self) -> None:
        """On a database the run's examples share (PostgreSQL's run schema), delete this
        example's jobs: an example that ended unsettled (hypothesis stops one at its last
        step) left leased and running jobs, and later examples' sweeps, which scan every
        job of the store as a worker's do, met them first; the same choices then led to
        different steps (Flaky). A store of the example's own has nothing to forget."""
        forget: Callable[[str], None] | None = offered(QUEUE_FORGETTERS, self.real)
        if forget is not None:
            forget(self.queue)

    def _settle(self) -> None:
        self.store.disarm()
        for i, x in enumerate(self.workers):
            x.paused = False
            if not x.alive:
                self.workers[i] = self._new_worker()
        for rnd in range(SETTLE_ROUNDS):
            if all(self.spec.is_final(j.state) for j in self._tracked()):
                break
            self.outside.release()
            for x in self.workers:
                self._heartbeat(x)
            self._sweep(judged=True, by=self.workers[rnd % len(self.workers)])
            for x in self.workers:
                self._claim(x, MAX_JOBS)
                for jid in sorted(x.held, key=self.index.__getitem__):
                    self._drive(x, jid, rnd)
            self.clock.advance(SETTLE_STEP)
        now = self.clock.now()
        stuck = [
            f"{j.id} {j.state}"
            + (
                f" (deadline {j.deadline} passed: the sweep never failed it)"
                if j.deadline and j.deadline <= now
                else ""
            )
            for j in self._tracked()
            if not self.spec.is_final(j.state)
        ]
        if stuck:
            self._fail(f"I3 liveness: after {SETTLE_ROUNDS} fault-free rounds, not final: {stuck}")
        self.stats.checks["I3 liveness: every job terminal or in investigate"] += 1
        self.invariants_hold()
        self._clear_queue()

    def _clear_queue(self) -> None:
        """Once its last check held, delete the example's finished jobs and their trails
        (the production prune, its queue only, any age). A store shared by the examples
        (PostgreSQL's schema) then holds one example's jobs at a time, not every earlier
        one: `counts()`, which the check after every step reads, groups the whole table."""
        request = PruneRequest(
            cutoffs=dict.fromkeys(sorted(self.spec.terminal), float("inf")),
            queues=(self.queue,),
            limit=CLEAR_BATCH,
        )
        while self.real.prune(request) >= CLEAR_BATCH:
            pass

    def _tracked(self) -> list[Job]:
        """The example's jobs as stored, in one read (pruned ones are gone)."""
        by_id = self._stored()
        return [by_id[jid] for jid in self.jobs if jid in by_id]

    def _drive(self, worker: SimWorker, jid: str, rnd: int) -> None:
        for step in range(4):
            held = worker.held.get(jid)
            if held is None:
                return
            if held.phase == "leased":
                self._start(worker, jid, held.fence)
            elif held.phase == "running":
                self._finish(worker, jid, rnd * 37 + step * 11 + self.index[jid])
            else:
                ack = partial(self.engine.cancelled_ack, jid, held.fence, "partial")
                self._report(worker, jid, "cancelled_ack", held.fence, ack)
                self._reconcile(worker, jid)
