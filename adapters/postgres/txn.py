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
from ._base import _job
from ._insert import Inserts

_WHAT = "conn= of a transactional submit"
#: what identifies this store's database: its name, the server's start time (one per
#: server process tree) and the oid of the jobs table of the store's schema
_FINGERPRINT = "SELECT current_database(), pg_postmaster_start_time(), to_regclass(%s)::oid"


class _TupleRows:
    """The caller's connection, read as tuples whatever its row factory is."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn

    def execute(self, query: Any, params: Any = None) -> psycopg.Cursor[tuple[Any, ...]]:
        return self.conn.cursor(row_factory=tuple_row).execute(query, params)


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
        try:
            with caller.transaction():  # a savepoint in the caller's transaction
                ids = self.insert_statements(rows, decisions, capacity)()  # type: ignore[arg-type]
                missing = [d for d in decisions if d.job.id not in ids]
                found: dict[str, Job] = {}
                if missing:
                    keys = [d.job.idempotency_key for d in missing if d.job.idempotency_key]
                    stored = rows.execute(self.sql.by_key, (keys, [d.job.id for d in missing]))
                    for row in stored.fetchall():
                        job = _job(row)
                        found[job.id] = job
                        if job.idempotency_key is not None:
                            found[job.idempotency_key] = job
        except JobFSMError:
            raise
        except psycopg.Error as err:
            raise self._translate(err, "insert in the caller's transaction") from err
        out = []
        for d in decisions:
            if d.job.id in ids:
                out.append(d.job)
                continue
            twin = found.get(d.job.idempotency_key or "") or found.get(d.job.id)
            if twin is None:
                raise TransientStoreError(
                    f"insert of job {d.job.id}: its idempotency key's job vanished (pruned) "
                    "while it was inserted; roll back and retry"
                )
            out.append(twin)
        return out

    def _joinable(self, conn: object) -> psycopg.Connection[Any]:
        """`conn` if it is an open psycopg connection to this store's database and schema
        with a transaction to join (one is begun if the connection is not autocommit)."""
        if isinstance(conn, psycopg.AsyncConnection):
            raise BadInput(f"{_WHAT}: an AsyncConnection cannot be used; pass a psycopg.Connection")
        if not isinstance(conn, psycopg.Connection):
            raise BadInput(
                f"{_WHAT}: the PostgreSQL store needs a psycopg.Connection, "
                f"got {type(conn).__name__}"
            )
        if conn.closed or conn.broken:
            raise BadInput(f"{_WHAT}: the psycopg connection is closed")
        status = conn.info.transaction_status
        if status == pq.TransactionStatus.INERROR:
            raise BadInput(f"{_WHAT}: the caller's transaction has failed; roll it back first")
        if status == pq.TransactionStatus.ACTIVE:
            raise BadInput(f"{_WHAT}: the connection is busy running another statement")
        if status == pq.TransactionStatus.IDLE and conn.autocommit:
            raise BadInput(
                f"{_WHAT}: the connection is in autocommit mode with no transaction open, so "
                "the job would commit at once; submit inside `with conn.transaction():`"
            )
        jobs = f"{_schema.quote(self.schema)}.jobs"
        try:  # on a non-autocommit connection this begins the transaction the insert joins
            theirs = _TupleRows(conn).execute(_FINGERPRINT, (jobs,)).fetchone()
        except psycopg.Error as err:
            raise self._translate(err, "check the caller's connection") from err
        if self._fingerprint is None:
            with self.connection("fingerprint") as own:
                self._fingerprint = tuple(own.execute(_FINGERPRINT, (jobs,)).fetchone() or ())
        if theirs is None or tuple(theirs) != self._fingerprint:
            db = "?" if theirs is None else theirs[0]
            raise BadInput(
                f"{_WHAT}: the connection is to database {db!r} "
                f"{'without' if theirs is None or theirs[2] is None else 'with another'} "
                f"jobfsm schema {self.schema!r}, not to this store ({self.settings.redacted})"
            )
        return conn
