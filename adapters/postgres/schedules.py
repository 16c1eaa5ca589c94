"""`fsm.ports.HoldsSchedules` for PostgreSQL: the `schedules` table (migration 4)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fsm.ports import ScheduleRecord

from . import _schema
from ._base import Connected

_COLUMNS = "name, definition, origin, created_at, updated_at, paused, last_tick"


def _record(row: Sequence[Any]) -> ScheduleRecord:
    name, definition, origin, created, updated, paused, last = row
    return ScheduleRecord(name, definition, origin, created, updated, bool(paused), last)


class PostgresSchedules(Connected):
    """Mixed into PostgresStore; each call is one autocommitted statement."""

    @property
    def _schedules_table(self) -> str:
        return f"{_schema.quote(self.schema)}.schedules"

    def save_schedule(self, record: ScheduleRecord, *, replace: bool) -> bool:
        r = record
        conflict = (
            "DO UPDATE SET definition = excluded.definition, origin = excluded.origin, "
            "updated_at = excluded.updated_at"
            if replace
            else "DO NOTHING"
        )
        with self.connection("save schedule") as conn:
            cur = conn.execute(
                f"INSERT INTO {self._schedules_table} ({_COLUMNS}) "
                f"VALUES (%s, %s, %s, %s, %s, %s, NULL) ON CONFLICT (name) {conflict}",
                (r.name, r.definition, r.origin, r.created_at, r.updated_at, r.paused),
            )
            return cur.rowcount > 0

    def delete_schedule(self, name: str) -> bool:
        with self.connection("delete schedule") as conn:
            sql = f"DELETE FROM {self._schedules_table} WHERE name = %s"
            return conn.execute(sql, (name,)).rowcount > 0

    def pause_schedule(self, name: str, paused: bool, at: float) -> bool:
        with self.connection("pause schedule") as conn:
            sql = f"UPDATE {self._schedules_table} SET paused = %s, updated_at = %s WHERE name = %s"
            return conn.execute(sql, (paused, at, name)).rowcount > 0

    def advance_schedule(self, name: str, expected: float | None, tick: float, at: float) -> bool:
        sql = (
            f"UPDATE {self._schedules_table} SET last_tick = %s, updated_at = %s "
            "WHERE name = %s AND last_tick IS NOT DISTINCT FROM %s::float8"
        )
        with self.connection("advance schedule") as conn:
            return conn.execute(sql, (tick, at, name, expected)).rowcount > 0

    def schedules(self) -> list[ScheduleRecord]:
        with self.connection("schedules") as conn:
            sql = f"SELECT {_COLUMNS} FROM {self._schedules_table} ORDER BY name"
            return [_record(r) for r in conn.execute(sql).fetchall()]
