"""Leases: claiming due jobs for an owner, renewing what it holds, storing progress.

These are the worker's writes that are not read-decide-write loops: a claim is one
store call that leases (and may start) a batch in one transaction, deciding each job
through the core inside it; a renewal and a progress write are fenced conditional
updates of many leases at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..ports import ClaimRequest, ProgressRequest, RenewRequest, StoresProgress
from ..records import AuditEntry, Decision, Job, Owner
from .kernel import Kernel


def claim(
    kernel: Kernel,
    owner: Owner,
    queues: Sequence[str],
    limit: int,
    *,
    ids: Sequence[str] | None = None,
    kinds: Sequence[str] | None = None,
    start: Callable[[Job], Mapping[str, Any]] | None = None,
    caps: Mapping[str, int] | None = None,
) -> list[Job]:
    """Lease up to `limit` due jobs of `queues` (or the given `ids`) for `owner`; with
    `kinds`, only jobs of those kinds. With `start` (a leased job's `start` arguments,
    its fence aside) each job is also started in the claim's transaction and comes back
    running; one whose start the core refuses comes back leased. `caps` are the
    caller's own limits (limit key -> how many more it takes on), on top of the
    store's global ones (docs/flow-control.md). Every lease and start written is
    observed (`Kernel.claim`)."""
    entries: dict[str, list[AuditEntry]] = {}

    def at(now: float) -> ClaimRequest:
        """The claim as of `now` (`ClaimRequest.retime` reads the clock again)."""
        lease_until = now + kernel.policy.lease.ttl

        def lease(job: Job) -> Decision:
            d = kernel.decide(job, "lease", now, owner=owner, lease_until=lease_until)
            entries[job.id] = [] if d.entry is None else [d.entry]
            return d

        def begin(job: Job) -> Decision:
            assert start is not None
            d = kernel.decide(job, "start", now, fence=job.fence, **start(job))
            if d.entry is not None:
                entries.setdefault(job.id, []).append(d.entry)
            return d

        return ClaimRequest(
            owner=owner,
            queues=tuple(queues),
            now=now,
            limit=limit,
            lease_until=lease_until,
            states=kernel.lease_states,
            decide=lease,
            ids=None if ids is None else tuple(ids),
            kinds=None if kinds is None else tuple(kinds),
            start=None if start is None else begin,
            retime=lambda: at(kernel.clock.now()),
            held_states=kernel.heartbeat_states,
            caps=None if caps is None else dict(caps),
        )

    request = at(kernel.clock.now())
    return kernel.claim(request, entries)


def renew(kernel: Kernel, owner: Owner, fences: Mapping[str, int]) -> dict[str, str]:
    """Renew every lease in `fences` (job id -> fence) at once; returns id -> state of
    those renewed (a lease whose fence moved is not)."""
    if not fences:
        return {}
    now = kernel.clock.now()
    request = RenewRequest(
        owner=owner,
        fences=dict(fences),
        now=now,
        lease_until=now + kernel.policy.lease.ttl,
        states=kernel.heartbeat_states,
    )
    return kernel.store.renew(request)


def save_progress(kernel: Kernel, owner: Owner, items: Mapping[str, tuple[int, str]]) -> list[str]:
    """Store the latest progress of jobs `owner` holds: job id -> (fence, stored JSON,
    `fsm.service.progress.envelope`). Fenced like a heartbeat; no version bump, no audit
    entry. Returns the ids written; a store without the capability keeps none."""
    store = kernel.store
    if not items or not isinstance(store, StoresProgress):
        return []
    request = ProgressRequest(owner=owner, items=dict(items), states=kernel.heartbeat_states)
    return store.save_progress(request)
