"""The store port: what a store must do, and the requests it is given.

Ports speak of jobs, not queries. A store carries out decisions made by
`fsm.lifecycle.core.decide`; it never decides a state on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import attrs

from ..errors import VersionConflict
from ..records import AuditEntry, Decision, Job, Owner


class Clock(Protocol):
    def now(self) -> float: ...
    def sleep(self, seconds: float) -> None: ...


@attrs.frozen
class ClaimRequest:
    """Lease up to `limit` due jobs of `queues` (or exactly the jobs `ids`) for `owner`.

    The store picks candidates in `states` that are due (`run_after <= now`) and
    not past their deadline, ordered by priority (lower first), run_after, id;
    locks them against other claimers; and writes `decide(job)` for each, with
    its audit entry, in one transaction. A job that is not claimable is skipped.
    With `start`, the same transaction also starts each job it leases.
    """

    owner: Owner
    queues: tuple[str, ...]
    now: float
    limit: int
    lease_until: float
    states: tuple[str, ...]
    decide: Callable[[Job], Decision] = attrs.field(eq=False, repr=False)
    ids: tuple[str, ...] | None = None
    #: only jobs of these kinds (the kinds a worker has handlers for); None: any kind.
    #: A job of another kind stays where it is for a worker that knows it (rolling deploys).
    kinds: tuple[str, ...] | None = None
    #: claim-and-start: the core's `start` decision for a job just leased. With it, the
    #: store writes the lease and the start in the same transaction (both audit entries,
    #: one commit) and returns the running record; a job whose start decision raises is
    #: written and returned leased only, for the caller to start (or fail) on its own.
    start: Callable[[Job], Decision] | None = attrs.field(default=None, eq=False, repr=False)
    #: the same request with the clock read again (its `now`, `lease_until` and decisions
    #: moved to that moment): a store that may wait for a write lock calls it once it
    #: holds the lock, so the leases and their audit entries carry a time no earlier
    #: than the wait (SQLite's BEGIN IMMEDIATE). None: keep `now`.
    retime: Callable[[], ClaimRequest] | None = attrs.field(default=None, eq=False, repr=False)
    #: the states that hold a slot of a concurrency limit (the sources of heartbeat)
    held_states: tuple[str, ...] = ("cancelling", "leased", "running")
    #: this worker's own limits (`jobfsm worker --limit`): limit key -> how many more
    #: jobs of it this claim may lease, on top of the store's global limits
    #: (`fsm.lifecycle.limits.Budget`); None: none of its own
    caps: Mapping[str, int] | None = None


@attrs.frozen
class RenewRequest:
    """Extend the leases `fences` (job id -> fence) of `owner` to `lease_until`.

    Only jobs whose fence and owner still match and whose state is in `states`
    are renewed (one conditional write for all of them; version += 1 each).
    """

    owner: Owner
    fences: Mapping[str, int]
    now: float
    lease_until: float
    states: tuple[str, ...]


@attrs.frozen
class ProgressRequest:
    """Store the latest progress `items` (job id -> (fence, progress JSON text)) of `owner`.

    Only jobs whose fence and owner still match and whose state is in `states` are
    written (one conditional write for all of them). Unlike a renewal it bumps no
    `version` and appends no audit entry: progress is no input to any decision, so
    it never makes a report lose its compare-and-set, and a decision never writes it
    (stores set only the columns a decision changes, never `progress_json`).
    """

    owner: Owner
    items: Mapping[str, tuple[int, str]]
    states: tuple[str, ...]


@attrs.frozen
class ScanRequest:
    """Find jobs by state and, optionally, lapsed lease, passed deadline or owner host."""

    states: tuple[str, ...]
    lease_expired_at: float | None = None
    deadline_passed_at: float | None = None
    owner_host: str | None = None
    queues: tuple[str, ...] | None = None
    kinds: tuple[str, ...] | None = None
    limit: int = 1000


@attrs.frozen
class PruneRequest:
    """Delete jobs in state s whose finished_at < cutoffs[s], with their audit trail.

    `queues`: only jobs of these queues; `other_than`: no job of these queues (the
    queues whose own retention is pruned by a request of their own).

    `Engine.prune` passes the same request object batch after batch; a store may go on
    after the last job it deleted for it (PostgreSQL does, see its `prune`): a job one
    batch passed over (locked, held) is then left for the next request.
    """

    cutoffs: Mapping[str, float]
    limit: int = 1000
    queues: tuple[str, ...] | None = None
    other_than: tuple[str, ...] = ()
    #: a store that tracks dependencies keeps every job that a job in these states
    #: still waits for (its outcome is still to be read)
    held_by: tuple[str, ...] = ()


@attrs.frozen
class Capacity:
    """Queue capacities an insert must respect: after it, at most `limits[queue]` jobs
    of `queue` may be waiting, a job waiting when its state is in `states` (the
    sources of the spec's `lease` event; the Engine passes them, stores never name
    states themselves). Queues not in `limits` are unbounded.
    """

    limits: Mapping[str, int]
    states: tuple[str, ...]


@runtime_checkable
class Store(Protocol):
    def insert(self, decisions: Sequence[Decision], capacity: Capacity | None = None) -> list[Job]:
        """Insert submitted jobs with their audit entries, atomically.

        A job whose idempotency key is already stored is not written: the stored
        job is returned in its place (compare ids to tell which).

        With `capacity`, the check and the insert are one atomic step: if the new
        jobs would leave a queue with more waiting jobs than its limit, nothing is
        written and `fsm.errors.QueueFull` names the queue (concurrent submitters
        can never overshoot). Jobs returned in place of a duplicate key do not count.
        """
        ...

    def get(self, job_id: str) -> Job | None: ...

    def claim(self, request: ClaimRequest) -> list[Job]: ...

    def apply(self, decisions: Sequence[Decision]) -> list[Job | VersionConflict]:
        """Write each decision if the stored version is still `decision.previous.version`.

        Applied records and their audit entries commit in one transaction; a
        decision that lost the race comes back as a VersionConflict, unwritten.
        """
        ...

    def renew(self, request: RenewRequest) -> dict[str, str]:
        """Renew leases; return job id -> current state for the jobs renewed."""
        ...

    def record(self, entries: Sequence[AuditEntry]) -> None:
        """Append audit entries that change no job (rejected, stale reports)."""
        ...

    def scan(self, request: ScanRequest) -> list[Job]: ...

    def history(self, job_id: str) -> list[AuditEntry]:
        """The job's audit trail in the order it was written."""
        ...

    def counts(self) -> dict[tuple[str, str], int]:
        """(queue, state) -> number of jobs."""
        ...

    def prune(self, request: PruneRequest) -> int: ...

    def close(self) -> None: ...
