"""AsyncPostgresStore: the PostgreSQL store for asyncio code, on psycopg's
`AsyncConnection` and `psycopg_pool.AsyncConnectionPool`.

It is the twin of one `PostgresStore` (`PostgresStore.async_store()`): the same
schema and statements (`Statements`), the same parameter building and row
conversion, the same insert rounds (`insert_rounds`), the same error edge
(`_translate`). Only the waiting differs: a call awaits the server instead of
holding a thread. It serves `fsm.aio.AsyncEngine` (submit, reads, operator
actions); the worker's claim, renew and prune stay on the blocking store.

Bounds: at most `pool_max` connections (the URL's, as for the blocking store, and
in addition to it), `pool_timeout` seconds to wait for one. An AsyncEngine lives on
one event loop: the pool is opened on the loop of its first call and closed by
`aclose`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from adapters._rows import check_storable, first_rejections
from fsm.errors import BadInput, JobFSMError, StoreError, TransientStoreError, VersionConflict
from fsm.lifecycle.core import erased_data_json
from fsm.ports import Capacity, ScanRequest
from fsm.records import AuditEntry, Decision, Job
from fsm.steps import adrive

from . import txn
from ._base import _audit_arrays, _entry, _job, check_apply, outcomes
from ._insert import CappedInsert, InsertRequest, existing_by_key, insert_rounds, insert_statement

if TYPE_CHECKING:
    from .store import PostgresStore

log = logging.getLogger(__name__)

AConn = psycopg.AsyncConnection[tuple[Any, ...]]
T = TypeVar("T")


class AsyncPostgresStore:
    """`fsm.ports.AsyncStore` on PostgreSQL: jobs and audit of one `PostgresStore`'s schema."""

    def __init__(self, twin: PostgresStore) -> None:
        self.twin = twin
        self.settings = settings = twin.settings
        self.sql = twin.sql
        self.channel = twin.channel
        self.pool = AsyncConnectionPool(
            settings.conninfo, **settings.pool_options(f"jobfsm-async-{settings.schema}")
        )
        self._gate = asyncio.Semaphore(settings.pool_max)
        self._closed = False

    async def open(self) -> None:
        """Open the pool on the running loop (connections are made in the background)."""
        await self.pool.open(wait=False)

    async def aclose(self) -> None:
        """Close the pool and every connection it holds (idempotent)."""
        if self._closed:
            return
        self._closed = True
        await self.pool.close()

    # --- connections and errors ------------------------------------------------------

    @asynccontextmanager
    async def connection(self, what: str) -> AsyncIterator[AConn]:
        if self._closed:
            raise StoreError(f"PostgreSQL store {self.settings.redacted} is closed ({what})")
        # A turn first: at most `pool_max` calls ask the pool at once, the others queue
        # on a Semaphore, in order (far cheaper for the loop than the pool's own waiting
        # list when thousands of calls arrive together). `pool_timeout` bounds both waits.
        loop = asyncio.get_running_loop()
        timeout = self.settings.pool_timeout
        deadline = loop.time() + timeout
        try:
            if self._gate.locked():
                try:
                    async with asyncio.timeout(timeout):
                        await self._gate.acquire()
                except TimeoutError:
                    raise PoolTimeout(f"waited {timeout} s for a turn at the pool") from None
            else:
                await self._gate.acquire()  # a turn is free: taken at once, no timer
            try:
                async with self.pool.connection(max(0.0, deadline - loop.time())) as conn:
                    yield conn
            finally:
                self._gate.release()
        except (psycopg.Error, PoolTimeout) as err:
            if isinstance(err, psycopg.OperationalError | PoolTimeout):
                await self._purge()
            raise self.twin._translate(err, what) from err

    async def _purge(self) -> None:
        try:
            await self.pool.check()
        except Exception:  # best effort; the next call reports the real error
            log.debug("pool check after a connection failure failed", exc_info=True)

    async def _write(
        self,
        what: str,
        body: Callable[[AConn], Awaitable[T]],
        reconcile: Callable[[], Awaitable[T]],
    ) -> T:
        """`Connected._write`, awaited: a write whose connection broke while it ran is
        reconciled from a fresh connection, never assumed."""
        lost: psycopg.Error | None = None
        async with self.connection(what) as conn:
            try:
                return await body(conn)
            except psycopg.OperationalError as err:
                if not conn.broken:
                    raise
                lost = err
        await self._purge()
        log.warning("connection lost during %s; reconciling from a fresh connection", what)
        try:
            return await reconcile()
        except TransientStoreError:
            raise
        except StoreError as err:
            raise TransientStoreError(f"{what}: commit unknown and re-reading failed: {err}") from (
                lost
            )

    async def _confirmed(self, decisions: Sequence[Decision], what: str) -> set[str]:
        """Ids whose decision shows in the store (row equal to it, or its audit entry)."""
        ids = [d.job.id for d in decisions]
        async with self.connection(f"{what} (reconcile)") as conn:
            rows = await (await conn.execute(self.sql.get_many, (ids,))).fetchall()
            stored = {_job(r).id: _job(r) for r in rows}
            confirmed = set()
            for d in decisions:
                if stored.get(d.job.id) == d.job:
                    confirmed.add(d.job.id)
                elif (e := d.entry) is not None:
                    cur = await conn.execute(
                        self.sql.has_entry,
                        (e.job_id, e.version, e.at, e.event, e.fence, e.data_json),
                    )
                    row = await cur.fetchone()
                    if row is not None and row[0] > 0:
                        confirmed.add(d.job.id)
        return confirmed

    async def _confirm(self, decisions: Sequence[Decision], what: str) -> set[str]:
        confirmed = await self._confirmed(decisions, what)
        if not confirmed:
            raise self.twin._unknown(f"{what} of {len(decisions)} decisions")
        return confirmed

    # --- AsyncStore --------------------------------------------------------------------

    async def insert(
        self, decisions: Sequence[Decision], capacity: Capacity | None = None
    ) -> list[Job]:
        """`Store.insert`: the same rounds (`insert_rounds`) and statements, awaited."""

        async def perform(request: InsertRequest) -> Any:
            what, batch, capped = request
            if what == "insert":
                return await self._insert_once(batch, capped)
            return await self._existing(batch)

        return await adrive(insert_rounds(decisions, capacity), perform)

    async def _insert_once(
        self, decisions: Sequence[Decision], capacity: Capacity | None
    ) -> set[str]:
        if capacity is not None or any(d.prerequisites for d in decisions):
            return await self._insert_capped(decisions, capacity)
        statement, params = insert_statement(self.sql, decisions, self.channel)

        async def body(conn: AConn) -> set[str]:
            cur = await conn.execute(statement, params)
            return {r[0] for r in await cur.fetchall()}

        async def reconcile() -> set[str]:
            return await self._reconcile_insert(decisions)

        return await self._write("insert", body, reconcile)

    async def _insert_capped(
        self, decisions: Sequence[Decision], capacity: Capacity | None
    ) -> set[str]:
        """`Inserts._insert_capped`: `CappedInsert` in one transaction and one round
        trip; over a limit or with an unknown prerequisite, ROLLBACK and the error."""
        plan = CappedInsert(self.sql, self.settings.schema, self.channel, decisions, capacity)
        async with self.connection("insert") as conn:
            try:
                async with conn.pipeline():  # one round trip: BEGIN, locks, insert, counts
                    await conn.execute("BEGIN")
                    cursors = [await conn.execute(sql, params) for sql, params in plan.statements]
                ids = plan.check([await c.fetchall() for c in cursors])
                for sql, params in plan.after(ids):
                    await conn.execute(sql, params)
            except BaseException:
                await _rollback(conn)
                raise
            try:
                await conn.execute("COMMIT")
            except psycopg.Error:
                if not conn.broken:
                    await _rollback(conn)
                    raise
            else:
                return ids
        await self._purge()
        log.warning("connection lost while committing an insert; reconciling")
        return await self._reconcile_insert(decisions)

    async def insert_in(
        self, conn: object, decisions: Sequence[Decision], capacity: Capacity | None = None
    ) -> list[Job]:
        """`JoinsTransactions.insert_in` on the caller's `psycopg.AsyncConnection`: the
        same checks (`txn.refuse_state`, `same_store`) and statements (`CappedInsert`) as
        the blocking store's, in a savepoint of the caller's transaction; never commits."""
        if not decisions:
            return []
        check_storable((d.job for d in decisions), (d.entry for d in decisions))
        caller = await self._joinable(conn)
        plan = CappedInsert(self.sql, self.settings.schema, self.channel, decisions, capacity)
        stored: list[Any] = []
        try:
            async with caller.transaction():  # a savepoint in the caller's transaction
                cur = caller.cursor(row_factory=tuple_row)
                rows = []
                for sql, params in plan.statements:
                    await cur.execute(sql, params)
                    rows.append(await cur.fetchall())
                ids = plan.check(rows)
                for sql, params in plan.after(ids):
                    await cur.execute(sql, params)
                keys, others = txn.missing_twins(decisions, ids)
                if others:
                    await cur.execute(self.sql.by_key, (keys, others))
                    stored = await cur.fetchall()
        except JobFSMError:
            raise
        except psycopg.Error as err:
            raise self.twin._translate(err, "insert in the caller's transaction") from err
        return txn.joined(decisions, ids, stored)

    async def _joinable(self, conn: object) -> psycopg.AsyncConnection[Any]:
        """`conn` if it is an open AsyncConnection to this store's database and schema
        with a transaction to join (one is begun if the connection is not autocommit)."""
        if not isinstance(conn, psycopg.AsyncConnection):
            raise BadInput(
                "conn= of a transactional submit: the asyncio path needs a "
                f"psycopg.AsyncConnection, got {type(conn).__name__}"
            )
        txn.refuse_state(conn.closed or conn.broken, conn.info.transaction_status, conn.autocommit)
        try:  # on a non-autocommit connection this begins the transaction the insert joins
            cur = conn.cursor(row_factory=tuple_row)
            await cur.execute(txn.FINGERPRINT, (self.twin.jobs_table,))
            theirs = await cur.fetchone()
        except psycopg.Error as err:
            raise self.twin._translate(err, "check the caller's connection") from err
        await asyncio.to_thread(self.twin.same_store, theirs)  # the store's own, once
        return conn

    async def _reconcile_insert(self, decisions: Sequence[Decision]) -> set[str]:
        ids = [d.job.id for d in decisions]
        async with self.connection("insert (reconcile)") as conn:
            rows = await (await conn.execute(self.sql.get_many, (ids,))).fetchall()
        stored = {_job(r).id: _job(r) for r in rows}
        mine = {d.job.id for d in decisions if stored.get(d.job.id) == d.job}
        if not mine:
            raise self.twin._unknown(f"insert of {len(ids)} jobs")
        return mine

    async def _existing(self, decisions: Sequence[Decision]) -> dict[tuple[str, str | None], Job]:
        keys = [d.job.idempotency_key for d in decisions if d.job.idempotency_key is not None]
        ids = [d.job.id for d in decisions]
        async with self.connection("insert (existing keys)") as conn:
            rows = await (await conn.execute(self.sql.by_key, (keys, ids))).fetchall()
        return existing_by_key(rows)

    async def get(self, job_id: str) -> Job | None:
        async with self.connection("get") as conn:
            row = await (await conn.execute(self.sql.get, (job_id,))).fetchone()
        return None if row is None else _job(row)

    async def apply(self, decisions: Sequence[Decision]) -> list[Job | VersionConflict]:
        """`Store.apply`: compare-and-set on the version and the audit entries, in one
        statement (the blocking store's, `PostgresStore._apply_statement`)."""
        if not decisions:
            return []
        if check_apply(decisions):
            out: list[Job | VersionConflict] = []
            for d in decisions:  # several decisions for one job: each after the last
                out += await self.apply([d])
            return out
        statement, params = self.twin._apply_statement(decisions)

        async def body(conn: AConn) -> set[str]:
            return {r[0] for r in await (await conn.execute(statement, params)).fetchall()}

        async def reconcile() -> set[str]:
            return await self._confirm(decisions, "apply")

        return await self._outcomes(decisions, await self._write("apply", body, reconcile))

    async def _outcomes(
        self, decisions: Sequence[Decision], written: set[str]
    ) -> list[Job | VersionConflict]:
        lost = [d.job.id for d in decisions if d.job.id not in written]
        current: dict[str, int] = {}
        if lost:
            async with self.connection("apply (versions)") as conn:
                current = dict(await (await conn.execute(self.sql.versions, (lost,))).fetchall())
        return outcomes(decisions, written, current)

    async def erase(self, decision: Decision) -> Job | VersionConflict:
        """`Erasable.erase`: the apply and the rewrite of the trail in one transaction."""
        if decision.previous is None:
            raise BadInput(f"job {decision.job.id}: erase needs a decision on an existing job")
        check_storable([decision.job], [decision.entry])
        job_id = decision.job.id
        statement, params = self.twin._apply_statement([decision])

        async def body(conn: AConn) -> set[str]:
            async with conn.transaction():
                cur = await conn.execute(statement, params)
                written = {r[0] for r in await cur.fetchall()}
                if job_id in written:
                    cur = await conn.execute(self.sql.trail_data, (job_id,))
                    rows = await cur.fetchall()
                    async with conn.cursor() as each:
                        await each.executemany(
                            self.sql.erase_entry,
                            [(erased_data_json(text), job_id, seq) for seq, text in rows],
                        )
            return written

        async def reconcile() -> set[str]:
            return await self._confirm([decision], "erase")

        written = await self._write("erase", body, reconcile)
        (outcome,) = await self._outcomes([decision], written)
        return outcome

    async def record(self, entries: Sequence[AuditEntry]) -> None:
        check_storable((), entries)
        entries = first_rejections(entries)  # a repeated rejected report: recorded once
        if not entries:
            return
        params = _audit_arrays(entries)

        async def body(conn: AConn) -> None:
            await conn.execute(self.sql.record, params)

        async def reconcile() -> None:
            async with self.connection("record (reconcile)") as conn:
                for e in entries:
                    cur = await conn.execute(
                        self.sql.has_entry,
                        (e.job_id, e.version, e.at, e.event, e.fence, e.data_json),
                    )
                    row = await cur.fetchone()
                    if row is not None and row[0] > 0:
                        return
            raise self.twin._unknown(f"recording {len(entries)} audit entries")

        await self._write("record", body, reconcile)

    async def history(self, job_id: str) -> list[AuditEntry]:
        async with self.connection("history") as conn:
            rows = await (await conn.execute(self.sql.history, (job_id,))).fetchall()
        return [_entry(r) for r in rows]

    async def counts(self) -> dict[tuple[str, str], int]:
        async with self.connection("counts") as conn:
            rows = await (await conn.execute(self.sql.counts)).fetchall()
        return {(q, s): int(n) for q, s, n in rows}

    async def scan(self, request: ScanRequest) -> list[Job]:
        if not request.states or request.limit < 1:
            return []
        statement, params = self.twin._scan_statement(request)
        async with self.connection("scan") as conn:
            rows = await (await conn.execute(statement, params)).fetchall()
        return [_job(r) for r in rows]


async def _rollback(conn: AConn) -> None:
    if conn.broken or conn.closed:
        return
    try:
        await conn.execute("ROLLBACK")
    except psycopg.Error:
        log.debug("ROLLBACK after an error failed", exc_info=True)
