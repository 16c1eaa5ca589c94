"""PostgresStore: the jobfsm Store on PostgreSQL (psycopg 3 + a bounded connection pool).

Every write is one statement in autocommit mode (CAS on `version` plus the audit
entries, in data-modifying CTEs) except claim, which locks, leases and checks the
lease against the core's decision before it commits. Connection trouble surfaces
as TransientStoreError; a write whose commit may or may not have happened (the
connection broke while it ran) is reconciled by re-reading the rows from a fresh
connection, never by assuming.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

import attrs
import psycopg
from psycopg import errors as pgerrors
from psycopg_pool import ConnectionPool, PoolTimeout

from adapters._rows import (
    AUDIT_COLUMNS,
    JOB_COLUMNS,
    audit_from_row,
    job_from_row,
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
from fsm.ports import ClaimRequest, PruneRequest, RenewRequest, ScanRequest
from fsm.records import AuditEntry, Decision, Job

from . import _schema
from ._sql import Statements
from ._url import Settings

log = logging.getLogger(__name__)

Conn = psycopg.Connection[tuple[Any, ...]]
T = TypeVar("T")

#: how long `wait_for_jobs` may be asked to block at most (seconds).
MAX_WAIT = 3600.0
#: how many times insert re-tries a duplicate key whose job vanished (pruned) meanwhile.
INSERT_ROUNDS = 3
_N = len(JOB_COLUMNS)
_OWNER = JOB_COLUMNS.index("owner")


def _job(row: Sequence[Any]) -> Job:
    return job_from_row(dict(zip(JOB_COLUMNS, row, strict=True)))


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


def _lease_order(job: Job) -> tuple[int, float, str]:
    return (job.priority, job.run_after, job.id)


class _Ambiguous(Exception):
    """The connection broke while a write could have committed."""


class PostgresStore:
    """Jobs in `<schema>.jobs`, their audit trail in `<schema>.job_events`.

    Thread-safe: each call borrows a connection from a bounded pool
    (`pool_max`, default 10; waiting for one is bounded by `pool_timeout`).
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.schema = settings.schema
        self.sql = Statements(_schema.quote(settings.schema))
        self.channel = f"jobfsm_{settings.schema}"
        self._pool = ConnectionPool(
            settings.conninfo,
            min_size=settings.pool_min,
            max_size=settings.pool_max,
            timeout=settings.pool_timeout,
            kwargs={"autocommit": True},
            name=f"jobfsm-{settings.schema}",
            open=False,
        )
        self._listen_lock = threading.Lock()
        self._listener: Conn | None = None
        self._closed = False
        from .liveness import PostgresLiveness

        self.liveness = PostgresLiveness(self)

    # --- connections and errors ------------------------------------------------------

    def connect(self, **kwargs: Any) -> Conn:
        """A dedicated connection outside the pool (LISTEN, liveness, migrations)."""
        try:
            return psycopg.connect(self.settings.conninfo, autocommit=True, **kwargs)
        except psycopg.Error as err:
            raise TransientStoreError(
                f"cannot connect to PostgreSQL at {self.settings.redacted}: {err}"
            ) from err

    def open(self) -> None:
        """Check the server answers, then open the pool (connections made in background)."""
        with self.connect() as conn:
            conn.execute("SELECT 1")
        self._pool.open(wait=False)

    def _translate(self, err: BaseException, what: str) -> JobFSMError:
        where = f"PostgreSQL store {self.settings.redacted} ({what})"
        if isinstance(err, PoolTimeout):
            return TransientStoreError(
                f"{where}: no connection within {self.settings.pool_timeout} s "
                f"(pool_max={self.settings.pool_max}): {err}"
            )
        if isinstance(err, pgerrors.UndefinedTable | pgerrors.InvalidSchemaName):
            return SchemaError(f"{where}: the jobfsm schema {self.schema!r} is missing: {err}")
        if isinstance(err, psycopg.OperationalError | psycopg.InterfaceError):
            return TransientStoreError(f"{where}: {err}")
        if isinstance(err, psycopg.DataError):
            return BadInput(f"{where}: PostgreSQL rejected a value: {err}")
        return StoreError(f"{where}: {err}")

    def _purge(self) -> None:
        """After a connection failure, drop the pool's other dead connections too."""
        try:
            self._pool.check()
        except Exception:  # best effort; the next call reports the real error
            log.debug("pool check after a connection failure failed", exc_info=True)

    @contextmanager
    def _connection(self, what: str) -> Iterator[Conn]:
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
        with self._connection(what) as conn:
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
        with self._connection("schema_version") as conn:
            return _schema.current_version(conn, self.schema)

    def check_schema(self) -> None:
        with self.connect() as conn:
            _schema.check(conn, self.schema)

    # --- Store -----------------------------------------------------------------------

    def insert(self, decisions: Sequence[Decision]) -> list[Job]:
        out: dict[int, Job] = {}
        pending = list(enumerate(decisions))
        for _ in range(INSERT_ROUNDS):
            if not pending:
                break
            batch = [d for _, d in pending]
            inserted = self._insert_once(batch)
            missing = [(i, d) for i, d in pending if d.job.id not in inserted]
            for i, d in pending:
                if d.job.id in inserted:
                    out[i] = d.job
            if not missing:
                break
            found = self._existing([d for _, d in missing])
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

    def _insert_once(self, decisions: Sequence[Decision]) -> set[str]:
        entries = [d.entry for d in decisions if d.entry is not None]
        params = [
            *_job_arrays(d.job for d in decisions),
            *_audit_arrays(entries),
            self.channel,
        ]
        ids = [d.job.id for d in decisions]

        def body(conn: Conn) -> set[str]:
            return {r[0] for r in conn.execute(self.sql.insert, params).fetchall()}

        def reconcile() -> set[str]:
            with self._connection("insert (reconcile)") as conn:
                rows = conn.execute(self.sql.get_many, (ids,)).fetchall()
            stored = {_job(r).id: _job(r) for r in rows}
            mine = {d.job.id for d in decisions if stored.get(d.job.id) == d.job}
            if not mine:
                raise self._unknown(f"insert of {len(ids)} jobs")
            return mine

        return self._write("insert", body, reconcile)

    def _existing(self, decisions: Sequence[Decision]) -> dict[tuple[str, str | None], Job]:
        keys = [d.job.idempotency_key for d in decisions if d.job.idempotency_key is not None]
        ids = [d.job.id for d in decisions]
        with self._connection("insert (existing keys)") as conn:
            rows = conn.execute(self.sql.by_key, (keys, ids)).fetchall()
        found: dict[tuple[str, str | None], Job] = {}
        for row in rows:
            job = _job(row)
            found[("id", job.id)] = job
            if job.idempotency_key is not None:
                found[("key", job.idempotency_key)] = job
        return found

    def get(self, job_id: str) -> Job | None:
        with self._connection("get") as conn:
            row = conn.execute(self.sql.get, (job_id,)).fetchone()
        return None if row is None else _job(row)

    def claim(self, request: ClaimRequest) -> list[Job]:
        if request.limit < 1 or not request.queues or not request.states:
            return []
        if request.ids is not None and not request.ids:
            return []
        one_queue = len(set(request.queues)) == 1
        statement = self.sql.claim(tuple(request.states), request.ids is not None, one_queue)
        params = {
            "queues": list(request.queues),
            "queue": request.queues[0],
            "now": request.now,
            "limit": request.limit,
            "ids": None if request.ids is None else list(request.ids),
            "owner": owner_to_text(request.owner),
            "lease_until": request.lease_until,
        }
        decisions: list[Decision] = []
        lost: psycopg.Error | None = None
        with self._connection("claim") as conn:
            try:
                # round trip 1: BEGIN and the lease statement, pipelined
                with conn.pipeline():
                    conn.execute("BEGIN")
                    cursor = conn.execute(statement, params)
                for row in cursor.fetchall():
                    before, after = _job(row[:_N]), _job(row[_N:])
                    decision = request.decide(before)
                    if decision.job != after:
                        raise StoreError(_disagreement(before, after, decision.job))
                    decisions.append(decision)
                decisions.sort(key=lambda d: _lease_order(d.job))
            except BaseException:
                _rollback(conn)
                raise
            entries = [d.entry for d in decisions if d.entry is not None]
            try:
                # round trip 2: the audit entries and COMMIT, pipelined
                with conn.pipeline():
                    if entries:
                        conn.execute(self.sql.audit_insert, _audit_arrays(entries))
                    conn.execute("COMMIT")
            except psycopg.Error as err:
                if not conn.broken:
                    _rollback(conn)
                    raise
                lost = err
            else:
                return [d.job for d in decisions]
        self._purge()
        log.warning("connection lost while committing a claim; reconciling")
        confirmed = self._confirmed(decisions, "claim", lost)
        if not confirmed:
            raise self._unknown(f"claim of {len(decisions)} jobs")
        return [d.job for d in decisions]

    def _confirmed(
        self, decisions: Sequence[Decision], what: str, lost: BaseException | None
    ) -> set[str]:
        """Ids whose decision shows in the store (row equal to it, or its audit entry)."""
        ids = [d.job.id for d in decisions]
        try:
            with self._connection(f"{what} (reconcile)") as conn:
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

    def apply(self, decisions: Sequence[Decision]) -> list[Job | VersionConflict]:
        if not decisions:
            return []
        for d in decisions:
            if d.previous is None:
                raise BadInput(f"job {d.job.id}: apply needs a decision on an existing job")
        ids = [d.job.id for d in decisions]
        if len(set(ids)) != len(ids):
            return self._apply_in_order(decisions)

        def body(conn: Conn) -> set[str]:
            rows = conn.execute(self.sql.apply, self._apply_params(decisions)).fetchall()
            return {r[0] for r in rows}

        def reconcile() -> set[str]:
            confirmed = self._confirmed(decisions, "apply", None)
            if not confirmed:
                raise self._unknown(f"apply of {len(decisions)} decisions")
            return confirmed

        written = self._write("apply", body, reconcile)
        return self._outcomes(decisions, written)

    def _apply_params(self, decisions: Sequence[Decision]) -> list[Any]:
        entries = [d.entry for d in decisions if d.entry is not None]
        prev = [d.previous.version if d.previous is not None else None for d in decisions]
        return [prev, *_job_arrays(d.job for d in decisions), *_audit_arrays(entries)]

    def _outcomes(
        self, decisions: Sequence[Decision], written: set[str]
    ) -> list[Job | VersionConflict]:
        lost = [d.job.id for d in decisions if d.job.id not in written]
        current: dict[str, int] = {}
        if lost:
            with self._connection("apply (versions)") as conn:
                current = dict(conn.execute(self.sql.versions, (lost,)).fetchall())
        out: list[Job | VersionConflict] = []
        for d in decisions:
            if d.job.id in written:
                out.append(d.job)
            else:
                assert d.previous is not None
                out.append(VersionConflict(d.job.id, d.previous.version, current.get(d.job.id)))
        return out

    def _apply_in_order(self, decisions: Sequence[Decision]) -> list[Job | VersionConflict]:
        """Several decisions for one job: apply them one by one in one transaction."""
        out: list[Job | VersionConflict] = []
        lost: psycopg.Error | None = None
        applied: list[Decision] = []
        with self._connection("apply") as conn:
            conn.execute("BEGIN")
            try:
                for d in decisions:
                    rows = conn.execute(self.sql.apply, self._apply_params([d])).fetchall()
                    if rows:
                        out.append(d.job)
                        applied.append(d)
                    else:
                        row = conn.execute(self.sql.versions, ([d.job.id],)).fetchone()
                        assert d.previous is not None
                        out.append(
                            VersionConflict(
                                d.job.id, d.previous.version, None if row is None else row[1]
                            )
                        )
            except BaseException:
                _rollback(conn)
                raise
            try:
                conn.execute("COMMIT")
            except psycopg.OperationalError as err:
                if not conn.broken:
                    raise
                lost = err
            else:
                return out
        if applied and self._confirmed(applied, "apply", lost):
            return out
        raise self._unknown(f"apply of {len(decisions)} decisions")

    def renew(self, request: RenewRequest) -> dict[str, str]:
        if not request.fences or not request.states:
            return {}
        ids = list(request.fences)
        owner = owner_to_text(request.owner)
        params = [
            request.lease_until,
            request.now,
            ids,
            [request.fences[i] for i in ids],
            owner,
            list(request.states),
        ]

        def body(conn: Conn) -> dict[str, str]:
            return {r[0]: r[1] for r in conn.execute(self.sql.renew, params).fetchall()}

        def reconcile() -> dict[str, str]:
            with self._connection("renew (reconcile)") as conn:
                rows = [_job(r) for r in conn.execute(self.sql.get_many, (ids,)).fetchall()]
            renewed = {
                j.id: j.state
                for j in rows
                if j.owner == request.owner
                and j.fence == request.fences[j.id]
                and j.lease_until == request.lease_until
                and j.updated_at == request.now
            }
            if not renewed:
                raise self._unknown(f"renew of {len(ids)} leases")
            return renewed

        return self._write("renew", body, reconcile)

    def record(self, entries: Sequence[AuditEntry]) -> None:
        if not entries:
            return
        params = _audit_arrays(entries)

        def body(conn: Conn) -> None:
            conn.execute(self.sql.record, params)

        def reconcile() -> None:
            with self._connection("record (reconcile)") as conn:
                for e in entries:
                    row = conn.execute(
                        self.sql.has_entry,
                        (e.job_id, e.version, e.at, e.event, e.fence, e.data_json),
                    ).fetchone()
                    if row is not None and row[0] > 0:
                        return
            raise self._unknown(f"recording {len(entries)} audit entries")

        self._write("record", body, reconcile)

    def scan(self, request: ScanRequest) -> list[Job]:
        if not request.states or request.limit < 1:
            return []
        statement = self.sql.scan(
            tuple(request.states),
            lease=request.lease_expired_at is not None,
            deadline=request.deadline_passed_at is not None,
            host=request.owner_host is not None,
            queues=request.queues is not None,
            kinds=request.kinds is not None,
        )
        params = {
            "lease": request.lease_expired_at,
            "deadline": request.deadline_passed_at,
            "host": request.owner_host,
            "queues": None if request.queues is None else list(request.queues),
            "kinds": None if request.kinds is None else list(request.kinds),
            "limit": request.limit,
        }
        with self._connection("scan") as conn:
            return [_job(r) for r in conn.execute(statement, params).fetchall()]

    def history(self, job_id: str) -> list[AuditEntry]:
        with self._connection("history") as conn:
            return [_entry(r) for r in conn.execute(self.sql.history, (job_id,)).fetchall()]

    def counts(self) -> dict[tuple[str, str], int]:
        with self._connection("counts") as conn:
            return {(q, s): int(n) for q, s, n in conn.execute(self.sql.counts).fetchall()}

    def prune(self, request: PruneRequest) -> int:
        states = tuple(request.cutoffs)
        if not states or request.limit < 1:
            return 0
        statement = self.sql.prune(states)
        params = [*(request.cutoffs[s] for s in states), request.limit]

        def body(conn: Conn) -> int:
            row = conn.execute(statement, params).fetchone()
            return 0 if row is None else int(row[0])

        def reconcile() -> int:
            raise TransientStoreError(
                "prune: the connection was lost while it ran; how many jobs it removed is "
                "unknown. Prune again (it only removes what is past retention)."
            )

        return self._write("prune", body, reconcile)

    # --- wake-ups ----------------------------------------------------------------------

    def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> bool:
        """Block until a job is inserted into one of `queues` (True) or `timeout` passes.

        A hint only (LISTEN/NOTIFY): polling the store stays the truth. At most
        `MAX_WAIT` seconds; one waiter at a time per store (others wait for it up
        to their timeout). If the listening connection fails, the failure is logged
        and the call waits out its timeout and returns False.
        """
        if isinstance(timeout, bool) or not math.isfinite(timeout) or timeout < 0:
            raise BadInput(f"wait_for_jobs timeout must be a non-negative number, got {timeout!r}")
        deadline = time.monotonic() + min(timeout, MAX_WAIT)
        wanted = set(queues)
        if not self._listen_lock.acquire(timeout=min(timeout, MAX_WAIT)):
            return False
        try:
            conn = self._listen_connection()
            while (remaining := deadline - time.monotonic()) > 0:
                for note in conn.notifies(timeout=remaining, stop_after=1):
                    if note.payload in wanted:
                        return True
            return False
        except (psycopg.Error, StoreError) as err:
            log.warning("LISTEN for new jobs failed (%s); falling back to polling", err)
            self._drop_listener()
            time.sleep(max(0.0, deadline - time.monotonic()))
            return False
        finally:
            self._listen_lock.release()

    def _listen_connection(self) -> Conn:
        if self._listener is None or self._listener.closed or self._listener.broken:
            self._drop_listener()
            conn = self.connect()
            conn.execute(f'LISTEN "{self.channel}"')
            self._listener = conn
        return self._listener

    def _drop_listener(self) -> None:
        if self._listener is not None:
            with suppress(psycopg.Error):
                self._listener.close()
            self._listener = None

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.liveness.close()
        with self._listen_lock:
            self._drop_listener()
        self._pool.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _disagreement(before: Job, after: Job, decided: Job) -> str:
    fields = [
        f"{f.name}: store {getattr(after, f.name)!r}, core {getattr(decided, f.name)!r}"
        for f in attrs.fields(Job)
        if getattr(after, f.name) != getattr(decided, f.name)
    ]
    return (
        f"job {before.id}: the store's lease of state {before.state!r} disagrees with the "
        f"core's lease decision ({'; '.join(fields)}); rolled back"
    )


def _rollback(conn: Conn) -> None:
    """Roll back an explicit transaction after an error, if the connection still works."""
    if conn.broken or conn.closed:
        return
    try:
        conn.execute("ROLLBACK")
    except psycopg.Error:
        log.debug("ROLLBACK after an error failed", exc_info=True)
