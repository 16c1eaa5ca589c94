"""The Engine: submit, report, operate and recover jobs through `decide` and a Store.

A thin blocking driver over a `Kernel` (`fsm.service.kernel`): each method runs a plan
(`fsm.service.plans`) or a service function against the kernel's store. The Engine
keeps no rule of its own; what it holds besides the kernel is the view of paused
queues its claims consult.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from typing import Any

from ..clock import SystemClock
from ..errors import JobFSMError, JobNotFound
from ..inputs import KindPolicy
from ..lifecycle.limits import Limit
from ..lifecycle.spec import Lifecycle, lifecycle
from ..policies import Policy
from ..ports import Clock, Delivery, Observer, QueuePause, ScanRequest, Store
from ..records import AuditEntry, Job, Owner
from ..telemetry import tracing
from ..telemetry.metrics import Metrics
from ..telemetry.observers import LogObserver, MetricsObserver, Observers
from . import batches, leasing, plans, waiting
from . import limits as flow
from .connections import driver_connection
from .kernel import Kernel
from .maintenance.retention import prune
from .pausing import QueuePauses
from .writes import decide_seen, run


def default_observers(
    metrics: Metrics | None = None,
    tracer_provider: Any = None,
    observers: Iterable[Observer] = (),
    known_kinds: Callable[[], Container[str]] | None = None,
) -> Observers:
    """The log, `metrics` (if any; kinds not in `known_kinds()` counted as
    "unregistered"), OpenTelemetry spans (when opentelemetry-api is installed, to
    `tracer_provider` or the global provider), then `observers`."""
    members: list[Observer] = [LogObserver()]
    if metrics is not None:
        members.append(MetricsObserver(metrics, known_kinds))
    if tracing.available():
        members.append(tracing.TracingObserver(tracer_provider))
    members += observers
    return Observers(members)


class Engine:
    """The jobfsm engine over one store. Thread-safe if the store is."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Clock | None = None,
        policy: Policy | None = None,
        kinds: Mapping[str, KindPolicy] | None = None,
        strict_kinds: bool = False,
        metrics: Metrics | None = None,
        publisher: Delivery | None = None,
        spec: Lifecycle | None = None,
        tracer_provider: Any = None,
        observers: Iterable[Observer] = (),
    ) -> None:
        """`metrics`, `tracer_provider` (where operator actions' and attempts' spans go;
        default OpenTelemetry's global one) and `observers` (more `fsm.ports.Observer`s)
        are attached to the one transition hook (`default_observers`)."""
        self._metrics = metrics
        self._tracer_provider = tracer_provider
        self._extra_observers = tuple(observers)
        self.kernel = Kernel(
            store=store,
            clock=clock or SystemClock(),
            policy=policy or Policy(),
            spec=spec or lifecycle(),
            observers=self._observers(),
            kinds=kinds,
            strict_kinds=strict_kinds,
            publisher=publisher,
        )
        self._pauses = QueuePauses(store, self.kernel.clock)

    # --- settings (each change makes a new kernel) ----------------------------------

    @property
    def store(self) -> Store:
        return self.kernel.store

    @property
    def clock(self) -> Clock:
        return self.kernel.clock

    @property
    def policy(self) -> Policy:
        return self.kernel.policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        self.kernel = self.kernel.replace(policy=policy)

    @property
    def spec(self) -> Lifecycle:
        return self.kernel.spec

    @property
    def kinds(self) -> Mapping[str, KindPolicy]:
        """The kinds' policies (read-only; `register_kind` adds one)."""
        return self.kernel.kinds

    @property
    def strict_kinds(self) -> bool:
        return self.kernel.strict_kinds

    @property
    def observers(self) -> Observers:
        return self.kernel.observers

    @property
    def publisher(self) -> Delivery | None:
        return self.kernel.publisher

    @publisher.setter
    def publisher(self, publisher: Delivery | None) -> None:
        self.kernel = self.kernel.replace(publisher=publisher)

    @property
    def metrics(self) -> Metrics | None:
        return self._metrics

    @metrics.setter
    def metrics(self, metrics: Metrics | None) -> None:
        self._metrics = metrics
        self._reobserve()

    @property
    def tracer_provider(self) -> Any:
        return self._tracer_provider

    @tracer_provider.setter
    def tracer_provider(self, provider: Any) -> None:
        self._tracer_provider = provider
        self._reobserve()

    def _observers(self) -> Observers:
        return default_observers(
            self._metrics,
            self._tracer_provider,
            self._extra_observers,
            known_kinds=lambda: self.kernel.kinds,
        )

    def _reobserve(self) -> None:
        self.kernel = self.kernel.replace(observers=self._observers())

    def register_kind(self, kind: str, policy: KindPolicy | None = None) -> None:
        self.kernel = self.kernel.with_kind(kind, policy)

    @property
    def final_states(self) -> frozenset[str]:
        """Where `wait` returns: terminal states, and parked ones (an operator decides)."""
        return self.kernel.final_states

    # --- submit ----------------------------------------------------------------------

    def submit(self, kind: str, payload: Any = None, *, conn: Any = None, **opts: Any) -> Job:
        """Submit one job; with an idempotency key already used, return that job.

        `conn`: the caller's open database connection (psycopg on PostgreSQL, sqlite3
        on SQLite, or a SQLAlchemy Session or Connection over either): the job is
        written inside its transaction and exists only once the caller commits
        (docs/transactional-submit.md)."""
        return self.submit_many([(kind, payload, opts)], conn=conn)[0]

    def submit_many(
        self, items: Iterable[tuple[str, Any, Mapping[str, Any]]], *, conn: Any = None
    ) -> list[Job]:
        """Submit many jobs in one store transaction; validation happens before any write.

        With `conn`, in the caller's transaction instead (see `submit`); a publisher is
        not told of those jobs (they are not committed yet): workers find them by
        polling or NOTIFY on commit, and a RabbitMQ sweep republishes them."""
        kernel = self.kernel
        if conn is not None:  # a SQLAlchemy Session or Connection: its driver's
            conn = driver_connection(conn)
        return run(kernel, plans.submit_many(kernel, items, conn=conn))

    # --- reads -------------------------------------------------------------------------

    def get(self, job_id: str) -> Job:
        job = self.kernel.store.get(job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job

    def history(self, job_id: str) -> list[AuditEntry]:
        self.get(job_id)
        return self.kernel.store.history(job_id)

    def counts(self) -> dict[tuple[str, str], int]:
        return self.kernel.store.counts()

    def scan(self, request: ScanRequest) -> list[Job]:
        return self.kernel.store.scan(request)

    def wait(self, job_id: str, *, timeout: float) -> Job:
        """Block until the job is in a final state and return it; WaitTimeout after
        `timeout` seconds (at most `waiting.MAX_WAIT`). See `fsm.service.waiting`."""
        return waiting.wait(self.kernel, job_id, timeout=timeout)

    # --- transitions -------------------------------------------------------------------

    def transition(self, job_id: str, event: str, **args: Any) -> Job:
        """Apply `event` to the job through `decide` and compare-and-set.

        A lost race re-reads and decides again, at most `limits.cas_retries` times.
        A stale fence raises LeaseLost after recording the rejected report.
        """
        kernel = self.kernel
        return run(kernel, plans.transition(kernel, job_id, event, args))

    def start(self, job_id: str, fence: int) -> Job:
        return self.transition(job_id, "start", fence=fence)

    def heartbeat(self, owner: Owner, fences: Mapping[str, int]) -> dict[str, str]:
        """Renew every lease in `fences` at once; returns id -> state of those renewed."""
        return leasing.renew(self.kernel, owner, fences)

    def save_progress(self, owner: Owner, items: Mapping[str, tuple[int, str]]) -> list[str]:
        """Store the latest progress of jobs `owner` holds (`fsm.service.leasing`)."""
        return leasing.save_progress(self.kernel, owner, items)

    def succeed(self, job_id: str, fence: int, result: Any = None) -> Job:
        result_json = self.kernel.result_json(job_id, result)
        return self.transition(job_id, "succeed", fence=fence, result_json=result_json)

    def fail(
        self,
        job_id: str,
        fence: int,
        error: str,
        *,
        delay: float | None = None,
        permanent: bool = False,
    ) -> Job:
        return self.transition(
            job_id, "fail", fence=fence, error=error, delay=delay, permanent=permanent
        )

    def mark(self, job_id: str, fence: int, label: str, external_id: str | None = None) -> Job:
        """Record, durably and fenced, what the running attempt is about to do outside
        (`ctx.mark`); BadInput past the bounds of `fsm.lifecycle.outside` (nothing stored)."""
        return self.transition(job_id, "mark", fence=fence, label=label, external_id=external_id)

    def reconcile(
        self,
        job_id: str,
        fence: int,
        answer: str,
        *,
        result: Any = None,
        until: float | None = None,
        failure: str | None = None,
        why: str | None = None,
    ) -> Job:
        """Record a reconciler's answer for a lost run (see `fsm.service.reconcile`);
        `failure` (with answer "unknown") says the reconciler itself failed."""
        kernel = self.kernel
        plan = plans.reconcile(
            kernel, job_id, fence, answer, result=result, until=until, failure=failure, why=why
        )
        return run(kernel, plan)

    def ambiguous(self, job_id: str, fence: int, error: str) -> Job:
        return self.transition(job_id, "ambiguous", fence=fence, error=error)

    def release(self, job_id: str, fence: int) -> Job:
        return self.transition(job_id, "release", fence=fence)

    def cancelled_ack(self, job_id: str, fence: int, result: Any = None) -> Job:
        result_json = self.kernel.result_json(job_id, result)
        return self.transition(job_id, "cancelled_ack", fence=fence, result_json=result_json)

    def claim(
        self,
        owner: Owner,
        queues: Sequence[str] = ("default",),
        limit: int = 1,
        ids: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
        *,
        start: Callable[[Job], Mapping[str, Any]] | None = None,
        caps: Mapping[str, int] | None = None,
    ) -> list[Job]:
        """Lease up to `limit` due jobs of the queues that are not paused (or the given
        ids) for `owner`; with `kinds`, only jobs of those kinds (a worker leases only
        what it has handlers for). With `start`, claim-and-start; `caps`: the caller's
        own limits by limit key (`fsm.service.leasing`). The store's global limits hold
        either way (docs/flow-control.md)."""
        if limit < 1:
            return []
        queues = self._pauses.unpaused(queues)
        if not queues:
            return []
        return leasing.claim(
            self.kernel, owner, queues, limit, ids=ids, kinds=kinds, start=start, caps=caps
        )

    def report_many(
        self, reports: Sequence[tuple[Job, str, Mapping[str, Any]]]
    ) -> list[Job | JobFSMError]:
        """Apply worker reports decided on the records the worker last saw, in one write
        (`fsm.service.batches`); results in order: the new record, or the error."""
        return batches.report_many(self.kernel, reports)

    # --- operator events (actor and reason required, audited) ---------------------------

    def cancel(self, job_id: str, *, actor: str, reason: str) -> Job:
        kernel = self.kernel
        return run(kernel, plans.cancel(kernel, job_id, actor=actor, reason=reason))

    def requeue(self, job_id: str, *, actor: str, reason: str, attempts: int) -> Job:
        kernel = self.kernel
        plan = plans.requeue(kernel, job_id, actor=actor, reason=reason, attempts=attempts)
        return run(kernel, plan)

    def resolve(
        self, job_id: str, *, outcome: str, actor: str, reason: str, result: Any = None
    ) -> Job:
        kernel = self.kernel
        plan = plans.resolve(
            kernel, job_id, outcome=outcome, actor=actor, reason=reason, result=result
        )
        return run(kernel, plan)

    def erase(self, job_id: str, *, actor: str, reason: str) -> Job:
        """Blank a finished job's payload and result, in its record and in every audit
        entry of its trail; the erase itself is audited with actor and reason."""
        kernel = self.kernel
        return run(kernel, plans.erase(kernel, job_id, actor=actor, reason=reason))

    # --- pausing queues (fsm.service.pausing) -------------------------------------------

    def pause(self, queue: str, *, actor: str, reason: str) -> QueuePause:
        """Stop every worker of this store from leasing jobs of `queue`."""
        with self.kernel.observers.operator("pause", queue, actor):
            return self._pauses.pause(queue, actor=actor, reason=reason)

    def resume(self, queue: str, *, actor: str, reason: str) -> bool:
        """Let workers lease jobs of `queue` again; False if it was not paused."""
        with self.kernel.observers.operator("resume", queue, actor):
            return self._pauses.resume(queue, actor=actor, reason=reason)

    def paused(self) -> dict[str, QueuePause]:
        """The paused queues (none on a store that cannot pause)."""
        return self._pauses.paused()

    # --- global limits (fsm.service.limits, docs/flow-control.md) -------------------------

    def set_limit(
        self,
        key: str,
        *,
        concurrency: int | None = None,
        rate: int | None = None,
        period: float | None = None,
        actor: str,
        reason: str,
        new_kind: bool = False,
    ) -> Limit:
        """Limit the jobs of `key` (`kind:NAME` or `queue:NAME`) across every worker of
        the store: `concurrency` holding a lease at once, `rate` leases per `period` s."""
        return flow.set_limit(
            self.kernel,
            key,
            concurrency=concurrency,
            rate=rate,
            period=period,
            actor=actor,
            reason=reason,
            new_kind=new_kind,
        )[0]

    def clear_limit(self, key: str, *, actor: str, reason: str) -> Limit | None:
        """Remove the limit of `key`; returns it (None if there was none)."""
        return flow.clear_limit(self.kernel, key, actor=actor, reason=reason)

    def limits(self) -> list[flow.LimitStatus]:
        """Every limit of the store with the jobs holding a slot and waiting now."""
        return flow.limit_statuses(self.kernel)

    # --- recovery -------------------------------------------------------------------------

    def expire(self, job_id: str, *, verdict: str | None = None, reason: str | None = None) -> Job:
        """Take a job back from its owner: lease lapsed, or the owner confirmed dead."""
        args = {k: v for k, v in (("verdict", verdict), ("reason", reason)) if v is not None}
        return self.transition(job_id, "expire", **args)

    def prune(
        self,
        *,
        limit: int = 1000,
        max_batches: int = 1000,
        queue_retention: Mapping[str, Mapping[str, float | None]] | None = None,
    ) -> int:
        """Delete finished jobs past their retention, in bounded batches
        (`fsm.service.maintenance.retention.prune`)."""
        return prune(
            self.kernel, limit=limit, max_batches=max_batches, queue_retention=queue_retention
        )

    def expire_seen(
        self,
        job: Job,
        *,
        verdict: str | None = None,
        reason: str | None = None,
        **extra: Any,
    ) -> Job | None:
        """Expire the job exactly as it was read, if it has not changed since: a
        compare-and-set on the version that was judged, so it can never take a lease
        that a newer owner has since taken. None (nothing written) when the job moved."""
        return self.decide_seen(job, "expire", verdict=verdict, reason=reason, **extra)

    def decide_seen(self, job: Job, event: str, **args: Any) -> Job | None:
        """Apply `event` to the job exactly as it was read (compare-and-set on that
        version); None when the job moved since or the event does not apply."""
        return decide_seen(self.kernel, job, event, **args)
