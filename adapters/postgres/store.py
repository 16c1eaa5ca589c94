"""PostgresStore: the jobfsm Store on PostgreSQL (psycopg 3 + a bounded connection pool).

Most writes are one statement in autocommit mode (CAS on `version` plus the audit
entries, in data-modifying CTEs). Claim is one lease statement in a transaction
that checks the lease against the core's decision before it commits; large keyless
insert batches are COPYed in one transaction. Connection trouble surfaces
as TransientStoreError; a write whose commit may or may not have happened (the
connection broke while it ran) is reconciled by re-reading the rows from a fresh
connection, never by assuming.
"""

from __future__ import annotations

import functools
import logging
import operator
import weakref
from collections.abc import Callable, Sequence
from itertools import compress, repeat
from typing import Any

import attrs
import psycopg

from adapters._rows import (
    AUDIT_COLUMNS,
    JOB_COLUMNS,
    Claimed,
    Unclaimable,
    check_storable,
    first_rejections,
    owner_to_text,
    start_leased,
)
from fsm.errors import BadInput, StoreError, TransientStoreError, VersionConflict
from fsm.lifecycle.core import erased_data_json
from fsm.ports import (
    ClaimRequest,
    ProgressRequest,
    PruneRequest,
    QueuePause,
    RenewRequest,
    ScanRequest,
)
from fsm.records import AuditEntry, Decision, Job

from . import _schema
from ._base import (
    Conn,
    _audit_arrays,
    _entry,
    _job,
    _job_arrays,
    _lease_order,
    _rollback,
    check_apply,
    outcomes,
)
from ._insert import COPY_MIN, INSERT_ROUNDS
from ._sql import ClaimShape
from ._url import CHANNEL_PREFIX, Settings
from .aio import AsyncPostgresStore
from .browse import PostgresBrowse
from .deps import PostgresDependencies
from .listen import Listener
from .liveness import PostgresLiveness
from .schedules import PostgresSchedules
from .txn import JoinsPostgres
from .waiting import FinalStates, drop_trigger

log = logging.getLogger(__name__)

__all__ = ["CLAIM_ROUNDS", "COPY_MIN", "INSERT_ROUNDS", "PostgresStore"]

#: how many times one claim looks again past jobs the core refused to lease
CLAIM_ROUNDS = 4
_N = len(JOB_COLUMNS)
_SET_COLUMNS = tuple(c for c in JOB_COLUMNS if c != "id")
_set_values = operator.attrgetter(*_SET_COLUMNS)


def _changed(d: Decision) -> tuple[str, ...]:
    """The columns `d` changes, in column order; `version` always (it always grows)."""
    assert d.previous is not None
    differ = map(operator.ne, _set_values(d.job), _set_values(d.previous))
    return tuple(compress(_SET_COLUMNS, differ))  # version is among them: it always grows


_audit_values = operator.attrgetter(*AUDIT_COLUMNS)


def _batch_params(rows: Sequence[Sequence[Any]]) -> tuple[tuple[bool, ...], list[Any]]:
    """`batch_rows` flags and parameters for `rows`: a column whose rows all hold the
    very same object (one `now`, one state name, None) goes as one scalar; the first
    column always goes as an array. Fewer values to dump, the same rows written.
    (Transposed and compared by identity in C: this runs for every batch written.)"""
    columns = list(zip(*rows, strict=True))
    varying = tuple(
        i == 0 or not all(map(operator.is_, column, repeat(column[0])))
        for i, column in enumerate(columns)
    )
    scalars = [column[0] for column, v in zip(columns, varying, strict=True) if not v]
    arrays = [list(column) for column, v in zip(columns, varying, strict=True) if v]
    return varying, scalars + arrays


@functools.lru_cache(maxsize=256)  # bounded: a transition changes one of a few column sets
def _values_of(columns: tuple[str, ...]) -> Callable[[Job], list[Any]]:
    """The values of `columns` of a job, read in C; the owner as its text."""
    get = operator.attrgetter(*columns)
    owner_at = columns.index("owner") if "owner" in columns else None

    def values(job: Job) -> list[Any]:
        got = get(job)
        out = list(got) if len(columns) > 1 else [got]
        if owner_at is not None:
            out[owner_at] = owner_to_text(job.owner)
        return out

    return values


class PostgresStore(JoinsPostgres, PostgresSchedules, PostgresBrowse, PostgresDependencies):
    """Jobs in `<schema>.jobs`, their audit trail in `<schema>.job_events`.

    Thread-safe: each call borrows a connection from a bounded pool
    (`pool_max`, default 10; waiting for one is bounded by `pool_timeout`).
    """

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.channel = f"{CHANNEL_PREFIX}{settings.schema}"
        self._listener = Listener(self.connect, self.channel)
        self._finals = FinalStates(self.connect, self.schema, f"{self.channel}_final")
        self.liveness = PostgresLiveness(self)
        self._unclaimable = Unclaimable(log)
        #: (the last prune request, the seq of the last job it deleted): see `prune`
        self._prune_resume: tuple[weakref.ref[PruneRequest], int] | None = None

    # --- Store -----------------------------------------------------------------------

    def get(self, job_id: str) -> Job | None:
        with self.connection("get") as conn:
            row = conn.execute(self.sql.get, (job_id,)).fetchone()
        return None if row is None else _job(row)

    def claim(self, request: ClaimRequest) -> list[Job]:
        if request.limit < 1 or not request.queues or not request.states:
            return []
        if (request.ids is not None and not request.ids) or request.kinds == ():
            return []
        skip = self._unclaimable.known()
        for _ in range(CLAIM_ROUNDS):  # bounded: a round only repeats past refused jobs
            leased, refused = self._claim_once(request, skip)
            if not refused:
                return leased
            skip = [*skip, *refused]
        return []  # every round met a job the core refused: the next claim goes on

    def _claim_once(
        self, request: ClaimRequest, skip: Sequence[str]
    ) -> tuple[list[Job], list[str]]:
        """One lease transaction. A job whose lease decision raises is refused: the
        transaction rolls back and its id comes back, for the next round to skip.

        A plain claim leases in its first statement (SQL) and checks each row against
        the core's decision. A claim-and-start (`request.start`) only locks in its
        first statement; the core decides the lease and the start, and each row is
        written once, from its pre-image to running, before the one commit."""
        one_queue = len(set(request.queues)) == 1
        shape: ClaimShape = (
            tuple(request.states),
            request.ids is not None,
            one_queue,
            bool(skip),
            request.kinds is not None,
        )
        statement = self.sql.lock(shape) if request.start else self.sql.claim(shape)
        params = {
            "queues": list(request.queues),
            "queue": request.queues[0],
            "now": request.now,
            "limit": request.limit,
            "ids": None if request.ids is None else list(request.ids),
            "owner": owner_to_text(request.owner),
            "lease_until": request.lease_until,
            "skip": list(skip),
            "kinds": None if request.kinds is None else list(request.kinds),
        }
        claimed: list[Claimed] = []
        refused: list[str] = []
        lost: psycopg.Error | None = None
        with self.connection("claim") as conn:
            try:
                # round trip 1: BEGIN and the lease (or lock) statement, pipelined
                with conn.pipeline():
                    conn.execute("BEGIN")
                    cursor = conn.execute(statement, params)
                decisions: list[Decision] = []
                for row in cursor.fetchall():
                    before = _job(row[:_N])
                    try:
                        decision = request.decide(before)
                    except Exception as err:  # one job the core refuses fails alone
                        self._unclaimable.skip(before, err)
                        refused.append(before.id)
                        continue
                    if request.start is None and decision.job != (after := _job(row[_N:])):
                        raise StoreError(_disagreement(before, after, decision.job))
                    decisions.append(decision)
                if refused:
                    _rollback(conn)
                    return [], refused
                decisions.sort(key=lambda d: _lease_order(d.job))
                claimed = start_leased(decisions, request.start)
                if request.start is not None and claimed:
                    # round trip 2: each locked row written once (compare-and-set on
                    # the version just read under the lock), with every audit entry
                    self._write_claimed(conn, claimed)
            except BaseException:
                _rollback(conn)
                raise
            entries = [] if request.start else [e for c in claimed for e in c.entries]
            try:
                # last round trip: a plain claim's audit entries, and COMMIT, pipelined
                with conn.pipeline():
                    if entries:
                        varying, rows = _batch_params([_audit_values(e) for e in entries])
                        conn.execute(self.sql.audit_insert_rows(varying), rows)
                    conn.execute("COMMIT")
            except psycopg.Error as err:
                if not conn.broken:
                    _rollback(conn)
                    raise
                lost = err
            else:
                return [c.write.job for c in claimed], []
        self._purge()
        if not claimed:
            return [], []  # nothing was leased, so nothing can have been committed
        log.warning("connection lost while committing a claim; reconciling")
        confirmed = self._confirmed([c.write for c in claimed], "claim", lost)
        if not confirmed:
            raise self._unknown(f"claim of {len(claimed)} jobs")
        return [c.write.job for c in claimed], []

    def _write_claimed(self, conn: Conn, claimed: Sequence[Claimed]) -> None:
        """Write a claim-and-start's rows and audit entries in one pipelined round trip
        inside the claim's transaction; every row must be written (we hold its lock)."""
        writes = [c.write for c in claimed]
        groups: dict[tuple[str, ...], list[Decision]] = {}
        for w in writes:  # a job whose start was refused is only leased: other columns
            groups.setdefault(_changed(w), []).append(w)
        entries = [e for c in claimed for e in c.entries]
        with conn.pipeline():  # the rows without their entries: those are all written below
            cursors = [
                conn.execute(*self._apply_statement(g, columns, audited=False))
                for columns, g in groups.items()
            ]
            if entries:
                varying, rows = _batch_params([_audit_values(e) for e in entries])
                conn.execute(self.sql.audit_insert_rows(varying), rows)
        written = {r[0] for c in cursors for r in c.fetchall()}
        missing = [w.job.id for w in writes if w.job.id not in written]
        if missing:
            raise StoreError(
                f"claim: {len(missing)} locked job(s) were not written as the core decided "
                f"(first {missing[0]}); the claim is rolled back"
            )

    def apply(self, decisions: Sequence[Decision]) -> list[Job | VersionConflict]:
        if not decisions:
            return []
        if check_apply(decisions):
            return self._apply_in_order(decisions)

        def body(conn: Conn) -> set[str]:
            statement, params = self._apply_statement(decisions)
            return {r[0] for r in conn.execute(statement, params).fetchall()}

        def reconcile() -> set[str]:
            confirmed = self._confirmed(decisions, "apply", None)
            if not confirmed:
                raise self._unknown(f"apply of {len(decisions)} decisions")
            return confirmed

        written = self._write("apply", body, reconcile)
        return self._outcomes(decisions, written)

    def erase(self, decision: Decision) -> Job | VersionConflict:
        if decision.previous is None:
            raise BadInput(f"job {decision.job.id}: erase needs a decision on an existing job")
        check_storable([decision.job], [decision.entry])
        job_id = decision.job.id

        def body(conn: Conn) -> set[str]:
            with conn.transaction():
                statement, params = self._apply_statement([decision])
                written = {r[0] for r in conn.execute(statement, params).fetchall()}
                if job_id in written:
                    rows = conn.execute(self.sql.trail_data, (job_id,)).fetchall()
                    with conn.cursor() as cur:
                        cur.executemany(
                            self.sql.erase_entry,
                            [(erased_data_json(text), job_id, seq) for seq, text in rows],
                        )
            return written

        def reconcile() -> set[str]:
            confirmed = self._confirmed([decision], "erase", None)
            if not confirmed:
                raise self._unknown("erase")
            return confirmed

        (outcome,) = self._outcomes([decision], self._write("erase", body, reconcile))
        return outcome

    def _apply_statement(
        self,
        decisions: Sequence[Decision],
        columns: tuple[str, ...] | None = None,
        *,
        audited: bool | None = None,
    ) -> tuple[str, list[Any]]:
        """The apply statement and its parameters, setting only the changed columns.

        Every write bumps `version`, so the row a compare-and-set on
        `d.previous.version` finds holds exactly `d.previous`: setting the columns
        that differ leaves it equal to `d.job`, field for field, while the row,
        the parameters and the server's work shrink to what changed. A batch
        whose decisions change different sets of columns sets every column.

        A caller that grouped the decisions by their changed columns passes them
        (`columns`); `audited=False` writes the rows without their audit entries
        (a claim-and-start writes every entry of a job in one statement of its own).
        """
        if columns is None:
            changed = {_changed(d) for d in decisions}
            if len(changed) != 1:
                return self.sql.apply, self._apply_params(decisions)
            (columns,) = changed
        if audited is None:
            audited = all(d.entry is not None for d in decisions)
            if not (audited or all(d.entry is None for d in decisions)):
                return self.sql.apply, self._apply_params(decisions)
        entries = [d.entry for d in decisions if d.entry is not None] if audited else []
        if len(decisions) == 1:
            (d,) = decisions
            assert d.previous is not None
            params = [*_values_of(columns)(d.job), d.job.id, d.previous.version]
            if entries:
                params += [getattr(entries[0], c) for c in AUDIT_COLUMNS]
        else:
            values = _values_of(columns)
            rows = [
                [d.job.id, d.previous.version if d.previous is not None else None, *values(d.job)]
                for d in decisions
            ]
            varying, params = _batch_params(rows)
            if entries:
                audit_varying, audit_params = _batch_params([_audit_values(e) for e in entries])
                varying += audit_varying
                params += audit_params
            statement = self.sql.apply_changed(
                columns, batch=True, audited=audited, varying=varying
            )
            return statement, params
        statement = self.sql.apply_changed(columns, batch=False, audited=audited)
        return statement, params

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
            with self.connection("apply (versions)") as conn:
                current = dict(conn.execute(self.sql.versions, (lost,)).fetchall())
        return outcomes(decisions, written, current)

    def _apply_in_order(self, decisions: Sequence[Decision]) -> list[Job | VersionConflict]:
        """Several decisions for one job: apply them one by one in one transaction."""
        out: list[Job | VersionConflict] = []
        lost: psycopg.Error | None = None
        applied: list[Decision] = []
        with self.connection("apply") as conn:
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
        if not applied or self._confirmed(applied, "apply", lost):
            return out  # all conflicts (nothing to commit), or the commit went through
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
            with self.connection("renew (reconcile)") as conn:
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

    def save_progress(self, request: ProgressRequest) -> list[str]:
        if not request.items or not request.states:
            return []
        ids = list(request.items)
        params = [
            ids,
            [request.items[i][0] for i in ids],
            [request.items[i][1] for i in ids],
            owner_to_text(request.owner),
            list(request.states),
        ]

        def body(conn: Conn) -> list[str]:
            return [r[0] for r in conn.execute(self.sql.save_progress, params).fetchall()]

        def reconcile() -> list[str]:
            with self.connection("save_progress (reconcile)") as conn:
                rows = [_job(r) for r in conn.execute(self.sql.get_many, (ids,)).fetchall()]
            return [j.id for j in rows if j.progress_json == request.items[j.id][1]]

        return self._write("save_progress", body, reconcile)

    def record(self, entries: Sequence[AuditEntry]) -> None:
        check_storable((), entries)
        entries = first_rejections(entries)  # a repeated rejected report: recorded once
        if not entries:
            return
        params = _audit_arrays(entries)

        def body(conn: Conn) -> None:
            conn.execute(self.sql.record, params)

        def reconcile() -> None:
            with self.connection("record (reconcile)") as conn:
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
        statement, params = self._scan_statement(request)
        with self.connection("scan") as conn:
            return [_job(r) for r in conn.execute(statement, params).fetchall()]

    def _scan_statement(self, request: ScanRequest) -> tuple[str, dict[str, Any]]:
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
        return statement, params

    def history(self, job_id: str) -> list[AuditEntry]:
        with self.connection("history") as conn:
            return [_entry(r) for r in conn.execute(self.sql.history, (job_id,)).fetchall()]

    def counts(self) -> dict[tuple[str, str], int]:
        with self.connection("counts") as conn:
            return {(q, s): int(n) for q, s, n in conn.execute(self.sql.counts).fetchall()}

    def prune(self, request: PruneRequest) -> int:
        """Delete one batch (at most `request.limit` jobs, oldest `seq` first).

        Called again with the same request object, as `Engine.prune` does batch after
        batch, it goes on after the last job it deleted rather than from the start: a
        delete leaves its index entries behind until VACUUM, so a scan from the start
        walks every job deleted before it, and a prune of n jobs in batches would cost
        O(n^2) (9M jobs: 6 minutes more). What an earlier batch of the same request
        passed over (kept, held, locked by another transaction) is for the next request.
        """
        states = tuple(request.cutoffs)
        if not states or request.limit < 1:
            return 0
        if request.queues is not None and not request.queues:
            return 0
        statement = self.sql.prune(
            states, request.queues is not None, bool(request.other_than), request.held_by
        )
        params: list[Any] = [*(request.cutoffs[s] for s in states)]
        if request.queues is not None:
            params.append(list(request.queues))
        if request.other_than:
            params.append(list(request.other_than))
        resume = self._prune_resume
        after = resume[1] if resume is not None and resume[0]() is request else 0
        params += [after, request.limit]

        def body(conn: Conn) -> int:
            row = conn.execute(statement, params).fetchone()
            if row is None or not row[0]:
                return 0
            self._prune_resume = (weakref.ref(request), int(row[1]))
            return int(row[0])

        def reconcile() -> int:
            raise TransientStoreError(
                "prune: the connection was lost while it ran; how many jobs it removed is "
                "unknown. Prune again (it only removes what is past retention)."
            )

        return self._write("prune", body, reconcile)

    # --- wake-ups ----------------------------------------------------------------------

    def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> bool:
        """Block until a job is inserted into one of `queues` (True) or `timeout` passes.

        A hint only (LISTEN/NOTIFY, see adapters.postgres.listen): poll the store anyway.
        """
        return self._listener.wait(queues, timeout)

    def async_store(self) -> AsyncPostgresStore:
        """`fsm.ports.HasAsyncStore`: this store's twin on psycopg's async pool (not yet
        open: `await twin.open()` on the loop that uses it)."""
        return AsyncPostgresStore(self)

    def watch(self, job_id: str, changed: Callable[[], None]) -> Callable[[], None]:
        """`fsm.ports.WatchesJobs`: wakes `Engine.wait` (adapters.postgres.waiting)."""
        return self._finals.watch(job_id, changed)

    def pause_queue(self, pause: QueuePause) -> None:
        table = f"{_schema.quote(self.schema)}.queue_pauses"
        with self.connection("pause queue") as conn:
            conn.execute(
                f"INSERT INTO {table} VALUES (%s, %s, %s, %s) ON CONFLICT (queue) DO UPDATE "
                "SET actor = excluded.actor, reason = excluded.reason, at = excluded.at",
                (pause.queue, pause.actor, pause.reason, pause.at),
            )

    def resume_queue(self, queue: str) -> bool:
        table = f"{_schema.quote(self.schema)}.queue_pauses"
        with self.connection("resume queue") as conn:
            return conn.execute(f"DELETE FROM {table} WHERE queue = %s", (queue,)).rowcount > 0

    def paused_queues(self) -> dict[str, QueuePause]:
        table = f"{_schema.quote(self.schema)}.queue_pauses"
        with self.connection("paused queues") as conn:
            rows = conn.execute(f"SELECT queue, actor, reason, at FROM {table}").fetchall()
        return {r[0]: QueuePause(*r) for r in rows}

    def drop_schema(self) -> None:
        """Remove everything jobfsm created: its tables (with their indexes and
        sequences), then the schema unless it is `public` or holds anything else.
        Closes the store. Call it when no other process uses the schema."""
        self.liveness.close()
        self._listener.close()
        self._finals.close()
        with self.connect() as conn:
            try:
                drop_trigger(conn, self.schema)
                _schema.drop(conn, self.schema)
            except psycopg.Error as err:
                raise self._translate(err, "drop schema") from err
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.liveness.close()
        self._listener.close()
        self._finals.close()
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
