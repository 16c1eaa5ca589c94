"""Broken stores: each breaks one promise the fault suite must catch.

They subclass the reference `MemoryStore` (and, once, the SQLite store) and
change one thing a real store could get wrong. `tests/property/test_mutants.py`
runs the suite against each and expects it to fail with the invariant it breaks.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from adapters.memory import MemoryStore
from adapters.sqlite.store import SqliteStore
from adapters.sqlite.url import parse_url
from fsm.errors import VersionConflict
from fsm.ports import ClaimRequest, PruneRequest, RenewRequest
from fsm.records import Decision, Job


class NoVersionCheckStore(MemoryStore):
    """apply writes without compare-and-set: a concurrent change is overwritten."""

    def _write(self, d: Decision) -> Job | VersionConflict:
        self._put(d.job)
        if d.entry is not None:
            self._audit[d.job.id].append(d.entry)
        return d.job


class NoFenceRenewStore(MemoryStore):
    """renew extends any lease it is asked to, whatever the fence and the owner."""

    def renew(self, request: RenewRequest) -> dict[str, str]:
        with self._lock:
            renewed: dict[str, str] = {}
            for job_id in request.fences:
                job = self._jobs.get(job_id)
                if job is None or job.state not in request.states:
                    continue
                self._put(
                    attrs.evolve(job, lease_until=request.lease_until, version=job.version + 1)
                )
                renewed[job_id] = job.state
            return renewed


class DoubleLeaseStore(MemoryStore):
    """claim also takes over lapsed leases in place: new owner, same fence, no audit."""

    def claim(self, request: ClaimRequest) -> list[Job]:
        leased = super().claim(request)
        with self._lock:
            for job in list(self._jobs.values()):
                if len(leased) >= request.limit:
                    break
                if (
                    job.state in ("leased", "running")
                    and job.queue in request.queues
                    and job.lease_until is not None
                    and job.lease_until <= request.now
                ):
                    taken = attrs.evolve(
                        job,
                        owner=request.owner,
                        lease_until=request.lease_until,
                        version=job.version + 1,
                    )
                    self._put(taken)
                    leased.append(taken)
        return leased


class UncountedRecoveryStore(MemoryStore):
    """expire is written without its recovery count: crash loops are never bounded."""

    def _write(self, d: Decision) -> Job | VersionConflict:
        if d.event == "expire" and d.previous is not None:
            d = attrs.evolve(d, job=attrs.evolve(d.job, recoveries=d.previous.recoveries))
        return super()._write(d)


class PruneAnythingStore(MemoryStore):
    """prune deletes every job untouched since the oldest cutoff, finished or not."""

    def prune(self, request: PruneRequest) -> int:
        if not request.cutoffs:
            return 0
        cutoff = min(request.cutoffs.values())
        with self._lock:
            doomed = [j.id for j in self._jobs.values() if j.updated_at < cutoff]
            doomed = doomed[: request.limit]
            for job_id in doomed:
                job = self._jobs.pop(job_id)
                self._audit.pop(job_id, None)
                if job.idempotency_key is not None:
                    self._keys.pop(job.idempotency_key, None)
            return len(doomed)


class PhantomAuditStore(MemoryStore):
    """apply appends the audit entry before its compare-and-set: a lost race leaves it."""

    def _write(self, d: Decision) -> Job | VersionConflict:
        if d.entry is not None:
            self._audit[d.job.id].append(d.entry)
        return super()._write(attrs.evolve(d, entry=None))


#: mutant -> the invariant code its failure must name
MUTANTS: dict[type[MemoryStore], str] = {
    NoVersionCheckStore: "I",
    NoFenceRenewStore: "I1",
    DoubleLeaseStore: "I",
    UncountedRecoveryStore: "I",
    PruneAnythingStore: "I3",
    PhantomAuditStore: "I",
}


def store_classes() -> Sequence[type[MemoryStore]]:
    return tuple(MUTANTS)


class SqlitePruneAnythingStore(SqliteStore):
    """The SQLite store with prune's state filter lost: any job untouched since the cutoff."""

    def prune(self, request: PruneRequest) -> int:
        if not request.cutoffs:
            return 0
        cutoff = min(request.cutoffs.values())
        with self._write("prune") as conn:
            ids = [
                r[0]
                for r in conn.execute(
                    "SELECT id FROM jobs WHERE updated_at < ? LIMIT ?", (cutoff, request.limit)
                ).fetchall()
            ]
            for job_id in ids:
                conn.execute("DELETE FROM job_events WHERE job_id = ?", (job_id,))
                conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
        return len(ids)


def sqlite_mutant(path: str) -> SqlitePruneAnythingStore:
    store = SqlitePruneAnythingStore(parse_url(f"sqlite:///{path}?synchronous=NORMAL"))
    store.migrate()
    return store
