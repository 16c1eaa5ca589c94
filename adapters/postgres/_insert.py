"""Insert for the PostgreSQL store: one statement per batch, COPY for large keyless
batches, and the capacity-checked transaction (a mixin of PostgresStore)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Sequence
from typing import Any

import psycopg
from psycopg import errors as pgerrors

from adapters._rows import AUDIT_COLUMNS, check_storable
from fsm.errors import QueueFull, TransientStoreError
from fsm.ports import Capacity
from fsm.records import Decision, Job
from fsm.steps import drive

from . import _schema
from ._base import Conn, Connected, _audit_arrays, _commit, _job, _job_arrays, _rollback
from ._sql import Statements
from .deps import check_prerequisites, lock_prerequisites, prerequisite_rows

log = logging.getLogger(__name__)

#: batches of at least this many jobs without idempotency keys are written with COPY
COPY_MIN = 200
#: how many times insert re-tries a duplicate key whose job vanished (pruned) meanwhile.
INSERT_ROUNDS = 3


#: ("insert", batch, capacity) -> the ids inserted; ("existing", batch, None) -> the
#: stored jobs by ("key", idempotency key) and ("id", id)
InsertRequest = tuple[str, Sequence[Decision], Capacity | None]


def insert_rounds(
    decisions: Sequence[Decision], capacity: Capacity | None
) -> Generator[InsertRequest, Any, list[Job]]:
    """`Store.insert` without its I/O (shared by the blocking and the async store):
    insert what is new, read back the stored twins of duplicate keys or ids, and
    insert again those whose twin vanished meanwhile (pruned), at most INSERT_ROUNDS
    times. Returns the jobs in order: the new ones, or their stored twins."""
    if not decisions:
        return []
    check_storable((d.job for d in decisions), (d.entry for d in decisions))
    if capacity is not None and not {d.job.queue for d in decisions} & set(capacity.limits):
        capacity = None
    out: dict[int, Job] = {}
    pending = list(enumerate(decisions))
    for _ in range(INSERT_ROUNDS):
        if not pending:
            break
        inserted: set[str] = yield ("insert", [d for _, d in pending], capacity)
        missing = [(i, d) for i, d in pending if d.job.id not in inserted]
        for i, d in pending:
            if d.job.id in inserted:
                out[i] = d.job
        if not missing:
            break
        found: dict[tuple[str, str | None], Job] = yield ("existing", [d for _, d in missing], None)
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
    return [out[i] for i in range(len(decisions))]


def existing_by_key(rows: Sequence[Sequence[Any]]) -> dict[tuple[str, str | None], Job]:
    """The rows of `Statements.by_key`, by ("id", id) and ("key", idempotency key)."""
    found: dict[tuple[str, str | None], Job] = {}
    for row in rows:
        job = _job(row)
        found[("id", job.id)] = job
        if job.idempotency_key is not None:
            found[("key", job.idempotency_key)] = job
    return found


def insert_statement(
    sql: Statements, decisions: Sequence[Decision], channel: str
) -> tuple[str, list[Any]]:
    """`Statements.insert` (or `insert_one` for one audited job) and its parameters."""
    if len(decisions) == 1 and (entry := decisions[0].entry) is not None:
        values = [column[0] for column in _job_arrays([decisions[0].job])]
        return sql.insert_one, [*values, *(getattr(entry, c) for c in AUDIT_COLUMNS), channel]
    entries = [d.entry for d in decisions if d.entry is not None]
    params = [*_job_arrays(d.job for d in decisions), *_audit_arrays(entries), channel]
    return sql.insert, params


class CappedInsert:
    """The checked insert without its I/O (both PostgreSQL stores run it): capacity
    (`capacity`, or None) and prerequisites (`Decision.prerequisites`).

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
            (sql.capacity_lock, [_schema.CAPACITY_CLASS, _schema.key32(f"{schema}\x00{q}")])
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


class Inserts(Connected):
    """`insert` of the Store port; needs `channel` (the LISTEN channel) from the store."""

    channel: str

    def insert(self, decisions: Sequence[Decision], capacity: Capacity | None = None) -> list[Job]:
        def perform(request: InsertRequest) -> Any:
            what, batch, capped = request
            return self._insert_once(batch, capped) if what == "insert" else self._existing(batch)

        return drive(insert_rounds(decisions, capacity), perform)

    def _insert_once(
        self, decisions: Sequence[Decision], capacity: Capacity | None = None
    ) -> set[str]:
        if capacity is not None or any(d.prerequisites for d in decisions):
            return self._insert_capped(decisions, capacity)

        def body(conn: Conn) -> set[str]:
            statement, params = insert_statement(self.sql, decisions, self.channel)
            return {r[0] for r in conn.execute(statement, params).fetchall()}

        def reconcile() -> set[str]:
            return self._reconcile_insert(decisions)

        if len(decisions) >= COPY_MIN and all(d.job.idempotency_key is None for d in decisions):
            copied = self._copy_insert(decisions)
            if copied is not None:
                return copied
        return self._write("insert", body, reconcile)

    def _insert_capped(self, decisions: Sequence[Decision], capacity: Capacity | None) -> set[str]:
        """Insert and check the queues' capacities in one transaction, atomically; the
        jobs' prerequisites (`Decision.prerequisites`) are checked and stored in it too.

        The transaction takes a lock per capped queue (a transaction advisory lock,
        class CAPACITY_CLASS, in sorted order), inserts, then counts the queue's
        waiting jobs (at most limit + 1 rows of the partial index jobs_due). Two
        submitters to one queue are serialized by the lock, so the second counts
        the first's committed jobs: no overshoot. Over the limit: ROLLBACK, QueueFull.
        """
        plan = CappedInsert(self.sql, self.schema, self.channel, decisions, capacity)
        lost: psycopg.Error | None = None
        with self.connection("insert") as conn:
            try:
                with conn.pipeline():  # one round trip: BEGIN, locks, insert, counts
                    conn.execute("BEGIN")
                    cursors = [conn.execute(sql, params) for sql, params in plan.statements]
                ids = plan.check([c.fetchall() for c in cursors])
                for sql, params in plan.after(ids):
                    conn.execute(sql, params)
            except BaseException:
                _rollback(conn)
                raise
            lost = _commit(conn)
            if lost is None:
                return ids
        self._purge()
        log.warning("connection lost while committing an insert (%s); reconciling", lost)
        return self._reconcile_insert(decisions)

    def insert_statements(
        self, conn: Conn, decisions: Sequence[Decision], capacity: Capacity | None
    ) -> Callable[[], set[str]]:
        """Send one insert's statements (`CappedInsert`) on `conn`, inside a transaction
        the caller holds; the function returned reads the ids inserted, raises QueueFull
        or UnknownPrerequisite, and stores the new jobs' prerequisites. It never commits
        (a caller's transaction: `JoinsPostgres.insert_in`)."""
        plan = CappedInsert(self.sql, self.schema, self.channel, decisions, capacity)
        cursors = [conn.execute(sql, params) for sql, params in plan.statements]

        def finish() -> set[str]:
            ids = plan.check([c.fetchall() for c in cursors])
            for sql, params in plan.after(ids):
                conn.execute(sql, params)
            return ids

        return finish

    def _copy_insert(self, decisions: Sequence[Decision]) -> set[str] | None:
        """A large batch without idempotency keys: COPY the rows in one transaction.

        Returns None (nothing written) if one of the ids is already stored (a batch
        inserted again): the caller then takes the ON CONFLICT path.
        """
        ids = {d.job.id for d in decisions}
        lost: psycopg.Error | None = None
        with self.connection("insert") as conn:
            try:
                conn.execute("BEGIN")
                with conn.cursor() as cur:
                    with cur.copy(self.sql.copy_jobs) as copy:
                        for row in zip(*_job_arrays(d.job for d in decisions), strict=True):
                            copy.write_row(row)
                    entries = [d.entry for d in decisions if d.entry is not None]
                    with cur.copy(self.sql.copy_events) as copy:
                        for row in zip(*_audit_arrays(entries), strict=True):
                            copy.write_row(row)
                queues = sorted({d.job.queue for d in decisions})
                conn.execute(self.sql.notify, (self.channel, queues))
            except pgerrors.UniqueViolation:
                _rollback(conn)
                return None
            except BaseException:
                _rollback(conn)
                raise
            lost = _commit(conn)
            if lost is None:
                return ids
        self._purge()
        log.warning("connection lost while committing an insert (%s); reconciling", lost)
        return self._reconcile_insert(decisions)

    def _reconcile_insert(self, decisions: Sequence[Decision]) -> set[str]:
        """After a lost commit: the ids whose rows show the decided job, or Transient."""
        ids = [d.job.id for d in decisions]
        with self.connection("insert (reconcile)") as conn:
            rows = conn.execute(self.sql.get_many, (ids,)).fetchall()
        stored = {_job(r).id: _job(r) for r in rows}
        mine = {d.job.id for d in decisions if stored.get(d.job.id) == d.job}
        if not mine:
            raise self._unknown(f"insert of {len(ids)} jobs")
        return mine

    def _existing(self, decisions: Sequence[Decision]) -> dict[tuple[str, str | None], Job]:
        keys = [d.job.idempotency_key for d in decisions if d.job.idempotency_key is not None]
        ids = [d.job.id for d in decisions]
        with self.connection("insert (existing keys)") as conn:
            rows = conn.execute(self.sql.by_key, (keys, ids)).fetchall()
        return existing_by_key(rows)
