"""A caller's own connections to a PostgreSQL store's database, for the `transactions`
fault model (`fsm.testing.faults_txn`), and the faults of its listener of final states,
for the `waits` model (`fsm.testing.faults_waits`): the models live in `fsm/`, which
never imports a driver, so they reach psycopg through the `jobfsm.caller_connections`
and `jobfsm.wait_faults` entry points."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from . import migrations
from .store import PostgresStore


class PostgresCallerConnections:
    """Blocking and asyncio psycopg connections of a caller, bare and through
    SQLAlchemy, to the store's database; the caller's table lives in the store's schema."""

    asyncio = True
    param = "%s"

    def __init__(self, conninfo: str, schema: str) -> None:
        self.conninfo = conninfo
        self.table = f"{migrations.quote(schema)}.jobfsm_txn_rows"

    @contextmanager
    def connect(self) -> Iterator[Any]:
        conn = psycopg.connect(self.conninfo)
        try:
            yield conn
        finally:
            conn.close()

    def sa_engine(self, sa: Any) -> Any:
        conninfo = self.conninfo
        return sa.create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(conninfo))

    def sa_async_engine(self) -> Any:
        from sqlalchemy.ext.asyncio import create_async_engine

        conninfo = self.conninfo
        return create_async_engine(
            "postgresql+psycopg://",
            async_creator=lambda: psycopg.AsyncConnection.connect(conninfo),
        )

    async def aconnect(self) -> Any:
        return await psycopg.AsyncConnection.connect(self.conninfo)


def caller_connections(store: object) -> PostgresCallerConnections | None:
    """The caller connections of `store` when it is a PostgreSQL store, else None."""
    if not isinstance(store, PostgresStore):
        return None
    return PostgresCallerConnections(store.settings.conninfo, store.settings.schema)


#: the longest a reconnect of the listener is held in an outage (seconds)
OUTAGE_MAX = 30.0


class PostgresWaitFaults:
    """`fsm.testing.faults_waits.WaitFaults` for the listener of a store's final states
    (`adapters.postgres.waiting.FinalStates`). Made before the store's first `watch`, it
    sees every connection the listener opens; an outage shuts the socket of the one it
    opened last down, client side, as a network failure does (no server process is
    ended: the server sees a client gone)."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self._hub = store.finals
        self._connect = self._hub.connect
        self._hub.connect = self._gated
        self._open = threading.Event()
        self._open.set()
        self._cond = threading.Condition()
        self._held = 0
        self._conns: list[psycopg.Connection[Any]] = []

    def _gated(self) -> psycopg.Connection[Any]:
        """The listener's connect: held while an outage lasts (OUTAGE_MAX at most)."""
        with self._cond:
            self._held += 1
            self._cond.notify_all()
        try:
            self._open.wait(OUTAGE_MAX)
        finally:
            with self._cond:
                self._held -= 1
        conn = self._connect()
        with self._cond:
            self._conns[:] = [conn]
        return conn

    def watchers(self, job_id: str) -> int:
        return self._hub.watching(job_id)

    @contextmanager
    def outage(self) -> Iterator[None]:
        # the listener up first: an outage right after another must kill the connection
        # it listens on now, not the one it lost
        started = bool(self._conns)
        if started and not self._hub.listening(OUTAGE_MAX):
            raise AssertionError(f"O0 the listener was not back within {OUTAGE_MAX:g}s")
        with self._cond:
            listening = self._conns[-1] if started else None
        self._open.clear()
        try:
            if listening is not None:  # no listener yet: its first connect is held instead
                cut = socket.socket(fileno=os.dup(listening.fileno()))
                try:
                    cut.shutdown(socket.SHUT_RDWR)
                finally:
                    cut.close()
                with self._cond:
                    if not self._cond.wait_for(lambda: self._held > 0, OUTAGE_MAX):
                        raise AssertionError(
                            f"O0 the listener did not try to reconnect within {OUTAGE_MAX:g}s "
                            "after its connection was killed"
                        )
            yield
        finally:
            self._open.set()


def wait_faults(store: object) -> PostgresWaitFaults | None:
    """The listener faults of `store` when it is a PostgreSQL store, else None."""
    if not isinstance(store, PostgresStore):
        return None
    return PostgresWaitFaults(store)


class PostgresQueueForgetter:
    """Deletes the jobs of one queue, with their trails and prerequisite rows: the fault
    machine's clean-up after each example on a schema the run's examples share
    (`fsm.testing.faults_machine`). It acts only on the queue an example made its own:
    a run pointed at a schema that holds other work leaves that work alone."""

    def __init__(self, store: PostgresStore) -> None:
        self._store = store
        self._schema = migrations.quote(store.settings.schema)

    def __call__(self, queue: str) -> None:
        s = self._schema
        mine = f"SELECT id FROM {s}.jobs WHERE queue = %s"
        with self._store.connection("forget a queue") as conn, conn.transaction():
            conn.execute(f"DELETE FROM {s}.job_events WHERE job_id IN ({mine})", (queue,))
            conn.execute(
                f"DELETE FROM {s}.job_deps WHERE job_id IN ({mine}) OR after_id IN ({mine})",
                (queue, queue),
            )
            conn.execute(f"DELETE FROM {s}.jobs WHERE queue = %s", (queue,))


def queue_forgetter(store: object) -> PostgresQueueForgetter | None:
    """The queue clean-up of `store` when it is a PostgreSQL store, else None."""
    if not isinstance(store, PostgresStore):
        return None
    return PostgresQueueForgetter(store)
