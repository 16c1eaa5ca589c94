"""Optional capabilities of a store (or a delivery): declared here, checked with
`isinstance`; a store that lacks one is worked around or refused by name."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from ..errors import VersionConflict
from ..lifecycle.limits import Limit, LimitChange
from ..records import Decision, Job
from .delivery import Liveness
from .store import Capacity, ProgressRequest, PruneRequest


@runtime_checkable
class ConfirmsDeath(Protocol):
    """A store that confirms a worker's death across hosts (PostgreSQL's advisory locks)."""

    @property
    def liveness(self) -> Liveness: ...


@runtime_checkable
class Migratable(Protocol):
    """A store with a versioned schema: `migrate` creates or upgrades it and returns the
    versions it applied; `schema_version` reads the version in place (None if none)."""

    def migrate(self) -> list[int]: ...

    def schema_version(self) -> int | None: ...


@runtime_checkable
class SchemaDroppable(Protocol):
    """A store that can remove everything it created (the fault suite cleans up with it).

    `drop_schema` returns the names of what is left where the store kept its data
    (a PostgreSQL schema, a SQLite file) that the store did not make, and that kept
    that place from being removed; empty when nothing is left."""

    def drop_schema(self) -> tuple[str, ...]: ...


@runtime_checkable
class WrapsConnections(Protocol):
    """A store whose statements all take their driver connection from one place, which
    `wrap` may replace with a stand-in (SQLite's; the crash fault model wraps it to fail
    the Nth statement). `wrap` is given the connection and returns what the statement
    uses; the store keeps and closes the connection itself."""

    def wrap_connections(self, wrap: Callable[[Any], Any]) -> None: ...


@runtime_checkable
class TracksDependencies(Protocol):
    """A store that keeps jobs' prerequisites (`after=`, docs/dependencies.md).

    `insert` stores each decision's `prerequisites` with its job, in the same
    transaction, after checking that every one of them is stored: if one is not,
    nothing is written and `fsm.errors.UnknownPrerequisite` names it. A duplicate
    idempotency key returns the stored job with the prerequisites it was stored with.
    `prune` keeps the jobs that a job in `PruneRequest.held_by` states waits for.
    """

    def prerequisites(self, job_ids: Sequence[str]) -> dict[str, dict[str, str | None]]:
        """For each of `job_ids` that has prerequisites: {prerequisite id: its state,
        or None if it is no longer stored}."""
        ...

    def dependents(self, job_ids: Sequence[str], states: tuple[str, ...], limit: int) -> list[Job]:
        """At most `limit` jobs in `states` that name one of `job_ids` as a prerequisite
        (found through the index on the prerequisite's id: no job scan)."""
        ...

    def in_states_after(self, states: tuple[str, ...], after: str, limit: int) -> list[Job]:
        """At most `limit` jobs in `states` whose id sorts after `after`, in id order
        (the recovery sweep walks waiting jobs with it, a bounded slice per pass)."""
        ...


@runtime_checkable
class Erasable(Protocol):
    """A store that can erase a finished job's payload and result everywhere."""

    def erase(self, decision: Decision) -> Job | VersionConflict:
        """Apply an `erase` decision like `apply` (compare-and-set on the version, its
        audit entry appended) and, in the same transaction, rewrite the data of every
        earlier audit entry of the job with `fsm.lifecycle.core.erased_data_json`."""
        ...


@runtime_checkable
class StoresProgress(Protocol):
    """A store that keeps the latest progress of running jobs (`Job.progress_json`)."""

    def save_progress(self, request: ProgressRequest) -> list[str]:
        """Write each item whose lease still matches; return the ids written."""
        ...


@attrs.frozen
class QueuePause:
    """A queue an operator paused: workers lease none of its jobs until it is resumed."""

    queue: str
    actor: str
    reason: str
    at: float


@runtime_checkable
class PausesQueues(Protocol):
    """A store that keeps which queues are paused (every worker of the store obeys)."""

    def pause_queue(self, pause: QueuePause) -> None:
        """Record the pause (a second pause of the queue replaces the first)."""
        ...

    def resume_queue(self, queue: str) -> bool:
        """Forget the queue's pause; True if it was paused."""
        ...

    def paused_queues(self) -> dict[str, QueuePause]: ...


@runtime_checkable
class LimitsClaims(Protocol):
    """A store that keeps global limits (docs/flow-control.md) and enforces them in its
    claim: in the claim's transaction it counts the jobs holding a slot of each limit
    that applies and the leases within its rate window, and leases only what
    `fsm.lifecycle.limits.Budget` admits, recording the lease times of rate limits."""

    def set_limit(self, limit: Limit) -> Limit | None:
        """Store `limit` (replacing the one of its key) and append its change, in one
        transaction; returns the limit it replaced (None if none)."""
        ...

    def clear_limit(self, key: str, *, actor: str, reason: str, at: float) -> Limit | None:
        """Remove the limit of `key` and append the change; returns the one removed."""
        ...

    def limits(self) -> dict[str, Limit]: ...

    def limit_changes(self, key: str | None = None, limit: int = 100) -> list[LimitChange]:
        """The newest `limit` changes (of `key`, or of every key), newest first."""
        ...

    def limit_usage(
        self, keys: Sequence[str], held: tuple[str, ...], waiting: tuple[str, ...]
    ) -> dict[str, tuple[int, int]]:
        """For each key: (jobs holding a slot, jobs waiting in `waiting` states)."""
        ...


@runtime_checkable
class JoinsTransactions(Protocol):
    """A store that can insert jobs inside the caller's own open database transaction
    (`Engine.submit(..., conn=...)`, docs/transactional-submit.md)."""

    def insert_in(
        self, conn: object, decisions: Sequence[Decision], capacity: Capacity | None = None
    ) -> list[Job]:
        """`insert`, with the very statements `insert` runs, on the caller's connection
        `conn` and inside its open transaction, never committing it: the jobs and their
        audit entries exist once the caller commits, and never if it rolls back.

        A connection of the wrong type, closed, to another database or schema, or with
        no transaction to join raises `fsm.errors.BadInput` and writes nothing. On any
        error nothing of this call stays in the caller's transaction (a savepoint)."""
        ...


@attrs.frozen
class ScheduleRecord:
    """A schedule as a store keeps it: its definition (`fsm.service.schedules.Schedule` as
    JSON), where it was declared (`code` or `cli`), whether an operator paused it,
    `last_tick`: the newest tick (UTC epoch seconds) handled (its job submitted, or
    skipped as missed under the schedule's policy), and `checked_at`: when a scheduler
    last handled the schedule (docs/schedules.md: it tells missed ticks from late ones)."""

    name: str
    definition: str
    origin: str
    created_at: float
    updated_at: float
    paused: bool = False
    last_tick: float | None = None
    checked_at: float | None = None


#: what a change did to a schedule (`ScheduleChange.action`)
SCHEDULE_ACTIONS = ("added", "replaced", "removed", "paused", "resumed", "triggered")


@attrs.frozen
class ScheduleChange:
    """One audited change of a schedule: who (`actor`), why (`reason`), when, and the
    definition it stored (`added`, `replaced`; for `triggered`, `{"job": id}` of the
    job it submitted; None for the others). A store writes it
    in the transaction of the change it records, and keeps it after the schedule is
    removed."""

    name: str
    action: str
    actor: str
    reason: str
    at: float
    definition: str | None = None


@attrs.frozen
class SchedulerBeat:
    """A running scheduler as the store knows it: its `owner` (one per worker process),
    the kinds its worker handles, when it was last seen, and until when it leads the
    passes (None: it does not lead)."""

    owner: str
    kinds: tuple[str, ...]
    at: float
    lead_until: float | None = None


@runtime_checkable
class HoldsSchedules(Protocol):
    """A store that keeps schedules, their last tick, their audited changes and the
    schedulers that run them (docs/schedules.md)."""

    def save_schedule(
        self, record: ScheduleRecord, change: ScheduleChange, *, replace: bool
    ) -> bool:
        """Insert the schedule. If its name is taken: with `replace`, overwrite only its
        definition, origin and updated_at (paused, last_tick, checked_at, created_at
        are kept) and return True; without, write nothing and return False. `change`
        is appended in the same transaction, only if something was written."""
        ...

    def delete_schedule(self, change: ScheduleChange) -> bool:
        """Remove schedule `change.name` and append `change`; True if it was there
        (nothing is written if it was not)."""
        ...

    def pause_schedule(self, change: ScheduleChange, paused: bool) -> bool:
        """Set the paused flag of `change.name` (updated_at := change.at) and append
        `change`; True if the schedule exists (nothing is written if not)."""
        ...

    def advance_schedule(
        self, name: str, expected: float | None, tick: float | None, at: float
    ) -> bool:
        """Compare-and-set: `last_tick := tick` and `checked_at := max(checked_at, at)`
        only if `last_tick` is still `expected` (None: never ticked; `tick` may equal
        it, to record a pass alone). `checked_at` never moves back: a pass that records
        after a later one (it was held, or lost a race and tried again) must not make
        the schedule look unattended since its own start, or the next pass would skip
        as missed ticks a scheduler was there to run. True if written; False if
        another scheduler moved `last_tick` first or the schedule is gone."""
        ...

    def schedules(self) -> list[ScheduleRecord]:
        """Every schedule, by name."""
        ...

    def schedule_changes(self, name: str | None, limit: int) -> list[ScheduleChange]:
        """The newest `limit` changes (of schedule `name`, or of all), newest first."""
        ...

    def beat_scheduler(
        self, beat: SchedulerBeat, *, lead_until: float | None, forget_before: float
    ) -> bool:
        """In one transaction: forget the other schedulers last seen before
        `forget_before`; record `beat` (its owner's kinds and `at`); then with
        `lead_until`, lead until then unless another scheduler leads past `beat.at`
        (then, or with None, it leads no more). Of racing callers at most one leads.
        True if `beat.owner` leads after the call."""
        ...

    def schedulers(self) -> list[SchedulerBeat]:
        """The schedulers recorded, by owner."""
        ...


@attrs.frozen
class ServiceLease:
    """Who runs a singleton maintenance service (`name`, e.g. "retention") until when."""

    name: str
    owner: str
    until: float


@runtime_checkable
class LeasesServices(Protocol):
    """A store that grants exclusive, expiring leases on maintenance services that one
    worker at a time runs (the `service_leases` table; docs/retention.md)."""

    def take_service_lease(self, name: str, owner: str, now: float, until: float) -> bool:
        """Compare-and-set, atomic under racing callers: `owner` holds `name` until
        `until` if nobody holds it, `owner` holds it already (a renewal), or its holder's
        lease ended at or before `now` (a handover). True if `owner` holds it after the
        call; False (nothing written) if another owner holds it past `now`."""
        ...

    def release_service_lease(self, name: str, owner: str) -> bool:
        """Give the lease up if `owner` holds it; True if it did."""
        ...

    def service_leases(self) -> list[ServiceLease]:
        """Every service lease recorded (expired ones included), by name."""
        ...


@runtime_checkable
class CountsPrunes(Protocol):
    """A store whose prune tells what it deleted: `prune_counts` is `Store.prune` (the
    same batch, the same rules) returning (queue, state) -> jobs deleted, for the
    retention metrics (docs/metrics.md). `prune` is then the sum of its values."""

    def prune_counts(self, request: PruneRequest) -> dict[tuple[str, str], int]:
        """Delete one batch as `prune` does; (queue, state) -> jobs deleted."""
        ...


@runtime_checkable
class NotesScheduleChanges(Protocol):
    """A store that records an audited schedule action that changes no schedule (a
    trigger now: `fsm.service.schedules.Schedules.trigger`)."""

    def note_schedule_change(self, change: ScheduleChange) -> bool:
        """Append `change` if schedule `change.name` exists (one statement); True if
        appended."""
        ...


@runtime_checkable
class WaitsForJobs(Protocol):
    """A store that can tell a waiting worker that jobs arrived (LISTEN/NOTIFY)."""

    def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> bool:
        """Block at most `timeout` seconds; True if jobs of `queues` may have arrived."""
        ...


@runtime_checkable
class WatchesJobs(Protocol):
    """A store that can say when a job may have reached a final state (LISTEN/NOTIFY).

    `Engine.wait` uses it instead of polling; a store without it is polled.
    """

    def watch(self, job_id: str, changed: Callable[[], None]) -> Callable[[], None]:
        """Call `changed()`, from any thread, whenever job `job_id` may have reached a
        final state, until the returned function is called. Once `watch` returns, no
        change is missed: a read after it sees the state, or `changed` is called."""
        ...


@runtime_checkable
class Wakeable(Protocol):
    """A delivery whose waiting `poll` can be cut short from another thread."""

    def wake(self) -> None: ...
