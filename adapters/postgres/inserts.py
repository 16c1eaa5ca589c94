"""Insert as a plan (`adapters.postgres.plan`), driven by both stores: one statement per
batch, COPY for large keyless batches, the capacity- and prerequisite-checked
transaction, and the rounds that read back the stored twins of duplicate keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import errors as pgerrors

from adapters._rows import AUDIT_COLUMNS, check_storable, job_from_values
from fsm.errors import QueueFull, TransientStoreError
from fsm.ports import Capacity
from fsm.records import Decision, Job

from . import migrations
from ._sql import Statements
from .deps import check_prerequisites, lock_prerequisites, prerequisite_rows
from .params import audit_arrays, job_arrays
from .plan import (
    BEGIN,
    Copy,
    Pipeline,
    Plan,
    Run,
    Target,
    ids,
    not_applied,
    transaction,
    write,
)
from .unique import UniqueLookup, settled

#: batches of at least this many jobs without idempotency keys are written with COPY
COPY_MIN = 200
#: how many times insert re-tries a duplicate key whose job vanished (pruned) meanwhile.
INSERT_ROUNDS = 3


def insert(t: Target, decisions: Sequence[Decision], capacity: Capacity | None) -> Plan[list[Job]]:
    """`Store.insert`: insert what is new, read back the stored twins of duplicate keys
    or ids, and insert again those whose twin vanished meanwhile (pruned), at most
    INSERT_ROUNDS times. Returns the jobs in order: the new ones, or their stored twins."""
    if not decisions:
        return []
    check_storable((d.job for d in decisions), (d.entry for d in decisions))
    if capacity is not None and not {d.job.queue for d in decisions} & set(capacity.limits):
        capacity = None
    out: dict[int, Job] = {}
    pending = list(enumerate(decisions))
    twins: dict[str, Job] = {}  # a unique job's id -> the job its scope held
    for _ in range(INSERT_ROUNDS):
        if not pending:
            break
        inserted = yield from _insert_once(t, [d for _, d in pending], capacity, twins)
        missing = [(i, d) for i, d in pending if d.job.id not in inserted | twins.keys()]
        for i, d in pending:
            if d.job.id in inserted:
                out[i] = d.job
            elif d.job.id in twins:
                out[i] = twins[d.job.id]
        if not missing:
            break
        found = yield from _existing(t, [d for _, d in missing])
        pending = []
        for i, d in missing:
            key = d.job.idempotency_key
            job = found.get(("key", key)) if key is not None else None
            job = job or found.get(("id", d.job.id))
            if job is None:
                pending.append((i, d))  # its twin vanished (pruned) meanwhile: retry
            else:
                out[i] = job
    if len(out) != len(decisions):
        raise TransientStoreError(
            f"insert: {len(decisions) - len(out)} jobs collided with jobs that kept "
            f"vanishing in {INSERT_ROUNDS} rounds; retry"
        )
    return settled(decisions, [out[i] for i in range(len(decisions))])


def _insert_once(
    t: Target, decisions: Sequence[Decision], capacity: Capacity | None, twins: dict[str, Job]
) -> Plan[set[str]]:
    """The ids of `decisions` written (not those whose id or key is stored already, nor
    the unique ones whose scope held a job: those go into `twins`)."""
    if (
        capacity is not None
        or any(d.prerequisites for d in decisions)
        or any(d.unique is not None for d in decisions)
    ):
        return (yield from _insert_capped(t, decisions, capacity, twins))
    if len(decisions) >= COPY_MIN and all(d.job.idempotency_key is None for d in decisions):
        try:
            return (yield from _insert_copied(t, decisions))
        except pgerrors.UniqueViolation:
            pass  # one of the ids is stored already (a batch inserted again): ON CONFLICT
    body = ids(Run(*insert_statement(t.sql, decisions, t.channel)))
    return (yield from write(t, "insert", body, lambda: _reconciled(t, decisions)))


def _insert_capped(
    t: Target, decisions: Sequence[Decision], capacity: Capacity | None, twins: dict[str, Job]
) -> Plan[set[str]]:
    """Insert and check the queues' capacities in one transaction, atomically; the
    jobs' prerequisites (`Decision.prerequisites`) are checked and stored in it too.

    The transaction takes a lock per capped queue (a transaction advisory lock,
    class CAPACITY_CLASS, in sorted order), inserts, then counts the queue's
    waiting jobs (at most limit + 1 rows of the partial index jobs_due). Two
    submitters to one queue are serialized by the lock, so the second counts
    the first's committed jobs: no overshoot. Over the limit: ROLLBACK, QueueFull.
    """
    lookup = UniqueLookup(t.sql, t.settings.schema, decisions)

    def body() -> Plan[set[str]]:
        rest = decisions
        start: tuple[Run, ...] = (BEGIN,)
        if lookup.unique:
            # a round trip before the insert: BEGIN, the unique locks, the finds (the
            # twins decide what is inserted; a refused one raises: ROLLBACK)
            rows = yield Pipeline((BEGIN, *(Run(sql, p) for sql, p in lookup.statements)))
            found, rest = lookup.resolve(rows[1:])
            twins.update(found)
            start = ()
            if not rest:
                return set()
        capped = CappedInsert(t.sql, t.settings.schema, t.channel, rest, capacity)
        # one round trip: (BEGIN,) locks, insert, counts
        rows = yield Pipeline((*start, *(Run(sql, params) for sql, params in capped.statements)))
        inserted = capped.check(rows[len(start) :])
        for sql, params in capped.after(inserted):
            yield Run(sql, params, fetch=False)
        return inserted

    return (yield from write(t, "insert", transaction(body()), lambda: _reconciled(t, decisions)))


def _insert_copied(t: Target, decisions: Sequence[Decision]) -> Plan[set[str]]:
    """A large batch without idempotency keys: COPY the rows in one transaction.
    Raises UniqueViolation, with nothing written, if one of the ids is stored already."""

    def body() -> Plan[set[str]]:
        yield BEGIN
        yield Copy(t.sql.copy_jobs, zip(*job_arrays(d.job for d in decisions), strict=True))
        entries = [d.entry for d in decisions if d.entry is not None]
        yield Copy(t.sql.copy_events, zip(*audit_arrays(entries), strict=True))
        queues = sorted({d.job.queue for d in decisions})
        yield Run(t.sql.notify, (t.channel, queues), fetch=False)
        return {d.job.id for d in decisions}

    return (yield from write(t, "insert", transaction(body()), lambda: _reconciled(t, decisions)))


def _reconciled(t: Target, decisions: Sequence[Decision]) -> Plan[set[str]]:
    """After a lost commit: the ids whose rows show the decided job, or `not_applied`."""
    rows = yield Run(t.sql.get_many, ([d.job.id for d in decisions],))
    stored = {job.id: job for job in map(job_from_values, rows)}
    mine = {d.job.id for d in decisions if stored.get(d.job.id) == d.job}
    if not mine:
        raise not_applied(t, f"insert of {len(decisions)} jobs")
    return mine


def _existing(t: Target, decisions: Sequence[Decision]) -> Plan[dict[tuple[str, str | None], Job]]:
    keys = [d.job.idempotency_key for d in decisions if d.job.idempotency_key is not None]
    rows = yield Run(t.sql.by_key, (keys, [d.job.id for d in decisions]))
    return existing_by_key(rows)


def existing_by_key(rows: Sequence[Sequence[Any]]) -> dict[tuple[str, str | None], Job]:
    """The rows of `Statements.by_key`, by ("id", id) and ("key", idempotency key)."""
    found: dict[tuple[str, str | None], Job] = {}
    for row in rows:
        job = job_from_values(row)
        found[("id", job.id)] = job
        if job.idempotency_key is not None:
            found[("key", job.idempotency_key)] = job
    return found


def insert_statement(
    sql: Statements, decisions: Sequence[Decision], channel: str
) -> tuple[str, list[Any]]:
    """`Statements.insert` (or `insert_one` for one audited job) and its parameters."""
    if len(decisions) == 1 and (entry := decisions[0].entry) is not None:
        values = [column[0] for column in job_arrays([decisions[0].job])]
        return sql.insert_one, [*values, *(getattr(entry, c) for c in AUDIT_COLUMNS), channel]
    entries = [d.entry for d in decisions if d.entry is not None]
    params = [*job_arrays(d.job for d in decisions), *audit_arrays(entries), channel]
    return sql.insert, params


class CappedInsert:
    """The checked insert's statements (the pooled and the joined insert run them):
    capacity (`capacity`, or None) and prerequisites (`Decision.prerequisites`).

    `statements`, run in one transaction and one round trip: a transaction advisory
    lock per capped queue (class CAPACITY_CLASS, in sorted order), the prerequisites
    locked FOR KEY SHARE (adapters/postgres/deps.py), the insert, then a count of each
    capped queue's waiting jobs (at most limit + 1 rows). `check` takes the rows of
    every statement, in order, and returns the ids inserted, or raises QueueFull for
    a queue the new jobs took over its limit or UnknownPrerequisite (the caller rolls
    back); `after(ids)` are the statements that store the new jobs' prerequisites.
    """

    def __init__(
        self,
        sql: Statements,
        schema: str,
        channel: str,
        decisions: Sequence[Decision],
        capacity: Capacity | None,
    ) -> None:
        self.schema = schema
        self.decisions = decisions
        self.limits = capacity.limits if capacity is not None else {}
        self.queues = sorted({d.job.queue for d in decisions} & set(self.limits))
        self.queue_of = {d.job.id: d.job.queue for d in decisions}
        prerequisites = sorted({a for d in decisions for a in d.prerequisites})
        locks = [
            (sql.capacity_lock, [migrations.CAPACITY_CLASS, migrations.key32(f"{schema}\x00{q}")])
            for q in self.queues
        ]
        self.prerequisites: list[tuple[str, list[Any]]] = (
            [(lock_prerequisites(sql.jobs), [prerequisites])] if prerequisites else []
        )
        counts = (
            [(sql.waiting(tuple(capacity.states)), [q, self.limits[q] + 1]) for q in self.queues]
            if capacity is not None
            else []
        )
        self.statements: list[tuple[str, Sequence[Any]]] = [
            *locks,
            *self.prerequisites,
            insert_statement(sql, decisions, channel),
            *counts,
        ]

    def check(self, rows: Sequence[Sequence[Sequence[Any]]]) -> set[str]:
        n = len(self.queues) + len(self.prerequisites)
        if self.prerequisites:
            check_prerequisites(self.decisions, rows[n - 1])
        ids = {r[0] for r in rows[n]}
        added = {self.queue_of[i] for i in ids}
        for queue, counted in zip(self.queues, rows[n + 1 :], strict=True):
            limit = self.limits[queue]
            if queue in added and counted and counted[0][0] > limit:
                raise QueueFull(queue, limit)
        return ids

    def after(self, ids: set[str]) -> list[tuple[str, list[Any]]]:
        rows = prerequisite_rows(self.schema, self.decisions, ids)
        return [] if rows is None else [rows]
