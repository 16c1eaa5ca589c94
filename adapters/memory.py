"""A thread-safe in-memory store (`memory://`): for tests, examples and one process."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from urllib.parse import urlsplit

import attrs

from fsm.errors import BadStoreURL, QueueFull, UnknownPrerequisite, VersionConflict
from fsm.lifecycle.core import erased_data_json
from fsm.lifecycle.limits import Limit, LimitChange
from fsm.ports import (
    Capacity,
    ClaimRequest,
    ProgressRequest,
    PruneRequest,
    QueuePause,
    RenewRequest,
    ScanRequest,
    ScheduleChange,
    SchedulerBeat,
    ScheduleRecord,
    ServiceLease,
)
from fsm.records import AuditEntry, Decision, Job
from fsm.secrets import redact_url

from .claiming import Unclaimable, claim_within, decide_leases, start_leased
from .memory_browse import MemoryBrowse
from .memory_history import MemoryHistory
from .memory_limits import MemoryLimits
from .memory_schedules import MemorySchedules
from .memory_services import MemoryServices
from .rejections import first_rejections, rejected_key
from .rows import check_storable

log = logging.getLogger(__name__)


class MemoryStore(MemoryBrowse, MemoryHistory, MemorySchedules, MemoryLimits, MemoryServices):
    """Jobs and audit trails in dicts behind one lock. Nothing survives the process."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._unclaimable = Unclaimable(log)
        self._empty()

    def _empty(self) -> None:
        """Every table, empty: the new store's, and what `drop_schema` leaves."""
        self._jobs: dict[str, Job] = {}
        self._audit: dict[str, list[AuditEntry]] = {}
        self._keys: dict[str, str] = {}
        #: (kind, unique key) -> ids of the jobs submitted with it (fsm.records.UniqueScope)
        self._unique: dict[tuple[str, str], dict[str, None]] = {}
        self._paused: dict[str, QueuePause] = {}
        self._schedules: dict[str, ScheduleRecord] = {}
        self._schedule_changes: list[ScheduleChange] = []
        self._schedulers: dict[str, SchedulerBeat] = {}
        self._limits: dict[str, Limit] = {}
        self._limit_changes: list[LimitChange] = []
        self._limit_leases: dict[str, list[float]] = {}
        self._service_leases: dict[str, ServiceLease] = {}
        #: state -> ids, so claim and scan look only at jobs in the states asked for
        self._by_state: dict[str, dict[str, None]] = {}
        #: job id -> its prerequisites, and prerequisite id -> the jobs that name it
        self._deps: dict[str, tuple[str, ...]] = {}
        self._dependents: dict[str, dict[str, None]] = {}

    def _index(self, old: Job | None, new: Job | None) -> None:
        if old is not None and (new is None or old.state != new.state):
            self._by_state[old.state].pop(old.id, None)
        if new is not None and (old is None or old.state != new.state):
            self._by_state.setdefault(new.state, {})[new.id] = None

    def _put(self, job: Job) -> None:
        """The one way a record is stored: keeps the state index in step."""
        self._index(self._jobs.get(job.id), job)
        self._jobs[job.id] = job

    def _in_states(self, states: tuple[str, ...]) -> list[Job]:
        return [self._jobs[i] for s in states for i in self._by_state.get(s, {})]

    def insert(self, decisions: Sequence[Decision], capacity: Capacity | None = None) -> list[Job]:
        check_storable((d.job for d in decisions), (d.entry for d in decisions))
        with self._lock:
            out: list[Job] = []
            fresh: list[Decision] = []
            keys: dict[str, Job] = {}
            uniques: dict[tuple[str, str], list[Job]] = {}
            for d in decisions:
                key = d.job.idempotency_key
                if key is not None and key in self._keys:
                    out.append(self._jobs[self._keys[key]])
                elif key is not None and key in keys:
                    out.append(keys[key])
                elif d.unique is not None and (twin := self._twin(d, uniques)) is not None:
                    out.append(twin)  # (a refusing scope raised DuplicateJob: no write)
                else:
                    if key is not None:
                        keys[key] = d.job
                    if d.job.unique_key is not None:
                        uniques.setdefault((d.job.kind, d.job.unique_key), []).append(d.job)
                    fresh.append(d)
                    out.append(d.job)
            if capacity is not None:
                self._check_capacity(fresh, capacity)
            for d in fresh:
                missing = [a for a in d.prerequisites if a not in self._jobs]
                if missing:
                    raise UnknownPrerequisite(d.job.id, missing)
            for d in fresh:
                if d.prerequisites:
                    self._deps[d.job.id] = tuple(d.prerequisites)
                    for after in d.prerequisites:
                        self._dependents.setdefault(after, {})[d.job.id] = None
                self._put(d.job)
                self._audit[d.job.id] = [d.entry] if d.entry is not None else []
                if d.job.idempotency_key is not None:
                    self._keys[d.job.idempotency_key] = d.job.id
                if d.job.unique_key is not None:
                    self._unique.setdefault((d.job.kind, d.job.unique_key), {})[d.job.id] = None
            return out

    def _twin(self, d: Decision, batch: dict[tuple[str, str], list[Job]]) -> Job | None:
        """The job a unique submit duplicates: among the stored jobs of its kind and key
        and those earlier in its batch, the newest its scope covers."""
        scope = d.unique
        assert scope is not None
        ids = self._unique.get((scope.kind, scope.key), {})
        stored = [self._jobs[i] for i in ids]
        return scope.twin([*stored, *batch.get((scope.kind, scope.key), ())])

    def _check_capacity(self, fresh: Sequence[Decision], capacity: Capacity) -> None:
        adding: dict[str, int] = {}
        for d in fresh:
            if d.job.queue in capacity.limits:
                adding[d.job.queue] = adding.get(d.job.queue, 0) + 1
        for queue, n in adding.items():
            waiting = sum(1 for j in self._in_states(capacity.states) if j.queue == queue)
            if waiting + n > capacity.limits[queue]:
                raise QueueFull(queue, capacity.limits[queue])

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def prerequisites(self, job_ids: Sequence[str]) -> dict[str, dict[str, str | None]]:
        with self._lock:
            out: dict[str, dict[str, str | None]] = {}
            for job_id in job_ids:
                if job_id in self._deps:
                    out[job_id] = {
                        a: (j.state if (j := self._jobs.get(a)) is not None else None)
                        for a in self._deps[job_id]
                    }
            return out

    def dependents(self, job_ids: Sequence[str], states: tuple[str, ...], limit: int) -> list[Job]:
        with self._lock:
            out: dict[str, Job] = {}
            for job_id in job_ids:
                for dep in self._dependents.get(job_id, {}):
                    job = self._jobs.get(dep)
                    if job is not None and job.state in states and len(out) < limit:
                        out[dep] = job
            return list(out.values())

    def in_states_after(self, states: tuple[str, ...], after: str, limit: int) -> list[Job]:
        with self._lock:
            ids = sorted(i for s in states for i in self._by_state.get(s, {}) if i > after)
            return [self._jobs[i] for i in ids[:limit]]

    def _write(self, d: Decision) -> Job | VersionConflict:
        assert d.previous is not None
        current = self._jobs.get(d.job.id)
        if current is None or current.version != d.previous.version:
            return VersionConflict(
                d.job.id, d.previous.version, None if current is None else current.version
            )
        if d.job.progress_json == d.previous.progress_json != current.progress_json:
            # the owner's latest progress: no decision writes it (but erase)
            self._put(attrs.evolve(d.job, progress_json=current.progress_json))
        else:
            self._put(d.job)
        if d.entry is not None:
            self._audit[d.job.id].append(d.entry)
        return d.job

    def erase(self, decision: Decision) -> Job | VersionConflict:
        check_storable([decision.job], [decision.entry])
        with self._lock:
            written = self._write(decision)
            if isinstance(written, Job):
                self._audit[written.id] = [
                    attrs.evolve(e, data_json=erased_data_json(e.data_json))
                    for e in self._audit[written.id]
                ]
            return written

    def claim(self, request: ClaimRequest) -> list[Job]:
        if request.kinds is not None and not request.kinds:
            return []
        with self._lock:
            if request.retime is not None:  # the lease's time is no earlier than the lock
                request = request.retime()
            if request.ids is not None:
                pool = [self._jobs[i] for i in request.ids if i in self._jobs]
            else:
                pool = self._in_states(request.states)
            candidates = sorted(
                (
                    j
                    for j in pool
                    if j.state in request.states
                    and j.queue in request.queues
                    and (request.kinds is None or j.kind in request.kinds)
                    and j.run_after <= request.now
                    and (j.deadline is None or j.deadline > request.now)
                ),
                key=lambda j: (j.priority, j.run_after, j.id),
            )
            limited = self._budget(request)
            if limited is not None:
                budget = limited[0]

                def fetch(
                    wanted: int, taken: Sequence[str], kinds: Sequence[str], queues: tuple[str, ...]
                ) -> list[Job]:
                    out = (
                        j
                        for j in candidates
                        if j.id not in taken and j.kind not in kinds and j.queue in queues
                    )
                    return [j for _, j in zip(range(wanted), out, strict=False)]

                candidates = claim_within(request, budget, fetch)
            leased: list[Job] = []
            # a job the core refuses to lease is skipped: the ones behind it are leased
            for job in candidates:
                if len(leased) >= request.limit:
                    break
                decisions, _ = decide_leases([job], request.decide, self._unclaimable)
                for claimed in start_leased(decisions, request.start):
                    written = self._write(attrs.evolve(claimed.write, entry=None))
                    if isinstance(written, Job):
                        self._audit[written.id].extend(claimed.entries)
                        leased.append(written)
            if limited is not None:
                self._mark(limited[1], leased, request.now)
            return leased

    def apply(self, decisions: Sequence[Decision]) -> list[Job | VersionConflict]:
        check_storable((d.job for d in decisions), (d.entry for d in decisions))
        with self._lock:
            return [self._write(d) for d in decisions]

    def renew(self, request: RenewRequest) -> dict[str, str]:
        with self._lock:
            renewed: dict[str, str] = {}
            for job_id, fence in request.fences.items():
                job = self._jobs.get(job_id)
                if (
                    job is None
                    or job.fence != fence
                    or job.owner != request.owner
                    or job.state not in request.states
                ):
                    continue
                self._put(
                    attrs.evolve(
                        job,
                        lease_until=request.lease_until,
                        version=job.version + 1,
                        updated_at=request.now,
                    )
                )
                renewed[job_id] = job.state
            return renewed

    def save_progress(self, request: ProgressRequest) -> list[str]:
        with self._lock:
            written: list[str] = []
            for job_id, (fence, text) in request.items.items():
                job = self._jobs.get(job_id)
                if (
                    job is None
                    or job.fence != fence
                    or job.owner != request.owner
                    or job.state not in request.states
                ):
                    continue
                self._put(attrs.evolve(job, progress_json=text))
                written.append(job_id)
            return written

    def record(self, entries: Sequence[AuditEntry]) -> None:
        check_storable((), entries)
        with self._lock:
            for e in first_rejections(entries):
                trail = self._audit.get(e.job_id)
                if trail is None:
                    continue
                key = rejected_key(e)
                if key is not None and any(rejected_key(x) == key for x in trail):
                    continue  # a repeat of a rejected report: recorded once
                trail.append(e)

    def scan(self, request: ScanRequest) -> list[Job]:
        with self._lock:
            out = []
            for j in self._in_states(request.states):
                if request.lease_expired_at is not None and not (
                    j.lease_until is not None and j.lease_until <= request.lease_expired_at
                ):
                    continue
                if request.deadline_passed_at is not None and not (
                    j.deadline is not None and j.deadline <= request.deadline_passed_at
                ):
                    continue
                if request.owner_host is not None and (
                    j.owner is None or j.owner.host != request.owner_host
                ):
                    continue
                if request.queues is not None and j.queue not in request.queues:
                    continue
                if request.kinds is not None and j.kind not in request.kinds:
                    continue
                out.append(j)
                if len(out) >= request.limit:
                    break
            return out

    def history(self, job_id: str) -> list[AuditEntry]:
        with self._lock:
            return list(self._audit.get(job_id, ()))

    def counts(self) -> dict[tuple[str, str], int]:
        with self._lock:
            out: dict[tuple[str, str], int] = {}
            for j in self._jobs.values():
                out[(j.queue, j.state)] = out.get((j.queue, j.state), 0) + 1
            return out

    def prune(self, request: PruneRequest) -> int:
        return sum(self.prune_counts(request).values())

    def prune_counts(self, request: PruneRequest) -> dict[tuple[str, str], int]:
        """`fsm.ports.CountsPrunes`: `prune`, by (queue, state) deleted."""
        deleted: dict[tuple[str, str], int] = {}
        with self._lock:
            doomed = [
                j.id
                for j in self._in_states(tuple(request.cutoffs))
                if j.state in request.cutoffs
                and j.finished_at is not None
                and j.finished_at < request.cutoffs[j.state]
                and (request.queues is None or j.queue in request.queues)
                and j.queue not in request.other_than
                and not self._held(j.id, request.held_by)
            ][: request.limit]
            for job_id in doomed:
                job = self._jobs.pop(job_id)
                deleted[(job.queue, job.state)] = deleted.get((job.queue, job.state), 0) + 1
                self._index(job, None)
                for after in self._deps.pop(job_id, ()):
                    self._dependents.get(after, {}).pop(job_id, None)
                self._audit.pop(job_id, None)
                if job.idempotency_key is not None:
                    self._keys.pop(job.idempotency_key, None)
                if job.unique_key is not None:
                    ids = self._unique.get((job.kind, job.unique_key), {})
                    ids.pop(job_id, None)
                    if not ids:
                        self._unique.pop((job.kind, job.unique_key), None)
            return deleted

    def _held(self, job_id: str, states: tuple[str, ...]) -> bool:
        """Does a job in `states` still wait for `job_id`?"""
        return bool(states) and any(
            (j := self._jobs.get(d)) is not None and j.state in states
            for d in self._dependents.get(job_id, {})
        )

    def pause_queue(self, pause: QueuePause) -> None:
        with self._lock:
            self._paused[pause.queue] = pause

    def resume_queue(self, queue: str) -> bool:
        with self._lock:
            return self._paused.pop(queue, None) is not None

    def paused_queues(self) -> dict[str, QueuePause]:
        with self._lock:
            return dict(self._paused)

    def drop_schema(self) -> tuple[str, ...]:
        """Remove every job and audit entry (the memory store has no other schema);
        nothing is left (an empty tuple)."""
        with self._lock:
            self._empty()
        return ()

    def close(self) -> None:
        """Nothing to release."""


def open_store(url: str) -> MemoryStore:
    if not isinstance(url, str):
        raise BadStoreURL(f"a memory store URL is a string, got {type(url).__name__}")
    parts = urlsplit(url)
    if parts.scheme != "memory" or parts.netloc or parts.path not in ("", "/") or parts.query:
        raise BadStoreURL(f"a memory store URL is exactly 'memory://', got {redact_url(url)!r}")
    return MemoryStore()
