"""The claim loop (the thread that calls `Worker.run`): wake-ups in, attempts out.

It waits for a wake-up and a free slot, claims a batch and starts it in the same
store transaction (claim-and-start: one commit; each handler's kind policy is
enforced in the start decision) and hands each attempt to the executor. Launching
one job can fail (a payload that cannot be decoded, an executor that refuses it):
that job fails alone, the loop and the batch go on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..errors import IllegalTransition, JobFSMError, LeaseLost, StoreError
from ..handling.attempt import run_attempt, run_attempt_async
from ..inputs import KindPolicy
from ..lifecycle.limits import job_keys
from ..ports import Attempt, ExecutorFull, Outcome, Wakeup
from ..records import Job
from ..service.engine import Engine
from ..service.limits import worker_caps
from ..text import clean_text
from .handlers import HandlerSpec
from .runs import Run
from .state import Shared, backoff

log = logging.getLogger(__name__)

BATCH_WINDOW = 0.02  # longest wait to gather free slots into one claim batch
RELEASE_TRIES = 3  # bounded tries to give back an unstarted lease at shutdown


def kind_policy_arg(
    policy: KindPolicy, *, default_recoveries: int, reconciler: bool
) -> dict[str, Any]:
    """The `kind_policy` every start of a job of this kind carries: the handler's
    enforced policy (`KindPolicy.enforced`, `retry_safe` always included), the engine's
    recovery budget when the kind sets none, and whether the kind has a reconciler.

    The start decision stamps it onto the job (`fsm.lifecycle.rules`,
    `enforce_kind_policy`): the handler's policy is the policy of record wherever the
    job was submitted. The fault suite's simulated workers start with this too.
    """
    out = policy.enforced()
    out.setdefault("max_recoveries", default_recoveries)
    if reconciler:
        out["reconciler"] = True
    return out


def start_args(spec: HandlerSpec, engine: Engine) -> dict[str, Any]:
    """`start`'s arguments but the fence for a job of `spec`'s kind: the policy of the
    kind's handler on this worker, which the start decision stamps onto the job."""
    policy = kind_policy_arg(
        spec.policy,
        default_recoveries=engine.policy.recovery.max_recoveries,
        reconciler=spec.reconciler is not None,
    )
    return {"kind_policy": policy}


class Launched:
    """One launched attempt's calls: its `ctx.mark` (a fenced `mark` event), running its
    handler, and handing its outcome to the reporter.

    One object with methods instead of a closure each: a worker launches one per job,
    and three closures were eleven objects (functions and their cells) for the
    collector to scan while the attempt is in flight."""

    __slots__ = ("job", "limit", "run", "shared")

    def __init__(self, shared: Shared, job: Job) -> None:
        self.shared = shared
        self.job = job
        self.run: Run  # set by the launch, once the run is made
        self.limit = shared.engine.policy.limits.max_payload_bytes

    def mark(self, label: str, external_id: str | None) -> None:
        job = self.job
        self.shared.engine.mark(job.id, job.fence, label, external_id)

    def call(self) -> Outcome:
        run = self.run
        spec = run.spec
        assert spec is not None
        return run_attempt(spec.fn, run.ctx, self.limit, asynchronous=spec.asynchronous)

    async def acall(self) -> Outcome:
        run = self.run
        assert run.spec is not None
        return await run_attempt_async(run.spec.fn, run.ctx, self.limit)

    def done(self, _attempt: Attempt, outcome: Outcome) -> None:
        self.shared.settle(self.run, outcome)


class Claims:
    """Claims and launches jobs while the worker runs."""

    def __init__(self, shared: Shared, regain_liveness: Callable[[], bool]) -> None:
        self.s = shared
        self._regain_liveness = regain_liveness
        self._start_by_kind: dict[str, dict[str, Any]] = {}

    def free(self) -> int:
        s = self.s
        assert s.executor is not None
        running, held = s.runs.load()
        return max(0, min(s.executor.free, s.concurrency - running, s.held_limit - held))

    def loop(self) -> None:
        s = self.s
        delivery = s.delivery
        assert delivery is not None
        errors = 0
        immediate = True
        kept: list[Wakeup] = []  # polled as the liveness token was lost: claimed once regained
        while not s.stopping.is_set():
            if s.liveness_lost.is_set() and not self._regain_liveness():
                s.stopping.wait(backoff(errors))
                errors += 1
                continue
            free = self.free()
            if free == 0:
                s.runs.freed.wait(s.poll_interval)
                s.runs.freed.clear()
                continue
            free = self._gather_slots(free)
            try:
                if kept:
                    wakeups, kept = kept, []
                else:
                    wakeups = delivery.poll(free, 0.0 if immediate else s.poll_interval)
                delivery.check()
            except JobFSMError:
                raise
            except Exception:
                log.exception("worker %s: delivery poll failed", s.owner_name)
                s.stopping.wait(backoff(errors))
                errors += 1
                continue
            if s.stopping.is_set() or not wakeups:
                immediate = False
                continue
            if s.liveness_lost.is_set():
                # The token was lost while this loop waited for work: a lease taken now
                # would name an owner every sweep already judges dead and be left to
                # recovery (an attempt and a recovery spent on a run that never ran;
                # investigate for a kind that is not retry-safe). Take a new token first.
                kept = wakeups
                continue
            ids = [w.job_id for w in wakeups if w.job_id is not None]
            any_due = len(ids) < len(wakeups)
            try:
                jobs = self.claim(ids, any_due, free)
            except Exception as err:
                s.store_ok = False
                s.claim_failing = True
                level = logging.WARNING if isinstance(err, StoreError) else logging.ERROR
                log.log(level, "worker %s: claim failed: %s", s.owner_name, err)
                s.stopping.wait(backoff(errors))
                errors += 1
                continue
            errors = 0
            s.store_ok = True
            s.claim_failing = False
            self._settle(wakeups, {j.id for j in jobs})
            self.dispatch(jobs)
            immediate = any_due and len(jobs) >= free  # more may be due: no sleep

    def _settle(self, wakeups: list[Wakeup], claimed: set[str]) -> None:
        assert self.s.delivery is not None
        for w in wakeups:
            try:
                self.s.delivery.settle(w, claimed=w.job_id in claimed)
            except Exception:
                log.exception("worker %s: settling a wake-up failed", self.s.owner_name)

    def _gather_slots(self, free: int) -> int:
        """Under load, wait up to BATCH_WINDOW for half the slots, so claims come in batches."""
        s = self.s
        half = s.concurrency // 2
        until = time.monotonic() + BATCH_WINDOW
        while free < half and s.runs.count() and not s.stopping.is_set():
            left = until - time.monotonic()
            if left <= 0:
                break
            s.runs.freed.wait(left)
            s.runs.freed.clear()
            free = self.free()
        return free

    def claim(self, ids: list[str], any_due: bool, free: int) -> list[Job]:
        s = self.s
        owner = s.identity.owner
        with s.identity.claiming():
            jobs: list[Job] = []
            # only kinds this worker has handlers for: another kind waits for a worker
            # that knows it (a rolling deploy), instead of failing here
            kinds = tuple(s.handlers)
            start = self._start_args  # claim-and-start: one transaction, one commit
            caps = self._caps()
            if ids:
                jobs += s.engine.claim(
                    owner, s.queues, limit=len(ids), ids=ids, kinds=kinds, start=start, caps=caps
                )
            left = free - len(jobs)
            if any_due and left > 0:
                caps = None if caps is None else self._caps(jobs)
                jobs += s.engine.claim(
                    owner, s.queues, limit=left, kinds=kinds, start=start, caps=caps
                )
            s.identity.hold_many([(job.id, job.fence) for job in jobs])
        return jobs

    def _caps(self, claimed: list[Job] | None = None) -> dict[str, int] | None:
        """This worker's own limits (`--limit`) less the jobs of each key it holds
        (and those just `claimed`): what its next claim may still lease of each."""
        limits = self.s.limits
        if not limits:
            return None
        holding: dict[str, int] = {}
        for job in [*self.s.runs.jobs().values(), *(claimed or ())]:
            for key in job_keys(job):
                holding[key] = holding.get(key, 0) + 1
        return worker_caps(limits, holding)

    def _start_args(self, job: Job) -> dict[str, Any]:
        """`start`'s arguments but the fence (built once per kind: a worker's handlers
        and policy are fixed while it runs)."""
        args = self._start_by_kind.get(job.kind)
        if args is None:
            spec = self.s.handlers.get(job.kind)
            if spec is None:
                return {}
            args = start_args(spec, self.s.engine)
            self._start_by_kind[job.kind] = args  # bounded: one per handled kind
        return args

    def dispatch(self, jobs: list[Job]) -> None:
        """Launch the claimed jobs: those the claim started at once; those it only
        leased (their start was refused in the claim) are started here, in one write,
        and what the store refuses is reported for that job alone."""
        s = self.s
        if not jobs:
            return
        leased = [j for j in jobs if j.state == "leased"]
        running = [j for j in jobs if j.state != "leased"]
        if s.liveness_lost.is_set():
            # claimed just as the liveness token was lost: others may judge this worker
            # dead. Give back what is only leased; what the claim started is left to
            # recovery, never run here.
            self.release(leased)
            for job in running:
                s.identity.drop(job.id, job.fence, abandoned="claimed as liveness was lost")
            return
        if s.stopping.is_set():
            # claimed just as we began to stop: give back what is only leased; what the
            # claim started runs like every other run in flight, within the drain's grace
            self.release(leased)
            leased = []
        for job in running:
            self.launch(job)
        if not leased:
            return
        reports = [(j, "start", {"fence": j.fence, **self._start_args(j)}) for j in leased]
        results = s.with_retries("start", lambda: s.engine.report_many(reports))
        if results is None:
            for job in leased:  # the store is away: the leases lapse and recovery requeues
                s.identity.drop(job.id, job.fence, abandoned="could not start: store unreachable")
            return
        for job, started in zip(leased, results, strict=True):
            if not isinstance(started, Job):
                s.identity.drop(job.id, job.fence)
                log.warning("worker %s: could not start job %s: %s", s.owner_name, job.id, started)
                continue
            self.launch(started)

    def launch(self, job: Job) -> None:
        """Hand one started job to the executor; any failure fails this job alone."""
        s = self.s
        run: Run | None = None
        try:
            spec = s.handlers.get(job.kind)
            launched = Launched(s, job)
            run = launched.run = Run(job, spec, launched.mark)
            s.runs.add(run)
            if spec is None:
                known = ", ".join(sorted(s.handlers)) or "none"
                error = f"no handler for kind {job.kind!r} on this worker (it handles: {known})"
                s.settle(run, Outcome(status="permanent", error=error))
                return
            self._submit(launched, spec)
        except ExecutorFull:
            assert run is not None
            s.runs.finish(run)
            log.error("worker %s: executor full; giving back job %s", s.owner_name, job.id)
            self.release([job])
        except Exception as err:
            log.exception("worker %s: launching job %s failed", s.owner_name, job.id)
            if run is None:
                run = Run(job, None)
                s.runs.add(run)
            error = clean_text(f"could not launch the attempt: {type(err).__name__}: {err}")
            s.settle(run, Outcome(status="failed", error=error))

    def _submit(self, launched: Launched, spec: HandlerSpec) -> None:
        s = self.s
        assert s.executor is not None
        run = launched.run
        limits = s.engine.policy.limits
        limit = launched.limit
        ctx = run.ctx
        ctx.progress_limit = limit
        attempt = Attempt(
            job=run.job,
            timeout=float(run.job.timeout or limits.attempt_timeout),
            target=spec.target,
            run=launched.call,
            cancelled=run.cancelled,
            result_limit=limit,
            arun=launched.acall if spec.asynchronous else None,
            progress=ctx.progress_from,
            mark=ctx.marker,
        )
        s.executor.submit(attempt, launched.done)

    def release(self, jobs: list[Job]) -> None:
        """Give back leased, unstarted jobs (bounded tries; recovery covers the rest)."""
        s = self.s
        for job in jobs:
            for step in range(RELEASE_TRIES):
                try:
                    s.engine.release(job.id, job.fence)
                    break
                except (LeaseLost, IllegalTransition):
                    break
                except Exception as err:
                    log.warning("worker %s: release of %s failed: %s", s.owner_name, job.id, err)
                    time.sleep(backoff(step))
            s.identity.drop(job.id, job.fence)
