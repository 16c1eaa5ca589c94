"""PostgresStore: the jobfsm Store on PostgreSQL (psycopg 3 + a bounded connection pool).

Every read and write but the claim is a plan (`adapters.postgres.ops`, `inserts`, `txn`),
written once and driven here on psycopg's blocking pool (`Connected.run`) and by the
asyncio twin (`AsyncPostgresStore`, `async_store`) on its asyncio pool. Most writes are
one statement in autocommit mode (CAS on `version` plus the audit entries, in
data-modifying CTEs). Claim (`claim.PostgresClaims`) is one lease statement in a
transaction that checks the lease against the core's decision before it commits;
large keyless insert batches are COPYed in one transaction. Connection trouble
surfaces as TransientStoreError; a write whose commit may or may not have happened
(the connection broke while it ran) is reconciled by re-reading the rows from a fresh
connection, never by assuming (`plan.write`).
"""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from fsm.errors import VersionConflict
from fsm.ports import (
    Capacity,
    ProgressRequest,
    PruneRequest,
    QueuePause,
    RenewRequest,
    ScanRequest,
)
from fsm.records import AuditEntry, Decision, Job

from . import inserts, migrations, ops, txn
from ._url import Settings
from .aio import AsyncPostgresStore
from .browse import PostgresBrowse
from .claim import CLAIM_ROUNDS, PostgresClaims
from .deps import PostgresDependencies
from .history import PostgresHistory
from .inserts import COPY_MIN, INSERT_ROUNDS
from .listen import Listener
from .liveness import PostgresLiveness
from .plan import translate
from .schedules import PostgresSchedules
from .services import PostgresServices
from .waiting import FinalStates, drop_trigger

log = logging.getLogger(__name__)

__all__ = ["CLAIM_ROUNDS", "COPY_MIN", "INSERT_ROUNDS", "PostgresStore"]


class PostgresStore(
    PostgresClaims,
    PostgresSchedules,
    PostgresServices,
    PostgresBrowse,
    PostgresHistory,
    PostgresDependencies,
):
    """Jobs in `<schema>.jobs`, their audit trail in `<schema>.job_events`.

    Thread-safe: each call borrows a connection from a bounded pool
    (`pool_max`, default 2, opened on first use; waiting for one is bounded by
    `pool_timeout`). What a process holds in all: `adapters.postgres.budget`.
    """

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.channel = self.target.channel
        self._listener = Listener(functools.partial(self.connect, "listen"), self.channel)
        self._finals = FinalStates(
            functools.partial(self.connect, "wait"), self.schema, f"{self.channel}_final"
        )
        self.liveness = PostgresLiveness(self)
        #: (the last prune request, the seq of the last job it deleted): see `prune`
        self._prune_resume: tuple[weakref.ref[PruneRequest], int] | None = None

    # --- Store: each a plan, driven on the blocking pool -------------------------------

    def insert(self, decisions: Sequence[Decision], capacity: Capacity | None = None) -> list[Job]:
        return self.run(inserts.insert(self.target, decisions, capacity), "insert")

    def insert_in(
        self, conn: object, decisions: Sequence[Decision], capacity: Capacity | None = None
    ) -> list[Job]:
        """`fsm.ports.JoinsTransactions`: insert in the caller's open transaction on a
        `psycopg.Connection` (see `txn`); never commits."""
        caller = txn.joinable(conn, psycopg.Connection)
        plan = txn.insert_in(self.target, decisions, capacity, self.fingerprint)
        return self.run(plan, "insert in the caller's transaction", caller)

    def get(self, job_id: str) -> Job | None:
        return self.run(ops.get(self.target, job_id), "get")

    def apply(self, decisions: Sequence[Decision]) -> list[Job | VersionConflict]:
        return self.run(ops.apply(self.target, decisions), "apply")

    def erase(self, decision: Decision) -> Job | VersionConflict:
        return self.run(ops.erase(self.target, decision), "erase")

    def record(self, entries: Sequence[AuditEntry]) -> None:
        self.run(ops.record(self.target, entries), "record")

    def scan(self, request: ScanRequest) -> list[Job]:
        return self.run(ops.scan(self.target, request), "scan")

    def history(self, job_id: str) -> list[AuditEntry]:
        return self.run(ops.history(self.target, job_id), "history")

    def counts(self) -> dict[tuple[str, str], int]:
        return self.run(ops.counts(self.target), "counts")

    def renew(self, request: RenewRequest) -> dict[str, str]:
        return self.run(ops.renew(self.target, request), "renew")

    def save_progress(self, request: ProgressRequest) -> list[str]:
        return self.run(ops.save_progress(self.target, request), "save_progress")

    def prune(self, request: PruneRequest) -> int:
        return sum(self.prune_counts(request).values())

    def prune_counts(self, request: PruneRequest) -> dict[tuple[str, str], int]:
        """`fsm.ports.CountsPrunes`: delete one batch (at most `request.limit` jobs,
        oldest `seq` first); (queue, state) -> jobs deleted.

        Called again with the same request object, as `Engine.prune` does batch after
        batch, it goes on after the last job it deleted rather than from the start: a
        delete leaves its index entries behind until VACUUM, so a scan from the start
        walks every job deleted before it, and a prune of n jobs in batches would cost
        O(n^2) (9M jobs: 6 minutes more). What an earlier batch of the same request
        passed over (kept, held, locked by another transaction) is for the next request.
        """
        states = tuple(request.cutoffs)
        if not states or request.limit < 1:
            return {}
        if request.queues is not None and not request.queues:
            return {}
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
        deleted, last = self.run(ops.prune(self.target, statement, params), "prune")
        if deleted:
            self._prune_resume = (weakref.ref(request), last)
        return deleted

    # --- wake-ups ----------------------------------------------------------------------

    def wait_for_jobs(self, queues: Sequence[str], timeout: float) -> bool:
        """Block until a job is inserted into one of `queues` (True) or `timeout` passes.

        A hint only (LISTEN/NOTIFY, see adapters.postgres.listen): poll the store anyway.
        """
        return self._listener.wait(queues, timeout)

    def async_store(self) -> AsyncPostgresStore:
        """`fsm.ports.HasAsyncStore`: this store's twin on psycopg's async pool (not yet
        open: `await twin.open()` on the loop that uses it)."""
        return AsyncPostgresStore(self.target, self.fingerprint)

    @property
    def finals(self) -> FinalStates:
        """The listener of final states behind `watch` (its own connection and thread)."""
        return self._finals

    def watch(self, job_id: str, changed: Callable[[], None]) -> Callable[[], None]:
        """`fsm.ports.WatchesJobs`: wakes `Engine.wait` (adapters.postgres.waiting)."""
        return self._finals.watch(job_id, changed)

    def pause_queue(self, pause: QueuePause) -> None:
        table = f"{migrations.quote(self.schema)}.queue_pauses"
        with self.connection("pause queue") as conn:
            conn.execute(
                f"INSERT INTO {table} VALUES (%s, %s, %s, %s) ON CONFLICT (queue) DO UPDATE "
                "SET actor = excluded.actor, reason = excluded.reason, at = excluded.at",
                (pause.queue, pause.actor, pause.reason, pause.at),
            )

    def resume_queue(self, queue: str) -> bool:
        table = f"{migrations.quote(self.schema)}.queue_pauses"
        with self.connection("resume queue") as conn:
            return conn.execute(f"DELETE FROM {table} WHERE queue = %s", (queue,)).rowcount > 0

    def paused_queues(self) -> dict[str, QueuePause]:
        table = f"{migrations.quote(self.schema)}.queue_pauses"
        with self.connection("paused queues") as conn:
            rows = conn.execute(f"SELECT queue, actor, reason, at FROM {table}").fetchall()
        return {r[0]: QueuePause(*r) for r in rows}

    def drop_schema(self) -> tuple[str, ...]:
        """Remove everything jobfsm created: its tables (with their indexes and
        sequences), then the schema unless it is `public` or holds anything else.
        Returns the names of what is left in the schema (empty when it is gone).
        Closes the store. Call it when no other process uses the schema."""
        self.liveness.close()
        self._listener.close()
        self._finals.close()
        with self.connect() as conn:
            try:
                drop_trigger(conn, self.schema)
                left = migrations.drop(conn, self.schema)
            except psycopg.Error as err:
                raise translate(self.settings, err, "drop schema") from err
        self.close()
        return left

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.liveness.close()
        self._listener.close()
        self._finals.close()
        self.close_pool()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
