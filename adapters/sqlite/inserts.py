"""Insert for the SQLite store: the statements of one insert (shared by the store's own
transaction and by a caller's, `insert_in`) and the checks on a caller's connection."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence

from fsm.errors import BadInput, QueueFull
from fsm.ports import Capacity
from fsm.records import Decision, Job, UniqueScope
from fsm.service.connections import type_name

from ..rows import check_storable, job_from_values
from .deps import store_prerequisites
from .sql import (
    AUDIT_INSERT,
    JOB_COLS,
    JOB_MARKS,
    audit_values,
    job_values,
    translated,
    waiting_sql,
)

#: the savepoint `insert_in` wraps its statements in (rolled back to on any error)
SAVEPOINT = "jobfsm_submit"


def insert_rows(
    conn: sqlite3.Connection, decisions: Sequence[Decision], capacity: Capacity | None
) -> list[Job]:
    """Run one insert's statements on `conn`, inside a transaction the caller holds.

    A job whose idempotency key is stored, or whose unique scope holds a job (earlier
    in the batch too: the statements see their own rows), comes back in place of the
    new one; its
    prerequisites are checked and stored (UnknownPrerequisite rolls back); with
    `capacity`, a queue left over its limit raises QueueFull (the caller rolls back).
    Values are made before the first statement, so a lock is held for statements only.
    """
    rows = [job_values(d.job) for d in decisions]
    entries = [None if d.entry is None else audit_values(d.entry) for d in decisions]
    # (queue, limit, count statement) of each capped queue this insert adds to
    capped = (
        [
            (queue, capacity.limits[queue], waiting_sql(tuple(capacity.states)))
            for queue in sorted({d.job.queue for d in decisions} & set(capacity.limits))
        ]
        if capacity is not None
        else []
    )
    out: list[Job] = []
    added: set[str] = set()
    batch = {d.job.id for d in decisions}
    for d, row, entry in zip(decisions, rows, entries, strict=True):
        key = d.job.idempotency_key
        if key is not None:
            found = conn.execute(
                f"SELECT {JOB_COLS} FROM jobs WHERE idempotency_key = ?", (key,)
            ).fetchone()
            if found is not None:
                out.append(job_from_values(found))
                continue
        if d.unique is not None:
            twin = unique_twin(conn, d.unique)  # (refusing: DuplicateJob rolls back)
            if twin is not None:
                out.append(twin)
                continue
        if d.prerequisites:
            store_prerequisites(conn, d.job.id, d.prerequisites, batch)
        conn.execute(f"INSERT INTO jobs ({JOB_COLS}) VALUES ({JOB_MARKS})", row)
        if entry is not None:
            conn.execute(AUDIT_INSERT, entry)
        out.append(d.job)
        added.add(d.job.queue)
    for queue, limit, count in capped:
        # after the insert, in its transaction: a count that stops at limit + 1
        # rows of the waiting-jobs index, so it costs the capacity, not the table
        if queue in added and conn.execute(count, (queue, limit + 1)).fetchone()[0] > limit:
            raise QueueFull(queue, limit)  # rolls the whole insert back
    return out


def unique_twin(conn: sqlite3.Connection, scope: UniqueScope) -> Job | None:
    """The job a unique submit duplicates, read under the insert's write lock (so no
    other submitter can add one before the insert commits): the newest job of the
    scope's kind and key (index jobs_unique) that the scope covers."""
    marks = ", ".join("?" * len(scope.states))
    rows = conn.execute(
        f"SELECT {JOB_COLS} FROM jobs WHERE kind = ? AND unique_key = ? AND created_at > ? "
        f"AND state IN ({marks}) ORDER BY created_at DESC, id DESC LIMIT 1",
        (scope.kind, scope.key, scope.since, *scope.states),
    ).fetchall()
    return scope.twin(map(job_from_values, rows))


class JoinsSqlite:
    """`insert_in` of `fsm.ports.JoinsTransactions`, mixed into SqliteStore."""

    path: str

    def insert_in(
        self, conn: object, decisions: Sequence[Decision], capacity: Capacity | None = None
    ) -> list[Job]:
        if not decisions:
            return []
        check_storable((d.job for d in decisions), (d.entry for d in decisions))
        caller = self._joinable(conn)
        with translated(self.path, "insert in the caller's transaction"):
            if not caller.in_transaction:
                # legacy transaction control: the INSERT would BEGIN implicitly; BEGIN
                # now, so the savepoint below nests in the caller's transaction
                caller.execute("BEGIN")
            caller.execute(f"SAVEPOINT {SAVEPOINT}")
            try:
                jobs = insert_rows(caller, decisions, capacity)
            except BaseException:
                caller.execute(f"ROLLBACK TO {SAVEPOINT}")
                caller.execute(f"RELEASE {SAVEPOINT}")
                raise
            caller.execute(f"RELEASE {SAVEPOINT}")
        return jobs

    def _joinable(self, conn: object) -> sqlite3.Connection:
        """`conn`, if it is an open sqlite3 connection to this store's file whose
        transaction the insert can join; else BadInput naming what is wrong."""
        what = "conn= of a transactional submit"
        if not isinstance(conn, sqlite3.Connection):
            raise BadInput(
                f"{what}: the SQLite store {self.path} needs a sqlite3.Connection, "
                f"got {type_name(conn)}"
            )
        try:
            files = conn.execute("PRAGMA database_list").fetchall()
        except sqlite3.ProgrammingError as err:
            raise BadInput(f"{what}: the sqlite3 connection cannot be used: {err}") from err
        main = next((f for _, name, f in files if name == "main"), "")
        if not main or not _same_file(main, self.path):
            raise BadInput(
                f"{what}: the connection is to {main or 'an in-memory database'!s}, not to "
                f"this store's file {self.path}"
            )
        if not conn.in_transaction and _autocommit(conn):
            raise BadInput(
                f"{what}: the connection is in autocommit mode with no transaction open, so "
                "the job would commit at once; run BEGIN first (or use the default "
                "transaction control) and commit when your own writes are done"
            )
        has_jobs = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'jobs'"
        ).fetchone()
        if has_jobs is None:
            raise BadInput(f"{what}: {self.path} holds no jobfsm schema (open the store first)")
        return conn


def _autocommit(conn: sqlite3.Connection) -> bool:
    """True if statements on `conn` commit one by one (nothing BEGINs implicitly)."""
    mode = getattr(conn, "autocommit", None)  # Python 3.12+: True, False or LEGACY (-1)
    if mode is True:
        return True
    if mode is False:
        return False
    return conn.isolation_level is None


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)
