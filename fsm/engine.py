"""The Engine: submit, report, operate and recover jobs through `decide` and a Store."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from . import jsonio, steps, waiting
from .clock import SystemClock
from .errors import (
    BadInput,
    IllegalTransition,
    JobFSMError,
    JobNotFound,
    StoreError,
    UnknownKind,
    VersionConflict,
)
from .inputs import KindPolicy, check_name, submit_options
from .lifecycle.core import decide
from .lifecycle.spec import Lifecycle, lifecycle
from .observe import Metrics, log_transition
from .pausing import QueuePauses
from .policies import Policy
from .ports import (
    ClaimRequest,
    Clock,
    Delivery,
    Erasable,
    ProgressRequest,
    PruneRequest,
    QueuePause,
    RenewRequest,
    ScanRequest,
    Store,
    StoresProgress,
    TracksDependencies,
)
from .records import AuditEntry, Decision, Job, Owner, new_id
from .telemetry import tracing

log = logging.getLogger(__name__)


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
    ) -> None:
        """`tracer_provider`: where operator actions' spans go (default: OpenTelemetry's
        global one, when opentelemetry-api is installed)."""
        self.store = store
        self.clock: Clock = clock or SystemClock()
        self.policy = policy or Policy()
        self.kinds: dict[str, KindPolicy] = dict(kinds or {})
        self.strict_kinds = strict_kinds
        self.metrics = metrics
        self.publisher = publisher
        self.spec = spec or lifecycle()
        self._lease_states = self._sources("lease")
        self._heartbeat_states = self._sources("heartbeat")
        self.tracer_provider = tracer_provider
        self._traced = tracing.available()
        self._pauses = QueuePauses(store, self.clock)
        # imported here: fsm.dependencies needs the Engine type only for annotations
        from .dependencies import Releaser

        #: releases jobs that wait for prerequisites (None: the store keeps none)
        self.releaser = Releaser(self, store) if isinstance(store, TracksDependencies) else None

    def _dests(self, event: str) -> frozenset[str]:
        return frozenset(
            r.dest for (_, ev), rules in self.spec.table.items() if ev == event for r in rules
        )

    def _sources(self, event: str) -> tuple[str, ...]:
        return tuple(src for (src, ev) in self.spec.table if ev == event)

    # --- submit ------------------------------------------------------------------

    def register_kind(self, kind: str, policy: KindPolicy | None = None) -> None:
        self.kinds[check_name("kind", kind)] = policy or KindPolicy()

    def _submit_decision(self, now: float, kind: str, payload: Any, **opts: Any) -> Decision:
        policy = self.kinds.get(kind) if isinstance(kind, str) else None
        if policy is None and self.strict_kinds:
            raise UnknownKind(check_name("kind", kind), list(self.kinds))
        fields = submit_options(
            kind,
            opts,
            policy,
            now=now,
            default_attempts=self.policy.retry.max_attempts,
            default_recoveries=self.policy.recovery.max_recoveries,
        )
        payload_json = jsonio.encode(
            payload, what=f"payload of {kind!r}", limit=self.policy.limits.max_payload_bytes
        )
        job_id = new_id(now)
        if fields["correlation_id"] is None:
            fields["correlation_id"] = job_id
        return decide(
            None,
            "submit",
            now,
            self.policy,
            spec=self.spec,
            id=job_id,
            payload_json=payload_json,
            **fields,
        )

    def submit(self, kind: str, payload: Any = None, *, conn: Any = None, **opts: Any) -> Job:
        """Submit one job; with an idempotency key already used, return that job.

        `conn`: the caller's open database connection (psycopg on PostgreSQL, sqlite3
        on SQLite): the job is written inside its transaction and exists only once the
        caller commits (docs/transactional-submit.md)."""
        return self.submit_many([(kind, payload, opts)], conn=conn)[0]

    def submit_many(
        self, items: Iterable[tuple[str, Any, Mapping[str, Any]]], *, conn: Any = None
    ) -> list[Job]:
        """Submit many jobs in one store transaction; validation happens before any write.

        With `conn`, in the caller's transaction instead (see `submit`); a publisher is
        not told of those jobs (they are not committed yet): workers find them by
        polling or NOTIFY on commit, and a RabbitMQ sweep republishes them. The loop is
        `fsm.steps.submit_many`, shared with `AsyncEngine`."""
        plan = steps.submit_many(self, items, conn=conn)
        return steps.drive(plan, steps.sync_performer(self))

    # --- reads -------------------------------------------------------------------

    def get(self, job_id: str) -> Job:
        job = self.store.get(job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job

    def history(self, job_id: str) -> list[AuditEntry]:
        self.get(job_id)
        return self.store.history(job_id)

    def counts(self) -> dict[tuple[str, str], int]:
        return self.store.counts()

    # --- waiting for an outcome ----------------------------------------------------

    @property
    def final_states(self) -> frozenset[str]:
        """Where `wait` returns: terminal states, and parked ones (an operator decides)."""
        return self.spec.terminal | self.spec.parked

    def wait(self, job_id: str, *, timeout: float) -> Job:
        """Block until the job is in a final state and return it; WaitTimeout after
        `timeout` seconds (at most `fsm.waiting.MAX_WAIT`). See `fsm.waiting.wait`."""
        return waiting.wait(self, job_id, timeout=timeout)

    def scan(self, request: ScanRequest) -> list[Job]:
        return self.store.scan(request)

    # --- transitions ---------------------------------------------------------------

    def _observe(self, job: Job, entry: AuditEntry) -> None:
        log_transition(job, entry)
        if self.metrics is not None:
            self.metrics.transition(job.kind, entry.event, entry.from_state, entry.to_state)
            if entry.code is not None:
                self.metrics.transition_code(job.kind, entry.event, entry.to_state, entry.code)

    def transition(self, job_id: str, event: str, **args: Any) -> Job:
        """Apply `event` to the job through `decide` and compare-and-set.

        A lost race re-reads and decides again, at most `limits.cas_retries` times.
        A stale fence raises LeaseLost after recording the rejected report.
        """
        job = self._decided(job_id, event, lambda d: self.store.apply([d])[0], **args)
        if self.releaser is not None:
            self.releaser.settled([job])
        return job

    def _decided(
        self,
        job_id: str,
        event: str,
        write: Callable[[Decision], Job | VersionConflict],
        **args: Any,
    ) -> Job:
        """Read, `decide`, `write` with compare-and-set; re-read on a lost race (bounded).
        The loop is `fsm.steps.decided`, shared with `AsyncEngine`."""
        return steps.drive(
            steps.decided(self, job_id, event, args), steps.sync_performer(self, write)
        )

    def start(self, job_id: str, fence: int) -> Job:
        return self.transition(job_id, "start", fence=fence)

    def heartbeat(self, owner: Owner, fences: Mapping[str, int]) -> dict[str, str]:
        """Renew every lease in `fences` at once; returns id -> state of those renewed."""
        if not fences:
            return {}
        now = self.clock.now()
        return self.store.renew(
            RenewRequest(
                owner=owner,
                fences=dict(fences),
                now=now,
                lease_until=now + self.policy.lease.ttl,
                states=self._heartbeat_states,
            )
        )

    def save_progress(self, owner: Owner, items: Mapping[str, tuple[int, str]]) -> list[str]:
        """Store the latest progress of jobs `owner` holds: job id -> (fence, stored JSON,
        `fsm.progress.envelope`). Fenced like a heartbeat; no version bump, no audit
        entry. Returns the ids written; a store without the capability keeps none."""
        if not items or not isinstance(self.store, StoresProgress):
            return []
        request = ProgressRequest(owner=owner, items=dict(items), states=self._heartbeat_states)
        return self.store.save_progress(request)

    def succeed(self, job_id: str, fence: int, result: Any = None) -> Job:
        return self.transition(
            job_id, "succeed", fence=fence, result_json=self._result_json(job_id, result)
        )

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
        """Record a reconciler's answer for a lost run (see `fsm.reconcile`); `failure`
        (with answer "unknown") says the reconciler itself failed."""
        args: dict[str, Any] = {"fence": fence, "answer": answer}
        if answer == "done":
            args["result_json"] = self._result_json(job_id, result)
        if until is not None:
            args["until"] = until
        if failure is not None:
            args["failure"] = failure
        if why is not None:
            args["why"] = why
        return self.transition(job_id, "reconcile", **args)

    def ambiguous(self, job_id: str, fence: int, error: str) -> Job:
        return self.transition(job_id, "ambiguous", fence=fence, error=error)

    def release(self, job_id: str, fence: int) -> Job:
        return self.transition(job_id, "release", fence=fence)

    def cancelled_ack(self, job_id: str, fence: int, result: Any = None) -> Job:
        return self.transition(
            job_id, "cancelled_ack", fence=fence, result_json=self._result_json(job_id, result)
        )

    def _result_json(self, job_id: str, result: Any) -> str:
        return jsonio.encode(
            result, what=f"result of job {job_id}", limit=self.policy.limits.max_payload_bytes
        )

    def claim(
        self,
        owner: Owner,
        queues: Sequence[str] = ("default",),
        limit: int = 1,
        ids: Sequence[str] | None = None,
        kinds: Sequence[str] | None = None,
        *,
        start: Callable[[Job], Mapping[str, Any]] | None = None,
    ) -> list[Job]:
        """Lease up to `limit` due jobs (or the given ids) for `owner`; with `kinds`,
        only jobs of those kinds (a worker leases only what it has handlers for).

        With `start` (claim-and-start: a leased job's `start` arguments, its fence
        aside), each job is also started in the claim's transaction and comes back
        running; one whose start the core refuses comes back leased, for the caller
        to start (or fail) on its own."""
        if limit < 1:
            return []
        queues = self._pauses.unpaused(queues)
        if not queues:
            return []
        now = self.clock.now()
        lease_until = now + self.policy.lease.ttl

        def lease(job: Job) -> Decision:
            return decide(
                job,
                "lease",
                now,
                self.policy,
                spec=self.spec,
                owner=owner,
                lease_until=lease_until,
            )

        started: dict[tuple[str, int], AuditEntry] = {}

        def begin(job: Job) -> Decision:
            assert start is not None
            args = start(job)
            d = decide(job, "start", now, self.policy, spec=self.spec, fence=job.fence, **args)
            if d.entry is not None:
                started[(d.job.id, d.job.version)] = d.entry
            return d

        jobs = self.store.claim(
            ClaimRequest(
                owner=owner,
                queues=tuple(queues),
                now=now,
                limit=limit,
                lease_until=lease_until,
                states=self._lease_states,
                decide=lease,
                ids=None if ids is None else tuple(ids),
                kinds=None if kinds is None else tuple(kinds),
                start=None if start is None else begin,
            )
        )
        for job in jobs:
            if self.metrics is not None:
                self.metrics.transition(job.kind, "lease", None, "leased")
            entry = started.get((job.id, job.version))
            if entry is not None:
                self._observe(job, entry)
        return jobs

    # --- operator events (actor and reason required, audited) ---------------------

    def _operator_span(
        self, event: str, job_id: str, actor: Any
    ) -> contextlib.AbstractContextManager[Any]:
        """Every operator action, whichever surface asked for it, is one span (if traced)."""
        if not self._traced:
            return contextlib.nullcontext()
        return tracing.operator_span(event, job_id, actor=str(actor), provider=self.tracer_provider)

    def cancel(self, job_id: str, *, actor: str, reason: str) -> Job:
        plan = steps.cancel(self, job_id, actor=actor, reason=reason)
        return steps.drive(plan, steps.sync_performer(self))

    def requeue(self, job_id: str, *, actor: str, reason: str, attempts: int) -> Job:
        plan = steps.requeue(self, job_id, actor=actor, reason=reason, attempts=attempts)
        return steps.drive(plan, steps.sync_performer(self))

    def resolve(
        self, job_id: str, *, outcome: str, actor: str, reason: str, result: Any = None
    ) -> Job:
        plan = steps.resolve(
            self, job_id, outcome=outcome, actor=actor, reason=reason, result=result
        )
        return steps.drive(plan, steps.sync_performer(self))

    def erase(self, job_id: str, *, actor: str, reason: str) -> Job:
        """Blank a finished job's payload and result, in its record and in every audit
        entry of its trail; the erase itself is audited with actor and reason."""
        store = self.store
        if not isinstance(store, Erasable):
            raise BadInput(f"{type(store).__name__} cannot erase jobs (no `erase`)")
        args = {"actor": actor, "reason": reason}
        return steps.drive(steps.erase(self, job_id, args), steps.sync_performer(self, store.erase))

    # --- pausing queues (fsm.pausing) -------------------------------------------

    def pause(self, queue: str, *, actor: str, reason: str) -> QueuePause:
        """Stop every worker of this store from leasing jobs of `queue`."""
        with self._operator_span("pause", queue, actor):
            return self._pauses.pause(queue, actor=actor, reason=reason)

    def resume(self, queue: str, *, actor: str, reason: str) -> bool:
        """Let workers lease jobs of `queue` again; False if it was not paused."""
        with self._operator_span("resume", queue, actor):
            return self._pauses.resume(queue, actor=actor, reason=reason)

    def paused(self) -> dict[str, QueuePause]:
        """The paused queues (none on a store that cannot pause)."""
        return self._pauses.paused()

    # --- recovery --------------------------------------------------------------------

    def expire(self, job_id: str, *, verdict: str | None = None, reason: str | None = None) -> Job:
        """Take a job back from its owner: lease lapsed, or the owner confirmed dead."""
        args: dict[str, Any] = {}
        if verdict is not None:
            args["verdict"] = verdict
        if reason is not None:
            args["reason"] = reason
        return self.transition(job_id, "expire", **args)

    def prune(
        self,
        *,
        limit: int = 1000,
        max_batches: int = 1000,
        queue_retention: Mapping[str, Mapping[str, float | None]] | None = None,
    ) -> int:
        """Delete finished jobs past their retention, in bounded batches (at most
        `max_batches` of `limit` per retention rule). A queue of `queue_retention` (or of
        `policy.limits.queue_retention`) keeps its jobs by its own rule, for the states it
        names, and by the default for the others."""
        now = self.clock.now()
        limits = self.policy.limits
        overrides = dict(limits.queue_retention)
        overrides.update(queue_retention or {})

        def cutoffs(rule: Mapping[str, float | None]) -> dict[str, float]:
            # only terminal states are ever pruned, whatever a rule names
            return {
                s: now - keep
                for s, keep in rule.items()
                if keep is not None and s in self.spec.terminal
            }

        default = cutoffs(limits.retention)
        held = () if self.releaser is None else self.releaser.waiting
        requests = [
            PruneRequest(cutoffs=default, limit=limit, other_than=tuple(overrides), held_by=held)
        ]
        for queue, rule in sorted(overrides.items()):
            check_name("queue", queue)
            merged = {**limits.retention, **rule}
            requests.append(
                PruneRequest(cutoffs=cutoffs(merged), limit=limit, queues=(queue,), held_by=held)
            )
        total = 0
        for request in requests:
            for _ in range(max_batches):
                n = self.store.prune(request)
                total += n
                if n < limit:
                    break
        return total

    # --- batched reports and snapshot expiry (for workers) ----------------------------

    def report_many(
        self, reports: Sequence[tuple[Job, str, Mapping[str, Any]]]
    ) -> list[Job | JobFSMError]:
        """Apply worker reports decided on the records the worker last saw, in one write.

        Each (job, event, args) is decided on `job` as given and written with
        compare-and-set on its version, all in one `store.apply`. The reports whose
        record moved since (a heartbeat renews a lease with a new version, so every
        job that ran past one has) are decided again on the stored records and
        written in a second `store.apply`; what still fails (a cancel, a recovery,
        a fence that moved) falls back to `transition`, one by one, which re-reads,
        decides again and records a stale report. Results are in order: the new
        record, or the error (LeaseLost, IllegalTransition, ...) for that report.
        """
        out: list[Job | JobFSMError | None] = [None] * len(reports)
        self._report_batch(reports, list(range(len(reports))), out, reread=False)
        moved = [i for i, r in enumerate(out) if r is None]
        if moved:
            try:
                self._report_batch(reports, moved, out, reread=True)
            except StoreError:
                if len(moved) == len(reports):
                    raise  # nothing is written yet: the caller retries the whole batch
                # some are written: a retry would find those final and call their
                # reports refused, so the rest go one by one below instead
                log.warning("%d reports on moved records: one by one", len(moved))
        for i, (job, event, args) in enumerate(reports):
            if out[i] is None:
                out[i] = self._report_alone(job, event, args)
        return [r for r in out if r is not None]

    def _report_batch(
        self,
        reports: Sequence[tuple[Job, str, Mapping[str, Any]]],
        indexes: list[int],
        out: list[Job | JobFSMError | None],
        *,
        reread: bool,
    ) -> None:
        """Decide the reports at `indexes` (on the records as given, or as stored now
        with `reread`) and write them in one `store.apply`; fill `out` with what was
        written, leave None where the decision or its compare-and-set failed."""
        now = self.clock.now()
        batch: list[int] = []
        decisions: list[Decision] = []
        for i in indexes:
            job, event, args = reports[i]
            try:
                seen = self.store.get(job.id) if reread else job
                if seen is None:
                    continue  # gone: `transition` says so
                decisions.append(decide(seen, event, now, self.policy, spec=self.spec, **args))
            except JobFSMError:
                continue  # decided again on the stored record, alone
            batch.append(i)
        if not decisions:
            return
        applied: Sequence[Job | VersionConflict | None]
        try:
            applied = self.store.apply(decisions)
        except StoreError:
            raise  # the store is away: the caller retries the batch, bounded
        except Exception as err:  # one report the store cannot take: each alone
            log.warning("a batch of %d reports failed (%s); one by one", len(decisions), err)
            applied = [None] * len(decisions)
        for i, d, written in zip(batch, decisions, applied, strict=True):
            if isinstance(written, Job):
                if d.entry is not None:
                    self._observe(written, d.entry)
                out[i] = written
        if self.releaser is not None:
            self.releaser.settled(j for j in applied if isinstance(j, Job))

    def _report_alone(self, job: Job, event: str, args: Mapping[str, Any]) -> Job | JobFSMError:
        """One report, decided on the stored record; its failure is its own."""
        try:
            return self.transition(job.id, event, **args)
        except JobFSMError as err:
            return err
        except Exception as err:
            log.exception("job %s: report %s failed", job.id, event)
            return BadInput(f"job {job.id}: report {event!r} could not be stored: {err}")

    def expire_seen(
        self,
        job: Job,
        *,
        verdict: str | None = None,
        reason: str | None = None,
        **extra: Any,
    ) -> Job | None:
        """Expire the job exactly as it was read, if it has not changed since.

        For a verdict about `job.owner`: the write is a compare-and-set on the
        version that was judged, so it can never take a lease that a newer owner
        has since taken. Returns None (nothing written) when the job moved.
        `extra`: the verdict's `cause` code, and what a sweeper that knows the kind's
        reconciler passes to claim the reconcile (`fsm.reconcile`).
        """
        return self.decide_seen(job, "expire", verdict=verdict, reason=reason, **extra)

    def decide_seen(self, job: Job, event: str, **args: Any) -> Job | None:
        """Apply `event` to the job exactly as it was read (compare-and-set on that
        version); None when the job moved since or the event does not apply."""
        now = self.clock.now()
        args = {k: v for k, v in args.items() if v is not None}
        try:
            decision = decide(job, event, now, self.policy, spec=self.spec, **args)
        except IllegalTransition:
            return None
        (written,) = self.store.apply([decision])
        if isinstance(written, VersionConflict):
            return None
        if decision.entry is not None:
            self._observe(written, decision.entry)
        if self.releaser is not None:
            self.releaser.settled([written])
        return written
