"""`fsm.ports.LeasesServices` for SQLite: the `service_leases` table (migration 9).

The lease is taken by one compare-and-set statement inside a `BEGIN IMMEDIATE`
transaction: racing processes are serialized by the file's write lock, and the
statement writes only while the row is free, expired, or already the caller's."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from fsm.ports import ServiceLease

#: writes (name, owner, until) unless another owner holds the lease past `now`
TAKE = (
    "INSERT INTO service_leases (name, owner, until) VALUES (?, ?, ?) "
    "ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, until = excluded.until "
    "WHERE service_leases.owner = excluded.owner OR service_leases.until <= ?"
)


class SqliteServices:
    """Mixed into SqliteStore (it writes through the store's `_write`)."""

    def _write(self, what: str) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError  # provided by SqliteStore

    def _read(self, what: str, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        raise NotImplementedError  # provided by SqliteStore

    def take_service_lease(self, name: str, owner: str, now: float, until: float) -> bool:
        with self._write("take service lease") as conn:
            return conn.execute(TAKE, (name, owner, until, now)).rowcount == 1

    def release_service_lease(self, name: str, owner: str) -> bool:
        with self._write("release service lease") as conn:
            sql = "DELETE FROM service_leases WHERE name = ? AND owner = ?"
            return conn.execute(sql, (name, owner)).rowcount == 1

    def service_leases(self) -> list[ServiceLease]:
        sql = "SELECT name, owner, until FROM service_leases ORDER BY name"
        return [ServiceLease(*r) for r in self._read("service leases", sql)]
