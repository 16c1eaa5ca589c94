"""Rules of the fault machine for work that arrives late (specs/invariants.md I1, I7).

Two things a sequential machine misses unless it lets them be late:

- an **old run that ends after its job was leased again** by the same worker: the
  production run table (`fsm.worker.runs.Runs`) forgets exactly that run (job id
  and fence) in the identity's registry of held runs, never the newer run of the
  same job, so the worker's own sweep still judges the new run held (I1);
- a **reconciler's answer that arrives after its claim moved**: the sweeper that
  claimed a lost run for its reconciler asks in the background (an
  `fsm.service.reconcile.Asker`, as a worker does), stalls past its claim, another
  sweep finds the claim lapsed (`reconciler_lost`), an operator may requeue the job
  and it may be lost and claimed again; then the old answer arrives. It was
  recorded under a fence that is no longer the job's: it must change nothing (I7);
- a **recheck claim whose answer is still out when its own process sweeps again**:
  the reconciler said still_running, the sweeper claimed the job again when its
  next check came (`recheck`) and asks in the background; before the answer
  arrives (and before the claim lapses), the same process's sweep judges the
  owners: the claim is this process's, held in its registry, so it must be left
  alone (I1), or the job goes to investigate while its reconciler is still asked;
- an **own sweep that meets, in one pass, runs this process still holds and runs it
  no longer holds**: a run ends (its report lost, so the job's lease is still this
  process's) and the run table forgets it, while the same process runs others; its
  sweep judges each of its own jobs by its run (I1 both ways: a held run is never
  taken back, a run no longer held is), whichever comes first in the scan;
- a **reconciler asked about a later attempt of a job whose earlier attempt committed
  its outside effect** (investigated, requeued by an operator, lost again): it is
  given the lost attempt's own marks only, and a truthful "done" needs that
  attempt's own effect (I7, checked for every truthful answer by `OutsideSystem`'s
  record of the runs it was asked about).
- a **mark that arrives late from an older attempt** (its run lost, the job run
  again by another worker): refused and audited as rejected under the job's attempt
  then; when that attempt is lost too, its reconciler is given its own applied marks
  only, never the rejected one (I7).

`fault_machine` builds the suite's machine from `LateRules` (the main machine of
`faults_machine` with these rules).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import attrs
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from ..errors import IllegalTransition, TransientStoreError
from ..ports import ScanRequest, Store
from ..records import Job
from ..service import maintenance as recovery
from ..service.reconcile import Asker
from .faults_async import ENGINES
from .faults_machine import (
    DEFAULT_KINDS,
    FaultMachine,
    FaultStats,
    KindSpec,
    SimWorker,
)
from .faults_outside import ANSWER_TIMEOUT

W = st.integers(0, 2)
J = st.integers(0, 63)


@attrs.frozen
class LateCall:
    """A reconciler call the asker holds back: the job, the fence of the claim it
    answers, and the call that records the answer."""

    job_id: str
    fence: int
    call: Callable[[], object] = attrs.field(repr=False)


class HeldAsker(Asker):
    """An `Asker` whose calls wait until the machine delivers them: the reconciler is
    asked in the background, and its answer is recorded late."""

    def __init__(self, read: Callable[[str], Job | None]) -> None:
        super().__init__()
        self.read = read
        self.calls: list[LateCall] = []

    def free(self) -> int:
        return self.limit

    def start(self, name: str, call: Callable[[], object]) -> None:
        job = self.read(name)
        self.calls.append(LateCall(name, job.fence if job is not None else -1, call))

    def deliver(self, late: LateCall) -> None:
        """Run one held call as `Asker.start`'s thread would: a failure is logged there,
        and the next sweep finds the claim lost."""
        self.calls.remove(late)
        # as `Asker.start`'s thread: a refused answer (LeaseLost: its claim is gone) is
        # logged there and changes nothing; what it changed is judged by the caller
        with contextlib.suppress(Exception):
            late.call()


class LateRules(FaultMachine):
    """The main machine, with runs and reconciler answers that end late."""

    @precondition(lambda self: self.jobs and sum(x.active for x in self.workers) > 1)
    @rule(w=W, j=J)
    def old_run_ends_after_reclaim(self, w: int, j: int) -> None:
        """A worker stalls past the lease of a run; a sweep (not judging owners) takes
        the job back; the worker wakes and leases the same job again (a new fence)
        while the old run is still in flight; then the old run ends (its result
        discarded) and the worker's own sweeper judges the owners. Checked in the
        step (`_check_death_verdicts`, I1): the worker's run table forgot only the
        old run, so its sweep never expires the new one as "no longer held"."""
        worker = self._active(w)
        assert worker is not None
        picked = self._one_behind_run(worker, j, "running")
        if picked is None:
            return
        jid, _fence = picked
        worker.paused = True
        self._fault("worker pause")
        self.clock.advance(self.policy.lease.ttl + 1.0)
        self._fault("clock jump past leases")
        self._sweep(judged=False)
        worker.paused = False
        self._fault("zombie wakes")
        job = self.real.get(jid)
        if job is None or job.state not in self.lease_states:
            return
        wait = job.run_after - self.clock.now()
        if wait > 0:
            self.clock.advance(wait)
        got = self._claim(worker, 1, ids=[jid])
        if not got:
            return
        self._fault("job leased again while its old run is in flight")
        self._start(worker, jid, got[0].fence)
        if worker.end_older():
            self._fault("older run of a job leased again ended")
        self._sweep(judged=True, by=worker)

    @precondition(lambda self: self.marking and any(x.active for x in self.workers))
    @rule(w=W, j=J, commit=st.booleans(), again=st.booleans(), roll=st.integers(0, 999))
    def late_reconcile_answer(self, w: int, j: int, commit: bool, again: bool, roll: int) -> None:
        """A lost marked run is claimed for its reconciler by a sweeper that asks in the
        background; the sweeper stalls past its claim, another sweep finds the claim
        lapsed (investigate, `reconciler_lost`); with `again`, an operator requeues the
        job and it is run, marked and lost once more, and claimed by a new sweeper
        whose answer is held too. Then the first answer arrives.

        Checked in the step: an answer recorded for a claim whose fence is no longer
        the job's changes nothing (I7: the reconcile event is fenced like any report);
        the answer of the current claim, delivered last, may apply."""
        worker = self._active(w)
        assert worker is not None
        jid = self._lease_marking(worker, j)
        if jid is None:
            return
        first = HeldAsker(self.real.get)
        if not self._lose_with_held_answer(worker, jid, commit, first):
            return
        claim = self.real.get(jid)
        assert claim is not None
        lapse = (claim.lease_until or self.clock.now()) - self.clock.now() + 1.0
        self.clock.advance(max(lapse, ANSWER_TIMEOUT))
        self._fault("reconciling sweeper stalls past its claim")
        others = [x for x in self.workers if x.active]
        self._sweep(judged=True, by=others[roll % len(others)])
        if again:
            self._lose_again(jid, commit, roll)
        while first.calls:
            self._deliver_late(first, first.calls[0])

    @precondition(lambda self: self.marking and any(x.active for x in self.workers))
    @rule(w=W, j=J, commit=st.booleans())
    def own_sweep_beside_a_recheck(self, w: int, j: int, commit: bool) -> None:
        """A lost marked run is claimed for its reconciler by a new incarnation's sweep,
        whose answer (held, then delivered) is still_running; at the next check the
        same sweeper claims the job again (`recheck`) and asks in the background; then,
        the answer still out and the claim not lapsed, the same process sweeps again.
        Checked here (I1): that sweep leaves the recheck claim as it was."""
        worker = self._active(w)
        assert worker is not None
        jid = self._lease_marking(worker, j)
        if jid is None:
            return
        i = self.workers.index(worker)
        first = HeldAsker(self.real.get)
        mode, self.outside.mode = self.outside.mode, "still_running"
        try:
            if not self._lose_with_held_answer(worker, jid, commit, first):
                return
            sweeper = self.workers[i]  # the new incarnation that claimed the lost run
            while first.calls:
                self._deliver_late(first, first.calls[0])
            job = self.real.get(jid)
            if job is None or job.state != "reconciling" or job.owner is not None:
                return
            self.clock.advance(max(0.0, job.run_after - self.clock.now()))
            second = HeldAsker(self.real.get)
            self._sweep(judged=True, by=sweeper, asker=second)
        finally:
            self.outside.mode = mode
        claim = self.real.get(jid)
        if claim is None or claim.state != "reconciling" or claim.owner != sweeper.owner:
            return
        if not any(c.job_id == jid for c in second.calls):
            return
        self._fault("recheck claim with its answer held")
        self._sweep(judged=True, by=sweeper)
        self._fault("own sweep while a recheck's answer is out")
        after = self.real.get(jid)
        if after is not None and (after.fence != claim.fence or after.state != "reconciling"):
            trail = [(e.event, e.reason) for e in self.real.history(jid)][-2:]
            self._fail(
                f"I1 job {jid}: its recheck claim (fence {claim.fence}) by {sweeper.owner}, "
                f"whose answer is still out, was taken by that process's own sweep: now "
                f"{after.state} under fence {after.fence} ({trail})"
            )
        self.stats.checks["I1 a recheck claim is held by its own process"] += 1
        self.late.append(second)

    def _lose_with_held_answer(
        self, worker: SimWorker, jid: str, commit: bool, asker: HeldAsker
    ) -> bool:
        """`worker` starts the leased `jid`, marks, maybe commits, and is killed; its new
        incarnation sweeps, claiming the lost run and asking through `asker`. Whether
        an answer for `jid` is now held."""
        fence = worker.held[jid].fence
        self._start(worker, jid, fence)
        if jid not in worker.held or worker.held[jid].phase != "running":
            return False
        self._call_outside(worker, jid, commit)
        sweeper = self._killed_and_replaced(worker)
        self._sweep(judged=True, by=sweeper, asker=asker)
        held = any(c.job_id == jid for c in asker.calls)
        if held:
            self._fault("reconciler answer held back")
        return held

    def _lose_again(self, jid: str, commit: bool, roll: int) -> None:
        """An operator requeues the parked job; a worker leases it, runs it up to its
        outside call and is lost; a new sweeper claims it, its answer held too."""
        job = self.real.get(jid)
        if job is None or job.state not in self.requeue_states:
            return
        try:
            self.direct.requeue(jid, attempts=2, actor="operator", reason="retry after a lost run")
        except (IllegalTransition, TransientStoreError):
            return
        self._fault("operator requeue after reconciler_lost")
        takers = [x for x in self.workers if x.active]
        taker = takers[roll % len(takers)]
        if not self._claim(taker, 1, ids=[jid]):
            return
        second = HeldAsker(self.real.get)
        if self._lose_with_held_answer(taker, jid, commit, second):
            self.late.append(second)

    def _deliver_late(self, asker: HeldAsker, late: LateCall) -> None:
        before = self.real.get(late.job_id)
        self.touched.add(late.job_id)
        self._fault("late reconciler answer")
        asker.deliver(late)
        if before is None or before.fence == late.fence:
            return
        after = self.real.get(late.job_id)
        moved = [
            e
            for e in self.real.history(late.job_id)
            if e.outcome == "applied" and e.version > before.version
        ]
        if after is not None and (after.version != before.version or moved):
            self._fail(
                f"I7 job {late.job_id}: a reconciler's answer for the claim with fence "
                f"{late.fence} arrived after the claim moved (fence {before.fence}, "
                f"{before.state}) and changed the job: {[e.event for e in moved]}"
            )
        self.stats.checks["I7 late reconcile answers change nothing"] += 1

    @precondition(lambda self: self.jobs and any(x.active for x in self.workers))
    @rule(w=W, drop_first=st.booleans())
    def own_sweep_meets_held_and_ended(self, w: int, drop_first: bool) -> None:
        """A worker runs two jobs or more (it claims and starts more if it holds fewer);
        one of its runs ends without its report reaching the store (the lease is still
        the worker's, the production run table forgets that run); the worker's own
        sweep then judges its jobs in one pass. `drop_first`: the run that ended is
        this process's first job in the sweep's scan, else the last (the first stays
        held): both orders.

        Checked here (I1): no run the worker still holds is taken back on a death
        verdict (`_check_death_verdicts`), and the run it no longer holds is taken
        back in that pass (unless the pass deferred it or failed)."""
        worker = self._active(w)
        assert worker is not None
        now = self.clock.now()
        scan = ScanRequest(
            states=self.spec.sources("expire"),
            owner_host=worker.identity.host,
            limit=recovery.SWEEP_LIMIT,
        )

        def own() -> list[Job]:
            # in job id order, which is the scan's on the memory and SQLite stores (in
            # submit order); PostgreSQL's scan has no order of its own (its row order
            # moves with updates and vacuum), so the job dropped must not follow it, or
            # a replay takes another path (hypothesis's Flaky)
            return sorted(
                (
                    job
                    for job in self.real.scan(scan)
                    if job.owner == worker.owner
                    and job.id in worker.held
                    and worker.held[job.id].fence == job.fence
                    and job.lease_until is not None
                    and job.lease_until > now
                ),
                key=lambda job: job.id,
            )

        mine = own()
        if len(mine) < 2:
            for job in self._claim(worker, 2 - len(mine)):
                self._start(worker, job.id, job.fence)
            mine = own()
        if len(mine) < 2:
            return
        dropped = mine[0] if drop_first else mine[-1]
        worker.let_go(dropped.id)  # the run ended; its report never reached the store
        self._fault("own run ended, its lease still the worker's")
        self.touched.update(job.id for job in mine)
        before = {j.id: j for j in self._tracked() if j.state in self.owned}
        try:
            report = recovery.sweep(
                self.engine,
                worker.identity,
                self.liveness.probe,
                reconcilers=self.outside.reconcilers(self.marking),
            )
        except TransientStoreError:
            report = None
        self._check_death_verdicts(before)
        self._fault("own sweep over held and ended runs")
        after = self.real.get(dropped.id)
        if report is None or report.errors or after is None:
            return
        if any(d.job_id == dropped.id for d in report.deferred):
            return
        if after.version == dropped.version:
            self._fail(
                f"I1 job {dropped.id}: its run (fence {dropped.fence}) ended and left "
                f"{worker.owner}'s registry, but that process's own sweep left it "
                f"{after.state}, leased to it, beside the runs it still holds "
                f"{[j.id for j in mine if j.id != dropped.id]}"
            )
        self.stats.checks["I1 an own sweep judges each own run by itself"] += 1

    def _investigated_effects(self) -> list[str]:
        return [
            jid
            for jid in self.effects
            if self.states.get(jid) in self.requeue_states and jid in self.kind_of
        ]

    @precondition(lambda self: self.marking and self._investigated_effects())
    @rule(j=J, mark=st.booleans(), commit=st.booleans())
    def reconcile_after_requeue(self, j: int, mark: bool, commit: bool) -> None:
        """A marking job whose earlier attempt committed its outside effect was parked
        (investigate, or failed); an operator requeues it; a worker runs the next
        attempt, which marks (`mark`) and maybe commits, or not, and is lost; the new
        incarnation's sweep asks the truthful reconciler.

        Checked after every step (`check_reconciler_asks`, I7): the reconciler was given
        the lost attempt's own marks, and its "done" stands on that attempt's effect."""
        picks = self._investigated_effects()
        jid = picks[j % len(picks)]
        try:
            self.direct.requeue(jid, attempts=2, actor="operator", reason="after investigate")
        except (IllegalTransition, TransientStoreError):
            return
        self._fault("operator requeue of a job whose effect committed")
        takers = [x for x in self.workers if x.active]
        if not takers:
            return
        taker = takers[j % len(takers)]
        if not self._claim(taker, 1, ids=[jid]):
            return
        mode, self.outside.mode = self.outside.mode, "truthful"
        try:
            self._start(taker, jid, taker.held[jid].fence)
            if jid not in taker.held or taker.held[jid].phase != "running":
                return
            if mark:
                self._call_outside(taker, jid, commit)
            sweeper = self._killed_and_replaced(taker)
            self._sweep(judged=True, by=sweeper)
            self._fault("later attempt lost, truthful reconciler")
        finally:
            self.outside.mode = mode

    @precondition(lambda self: self.marking and sum(x.active for x in self.workers) > 1)
    @rule(w=W, j=J, roll=st.integers(0, 999))
    def stale_mark_then_lost(self, w: int, j: int, roll: int) -> None:
        """A marking run is lost after its mark, before its outside call; the truthful
        reconciler says not_started and another worker runs the job again (the next
        attempt, the next fence) up to its own mark; the first worker wakes and its
        `ctx.mark` arrives late under the older fence (refused, and in the trail as
        rejected under the job's attempt now); then the new attempt is lost too, and a
        new incarnation of its worker sweeps.

        Checked after the step (`check_reconciler_asks`, I7): the reconciler asked about
        the second attempt is given that attempt's own applied marks, never the
        zombie's rejected one (whose fence the attempt never held)."""
        zombie = self._active(w)
        assert zombie is not None
        jid = self._marking_run(zombie, j)
        if jid is None:
            return
        fence = zombie.held[jid].fence
        mode, self.outside.mode = self.outside.mode, "truthful"
        try:
            self._call_outside(zombie, jid, commit=False)
            zombie.paused = True
            self._fault("worker pause")
            self.clock.advance(self.policy.lease.ttl + 1.0)
            takers = [x for x in self.workers if x.active]
            taker = takers[roll % len(takers)]
            self._sweep(judged=True, by=taker)
            self._until_due(jid)
            got = self._claim(taker, 1, ids=[jid])
            if not got:
                return
            self._start(taker, jid, got[0].fence)
            if jid not in taker.held or taker.held[jid].phase != "running":
                return
            self._call_outside(taker, jid, commit=False)
            zombie.paused = False
            self._fault("zombie wakes")
            if self._mark(jid, fence):
                self._fail(f"I7 job {jid}: a mark under the older fence {fence} was accepted")
            self._fault("a late mark of an older attempt refused")
            self._reconcile(zombie, jid)
            sweeper = self._killed_and_replaced(taker)
            self._sweep(judged=True, by=sweeper)
            self._fault("attempt lost after a stale mark, truthful reconciler")
        finally:
            self.outside.mode = mode

    @invariant()
    def check_reconciler_asks(self) -> None:
        """I7, for every run the reconciler was asked about (`OutsideSystem.asks`): it was
        given exactly the marks the trail holds for the lost attempt (no earlier
        attempt's), and a truthful "done" names an effect committed under a fence that
        attempt marked with."""
        asks = getattr(self, "outside", None)
        if asks is None or not asks.asks:
            return
        for run, said in asks.drain():
            jid = run.job.id
            trail = self.real.history(jid)
            own = sorted(
                (str(e.data.get("label")), e.data.get("external_id"), e.fence)
                for e in trail
                if e.event == "mark" and e.outcome == "applied" and e.attempt == run.attempt
            )
            given = sorted((m.label, m.external_id, m.fence) for m in run.marks)
            if run.attempt != run.job.attempt or given != own:
                self._fail(
                    f"I7 job {jid}: its reconciler was asked about attempt {run.attempt} "
                    f"(the job's is {run.job.attempt}) with marks {given}, but that "
                    f"attempt's marks in the trail are {own}"
                )
            fences = {f for _label, _ext, f in own}
            if said == "done" and not fences & set(self.effects.get(jid, [])):
                self._fail(
                    f"I7 job {jid}: the truthful reconciler answered done for attempt "
                    f"{run.attempt}, whose marks (fences {sorted(fences)}) committed no "
                    f"effect (effects under fences {self.effects.get(jid, [])})"
                )
            self.stats.checks["I7 a reconciler is asked with the lost attempt's marks"] += 1

    def __init__(self) -> None:
        super().__init__()
        #: askers whose answers are the current claim's: delivered at the next step's end
        self.late: list[HeldAsker] = []

    @rule()
    def current_answer_arrives(self) -> None:
        """The held answer of the current claim is recorded (late, but its claim holds
        unless it lapsed meanwhile)."""
        for asker in self.late:
            while asker.calls:
                self._deliver_late(asker, asker.calls[0])
        self.late.clear()

    def teardown(self) -> None:
        self.late.clear()  # undelivered answers: their claims lapse, as a dead asker's
        super().teardown()


def fault_machine(
    store_factory: Callable[[], Store],
    *,
    kinds: tuple[KindSpec, ...] = DEFAULT_KINDS,
    stats: FaultStats | None = None,
    name: str = "FaultSuiteMachine",
    engine: str = "sync",
) -> type[FaultMachine]:
    """A fault machine over `store_factory` (called once per example); `engine`
    "async" sends submits and operator actions through AsyncEngine (faults_async.py)."""
    if not kinds:
        raise ValueError("the fault suite needs at least one handler kind")
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    attrs_: dict[str, Any] = {
        "store_factory": staticmethod(store_factory),
        "kind_specs": tuple(kinds),
        "stats": stats if stats is not None else FaultStats(),
        "engine_mode": engine,
    }
    return type(name, (LateRules,), attrs_)
