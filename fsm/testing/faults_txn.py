"""The `transactions` fault model: a submit in the caller's transaction, which then
commits, rolls back or is dropped.

`Engine.submit(..., conn=...)` writes the job and its audit entry on the caller's
connection, inside the caller's transaction, and never commits
(docs/transactional-submit.md). The caller's connection is a driver connection
(sqlite3, psycopg) or a SQLAlchemy `Session` or `Connection`, and on the
`AsyncEngine` a psycopg `AsyncConnection`, a SQLAlchemy `AsyncSession` or
`AsyncConnection` (unwrapped by `fsm.service.connections`). Each example opens a
fresh database, and each of its steps opens a caller connection of a drawn kind,
writes a row of its own, submits one to three jobs on it (some with an idempotency
key already used), and then commits, rolls back, or closes the connection without
committing (a caller that died mid-transaction).

Promises, read back from the store after every step:

- J1 the jobs of a committed transaction exist, each with its applied audit entry,
  and the caller's row with them; those of a rolled-back or dropped one do not,
  and neither does the row (both or neither);
- J2 while the caller's transaction is open, the store's own handle does not see
  its jobs.

Needs a store that joins transactions (`fsm.ports.JoinsTransactions`) and whose
adapter offers a caller's connections (the `jobfsm.caller_connections` entry points:
SQLite and PostgreSQL). The SQLAlchemy kinds need SQLAlchemy
(not a dependency of jobfsm: without it they are left out and a note says so); the
asyncio kinds need PostgreSQL. A memory store is reported as not exercised.
"""

from __future__ import annotations

import asyncio
import uuid
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Protocol

from hypothesis import given
from hypothesis import strategies as st

from ..clock import FakeClock
from ..errors import TransientStoreError
from ..inputs import KindPolicy
from ..ports import JoinsTransactions
from ..registry import offered
from ..service.aio import AsyncEngine
from ..service.engine import Engine
from .faults_machine import suite_policy
from .faults_models import ModelRun

#: how the caller holds its transaction (the `async ...` kinds go through AsyncEngine)
VIAS = ("driver", "session", "connection", "async driver", "async session", "async connection")
ENDINGS = ("commit", "rollback", "drop")


def _sqlalchemy() -> Any:
    try:
        import sqlalchemy
    except ModuleNotFoundError:
        return None
    return sqlalchemy


class TransactionsModel:
    name: ClassVar[str] = "transactions"
    about: ClassVar[str] = "a submit in the caller's transaction, then commit, rollback or drop"
    examples: ClassVar[dict[str, int]] = {"quick": 4, "default": 25, "thorough": 250}

    def run(self, ctx: ModelRun) -> None:
        with ctx.database() as opener:
            probe = opener()
            where = caller_connections(probe)
        if where is None:
            ctx.notes.append(
                "transactions model not run: the store does not join a caller's transaction "
                "(SQLite and PostgreSQL do)"
            )
            return
        vias = [v for v in VIAS if where.asyncio or not v.startswith("async")]
        if _sqlalchemy() is None:
            ctx.notes.append(
                "transactions model: SQLAlchemy is not installed, so only driver "
                "connections were exercised"
            )
            vias = [v for v in vias if v.endswith("driver")]
        steps = st.lists(
            st.tuples(st.sampled_from(vias), st.integers(1, 3), st.sampled_from(ENDINGS)),
            min_size=1,
            max_size=5,
        )

        with ctx.database() as opener:  # first every kind once, whatever the draws
            world = _World(ctx, opener())
            try:
                for via in vias:
                    world.step(via, 2, "commit")
                world.refusal()
            finally:
                world.close()

        @ctx.settings(self.examples[ctx.size])
        @given(steps)
        def example(drawn: list[tuple[str, int, str]]) -> None:
            with ctx.database() as opener:
                world = _World(ctx, opener())
                try:
                    for via, count, ending in drawn:
                        world.step(via, count, ending)
                finally:
                    world.close()

        example()


#: where the store adapters offer a caller's own connections to their database
CALLER_GROUP = "jobfsm.caller_connections"


class CallerConnections(Protocol):
    """A caller's own connections to the store's database (an adapter's
    `caller_connections(store)`, found through the `jobfsm.caller_connections` entry
    points: `fsm/` never imports a driver)."""

    #: whether the asyncio kinds (psycopg AsyncConnection, SQLAlchemy asyncio) apply
    asyncio: bool
    #: the caller's own table, and the driver's parameter mark
    table: str
    param: str

    def connect(self) -> AbstractContextManager[Any]: ...

    def sa_engine(self, sa: Any) -> Any: ...

    def sa_async_engine(self) -> Any: ...

    async def aconnect(self) -> Any: ...


def caller_connections(store: object) -> CallerConnections | None:
    """The caller connections an installed adapter offers for `store`, or None (a
    store that does not join a caller's transaction, or no adapter claims it)."""
    if not isinstance(store, JoinsTransactions):
        return None
    made: CallerConnections | None = offered(CALLER_GROUP, store)
    return made


class _World:
    def __init__(self, ctx: ModelRun, store: Any) -> None:
        where = caller_connections(store)
        assert where is not None
        self.ctx = ctx
        self.where = where
        self.store = store
        self.queue = f"txn-{uuid.uuid4().hex[:12]}"
        kinds = {"order": KindPolicy(queue=self.queue, retry_safe=True)}
        self.engine = Engine(store, clock=FakeClock(), policy=suite_policy(), kinds=kinds)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.aengine: AsyncEngine | None = None
        self.keys: list[str] = []
        self.committed: set[str] = set()
        with self.where.connect() as conn:
            conn.execute(f"CREATE TABLE IF NOT EXISTS {where.table} (id TEXT PRIMARY KEY)")
            conn.commit()

    def close(self) -> None:
        """Close the asyncio engine, then drop the caller's table this world made: the
        store's `drop_schema()` removes only jobfsm's own tables, and keeps a schema
        that still holds another."""
        try:
            if self.loop is not None:
                try:
                    if self.aengine is not None:
                        self.loop.run_until_complete(self.aengine.aclose())
                finally:
                    self.loop.close()
        finally:
            with self.where.connect() as conn:
                conn.execute(f"DROP TABLE IF EXISTS {self.where.table}")
                conn.commit()

    def _items(self, count: int) -> list[tuple[str, Any, dict[str, Any]]]:
        items: list[tuple[str, Any, dict[str, Any]]] = []
        for n in range(count):
            key = f"k-{uuid.uuid4().hex[:8]}"
            if n == 0 and self.keys and len(self.keys) % 2:
                key = self.keys[0]  # a key used before: stored or not, the store decides
            self.keys.append(key)
            items.append(("order", {"n": n}, {"idempotency_key": key}))
        return items

    def step(self, via: str, count: int, ending: str) -> None:
        row = uuid.uuid4().hex
        items = self._items(count)
        try:
            if via.startswith("async"):
                jobs = self._async_step(via, row, items, ending)
            else:
                jobs = self._sync_step(via, row, items, ending)
        except TransientStoreError as err:  # nothing else writes: only itself could block it
            raise AssertionError(
                f"J1 a submit on the caller's {via} did not join its transaction: {err}"
            ) from err
        self.ctx.stats.faults[f"caller's transaction: {ending} ({via})"] += 1
        self._check(jobs, row, ending)

    def _insert_row(self, conn: Any, row: str) -> None:
        conn.execute(f"INSERT INTO {self.where.table} (id) VALUES ({self.where.param})", (row,))

    def _sync_step(
        self, via: str, row: str, items: list[tuple[str, Any, dict[str, Any]]], ending: str
    ) -> list[Any]:
        if via == "driver":
            with self.where.connect() as conn:
                self._insert_row(conn, row)
                jobs = self.engine.submit_many(items, conn=conn)
                self._unseen(jobs)
                if ending == "commit":
                    conn.commit()
                elif ending == "rollback":
                    conn.rollback()
            return jobs
        sa = _sqlalchemy()
        from sqlalchemy.orm import Session

        db = self.where.sa_engine(sa)
        text = sa.text(f"INSERT INTO {self.where.table} (id) VALUES (:id)")
        try:
            holder: Any = Session(db) if via == "session" else db.connect()
            try:
                holder.execute(text, {"id": row})
                jobs = self.engine.submit_many(items, conn=holder)
                self._unseen(jobs)
                if ending == "commit":
                    holder.commit()
                elif ending == "rollback":
                    holder.rollback()
            finally:
                holder.close()  # a dropped transaction: closed without a commit
        finally:
            db.dispose()
        return jobs

    def _async_step(
        self, via: str, row: str, items: list[tuple[str, Any, dict[str, Any]]], ending: str
    ) -> list[Any]:
        if self.loop is None:
            self.loop = asyncio.new_event_loop()
            self.aengine = AsyncEngine(self.engine, max_threads=2, path="async")
        return self.loop.run_until_complete(self._async(via, row, items, ending))

    async def _async(
        self, via: str, row: str, items: list[tuple[str, Any, dict[str, Any]]], ending: str
    ) -> list[Any]:
        assert self.aengine is not None
        if via == "async driver":
            conn = await self.where.aconnect()
            try:
                await conn.execute(
                    f"INSERT INTO {self.where.table} (id) VALUES ({self.where.param})", (row,)
                )
                jobs = await self.aengine.submit_many(items, conn=conn)
                self._unseen(jobs)
                if ending == "commit":
                    await conn.commit()
                elif ending == "rollback":
                    await conn.rollback()
            finally:
                await conn.close()
            return jobs
        sa = _sqlalchemy()
        from sqlalchemy.ext.asyncio import AsyncSession

        db = self.where.sa_async_engine()
        text = sa.text(f"INSERT INTO {self.where.table} (id) VALUES (:id)")
        try:
            holder: Any = AsyncSession(db) if via == "async session" else await db.connect()
            try:
                await holder.execute(text, {"id": row})
                jobs = await self.aengine.submit_many(items, conn=holder)
                self._unseen(jobs)
                if ending == "commit":
                    await holder.commit()
                elif ending == "rollback":
                    await holder.rollback()
            finally:
                await holder.close()
        finally:
            await db.dispose()
        return jobs

    def refusal(self) -> None:
        """J3: an asyncio SQLAlchemy object given to the blocking Engine is refused by
        name (BadInput) and nothing is written."""
        sa = _sqlalchemy()
        if sa is None or not self.where.asyncio:
            return
        from sqlalchemy.ext.asyncio import AsyncSession

        from ..errors import BadInput

        db = self.where.sa_async_engine()
        before = self.engine.store.counts()
        try:
            self.engine.submit("order", {"n": 0}, conn=AsyncSession(db))
        except BadInput as err:
            if "AsyncEngine" not in str(err):
                raise AssertionError(f"J3 the refusal does not say where to submit: {err}") from err
        else:
            raise AssertionError("J3 the blocking Engine took an AsyncSession")
        if self.engine.store.counts() != before:
            raise AssertionError("J3 a refused submit wrote something")
        self.ctx.stats.checks["J3 a connection of the wrong kind is refused, nothing written"] += 1

    def _unseen(self, jobs: list[Any]) -> None:
        """J2: the store's own handle does not see a job of an open transaction (unless
        an earlier committed transaction stored it under the same key)."""
        for job in jobs:
            if job.id in self.committed:
                continue
            if self.store.get(job.id) is not None:
                raise AssertionError(
                    f"J2 job {job.id} submitted in an open transaction is visible to the "
                    "store before the caller committed"
                )
        self.ctx.stats.checks["J2 an open transaction's jobs are not seen by others"] += 1

    def _check(self, jobs: list[Any], row: str, ending: str) -> None:
        with self.where.connect() as conn:
            found = conn.execute(
                f"SELECT count(*) FROM {self.where.table} WHERE id = {self.where.param}",
                (row,),
            ).fetchone()[0]
        committed = ending == "commit"
        if found != int(committed):
            raise AssertionError(f"J1 the caller's row after {ending}: {found} rows")
        for job in jobs:
            stored = self.store.get(job.id)
            earlier = job.id in self.committed
            history = self.store.history(job.id)
            applied = any(e.outcome == "applied" for e in history)
            if committed or earlier:
                if stored is None or not applied:
                    raise AssertionError(
                        f"J1 job {job.id} of a {'committed' if committed else 'stored'} "
                        f"submit: stored {stored is not None}, its audit entry {applied}"
                    )
                self.committed.add(job.id)
            elif stored is not None or history:
                raise AssertionError(
                    f"J1 job {job.id} submitted in a transaction that was {ending} "
                    f"is there: stored {stored is not None}, {len(history)} audit entries"
                )
        checks = self.ctx.stats.checks
        checks["J1 jobs of the caller's transaction commit with it or not at all"] += 1
