"""`fsm.ports.HoldsSchedules` for PostgreSQL: the `schedules` table (migration 4), and the
`schedule_changes` and `schedulers` tables with `schedules.checked_at` (migration 11).

A change and its audit row are written in one transaction; a scheduler's beat takes a
transaction advisory lock keyed by the schema first, so of racing schedulers at most
one takes the lead."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from fsm.ports import ScheduleChange, SchedulerBeat, ScheduleRecord

from . import migrations
from ._base import Connected

_COLUMNS = "name, definition, origin, created_at, updated_at, paused, last_tick, checked_at"
_CHANGE = "name, action, actor, reason, at, definition"


def _record(row: Sequence[Any]) -> ScheduleRecord:
    name, definition, origin, created, updated, paused, last, checked = row
    return ScheduleRecord(name, definition, origin, created, updated, bool(paused), last, checked)


def _change_row(c: ScheduleChange) -> tuple[Any, ...]:
    return (c.name, c.action, c.actor, c.reason, c.at, c.definition)


class PostgresSchedules(Connected):
    """Mixed into PostgresStore."""

    def _table(self, name: str) -> str:
        return f"{migrations.quote(self.schema)}.{name}"

    def _append_change(self, conn: Any, change: ScheduleChange) -> None:
        conn.execute(
            f"INSERT INTO {self._table('schedule_changes')} ({_CHANGE}) "
            "VALUES (%s, %s, %s, %s, %s, %s)",
            _change_row(change),
        )

    def save_schedule(
        self, record: ScheduleRecord, change: ScheduleChange, *, replace: bool
    ) -> bool:
        r = record
        conflict = (
            "DO UPDATE SET definition = excluded.definition, origin = excluded.origin, "
            "updated_at = excluded.updated_at"
            if replace
            else "DO NOTHING"
        )
        with self.connection("save schedule") as conn, conn.transaction():
            cur = conn.execute(
                f"INSERT INTO {self._table('schedules')} ({_COLUMNS}) "
                f"VALUES (%s, %s, %s, %s, %s, %s, NULL, NULL) ON CONFLICT (name) {conflict}",
                (r.name, r.definition, r.origin, r.created_at, r.updated_at, r.paused),
            )
            if cur.rowcount == 0:
                return False
            self._append_change(conn, change)
            return True

    def delete_schedule(self, change: ScheduleChange) -> bool:
        with self.connection("delete schedule") as conn, conn.transaction():
            sql = f"DELETE FROM {self._table('schedules')} WHERE name = %s"
            if conn.execute(sql, (change.name,)).rowcount == 0:
                return False
            self._append_change(conn, change)
            return True

    def pause_schedule(self, change: ScheduleChange, paused: bool) -> bool:
        with self.connection("pause schedule") as conn, conn.transaction():
            sql = (
                f"UPDATE {self._table('schedules')} SET paused = %s, updated_at = %s "
                "WHERE name = %s"
            )
            if conn.execute(sql, (paused, change.at, change.name)).rowcount == 0:
                return False
            self._append_change(conn, change)
            return True

    def note_schedule_change(self, change: ScheduleChange) -> bool:
        sql = (
            f"INSERT INTO {self._table('schedule_changes')} ({_CHANGE}) "
            "SELECT %s, %s, %s, %s, %s, %s "
            f"WHERE EXISTS (SELECT 1 FROM {self._table('schedules')} WHERE name = %s)"
        )
        with self.connection("note schedule change") as conn, conn.transaction():
            return bool(conn.execute(sql, (*_change_row(change), change.name)).rowcount)

    def advance_schedule(
        self, name: str, expected: float | None, tick: float | None, at: float
    ) -> bool:
        sql = (
            f"UPDATE {self._table('schedules')} SET last_tick = %s, "
            # greatest() leaves out a NULL: a first pass sets it
            "checked_at = greatest(checked_at, %s::float8) "
            "WHERE name = %s AND last_tick IS NOT DISTINCT FROM %s::float8"
        )
        with self.connection("advance schedule") as conn:
            return conn.execute(sql, (tick, at, name, expected)).rowcount > 0

    def schedules(self) -> list[ScheduleRecord]:
        with self.connection("schedules") as conn:
            sql = f"SELECT {_COLUMNS} FROM {self._table('schedules')} ORDER BY name"
            return [_record(r) for r in conn.execute(sql).fetchall()]

    def schedule_changes(self, name: str | None, limit: int) -> list[ScheduleChange]:
        where = "WHERE name = %s " if name is not None else ""
        params: list[Any] = [name] if name is not None else []
        sql = (
            f"SELECT {_CHANGE} FROM {self._table('schedule_changes')} {where}"
            "ORDER BY seq DESC LIMIT %s"
        )
        with self.connection("schedule changes") as conn:
            rows = conn.execute(sql, (*params, max(limit, 0))).fetchall()
        return [ScheduleChange(*r) for r in rows]

    def beat_scheduler(
        self, beat: SchedulerBeat, *, lead_until: float | None, forget_before: float
    ) -> bool:
        table = self._table("schedulers")
        key = (migrations.SCHEDULER_CLASS, migrations.key32(self.schema))
        with self.connection("scheduler beat") as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", key)
            conn.execute(
                f"DELETE FROM {table} WHERE seen_at < %s AND owner <> %s",
                (forget_before, beat.owner),
            )
            others = conn.execute(
                f"SELECT 1 FROM {table} WHERE owner <> %s AND lead_until > %s LIMIT 1",
                (beat.owner, beat.at),
            ).fetchone()
            lead = None if lead_until is None or others else lead_until
            conn.execute(
                f"INSERT INTO {table} (owner, kinds_json, seen_at, lead_until) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (owner) DO UPDATE SET "
                "kinds_json = excluded.kinds_json, seen_at = excluded.seen_at, "
                "lead_until = excluded.lead_until",
                (beat.owner, json.dumps(list(beat.kinds)), beat.at, lead),
            )
        return lead is not None

    def schedulers(self) -> list[SchedulerBeat]:
        sql = (
            f"SELECT owner, kinds_json, seen_at, lead_until FROM {self._table('schedulers')} "
            "ORDER BY owner"
        )
        with self.connection("schedulers") as conn:
            rows = conn.execute(sql).fetchall()
        return [SchedulerBeat(o, tuple(json.loads(k)), at, lead) for o, k, at, lead in rows]
