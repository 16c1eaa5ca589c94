"""The ports: small protocols that stores, deliveries, executors and clocks implement.

Ports speak of jobs, not queries. A store carries out decisions made by
`fsm.lifecycle.core.decide`; it never decides a state on its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

import attrs

from .errors import VersionConflict
from .jsonio import DEFAULT_MAX_PAYLOAD_BYTES
from .records import AuditEntry, Decision, Job, Owner, job_to_json


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


class Delivery(Protocol):
    """How a worker learns of work. Hints only: the store stays the truth."""

    def publish(self, jobs: Sequence[Job]) -> None:
        """Announce committed jobs. A failure is logged, never fatal: sweeps repair it."""
        ...

    def close(self) -> None: ...


@attrs.frozen
class Wakeup:
    """A hint that work may be there: a job id (RabbitMQ) or None ("claim any due job").

    `token` is the delivery's own handle (on RabbitMQ a delivery tag and its channel
    generation, or one part of a message that names several jobs); the worker hands
    it back to `settle` once the lease is durable.
    """

    job_id: str | None
    token: object = attrs.field(default=None, eq=False)


class WorkerDelivery(Delivery, Protocol):
    """The worker side of a delivery: wake-ups in, settlements out."""

    def start(self, queues: Sequence[str]) -> None: ...

    def poll(self, capacity: int, timeout: float) -> list[Wakeup]:
        """Block at most `timeout` seconds; return at most `capacity` wake-ups."""
        ...

    def settle(self, wakeup: Wakeup, claimed: bool = False) -> None:
        """The wake-up was handled (job leased durably, or not claimable): ack it.

        `claimed`: the worker leased the job it names, so the job certainly exists.
        """
        ...

    @property
    def ready(self) -> bool: ...

    def check(self) -> None:
        """Raise if the delivery failed for good (recovery budget exhausted)."""
        ...


class Liveness(Protocol):
    """Cross-host confirmation of death, where a store can give it (PostgreSQL)."""

    def hold(self, owner: Owner, on_lost: Callable[[], None]) -> None:
        """Take this process's liveness token; call `on_lost` if it is ever lost."""
        ...

    def release(self, owner: Owner) -> None: ...

    def probe(self, owner: Owner) -> str:
        """'dead' if the owner's token is provably free, 'alive' if held, else 'unknown'."""
        ...


# --- optional capabilities: declared here, checked with isinstance ----------------------


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
    """A store that can remove everything it created (the fault suite cleans up with it)."""

    def drop_schema(self) -> None: ...


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
    """A schedule as a store keeps it: its definition (`fsm.schedules.Schedule` as
    JSON), where it was declared (`code` or `cli`), whether an operator paused it, and
    `last_tick`: the newest tick (UTC epoch seconds) whose job was submitted."""

    name: str
    definition: str
    origin: str
    created_at: float
    updated_at: float
    paused: bool = False
    last_tick: float | None = None


@runtime_checkable
class HoldsSchedules(Protocol):
    """A store that keeps schedules and their last tick (docs/schedules.md)."""

    def save_schedule(self, record: ScheduleRecord, *, replace: bool) -> bool:
        """Insert the schedule. If its name is taken: with `replace`, overwrite only its
        definition, origin and updated_at (paused, last_tick, created_at are kept) and
        return True; without, write nothing and return False."""
        ...

    def delete_schedule(self, name: str) -> bool:
        """Remove it; True if it was there."""
        ...

    def pause_schedule(self, name: str, paused: bool, at: float) -> bool:
        """Set its paused flag; True if the schedule exists."""
        ...

    def advance_schedule(self, name: str, expected: float | None, tick: float, at: float) -> bool:
        """Compare-and-set: `last_tick := tick` only if it is still `expected` (None:
        never ticked). True if written; False if another scheduler moved it first or
        the schedule is gone."""
        ...

    def schedules(self) -> list[ScheduleRecord]:
        """Every schedule, by name."""
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


# --- executors ---------------------------------------------------------------------


class ExecutorFull(RuntimeError):
    """An executor was given an attempt with no free slot (the worker's bug, not the job's)."""


#: How an attempt ended. The worker maps each to an engine report (docs/workers.md).
OUTCOMES = (
    "succeeded",  # returned; result_json holds the JSON result
    "retry",  # raised Retry(after=); delay holds `after`
    "failed",  # raised anything else: retryable
    "permanent",  # raised Permanent, or a result that is not JSON
    "ambiguous",  # raised Ambiguous: the outside effect is unknown
    "cancelled",  # stopped cooperatively after its cancel token was set
    "timeout",  # ran past its per-attempt timeout and was killed
    "crashed",  # its process died (signal, os._exit, OOM kill)
    "killed",  # stopped by the executor on request (hard cancel, lease lost)
    "abandoned",  # could not be stopped (a thread) and was left to recovery
)


@attrs.frozen
class Outcome:
    """How one attempt ended; crosses process boundaries as JSON (`to_json`)."""

    status: str
    result_json: str | None = None
    error: str | None = None
    delay: float | None = None
    seconds: float = 0.0
    #: an unexpected error's traceback, kept apart from its one-line `error`
    traceback: str | None = None

    def to_json(self) -> str:
        import json

        return json.dumps(attrs.asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Outcome:
        import json

        data = json.loads(text)
        if not isinstance(data, dict) or data.get("status") not in OUTCOMES:
            raise ValueError(f"not an attempt outcome: {text[:200]!r}")
        return cls(
            status=str(data["status"]),
            result_json=data.get("result_json"),
            error=data.get("error"),
            delay=data.get("delay"),
            seconds=float(data.get("seconds") or 0.0),
            traceback=data.get("traceback"),
        )


class CancelToken(Protocol):
    """A settable flag: `threading.Event` in threads, `multiprocessing.Event` in children."""

    def is_set(self) -> bool: ...
    def set(self) -> None: ...
    def wait(self, timeout: float | None = None) -> bool: ...


@attrs.frozen(eq=False)
class Attempt:
    """One run of a handler, as handed to an executor.

    `run` runs it in this process (thread executors); `target` names the handler by
    import path ("module:qualname") for executors that run it in another process,
    which rebuild the job from `job_json` (never a pickled object). Left out,
    `job_json` is made from `job` when first read, so an executor that runs
    attempts in this process never pays for the JSON. `arun` is set for an `async
    def` handler: an executor with an event loop awaits it there.
    """

    job: Job
    timeout: float
    target: str
    run: Callable[[], Outcome] = attrs.field(repr=False)
    cancelled: CancelToken = attrs.field(repr=False)
    #: most bytes of the result's JSON (the store's payload limit), on every executor
    result_limit: int = attrs.field(default=DEFAULT_MAX_PAYLOAD_BYTES, kw_only=True)
    #: for an `async def` handler: the attempt as a coroutine, for executors with an event
    #: loop (`run` still works anywhere: it runs the coroutine on a loop of its own)
    arun: Callable[[], Awaitable[Outcome]] | None = attrs.field(
        default=None, kw_only=True, repr=False
    )
    _job_json: str | None = attrs.field(default=None, kw_only=True, alias="job_json", repr=False)
    #: for executors that run the handler in another process: where the progress the
    #: handler reports there is handed, as JSON text (`Context.progress_from`)
    progress: Callable[[str], None] | None = attrs.field(default=None, kw_only=True, repr=False)
    #: stores one of the handler's marks (label, external_id), for executors whose
    #: handler runs in another process and sends its marks back (`ctx.mark`)
    mark: Callable[[str, str | None], None] | None = attrs.field(
        default=None, kw_only=True, repr=False
    )

    @property
    def job_json(self) -> str:
        """The job as JSON (`fsm.records.job_to_json`), made once, on first use."""
        if self._job_json is None:
            object.__setattr__(self, "_job_json", job_to_json(self.job))
        assert self._job_json is not None
        return self._job_json


class Executor(Protocol):
    """Runs attempts in bounded slots; restartable in place (a new generation).

    `done(attempt, outcome)` is called exactly once per submitted attempt of the
    current generation, from an executor thread; completions of an older generation
    are dropped. `cancel(job_id)` forwards the cancel token; `hard=True` stops the
    attempt now (a process executor kills the child; a thread executor abandons it).
    """

    def start(self, slots: int) -> None: ...

    @property
    def free(self) -> int: ...

    @property
    def generation(self) -> int: ...

    def submit(self, attempt: Attempt, done: Callable[[Attempt, Outcome], None]) -> None: ...

    def cancel(
        self,
        job_id: str,
        *,
        fence: int | None = None,
        hard: bool = False,
        reason: str = "cancelled",
    ) -> None:
        """Cancel run (job id, fence); without a fence, the job's newest run."""
        ...

    def restart(self, reason: str) -> None: ...

    def shutdown(self, wait: float) -> None: ...


@runtime_checkable
class AsyncStore(Protocol):
    """The part of the Store that `fsm.aio.AsyncEngine` uses, awaited (its methods mean
    what the Store's of the same name mean). A store offers it through `HasAsyncStore`."""

    async def open(self) -> None:
        """Get ready on the running event loop (open connection pools)."""
        ...

    async def insert(
        self, decisions: Sequence[Decision], capacity: Capacity | None = None
    ) -> list[Job]: ...
    async def get(self, job_id: str) -> Job | None: ...
    async def apply(self, decisions: Sequence[Decision]) -> list[Job | VersionConflict]: ...
    async def erase(self, decision: Decision) -> Job | VersionConflict: ...
    async def record(self, entries: Sequence[AuditEntry]) -> None: ...
    async def scan(self, request: ScanRequest) -> list[Job]: ...
    async def history(self, job_id: str) -> list[AuditEntry]: ...
    async def counts(self) -> dict[tuple[str, str], int]: ...
    async def aclose(self) -> None: ...


@runtime_checkable
class HasAsyncStore(Protocol):
    """A store with an asyncio twin over the same data (PostgreSQL: psycopg's async pool).

    `AsyncEngine` uses the twin instead of running the blocking store on threads."""

    def async_store(self) -> AsyncStore:
        """A new twin, not yet open; the caller opens it on its loop and closes it."""
        ...
