"""A caller's own connections to a SQLite store's file, for the `transactions` fault
model (`fsm.testing.faults_txn`): the model lives in `fsm/`, which never imports a
driver, so it reaches sqlite3 through the `jobfsm.caller_connections` entry point."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .store import SqliteStore


class SQLiteCallerConnections:
    """Driver and SQLAlchemy connections of a caller to the store's file."""

    #: SQLite has no asyncio driver the store joins (docs/transactional-submit.md)
    asyncio = False
    param = "?"

    def __init__(self, path: str) -> None:
        self.path = path
        self.table = "jobfsm_txn_rows"

    @contextmanager
    def connect(self) -> Iterator[Any]:
        conn = sqlite3.connect(self.path, timeout=10)
        try:
            yield conn
        finally:
            conn.close()

    def sa_engine(self, sa: Any) -> Any:
        return sa.create_engine(f"sqlite:///{self.path}")

    def sa_async_engine(self) -> Any:
        raise NotImplementedError("SQLite: no asyncio caller connections")

    async def aconnect(self) -> Any:
        raise NotImplementedError("SQLite: no asyncio caller connections")


def caller_connections(store: object) -> SQLiteCallerConnections | None:
    """The caller connections of `store` when it is a SQLite store, else None."""
    if not isinstance(store, SqliteStore):
        return None
    return SQLiteCallerConnections(str(store.path))
