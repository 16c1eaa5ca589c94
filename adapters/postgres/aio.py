"""AsyncPostgresStore: the PostgreSQL store for asyncio code, on psycopg's
`AsyncConnection` and `psycopg_pool.AsyncConnectionPool`.

It is the twin of one `PostgresStore` (`PostgresStore.async_store()`) and holds no
store logic of its own: each operation is the blocking store's own plan (`ops`,
`inserts`, `txn`: statements, checks, the unknown-commit rule, error translation),
driven here with `await` (`run`, `perform`) instead of a blocked thread. It serves
`fsm.service.aio.AsyncEngine` (submit, reads, operator actions); the worker's claim,
renew and prune stay on the blocking store.

Bounds: at most `pool_max` connections (the URL's, as for the blocking store, and
in addition to it; none before the first call unless `pool_min` says so),
`pool_timeout` seconds to wait for one. An AsyncEngine lives on one event loop: the
pool is opened on the loop of its first call and closed by `aclose`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, nullcontext
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from fsm.errors import StoreError, VersionConflict
from fsm.ports import Capacity, ScanRequest
from fsm.records import AuditEntry, Decision, Job

from . import inserts, ops, txn
from .plan import (
    Backend,
    Broken,
    Copy,
    Done,
    Fresh,
    Pipeline,
    Plan,
    Request,
    Run,
    RunMany,
    Target,
    advance,
)
from .plan import translate as translated

log = logging.getLogger(__name__)

T = TypeVar("T")


async def perform(conn: Any, request: Request) -> Any:
    """Carry one request of a plan out on an asyncio connection; its answer (the twin
    of `_base.perform`)."""
    if isinstance(request, Run):
        cur = await conn.execute(request.sql, request.params)
        return await cur.fetchall() if request.fetch else None
    if isinstance(request, Broken):
        return conn.broken
    if isinstance(request, Backend):
        return conn.info.backend_pid
    if isinstance(request, Pipeline):
        async with conn.pipeline():
            sent = [(r.fetch, await conn.execute(r.sql, r.params)) for r in request.runs]
        return [await c.fetchall() if fetch else None for fetch, c in sent]
    if isinstance(request, RunMany):
        async with conn.cursor() as cur:
            await cur.executemany(request.sql, request.params)
        return None
    assert isinstance(request, Copy), request  # Fresh never reaches a connection
    async with conn.cursor() as cur, cur.copy(request.sql) as copy:
        for row in request.rows:
            await copy.write_row(row)
    return None


class AsyncPostgresStore:
    """`fsm.ports.AsyncStore` on PostgreSQL: jobs and audit of one `PostgresStore`'s
    schema (`target`); `fingerprint`: that store's, for `insert_in`."""

    def __init__(self, target: Target, fingerprint: tuple[Any, ...]) -> None:
        self.target = target
        self.fingerprint = fingerprint
        self.settings = settings = target.settings
        self.pool = AsyncConnectionPool(
            settings.conninfo, **settings.pool_options(f"jobfsm-async-{settings.schema}")
        )
        self.gate = asyncio.Semaphore(settings.pool_max)
        self.closed = False

    async def open(self) -> None:
        """Open the pool on the running loop (connections are made in the background)."""
        await self.pool.open(wait=False)

    async def aclose(self) -> None:
        """Close the pool and every connection it holds (idempotent)."""
        if not self.closed:
            self.closed = True
            await self.pool.close()

    @asynccontextmanager
    async def connection(self, what: str) -> AsyncIterator[Any]:
        if self.closed:
            raise StoreError(f"PostgreSQL store {self.settings.redacted} is closed ({what})")
        # A turn first: at most `pool_max` calls ask the pool at once, the others queue
        # on a Semaphore, in order (far cheaper for the loop than the pool's own waiting
        # list when thousands of calls arrive together). `pool_timeout` bounds both waits.
        loop = asyncio.get_running_loop()
        timeout = self.settings.pool_timeout
        deadline = loop.time() + timeout
        try:
            if self.gate.locked():
                try:
                    async with asyncio.timeout(timeout):
                        await self.gate.acquire()
                except TimeoutError:
                    raise PoolTimeout(f"waited {timeout} s for a turn at the pool") from None
            else:
                await self.gate.acquire()  # a turn is free: taken at once, no timer
            try:
                async with self.pool.connection(max(0.0, deadline - loop.time())) as conn:
                    yield conn
            finally:
                self.gate.release()
        except (psycopg.Error, PoolTimeout) as err:
            if isinstance(err, psycopg.OperationalError | PoolTimeout):
                await self.purge()
            raise translated(self.settings, err, what) from err

    async def purge(self) -> None:
        """After a connection failure, drop the pool's other dead connections too."""
        try:
            await self.pool.check()
        except Exception:  # best effort; the next call reports the real error
            log.debug("pool check after a connection failure failed", exc_info=True)

    async def run(self, plan: Plan[T], what: str, conn: Any = None) -> T:
        """Drive `plan` on a pooled connection (a fresh one after a `Fresh`), or on the
        caller's `conn`. The asyncio twin of `Connected.run`."""
        step = advance(plan)  # a plan that asks for nothing takes no connection
        while not isinstance(step, Done):
            if isinstance(step, Fresh):
                what = step.what
                await self.purge()
                step = advance(plan)
                continue
            request: Any = step
            use = self.connection(what) if conn is None else nullcontext(txn.TupleRows(conn))
            async with use as c:
                try:
                    while type(request) is not Fresh:
                        try:
                            answer = await perform(c, request)
                        except BaseException as err:  # cancellation too: the plan rolls back
                            request = plan.throw(err)
                        else:
                            request = plan.send(answer)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
            step = request
        return step.value  # type: ignore[no-any-return]

    # --- AsyncStore: the blocking store's plans, awaited --------------------------------

    async def insert(
        self, decisions: Sequence[Decision], capacity: Capacity | None = None
    ) -> list[Job]:
        return await self.run(inserts.insert(self.target, decisions, capacity), "insert")

    async def insert_in(
        self, conn: object, decisions: Sequence[Decision], capacity: Capacity | None = None
    ) -> list[Job]:
        """`JoinsTransactions.insert_in` on the caller's `psycopg.AsyncConnection`."""
        caller = txn.joinable(conn, psycopg.AsyncConnection)
        plan = txn.insert_in(self.target, decisions, capacity, self.fingerprint)
        return await self.run(plan, "insert in the caller's transaction", caller)

    async def get(self, job_id: str) -> Job | None:
        return await self.run(ops.get(self.target, job_id), "get")

    async def apply(self, decisions: Sequence[Decision]) -> list[Job | VersionConflict]:
        return await self.run(ops.apply(self.target, decisions), "apply")

    async def erase(self, decision: Decision) -> Job | VersionConflict:
        return await self.run(ops.erase(self.target, decision), "erase")

    async def record(self, entries: Sequence[AuditEntry]) -> None:
        await self.run(ops.record(self.target, entries), "record")

    async def scan(self, request: ScanRequest) -> list[Job]:
        return await self.run(ops.scan(self.target, request), "scan")

    async def history(self, job_id: str) -> list[AuditEntry]:
        return await self.run(ops.history(self.target, job_id), "history")

    async def counts(self) -> dict[tuple[str, str], int]:
        return await self.run(ops.counts(self.target), "counts")
