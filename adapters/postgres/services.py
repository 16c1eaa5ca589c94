"""`fsm.ports.LeasesServices` for PostgreSQL: the `service_leases` table (migration 10).

The lease is taken by one `INSERT ... ON CONFLICT DO UPDATE ... WHERE` statement: the
row lock it takes serializes racing workers, and it writes only while the row is free,
expired, or already the caller's (`RETURNING` tells which)."""

from __future__ import annotations

from fsm.ports import ServiceLease

from . import migrations
from ._base import Connected


class PostgresServices(Connected):
    """Mixed into PostgresStore."""

    def _leases_table(self) -> str:
        return f"{migrations.quote(self.schema)}.service_leases"

    def take_service_lease(self, name: str, owner: str, now: float, until: float) -> bool:
        t = self._leases_table()
        sql = (
            f"INSERT INTO {t} AS held (name, owner, until) VALUES (%s, %s, %s) "
            "ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, until = excluded.until "
            "WHERE held.owner = excluded.owner OR held.until <= %s RETURNING owner"
        )
        with self.connection("take service lease") as conn, conn.transaction():
            return conn.execute(sql, (name, owner, until, now)).fetchone() is not None

    def release_service_lease(self, name: str, owner: str) -> bool:
        sql = f"DELETE FROM {self._leases_table()} WHERE name = %s AND owner = %s"
        with self.connection("release service lease") as conn, conn.transaction():
            return conn.execute(sql, (name, owner)).rowcount == 1

    def service_leases(self) -> list[ServiceLease]:
        sql = f"SELECT name, owner, until FROM {self._leases_table()} ORDER BY name"
        with self.connection("service leases") as conn:
            rows = conn.execute(sql).fetchall()
        return [ServiceLease(*r) for r in rows]
