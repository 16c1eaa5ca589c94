"""Recovery: the one sweep that takes jobs back from owners that lost them.

`sweep(engine, identity, probe)` is the only recovery code. The worker runs it
at start-up and every `recovery.sweep_interval`; `jobfsm recover` runs it once;
the fault suite runs it with a simulated process table and liveness probe behind
the same `Identity.judge`. One sweep, in order:

1. leases that lapsed (`lease_until <= now`) are expired: the owner stopped
   heartbeating, whoever it is;
2. with an `identity`, the owners of the other leased jobs are judged
   (`fsm.owner.Identity.judge`: ALIVE, DEAD or UNKNOWN, failing closed) and the
   jobs of owners confirmed DEAD are expired at once, this host's jobs first;
3. jobs whose deadline passed are failed;
4. with a store that keeps dependencies, the next slice of waiting jobs is offered
   release (`fsm.dependencies.Releaser.sweep`): the backstop for a process that died
   between a prerequisite's last write and its dependents' release.
5. with `reconcilers` (kinds -> `fsm.reconcile.Reconciler`), a lost run of such a kind
   whose outside call may have begun is claimed for its reconciler by the expire
   itself (state `reconciling`, fence + 1) and the reconciler is asked at once; and
   reconciling jobs whose next check is due are claimed and asked again. At most
   `fsm.reconcile.RECONCILES_PER_SWEEP` reconciler calls per sweep.

Every write is a compare-and-set on the version that was read (and judged), so
concurrent sweepers never both win and a verdict about one owner can never take
a lease that a newer owner holds. Each sweep looks at no more than `limit` jobs
per step: the bound on one sweep's work.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs

from .errors import IllegalTransition, VersionConflict
from .owner import Identity, Probe, Status, Verdict
from .ports import ScanRequest
from .reconcile import Asker, Reconciler, Round
from .records import Job, Owner

if TYPE_CHECKING:
    from .engine import Engine

log = logging.getLogger(__name__)

#: most jobs one step of a sweep looks at
SWEEP_LIMIT = 1000
#: seconds past its lease that a lost run of a kind with a reconciler is left to the
#: workers that have that reconciler, before a sweep without it parks it in investigate
RECONCILE_DEFER = 60.0


@attrs.frozen
class RecoveryReport:
    """What one sweep did. `errors` counts jobs that moved before the sweep's write."""

    expired: int = 0
    deadlines: int = 0
    to_investigate: int = 0
    errors: int = 0
    #: waiting jobs let go (or ended by their on_failed_dependency rule)
    released: int = 0
    #: reconciler calls whose answers were recorded
    reconciled: int = 0

    def __add__(self, other: RecoveryReport) -> RecoveryReport:
        return RecoveryReport(
            self.expired + other.expired,
            self.deadlines + other.deadlines,
            self.to_investigate + other.to_investigate,
            self.errors + other.errors,
            self.released + other.released,
            self.reconciled + other.reconciled,
        )


def _states(engine: Engine, event: str) -> tuple[str, ...]:
    return tuple(src for (src, ev) in engine.spec.table if ev == event)


def _expire(
    engine: Engine, job: Job, verdict: Verdict | None, rounds: Round | None = None
) -> RecoveryReport:
    """Expire `job` exactly as it was read; a job that moved since is left alone.

    A lost run of a kind with a reconciler here is claimed for it by the same write;
    over the sweep's bound on reconciler calls it is left for the next sweep."""
    claim = None if rounds is None or job.state != "running" else rounds.claim_args(job)
    if claim is not None and not rounds.can_call():  # type: ignore[union-attr]
        return RecoveryReport()
    if claim is None and job.state == "running" and job.reconciler:
        # a lost run of a kind with a reconciler this sweep does not have: a worker
        # that has it may ask it first, for RECONCILE_DEFER seconds past the lease
        lapsed_at = job.lease_until if job.lease_until is not None else 0.0
        if engine.clock.now() < lapsed_at + RECONCILE_DEFER:
            return RecoveryReport()
    if verdict is None:
        new = engine.expire_seen(job, **(claim or {}))
    else:
        new = engine.expire_seen(
            job,
            verdict=verdict.status.value,
            reason=verdict.reason,
            cause=verdict.code,
            **(claim or {}),
        )
    if new is None:
        return RecoveryReport(errors=1)
    if rounds is not None and new.state == "reconciling":
        settled = rounds.record(new)
        new = settled or new
    if engine.metrics is not None:
        engine.metrics.recovery("lapsed" if verdict is None else verdict.status.value, new.state)
    if verdict is not None:
        log.warning("job %s: recovered from dead owner: %s", job.id, verdict.reason)
    return RecoveryReport(expired=1, to_investigate=int(new.state == "investigate"))


def lapsed(
    engine: Engine, *, limit: int = SWEEP_LIMIT, rounds: Round | None = None
) -> RecoveryReport:
    """Expire the leases that lapsed: their owners stopped heartbeating."""
    now = engine.clock.now()
    report = RecoveryReport()
    request = ScanRequest(states=_states(engine, "expire"), lease_expired_at=now, limit=limit)
    for job in engine.scan(request):
        if job.lease_until is not None and job.lease_until <= now:
            report += _expire(engine, job, None, rounds)
    return report


def dead_owners(
    engine: Engine,
    identity: Identity,
    probe: Probe | None = None,
    *,
    limit: int = SWEEP_LIMIT,
    rounds: Round | None = None,
) -> RecoveryReport:
    """Expire the jobs whose owners `identity` judges DEAD (this host's first).

    A verdict on a foreign owner holds for all its jobs in this sweep; this
    process's own incarnation is judged per run (job id, fence).
    """
    states = _states(engine, "expire")
    local = ScanRequest(states=states, owner_host=identity.host, limit=limit)
    anywhere = ScanRequest(states=states, limit=limit)
    verdicts: dict[Owner, Verdict] = {}
    seen: set[str] = set()
    report = RecoveryReport()
    me = identity.owner
    for job in [*engine.scan(local), *engine.scan(anywhere)]:
        owner = job.owner
        if owner is None or job.id in seen:
            continue
        seen.add(job.id)
        if owner == me:
            verdict = identity.judge(owner, (job.id, job.fence), probe)
        else:
            if owner not in verdicts:
                verdicts[owner] = identity.judge(owner, (job.id, job.fence), probe)
            verdict = verdicts[owner]
        if verdict.status is Status.DEAD:
            report += _expire(engine, job, verdict, rounds)
    return report


def deadlines(engine: Engine, *, limit: int = SWEEP_LIMIT) -> RecoveryReport:
    """Fail the jobs whose deadline passed."""
    now = engine.clock.now()
    report = RecoveryReport()
    request = ScanRequest(states=_states(engine, "deadline"), deadline_passed_at=now, limit=limit)
    for job in engine.scan(request):
        try:
            engine.transition(job.id, "deadline")
        except (IllegalTransition, VersionConflict):
            report += RecoveryReport(errors=1)
        else:
            report += RecoveryReport(deadlines=1)
    return report


def sweep(
    engine: Engine,
    identity: Identity | None = None,
    probe: Probe | None = None,
    *,
    limit: int | None = None,
    reconcilers: Mapping[str, Reconciler] | None = None,
    asker: Asker | None = None,
) -> RecoveryReport:
    """One recovery sweep (see the module docstring). Without `identity`, only lapsed
    leases and deadlines: nobody judges owners (and no reconciler is called: a claim
    needs this process's identity as its owner). `limit` defaults to SWEEP_LIMIT. With
    an `asker`, reconcilers are asked in the background (`fsm.reconcile.Asker`)."""
    limit = SWEEP_LIMIT if limit is None else limit
    rounds = None
    if identity is not None and reconcilers:
        rounds = Round(engine, reconcilers, identity, asker)
    report = lapsed(engine, limit=limit, rounds=rounds)
    if identity is not None:
        report += dead_owners(engine, identity, probe, limit=limit, rounds=rounds)
    if rounds is not None:
        rounds.rechecks(limit)
        report += RecoveryReport(reconciled=rounds.asked)
    report += deadlines(engine, limit=limit)
    if engine.releaser is not None:
        done = engine.releaser.sweep(limit=limit)
        report += RecoveryReport(released=done.met + done.failed, errors=done.conflicts)
    return report
