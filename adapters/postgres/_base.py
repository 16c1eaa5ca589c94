"""The PostgreSQL store's plumbing: the pool, dedicated connections, error translation
and the reconciliation of writes whose commit is unknown."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pgerrors
from psycopg_pool import ConnectionPool, PoolTimeout

from adapters._rows import (
    AUDIT_COLUMNS,
    JOB_COLUMNS,
    audit_from_row,
    check_storable,
    job_from_values,
    owner_to_text,
)
from fsm.errors import (
    BadInput,
    JobFSMError,
    SchemaError,
    StoreError,
    TransientStoreError,
    VersionConflict,
)
from fsm.records import AuditEntry, Decision, Job

from . import _schema
from ._sql import Statements
from ._url import Settings

log = logging.getLogger(__name__)

Conn = psycopg.Connection[tuple[Any, ...]]
T = TypeVar("T")
_OWNER = JOB_COLUMNS.index("owner")


def _job(row: Sequence[Any]) -> Job:
    return job_from_values(row)


def _entry(row: Sequence[Any]) -> AuditEntry:
    return audit_from_row(dict(zip(AUDIT_COLUMNS, row, strict=True)))


def _job_arrays(jobs: Iterable[Job]) -> list[list[Any]]:
    """One array per column (the `unnest` parameters), mapped as adapters._rows.job_to_row."""
    listed = list(jobs)
    arrays = [[getattr(j, c) for j in listed] for c in JOB_COLUMNS]
    arrays[_OWNER] = [owner_to_text(j.owner) for j in listed]
    return arrays


def _audit_arrays(entries: Iterable[AuditEntry]) -> list[list[Any]]:
    listed = list(entries)
    return [[getattr(e, c) for e in listed] for c in AUDIT_COLUMNS]


def check_apply(decisions: Sequence[Decision]) -> bool:
    """Refuse what `apply` cannot take (a decision without the record it was made on,
    a value the store cannot hold), before any write, for the blocking and the async
    store alike. True when one job has several decisions: they go one after another."""
    for d in decisions:
        if d.previous is None:
            raise BadInput(f"job {d.job.id}: apply needs a decision on an existing job")
    check_storable((d.job for d in decisions), (d.entry for d in decisions))
    ids = [d.job.id for d in decisions]
    return len(set(ids)) != len(ids)


def outcomes(
    decisions: Sequence[Decision], written: set[str], current: dict[str, int]
) -> list[Job | VersionConflict]:
    """`apply`'s answer: each decision's job if `written`, else its VersionConflict
    (`current`: the stored versions of the ids not written)."""
    out: list[Job | VersionConflict] = []
    for d in decisions:
        if d.job.id in written:
            out.append(d.job)
        else:
            assert d.previous is not None
            out.append(VersionConflict(d.job.id, d.previous.version, current.get(d.job.id)))
    return out


def _lease_order(job: Job) -> tuple[int, float, str]:
    return (job.priority, job.run_after, job.id)


class Connected:
    """A schema on a PostgreSQL server: the bounded pool and the error edge."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.schema = settings.schema
        self.sql = Statements(_schema.quote(settings.schema))
        self._pool = ConnectionPool(
            settings.conninfo, **settings.pool_options(f"jobfsm-{settings.schema}")
        )
        self._closed = False

    # --- connections and errors ------------------------------------------------------

    def connect(self, **kwargs: Any) -> Conn:
        """A dedicated connection outside the pool (LISTEN, liveness, migrations)."""
        try:
            return psycopg.connect(self.settings.conninfo, autocommit=True, **kwargs)
        except psycopg.Error as err:
            raise TransientStoreError(
                f"cannot connect to PostgreSQL at {self.settings.redacted}: "
                f"{self.settings.scrub(str(err))}"
            ) from err

    def open(self) -> None:
        """Check the server answers, then open the pool (connections made in background)."""
        with self.connect() as conn:
            conn.execute("SELECT 1")
        self._pool.open(wait=False)

    def _translate(self, err: BaseException, what: str) -> JobFSMError:
        where = f"PostgreSQL store {self.settings.redacted} ({what})"
        text = self.settings.scrub(str(err))
        if isinstance(err, PoolTimeout):
            return TransientStoreError(
                f"{where}: no connection within {self.settings.pool_timeout} s "
                f"(pool_max={self.settings.pool_max}): {text}"
            )
        if isinstance(err, pgerrors.UndefinedTable | pgerrors.InvalidSchemaName):
            return SchemaError(f"{where}: the jobfsm schema {self.schema!r} is missing: {text}")
        if isinstance(err, psycopg.OperationalError | psycopg.InterfaceError):
            return TransientStoreError(f"{where}: {text}")
        if isinstance(err, psycopg.DataError):
            return BadInput(f"{where}: PostgreSQL rejected a value: {text}")
        return StoreError(f"{where}: {text}")

    def _purge(self) -> None:
        """After a connection failure, drop the pool's other dead connections too."""
        try:
            self._pool.check()
        except Exception:  # best effort; the next call reports the real error
            log.debug("pool check after a connection failure failed", exc_info=True)

    @contextmanager
    def connection(self, what: str) -> Iterator[Conn]:
        if self._closed:
            raise StoreError(f"PostgreSQL store {self.settings.redacted} is closed ({what})")
        try:
            with self._pool.connection() as conn:
                yield conn
        except (psycopg.Error, PoolTimeout) as err:
            if isinstance(err, psycopg.OperationalError | PoolTimeout):
                self._purge()
            raise self._translate(err, what) from err

    def _write(self, what: str, body: Callable[[Conn], T], reconcile: Callable[[], T]) -> T:
        """Run a one-statement (autocommit) write; if the connection broke while it
        ran, the commit is unknown: `reconcile` finds out from a fresh connection."""
        lost: psycopg.Error | None = None
        with self.connection(what) as conn:
            try:
                return body(conn)
            except psycopg.OperationalError as err:
                if not conn.broken:
                    raise
                lost = err
        self._purge()
        log.warning("connection lost during %s; reconciling from a fresh connection", what)
        try:
            return reconcile()
        except TransientStoreError:
            raise
        except StoreError as err:
            raise TransientStoreError(f"{what}: commit unknown and re-reading failed: {err}") from (
                lost
            )

    def _unknown(self, what: str) -> TransientStoreError:
        return TransientStoreError(
            f"PostgreSQL store {self.settings.redacted}: the connection was lost during {what} "
            "and a fresh read shows it was not applied; nothing changed, safe to retry"
        )

    # --- schema ----------------------------------------------------------------------

    def migrate(self) -> list[int]:
        """Apply pending migrations (safe when several processes migrate at once)."""
        with self.connect() as conn:
            try:
                return _schema.migrate(conn, self.schema)
            except psycopg.Error as err:
                raise self._translate(err, "migrate") from err

    def schema_version(self) -> int:
        with self.connection("schema_version") as conn:
            return _schema.current_version(conn, self.schema)

    def check_schema(self) -> None:
        with self.connect() as conn:
            _schema.check(conn, self.schema)

    def _confirmed(
        self, decisions: Sequence[Decision], what: str, lost: BaseException | None
    ) -> set[str]:
        """Ids whose decision shows in the store (row equal to it, or its audit entry)."""
        ids = [d.job.id for d in decisions]
        try:
            with self.connection(f"{what} (reconcile)") as conn:
                stored = {
                    _job(r).id: _job(r) for r in conn.execute(self.sql.get_many, (ids,)).fetchall()
                }
                confirmed = set()
                for d in decisions:
                    if stored.get(d.job.id) == d.job:
                        confirmed.add(d.job.id)
                    elif d.entry is not None:
                        e = d.entry
                        row = conn.execute(
                            self.sql.has_entry,
                            (e.job_id, e.version, e.at, e.event, e.fence, e.data_json),
                        ).fetchone()
                        if row is not None and row[0] > 0:
                            confirmed.add(d.job.id)
        except StoreError as err:
            raise TransientStoreError(
                f"{what}: the connection was lost while committing and re-reading failed "
                f"({err}); the outcome is unknown, re-read the jobs before retrying"
            ) from lost
        return confirmed


def _rollback(conn: Conn) -> None:
    """Roll back an explicit transaction after an error, if the connection still works."""
    if conn.broken or conn.closed:
        return
    try:
        conn.execute("ROLLBACK")
    except psycopg.Error:
        log.debug("ROLLBACK after an error failed", exc_info=True)


def _commit(conn: Conn) -> psycopg.Error | None:
    """COMMIT an explicit transaction. None: committed. The error: the connection broke
    during COMMIT, so whether it committed is unknown (the caller reconciles). Any other
    error rolls back and is raised."""
    try:
        conn.execute("COMMIT")
    except psycopg.Error as err:
        if not conn.broken:
            _rollback(conn)
            raise
        return err
    return None
