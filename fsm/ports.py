"""The ports: small protocols that stores, deliveries, executors and clocks implement.

Ports speak of jobs, not queries. A store carries out decisions made by
`fsm.core.decide`; it never decides a state on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import attrs

from .errors import VersionConflict
from .records import AuditEntry, Decision, Job, Owner


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
    """

    owner: Owner
    queues: tuple[str, ...]
    now: float
    limit: int
    lease_until: float
    states: tuple[str, ...]
    decide: Callable[[Job], Decision] = attrs.field(eq=False, repr=False)
    ids: tuple[str, ...] | None = None


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
    """Delete jobs in state s whose finished_at < cutoffs[s], with their audit trail."""

    cutoffs: Mapping[str, float]
    limit: int = 1000


@runtime_checkable
class Store(Protocol):
    def insert(self, decisions: Sequence[Decision]) -> list[Job]:
        """Insert submitted jobs with their audit entries, atomically.

        A job whose idempotency key is already stored is not written: the stored
        job is returned in its place (compare ids to tell which).
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


class Delivery(Protocol):
    """How a worker learns of work. Hints only: the store stays the truth."""

    def publish(self, jobs: Sequence[Job]) -> None:
        """Announce committed jobs. A failure is logged, never fatal: sweeps repair it."""
        ...

    def close(self) -> None: ...


@attrs.frozen
class Wakeup:
    """A hint that work may be there: a job id (RabbitMQ) or None ("claim any due job").

    `token` is the delivery's own handle (a delivery tag and its channel
    generation); the worker hands it back to `settle` once the lease is durable.
    """

    job_id: str | None
    token: object = attrs.field(default=None, eq=False)


class WorkerDelivery(Delivery, Protocol):
    """The worker side of a delivery: wake-ups in, settlements out."""

    def start(self, queues: Sequence[str]) -> None: ...

    def poll(self, capacity: int, timeout: float) -> list[Wakeup]:
        """Block at most `timeout` seconds; return at most `capacity` wake-ups."""
        ...

    def settle(self, wakeup: Wakeup) -> None:
        """The wake-up was handled (job leased durably, or not claimable): ack it."""
        ...

    @property
    def ready(self) -> bool: ...

    def check(self) -> None:
        """Raise if the delivery failed for good (recovery budget exhausted)."""
        ...


class Liveness(Protocol):
    """Cross-host confirmation of death, where a store can give it (PostgreSQL).

    A store that offers it exposes it as `store.liveness`; others set None.
    """

    def hold(self, owner: Owner, on_lost: Callable[[], None]) -> None:
        """Take this process's liveness token; call `on_lost` if it is ever lost."""
        ...

    def release(self, owner: Owner) -> None: ...

    def probe(self, owner: Owner) -> str:
        """'dead' if the owner's token is provably free, 'alive' if held, else 'unknown'."""
        ...
