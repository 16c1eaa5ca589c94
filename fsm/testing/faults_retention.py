"""The `retention` fault model: passes of several workers' automatic retention
(`fsm.service.maintenance.retention.Retention`, the production service) over one store,
against the promises of docs/retention.md.

Each example opens a fresh database and gives two or three workers each their own store
handle (as separate worker processes hold) and a retention plan drawn per example (a
retention per finished state, or "forever"; batches of 1 to 3 jobs, 1 to 3 batches per
pass; a lease of 5 to 60 s). Jobs go to two queues: one with a retention rule of its
own (`Limits.queue_retention`), the other kept by the default rule, drawn finite too.
Then, on a fake clock: jobs are submitted and driven to succeeded, failed or cancelled
(or left queued or running), a job is made to wait on a succeeded prerequisite and a
queued one (`after=`), the clock moves by steps of
1 s to an hour (a holder that stops passing loses its lease by expiry), workers pass,
and a worker stops (giving its lease up) or dies (keeping it until it expires).

The oracle is computed here from the plan and the model's own record of who was given
the lease until when, never from the store's lease table:

- G1 exclusive: a pass prunes only if its worker holds the lease, and holds it only
  if no other worker was given it past the pass's time; a lease that expired or was
  given up is handed to the next worker that asks (expiry hands it over);
- G2 within retention: a pass deletes only finished jobs whose age (now - finished_at)
  is more than their state's retention by their queue's own rule (a queue with a rule
  of its own is never pruned by the default's); a pass that ended below its bound leaves no
  job past its retention behind;
- G3 bounded: a pass runs at most `max_batches` batches and deletes at most
  `batch x max_batches` jobs; a worker that does not hold the lease deletes nothing;
- G4 counted: a pass that held the lease tells its observers (the retention metrics,
  `Observer.on_retention`) what it deleted, by (queue, state), at the pass's time, and
  a refused pass tells nothing;
- G5 held: a pass never deletes a job that a waiting job names as its prerequisite
  (which would then fail as "gone"), by whichever rule it runs;
- G6 a worker's retention thread (the production `fsm.worker.retainer.Retainer`, run
  now and then in place of a bare pass) passes once as it starts, checked as every
  pass is (G1 to G5), and once its worker drains it ends within `RETAINER_WAIT`
  seconds and gives its lease up: another worker's pass right after takes the lease
  (G1 then says whether it had to).

On a store shared by every example (PostgreSQL's run schema: one that holds jobs when
the example starts) each example keeps to queues of its own: each has a rule of its own
(`Limits.queue_retention`), the default rule keeps every other queue forever, and
each example starts a year after the last, so the leases of earlier examples have
expired.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import attrs
import hypothesis
from hypothesis import given
from hypothesis import strategies as st

from ..clock import FakeClock
from ..inputs import KindPolicy
from ..lifecycle.prerequisites import PREREQUISITE_GONE
from ..lifecycle.spec import lifecycle
from ..ports import LeasesServices, ScanRequest
from ..records import Job, Owner
from ..service.dependencies import waiting_states
from ..service.engine import Engine
from ..service.identity import Identity
from ..service.maintenance.report import Report
from ..service.maintenance.retention import Retention, RetentionPlan
from ..telemetry.observers import ObserverBase
from ..worker.handlers import Handlers
from ..worker.retainer import Retainer
from ..worker.state import Shared
from .faults_commits import quiet
from .faults_machine import suite_policy
from .faults_models import ModelRun

KIND = "retention.job"
#: the kind of the second queue, kept by the default rule (or its own, see _World)
OTHER_KIND = "retention.other"
FINISHED = ("succeeded", "failed", "cancelled")
OWNER = Owner(host="retention-sim", pid=5, incarnation="retention-incarnation-a")
#: real seconds a worker's retention thread has for its first pass, and to end once its
#: worker drains (its pause between passes is the plan's minute: only the drain ends it)
RETAINER_WAIT = 10.0
#: seconds from 2030-01-01: each example starts a year after the last
YEAR = 365 * 86400.0
START = 1_893_456_000.0

_keep = st.one_of(st.none(), st.sampled_from((1.0, 10.0, 60.0, 600.0, 3600.0)))
_jobs = st.tuples(
    st.just("jobs"),
    st.tuples(st.sampled_from((*FINISHED, "queued", "running")), st.integers(0, 1)),
    st.integers(1, 6),
)
#: a waiting job with a succeeded prerequisite and an unfinished one, in queue 0 or 1
_dependent = st.tuples(st.just("dependent"), st.integers(0, 1), st.just(0))
#: a dependent cancelled by an operator, so its finished prerequisite may be pruned, then
#: requeued back to waiting and judged: on a pruned prerequisite alone (0) or beside a
#: queued one that then succeeds (1)
_orphan = st.tuples(st.just("orphan"), st.integers(0, 1), st.integers(0, 1))
_advance = st.tuples(
    st.just("advance"), st.sampled_from((1.0, 5.0, 10.0, 30.0, 60.0, 600.0, 3600.0)), st.just(0)
)
_pass = st.tuples(st.just("pass"), st.integers(0, 2), st.just(0))
#: worker i's retention thread starts (its first pass at once) and its worker drains
_retainer = st.tuples(st.just("retainer"), st.integers(0, 2), st.just(0))
_end = st.tuples(st.sampled_from(("stop", "die")), st.integers(0, 2), st.just(0))
#: passes and jobs weigh most; a worker ends now and then; a dependent or an orphan
#: weighs as much as a dependent alone did before orphans (the time of a run)
_step = st.one_of(
    _jobs,
    _jobs,
    st.one_of(_dependent, _orphan),
    _advance,
    _advance,
    _pass,
    _pass,
    st.one_of(_pass, _retainer),
    _end,
)
_example = st.fixed_dictionaries(
    {
        "keep": st.fixed_dictionaries(dict.fromkeys(FINISHED, _keep)),
        # the default rule: forever now and then (a pass then spends no batch on it,
        # and the override rule gets them all), else drawn like the queue's own
        "default": st.one_of(
            st.just(dict.fromkeys(FINISHED)), st.fixed_dictionaries(dict.fromkeys(FINISHED, _keep))
        ),
        "batch": st.integers(1, 3),
        "max_batches": st.integers(1, 3),
        "lease_for": st.sampled_from((5.0, 30.0, 60.0)),
        "workers": st.integers(2, 3),
        "steps": st.lists(_step, min_size=10, max_size=40),
    }
)


#: an explicit example (every run): a waiting dependent (G5: its succeeded prerequisite is
#: past retention and kept), then dependents cancelled by an operator, on a succeeded
#: prerequisite alone or beside a queued one; passes prune the succeeded ones (1 s) and
#: keep the cancelled dependents (forever); each is requeued and judged (D3)
_KEEP = {"succeeded": 1.0, "failed": 3600.0, "cancelled": None}
ORPHANS: dict[str, Any] = {
    "keep": _KEEP,
    "default": _KEEP,
    "batch": 3,
    "max_batches": 3,
    "lease_for": 30.0,
    "workers": 2,
    "steps": [
        ("dependent", 0, 0),
        ("orphan", 0, 0),
        ("orphan", 1, 1),
        ("jobs", ("succeeded", 0), 1),
        ("jobs", ("failed", 0), 1),  # kept an hour: G2 (not by the shortest retention)
        ("advance", 10.0, 0),
        ("pass", 0, 0),
        ("orphan", 0, 1),
        ("advance", 10.0, 0),
        ("pass", 1, 0),
        ("pass", 0, 0),
        ("jobs", ("succeeded", 1), 2),
        ("advance", 3600.0, 0),
        ("retainer", 1, 0),  # G6: worker 1's thread takes the lease, prunes, gives it up
        ("pass", 0, 0),
    ],
}


class RetentionModel:
    name: ClassVar[str] = "retention"
    about: ClassVar[str] = "retention passes of several workers, lease expiry and hand-over, bounds"
    examples: ClassVar[dict[str, int]] = {"quick": 15, "default": 100, "thorough": 500}

    def run(self, ctx: ModelRun) -> None:
        with ctx.database() as opener:
            leases = isinstance(opener(), LeasesServices)
        if not leases:
            ctx.notes.append("retention model not run: the store does not lease services")
            return
        years = itertools.count()

        @ctx.settings(self.examples[ctx.size])
        @given(example=_example)
        @hypothesis.example(example=ORPHANS)
        def one(example: dict[str, Any]) -> None:
            run_example(ctx, example, START + next(years) * YEAR)

        with quiet(("fsm.service.maintenance.retention",)):  # a line per pass, by design
            one()


def run_example(ctx: ModelRun, example: dict[str, Any], start: float = START) -> None:
    """One example (`ORPHANS`, or a drawn one) on a fresh database of `ctx`; on a shared
    one, `start` must be past the leases of the examples before it."""
    with ctx.database() as opener:
        _World(ctx, opener, example, start).play(example["steps"])


class _Told(ObserverBase):
    """What a worker's retention told its observers, pass by pass."""

    def __init__(self) -> None:
        self.passes: list[tuple[dict[tuple[str, str], int], float]] = []

    def on_retention(self, pruned: Mapping[tuple[str, str], int], at: float) -> None:
        self.passes.append((dict(pruned), at))


class _World:
    def __init__(self, ctx: ModelRun, opener: Any, example: dict[str, Any], start: float) -> None:
        self.ctx = ctx
        self.clock = FakeClock(start)
        self.start = start
        tag = uuid.uuid4().hex[:8]
        self.queue = f"retention-{tag}"
        #: a second queue: the default rule's on a database of the example's own, else
        #: a rule of its own beside `queue`'s
        self.other = f"retention-other-{tag}"
        self.queues = (self.queue, self.other)
        kinds = {KIND: KindPolicy(queue=self.queue), OTHER_KIND: KindPolicy(queue=self.other)}
        self.kinds = (KIND, OTHER_KIND)
        self.keep: dict[str, float | None] = dict(example["keep"])
        drawn: dict[str, float | None] = dict(example["default"])
        base = suite_policy()
        forever = dict.fromkeys(lifecycle().terminal)  # other queues: kept forever
        probe = opener()
        # a database that holds no job yet is the example's own (memory, SQLite): the
        # default rule is drawn finite, and prunes the second queue but never `queue`,
        # which has a rule of its own. On a shared one (PostgreSQL's run schema) the
        # default keeps the run's other examples forever, and the second queue gets a
        # rule of its own too
        own = not probe.scan(ScanRequest(states=lifecycle().states, limit=1))
        default = drawn if own else forever
        overrides = {self.queue: self.keep} if own else {self.queue: self.keep, self.other: drawn}
        #: queue -> the rule its jobs are kept by
        self.rules: dict[str, dict[str, float | None]] = {self.queue: self.keep, self.other: drawn}
        limits = attrs.evolve(base.limits, retention=forever, queue_retention=overrides)
        policy = attrs.evolve(base, limits=limits)
        self.admin = Engine(opener(), clock=self.clock, policy=policy, kinds=kinds)
        #: dependent -> its prerequisites (the model's own record of who waits on whom)
        self.deps: dict[str, tuple[str, ...]] = {}
        #: a cancelled dependent -> (its finished prerequisite, its queued one or None):
        #: requeued and judged once a pass pruned the finished one
        self.orphans: dict[str, tuple[str, str | None]] = {}
        # the plan's own rule is the default one (overriding the policy's "forever")
        self.plan = RetentionPlan(
            keep=default,
            every=60.0,
            batch=example["batch"],
            max_batches=example["max_batches"],
            lease_for=example["lease_for"],
        )
        self.told = [_Told() for _ in range(example["workers"])]
        self.engines = [
            Engine(opener(), clock=self.clock, policy=policy, kinds=kinds, observers=[told])
            for told in self.told
        ]
        self.tag = tag
        self.lives = itertools.count()
        self.workers = [self._worker(i) for i in range(example["workers"])]
        #: owner -> until when the model gave it the lease (a dead owner's stays)
        self.grants: dict[str, float] = {}

    def _worker(self, i: int) -> Retention:
        """Worker `i`'s retention, under a new owner (a restarted process is a new one)."""
        return Retention(self.engines[i], self.plan, owner=f"r-{self.tag}-{next(self.lives)}")

    def _jobs(self) -> dict[str, Job]:
        states = lifecycle().states
        jobs = self.admin.scan(ScanRequest(states=states, queues=self.queues, limit=10_000))
        return {j.id: j for j in jobs}

    def _dependent(self, q: int) -> None:
        """A job waiting on two prerequisites in queue `q`: one succeeded (prunable by
        age, were it not for the dependent), one left queued."""
        done = self._make("succeeded", 1, q)[0]
        pending = self._make("queued", 1, q)[0]
        job = self.admin.submit(self.kinds[q], {"n": 1}, after=[done.id, pending.id])
        self.deps[job.id] = (done.id, pending.id)
        self.ctx.stats.faults["retention: a job waits on a finished and an unfinished one"] += 1

    def _orphan(self, q: int, beside: int) -> None:
        """A job waiting on a succeeded prerequisite (and, `beside`, a queued one),
        cancelled by an operator: no job waits on the succeeded one any more, so a pass
        may prune it by age (docs/dependencies.md, "Retention")."""
        done = self._make("succeeded", 1, q)[0]
        pending = self._make("queued", 1, q)[0] if beside else None
        after = [done.id] if pending is None else [done.id, pending.id]
        job = self.admin.submit(self.kinds[q], {"n": 1}, after=after)
        self.admin.cancel(job.id, actor="fault-model", reason="retention model: orphan")
        self.deps[job.id] = tuple(after)
        self.orphans[job.id] = (done.id, None if pending is None else pending.id)
        self.ctx.stats.faults["retention: a cancelled dependent of a prunable job"] += 1

    def _judge(self, now: float) -> None:
        """Each cancelled dependent whose succeeded prerequisite a pass pruned is requeued
        by an operator (back to waiting: it has prerequisites), and its queued one, if it
        has one, then succeeds. D3: a pruned prerequisite counts as failed ("gone"), so
        the dependent ends `cancelled` by `dependency_failed` (the default rule) with the
        pruned one named gone, and is never queued (docs/dependencies.md, "What happens")."""
        stats, jobs = self.ctx.stats, self._jobs()
        for dep, (pruned, pending) in list(self.orphans.items()):
            if pruned in jobs:
                continue
            del self.orphans[dep]
            if dep not in jobs:  # pruned with it: nothing left to judge
                stats.faults["retention: an orphan pruned with its prerequisite"] += 1
                continue
            e = self.admin
            e.requeue(dep, actor="fault-model", reason="retention model: orphan", attempts=1)
            if pending is not None and pending in jobs:
                self._succeed(jobs[pending])
            job = e.get(dep)
            trail = [x for x in e.history(dep) if x.outcome == "applied"]
            last = trail[-1] if trail else None
            requeued = max(i for i, x in enumerate(trail) if x.event == "requeue")
            read = {} if last is None else json.loads(last.data_json).get("prerequisites", {})
            if (
                job is None
                or job.state != "cancelled"
                or last is None
                or last.event != "dependency_failed"
                or read.get(pruned) != PREREQUISITE_GONE
                or any(x.to_state == "queued" for x in trail[requeued:])
            ):
                raise AssertionError(
                    f"D3 job {dep} waited on {pruned}, pruned at {now - self.start:g} s, and "
                    f"was requeued: it is {None if job is None else job.state} after "
                    f"{None if last is None else last.event} on prerequisites {read} (a "
                    "pruned prerequisite counts as failed: cancelled by dependency_failed, "
                    f"{pruned} read as {PREREQUISITE_GONE!r}, never queued)"
                )
            self.deps.pop(dep, None)
            stats.faults[f"retention: a requeued orphan judged ({len(read)} prerequisites)"] += 1
            stats.checks["D3 a pruned prerequisite counts as failed for its dependent"] += 1

    def _succeed(self, job: Job) -> None:
        running = self.admin.claim(OWNER, (job.queue,), 1, ids=[job.id], start=lambda j: {})
        assert [j.id for j in running] == [job.id], f"claimed {running} for {job.id}"
        (done,) = self.admin.report_many([(running[0], "succeed", {"fence": running[0].fence})])
        if not isinstance(done, Job):
            raise done

    def _held(self, jobs: Mapping[str, Job]) -> dict[str, str]:
        """prerequisite -> a job in `jobs` that waits on it (a waiting state)."""
        waiting = set(waiting_states(lifecycle()))
        return {
            pre: dep
            for dep, pres in self.deps.items()
            if dep in jobs and jobs[dep].state in waiting
            for pre in pres
        }

    def _make(self, state: str, n: int, q: int = 0) -> list[Job]:
        """`n` jobs of queue `q` left in `state`, written as a service and a worker write
        them: one submit of all, one claim-and-start of all, one batch of reports."""
        e = self.admin
        jobs = e.submit_many([(self.kinds[q], {"n": 1}, {}) for _ in range(n)])
        if state == "cancelled":
            for job in jobs:
                e.cancel(job.id, actor="fault-model", reason="retention model")
        elif state != "queued":
            ids = [j.id for j in jobs]
            running = e.claim(OWNER, (self.queues[q],), n, ids=ids, start=lambda job: {})
            assert len(running) == n, f"claimed {len(running)} of {n} jobs made {state}"
            reports: list[tuple[Job, str, dict[str, Any]]] = []
            if state == "succeeded":
                reports = [(j, "succeed", {"fence": j.fence}) for j in running]
            elif state == "failed":
                args = {"error": "boom", "permanent": True}
                reports = [(j, "fail", {"fence": j.fence, **args}) for j in running]
            done = e.report_many(reports)
            for result in done:
                if not isinstance(result, Job):
                    raise result
            jobs = [r for r in done if isinstance(r, Job)] or running
        self.ctx.stats.faults[f"retention: jobs left {state}"] += n
        return jobs

    def play(self, steps: list[tuple[str, Any, int]]) -> None:
        stats = self.ctx.stats
        for op, arg, n in steps:
            if op == "jobs":
                self._make(arg[0], n, arg[1])
            elif op == "dependent":
                self._dependent(arg)
            elif op == "orphan":
                self._orphan(arg, n)
            elif op == "advance":
                self.clock.advance(arg)
                stats.faults["retention: clock advances"] += 1
            else:
                i = arg % len(self.workers)
                if op == "pass":
                    self._pass(i)
                elif op == "retainer":
                    self._retainer(i)
                elif op == "stop":
                    self.workers[i].stop()
                    self.grants.pop(self.workers[i].owner, None)
                    self.workers[i] = self._worker(i)
                    stats.faults["retention: a worker stops, gives its lease up, restarts"] += 1
                else:  # killed: its lease stays until it expires; it restarts as another
                    self.workers[i] = self._worker(i)
                    stats.faults["retention: a worker is killed and restarts"] += 1
        stats.examples += 1

    def _retainer(self, i: int) -> None:
        """G6: worker `i` restarts with a retention thread, the production `Retainer`:
        its first pass (at start) is checked as every pass is; then its worker drains,
        and the thread must end and give its lease up."""
        shared = Shared(
            self.engines[i],
            Identity(),
            Handlers(),
            concurrency=1,
            poll_interval=1.0,
            queues=self.queues,
        )
        retainer = Retainer(shared, self.plan)
        self.workers[i] = retainer.service  # a new process: a new owner
        thread = threading.Thread(target=retainer.loop, name="retention-model", daemon=True)

        def first_pass() -> Report:
            thread.start()
            waited = time.monotonic() + RETAINER_WAIT
            while retainer.last is None and thread.is_alive() and time.monotonic() < waited:
                time.sleep(0.001)
            if retainer.last is None:
                raise AssertionError(
                    f"G6 worker {i}'s retention thread made no pass within {RETAINER_WAIT:g}s "
                    "of its start"
                )
            return retainer.last

        try:
            self._pass(i, first_pass)
        finally:
            shared.stopping.set()
            thread.join(RETAINER_WAIT)
        if thread.is_alive():
            raise AssertionError(
                f"G6 worker {i}'s retention thread was still running {RETAINER_WAIT:g}s "
                "after its worker started draining"
            )
        self.grants.pop(retainer.service.owner, None)
        self.workers[i] = self._worker(i)
        self.ctx.stats.faults["retention: a worker's retention thread passes, then drains"] += 1
        # the lease given up: the next worker's pass takes it unless a third holds it (G1)
        self._pass((i + 1) % len(self.workers))
        self.ctx.stats.checks["G6 a retention thread passes at start, ends and gives up"] += 1

    def _pass(self, i: int, run: Callable[[], Report] | None = None) -> None:
        stats, checks = self.ctx.stats, self.ctx.stats.checks
        now = self.clock.now()
        worker = self.workers[i]
        others = [until for owner, until in self.grants.items() if owner != worker.owner]
        taken = any(until > now for until in others)
        before = self._jobs()
        told = len(self.told[i].passes)
        report = worker.run_once() if run is None else run()
        after = self._jobs()
        gone = [before[k] for k in before if k not in after]
        who = f"worker {i} at {now - self.start:g} s"
        if worker.holding and taken:
            raise AssertionError(
                f"G1 two workers hold the retention lease at once: {who} took it while "
                f"another holds it until {max(others) - self.start:g} s"
            )
        if not worker.holding and not taken:
            raise AssertionError(
                f"G1 {who} was refused a lease nobody holds (expired or given up): "
                "expiry does not hand it over"
            )
        checks["G1 one holder at a time, expiry hands the lease over"] += 1
        if worker.holding:
            if any(owner != worker.owner for owner in self.grants):
                stats.faults["retention: the lease handed over on expiry"] += 1
            self.grants = {worker.owner: now + self.plan.lease_seconds}
        else:
            stats.faults["retention: a pass refused (another holds the lease)"] += 1
        if not worker.holding and gone:
            raise AssertionError(f"G3 {who} deleted {len(gone)} job(s) without the lease")
        bound = self.plan.batch * self.plan.max_batches
        if worker.batches > self.plan.max_batches or len(gone) > bound:
            raise AssertionError(
                f"G3 {who}: a pass ran {worker.batches} batch(es) and deleted {len(gone)} "
                f"job(s); its bound is {self.plan.max_batches} batches of {self.plan.batch}"
            )
        if report.pruned != len(gone):
            raise AssertionError(f"G3 {who} reported {report.pruned} pruned, {len(gone)} gone")
        checks["G3 a pass stays within its bound"] += 1
        passes = self.told[i].passes[told:]
        if worker.holding or passes:
            deleted = dict(Counter((job.queue, job.state) for job in gone))
            if passes != [(deleted, now)]:
                raise AssertionError(
                    f"G4 {who} deleted {deleted or 'nothing'} and told its observers "
                    f"{passes or 'nothing'} (a pass that held the lease tells once what "
                    "it deleted, by queue and state, at its time; a refused one nothing)"
                )
        checks["G4 a pass tells what it deleted, by queue and state"] += 1
        if gone:
            stats.faults["retention: a pass pruned jobs"] += 1
        if len(gone) == bound:
            stats.faults["retention: a pass stopped at its bound"] += 1
        held = self._held(before)
        for job in gone:
            if job.id in held:
                raise AssertionError(
                    f"G5 job {job.id} ({job.state}, queue {job.queue}) was pruned while "
                    f"job {held[job.id]} waits on it as a prerequisite"
                )
            keep = self.rules[job.queue].get(job.state)
            age = None if job.finished_at is None else now - job.finished_at
            if job.state not in FINISHED or keep is None or age is None or not age > keep:
                raise AssertionError(
                    f"G2 job {job.id} ({job.state}, finished "
                    f"{'never' if age is None else f'{age:g} s ago'}) was pruned; its "
                    f"retention is {'forever' if keep is None else f'{keep:g} s'}"
                )
        if worker.holding and worker.batches < self.plan.max_batches:
            kept = self._held(after)
            left = [j for j in after.values() if self._due(j, now) and j.id not in kept]
            if left:
                j = left[0]
                raise AssertionError(
                    f"G2 {who}: a pass that ended below its bound left {len(left)} job(s) past "
                    f"their retention, e.g. {j.id} ({j.state}, queue {j.queue}, retention "
                    f"{self.rules[j.queue].get(j.state)})"
                )
        checks["G2 only finished jobs past their retention are pruned"] += 1
        checks["G5 a prerequisite of a waiting job is never pruned"] += 1
        if gone and self.orphans:
            self._judge(now)

    def _due(self, job: Job, now: float) -> bool:
        keep = self.rules[job.queue].get(job.state)
        return keep is not None and job.finished_at is not None and now - job.finished_at > keep
