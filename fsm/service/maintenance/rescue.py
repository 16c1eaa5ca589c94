"""The rescuer: takes jobs back from owners that lost them.

One pass, in order:

1. leases that lapsed (`lease_until <= now`) are expired: the owner stopped
   heartbeating, whoever it is;
2. with an `identity`, the owners of the other leased jobs are judged
   (`fsm.service.identity.Identity.judge`: ALIVE, DEAD or UNKNOWN, failing closed) and
   the jobs of owners confirmed DEAD are expired at once, this host's jobs first.

A lost run of a kind with a reconciler here (`lost_runs`) is claimed for it by the
expire itself (state `reconciling`, fence + 1, this process its owner) and handed to
`LostRuns`, which asks the reconciler. A lost run of a kind with a reconciler this
process does not have is left alone for RECONCILE_DEFER seconds past its lease, time
for a worker that has it to ask. Every write is a compare-and-set on the version that
was read and judged (`fsm.service.writes.decide_seen`).
"""

from __future__ import annotations

import logging

from ...ports import ScanRequest
from ...records import Job, Owner
from ..identity import Identity, Probe, Status, Verdict
from ..kernel import KernelSource
from ..writes import decide_seen
from .lost_runs import LostRuns
from .report import Deferred, Report

log = logging.getLogger(__name__)

#: seconds past its lease that a lost run of a kind with a reconciler is left to the
#: workers that have that reconciler, before a sweep without it parks it in investigate
RECONCILE_DEFER = 60.0


class Rescuer:
    """Lapsed leases and dead owners (see the module docstring)."""

    name = "rescue"

    def __init__(
        self,
        source: KernelSource,
        identity: Identity | None = None,
        probe: Probe | None = None,
        *,
        lost_runs: LostRuns | None = None,
    ) -> None:
        self.source = source
        self.identity = identity
        self.probe = probe
        self.lost_runs = lost_runs

    def run_once(self, limit: int = 1000) -> Report:
        report = self.lapsed(limit)
        if self.identity is not None:
            report += self.dead_owners(self.identity, limit)
        return report

    def lapsed(self, limit: int) -> Report:
        """Expire the leases that lapsed: their owners stopped heartbeating."""
        kernel = self.source.kernel
        now = kernel.clock.now()
        request = ScanRequest(
            states=kernel.spec.sources("expire"), lease_expired_at=now, limit=limit
        )
        report = Report()
        for job in kernel.store.scan(request):
            if job.lease_until is not None and job.lease_until <= now:
                report += self.expire(job, None)
        return report

    def dead_owners(self, identity: Identity, limit: int) -> Report:
        """Expire the jobs whose owners `identity` judges DEAD (this host's first).

        A verdict on a foreign owner holds for all its jobs in this pass; this
        process's own incarnation is judged per run (job id, fence)."""
        kernel = self.source.kernel
        states = kernel.spec.sources("expire")
        local = ScanRequest(states=states, owner_host=identity.host, limit=limit)
        anywhere = ScanRequest(states=states, limit=limit)
        verdicts: dict[Owner, Verdict] = {}
        seen: set[str] = set()
        report = Report()
        me = identity.owner
        for job in [*kernel.store.scan(local), *kernel.store.scan(anywhere)]:
            owner = job.owner
            if owner is None or job.id in seen:
                continue
            seen.add(job.id)
            if owner == me:
                verdict = identity.judge(owner, (job.id, job.fence), self.probe)
            else:
                if owner not in verdicts:
                    verdicts[owner] = identity.judge(owner, (job.id, job.fence), self.probe)
                verdict = verdicts[owner]
            if verdict.status is Status.DEAD:
                report += self.expire(job, verdict)
        return report

    def expire(self, job: Job, verdict: Verdict | None) -> Report:
        """Expire `job` exactly as it was read; a job that moved since is left alone."""
        kernel = self.source.kernel
        lost_runs = self.lost_runs
        claim = None if lost_runs is None or job.state != "running" else lost_runs.claim_args(job)
        if claim is not None and lost_runs is not None and not lost_runs.can_call():
            # over this pass's bound on reconciler calls: the next pass
            why = "this pass's reconciler calls are used up (or its reconcilers are busy)"
            return Report(deferred=(Deferred(job.id, job.kind, why),))
        if claim is None and job.state == "running" and job.reconciler:
            # a lost run of a kind with a reconciler this process does not have: a
            # worker that has it may ask it first, for RECONCILE_DEFER seconds
            lapsed_at = job.lease_until if job.lease_until is not None else 0.0
            if kernel.clock.now() < lapsed_at + RECONCILE_DEFER:
                why = (
                    f"a lost run of kind {job.kind!r}, which has a reconciler this process "
                    f"lacks: left {RECONCILE_DEFER:g}s past its lease for a worker that has "
                    "it to ask it, then parked in investigate"
                )
                until = lapsed_at + RECONCILE_DEFER
                return Report(deferred=(Deferred(job.id, job.kind, why, until),))
        args = dict(claim or {})
        if verdict is not None:
            args.update(verdict=verdict.status.value, reason=verdict.reason, cause=verdict.code)
        new = decide_seen(kernel, job, "expire", **args)
        if new is None:
            return Report(errors=1)
        if lost_runs is not None and new.state == "reconciling":
            lost_runs.claimed(new)
        kernel.observers.on_recovery(
            "lapsed" if verdict is None else verdict.status.value, new.state
        )
        if verdict is not None:
            log.warning("job %s: recovered from dead owner: %s", job.id, verdict.reason)
        return Report(expired=1, to_investigate=int(new.state == "investigate"))
