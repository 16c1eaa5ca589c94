"""The PostgreSQL store's plumbing: the bounded pool, dedicated connections, and the
blocking driver of the store's plans (`adapters.postgres.plan`)."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from fsm.errors import StoreError, TransientStoreError
from fsm.service.plans import drive

from . import migrations
from ._sql import Statements
from ._url import CHANNEL_PREFIX, Settings
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
    rollback,
)
from .plan import translate as translated
from .txn import FINGERPRINT, TupleRows

log = logging.getLogger(__name__)

Conn = psycopg.Connection[tuple[Any, ...]]
T = TypeVar("T")


def perform(conn: Any, request: Request) -> Any:
    """Carry one request of a plan out on a blocking connection; its answer (the twin of
    `aio.perform`)."""
    if isinstance(request, Run):
        cur = conn.execute(request.sql, request.params)
        return cur.fetchall() if request.fetch else None
    if isinstance(request, Broken):
        return conn.broken
    if isinstance(request, Backend):
        return conn.info.backend_pid
    if isinstance(request, Pipeline):
        with conn.pipeline():
            sent = [(r.fetch, conn.execute(r.sql, r.params)) for r in request.runs]
        return [c.fetchall() if fetch else None for fetch, c in sent]
    if isinstance(request, RunMany):
        with conn.cursor() as cur:
            cur.executemany(request.sql, request.params)
        return None
    assert isinstance(request, Copy), request  # Fresh never reaches a connection
    with conn.cursor() as cur, cur.copy(request.sql) as copy:
        for row in request.rows:
            copy.write_row(row)
    return None


def roll_back(conn: Conn) -> None:
    """`plan.rollback` on `conn`, now (for the claim, which is no plan)."""
    drive(rollback(), functools.partial(perform, conn))


class Connected:
    """A schema on a PostgreSQL server: the bounded pool and the error edge."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.schema = settings.schema
        self.sql = Statements(migrations.quote(settings.schema))
        self.target = Target(settings, self.sql, f"{CHANNEL_PREFIX}{settings.schema}")
        #: this store's `txn.FINGERPRINT`, read by `open`
        self.fingerprint: tuple[Any, ...] = ()
        self._pool = ConnectionPool(
            settings.conninfo, **settings.pool_options(f"jobfsm-{settings.schema}")
        )
        #: the pool is opened by the first call that needs a connection (`connection`)
        self._pool_opened = False
        self._opening = threading.Lock()
        self._closed = False

    # --- connections and errors ------------------------------------------------------

    def connect(self, role: str = "admin", **kwargs: Any) -> Conn:
        """A dedicated connection outside the pool, named after its `role` in
        `pg_stat_activity` (`_url.ROLES`: listen, wait, liveness, admin)."""
        try:
            params: dict[str, Any] = {**self.settings.role(role), **kwargs}
            return psycopg.connect(self.settings.conninfo, autocommit=True, **params)
        except psycopg.Error as err:
            raise TransientStoreError(
                f"cannot connect to PostgreSQL at {self.settings.redacted}: "
                f"{self.settings.scrub(str(err))}"
            ) from err

    def open(self, conn: Conn | None = None) -> None:
        """Check the server answers (and read the store's fingerprint), on `conn` (an
        admin connection the caller holds) or a connection of its own. The pool opens
        on first use: a process that never makes a blocking store call (an AsyncEngine's)
        holds none of its connections, nor its threads."""
        with self.connect() if conn is None else nullcontext(conn) as c:
            row = c.execute(FINGERPRINT, (self.sql.jobs,)).fetchone()
            self.fingerprint = tuple(row or ())

    def _open_pool(self) -> None:
        with self._opening:
            if not self._pool_opened and not self._closed:
                self._pool.open(wait=False)  # `pool_min` connections, in the background
                self._pool_opened = True

    def close_pool(self) -> None:
        """Close the pool (and every connection it holds), if it was ever opened."""
        with self._opening:
            self._closed = True
            if self._pool_opened:
                self._pool.close()

    def purge(self) -> None:
        """After a connection failure, drop the pool's other dead connections too."""
        if not self._pool_opened:
            return
        try:
            self._pool.check()
        except Exception:  # best effort; the next call reports the real error
            log.debug("pool check after a connection failure failed", exc_info=True)

    @contextmanager
    def connection(self, what: str) -> Iterator[Conn]:
        if not self._pool_opened:
            self._open_pool()
        if self._closed:
            raise StoreError(f"PostgreSQL store {self.settings.redacted} is closed ({what})")
        try:
            with self._pool.connection() as conn:
                yield conn
        except (psycopg.Error, PoolTimeout) as err:
            if isinstance(err, psycopg.OperationalError | PoolTimeout):
                self.purge()
            raise translated(self.settings, err, what) from err

    def run(self, plan: Plan[T], what: str, conn: Any = None) -> T:
        """Drive `plan` on a pooled connection (a fresh one after a `Fresh`), or on the
        caller's `conn`. The blocking twin of `AsyncPostgresStore.run`."""
        step = advance(plan)  # a plan that asks for nothing takes no connection
        while not isinstance(step, Done):
            if isinstance(step, Fresh):
                what = step.what
                self.purge()
                step = advance(plan)
                continue
            request: Any = step
            with self.connection(what) if conn is None else nullcontext(TupleRows(conn)) as c:
                try:
                    while type(request) is not Fresh:
                        try:
                            answer = perform(c, request)
                        except BaseException as err:
                            request = plan.throw(err)
                        else:
                            request = plan.send(answer)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
            step = request
        return step.value  # type: ignore[no-any-return]

    # --- schema ----------------------------------------------------------------------

    def migrate(self, conn: Conn | None = None) -> list[int]:
        """Apply pending migrations (safe when several processes migrate at once), on
        `conn` (an admin connection the caller holds) or a connection of its own."""
        with self.connect() if conn is None else nullcontext(conn) as c:
            try:
                return migrations.migrate(c, self.schema)
            except psycopg.Error as err:
                raise translated(self.settings, err, "migrate") from err

    def schema_version(self) -> int:
        with self.connection("schema_version") as conn:
            return migrations.current_version(conn, self.schema)

    def check_schema(self, conn: Conn | None = None) -> None:
        with self.connect() if conn is None else nullcontext(conn) as c:
            migrations.check(c, self.schema)
