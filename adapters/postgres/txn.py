"""`fsm.ports.JoinsTransactions` for PostgreSQL: insert jobs inside the caller's open
transaction, with the statements the store's own insert runs (`Inserts.insert_statements`).

The insert statement sends its NOTIFY too; PostgreSQL delivers a notification only when
the transaction that sent it commits, so waiting workers wake on the caller's COMMIT and
never for a job that was rolled back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import pq
from psycopg.rows import tuple_row

from adapters._rows import check_storable
from fsm.errors import BadInput, JobFSMError, TransientStoreError
from fsm.ports import Capacity
from fsm.records import Decision, Job

from . import _schema
from ._insert import Inserts, existing_by_key

_WHAT = "conn= of a transactional submit"
#: what identifies a store's database, read on the caller's connection and compared
#: with the store's own (`same_store`): its name, the server's start time (one per
#: server process tree) and the oid of the jobs table of the store's schema
FINGERPRINT = "SELECT current_database(), pg_postmaster_start_time(), to_regclass(%s)::oid"


class _TupleRows:
    """The caller's connection, read as tuples whatever its row factory is."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def execute(self, query: Any, params: Any = None) -> psycopg.Cursor[tuple[Any, ...]]:
        return self.conn.cursor(row_factory=tuple_row).execute(query, params)


def refuse_state(closed: bool, status: pq.TransactionStatus, autocommit: bool) -> None:
    """BadInput unless the caller's connection has a transaction the insert can join
    (shared by the blocking and the asyncio store: `AsyncPostgresStore.insert_in`)."""
    if closed:
        raise BadInput(f"{_WHAT}: the psycopg connection is closed")
    if status == pq.TransactionStatus.INERROR:
        raise BadInput(f"{_WHAT}: the caller's transaction has failed; roll it back first")
    if status == pq.TransactionStatus.ACTIVE:
        raise BadInput(f"{_WHAT}: the connection is busy running another statement")
    if status == pq.TransactionStatus.IDLE and autocommit:
        raise BadInput(
            f"{_WHAT}: the connection is in autocommit mode with no transaction open, so "
            "the job would commit at once; submit inside `with conn.transaction():`"
        )


def joined(
    decisions: Sequence[Decision], ids: set[str], stored: Sequence[Sequence[Any]]
) -> list[Job]:
    """The jobs of an insert in the caller's transaction, in order: the new ones, or the
    stored twins (`stored`: rows of `Statements.by_key`) of duplicate keys or ids."""
    found = existing_by_key(stored)
    out = []
    for d in decisions:
        if d.job.id in ids:
            out.append(d.job)
            continue
        key = d.job.idempotency_key
        twin = (found.get(("key", key)) if key is not None else None) or found.get(("id", d.job.id))
        if twin is None:
            raise TransientStoreError(
                f"insert of job {d.job.id}: its idempotency key's job vanished (pruned) "
                "while it was inserted; roll back and retry"
            )
        out.append(twin)
    return out


def missing_twins(decisions: Sequence[Decision], ids: set[str]) -> tuple[list[str], list[str]]:
    """(idempotency keys, ids) of the jobs an insert did not write: `Statements.by_key`'s
    parameters, to read their stored twins."""
    missing = [d for d in decisions if d.job.id not in ids]
    keys = [d.job.idempotency_key for d in missing if d.job.idempotency_key]
    return keys, [d.job.id for d in missing]


class JoinsPostgres(Inserts):
    """Mixed into PostgresStore."""

    _fingerprint: tuple[Any, ...] | None = None

    def insert_in(
        self, conn: object, decisions: Sequence[Decision], capacity: Capacity | None = None
    ) -> list[Job]:
        if not decisions:
            return []
        check_storable((d.job for d in decisions), (d.entry for d in decisions))
        caller = self._joinable(conn)
        rows = _TupleRows(caller)
        stored: list[Any] = []
        try:
            with caller.transaction():  # a savepoint in the caller's transaction
                ids = self.insert_statements(rows, decisions, capacity)()  # type: ignore[arg-type]
                keys, others = missing_twins(decisions, ids)
                if others:
                    stored = rows.execute(self.sql.by_key, (keys, others)).fetchall()
        except JobFSMError:
            raise
        except psycopg.Error as err:
            raise self._translate(err, "insert in the caller's transaction") from err
        return joined(decisions, ids, stored)

    def _joinable(self, conn: object) -> psycopg.Connection[Any]:
        """`conn` if it is an open psycopg connection to this store's database and schema
        with a transaction to join (one is begun if the connection is not autocommit)."""
        if isinstance(conn, psycopg.AsyncConnection):
            raise BadInput(
                f"{_WHAT}: an AsyncConnection joins through the AsyncEngine "
                "(`await aengine.submit(..., conn=aconn)`); here pass a psycopg.Connection"
            )
        if not isinstance(conn, psycopg.Connection):
            raise BadInput(
                f"{_WHAT}: the PostgreSQL store needs a psycopg.Connection, "
                f"got {type(conn).__name__}"
            )
        refuse_state(conn.closed or conn.broken, conn.info.transaction_status, conn.autocommit)
        try:  # on a non-autocommit connection this begins the transaction the insert joins
            theirs = _TupleRows(conn).execute(FINGERPRINT, (self.jobs_table,)).fetchone()
        except psycopg.Error as err:
            raise self._translate(err, "check the caller's connection") from err
        self.same_store(theirs)
        return conn

    @property
    def jobs_table(self) -> str:
        return f"{_schema.quote(self.schema)}.jobs"

    def same_store(self, theirs: Sequence[Any] | None) -> None:
        """BadInput unless `theirs` (the caller's connection's `FINGERPRINT` row) is
        this store's database and schema."""
        if self._fingerprint is None:
            with self.connection("fingerprint") as own:
                row = own.execute(FINGERPRINT, (self.jobs_table,)).fetchone()
                self._fingerprint = tuple(row or ())
        if theirs is None or tuple(theirs) != self._fingerprint:
            db = "?" if theirs is None else theirs[0]
            raise BadInput(
                f"{_WHAT}: the connection is to database {db!r} "
                f"{'without' if theirs is None or theirs[2] is None else 'with another'} "
                f"jobfsm schema {self.schema!r}, not to this store ({self.settings.redacted})"
            )
