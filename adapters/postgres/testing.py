"""A caller's own connections to a PostgreSQL store's database, for the `transactions`
fault model (`fsm.testing.faults_txn`): the model lives in `fsm/`, which never imports
a driver, so it reaches psycopg through the `jobfsm.caller_connections` entry point."""

from __future__ import annotations

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
