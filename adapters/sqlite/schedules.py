"""`fsm.ports.HoldsSchedules` for SQLite: the `schedules` table (migration 3)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from fsm.ports import ScheduleRecord

_COLUMNS = "name, definition, origin, created_at, updated_at, paused, last_tick"


def _record(row: Sequence[Any]) -> ScheduleRecord:
    name, definition, origin, created, updated, paused, last = row
    return ScheduleRecord(name, definition, origin, created, updated, bool(paused), last)


class SqliteSchedules:
    """Mixed into SqliteStore (it writes through the store's `_write`)."""

    def _write(self, what: str) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError  # provided by SqliteStore

    def _read(self, what: str, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        raise NotImplementedError  # provided by SqliteStore

    def save_schedule(self, record: ScheduleRecord, *, replace: bool) -> bool:
        r = record
        row = (r.name, r.definition, r.origin, r.created_at, r.updated_at, int(r.paused), None)
        with self._write("save schedule") as conn:
            added = conn.execute(
                f"INSERT INTO schedules ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (name) DO NOTHING",
                row,
            ).rowcount
            if added or not replace:
                return bool(added)
            conn.execute(
                "UPDATE schedules SET definition = ?, origin = ?, updated_at = ? WHERE name = ?",
                (r.definition, r.origin, r.updated_at, r.name),
            )
        return True

    def delete_schedule(self, name: str) -> bool:
        with self._write("delete schedule") as conn:
            return bool(conn.execute("DELETE FROM schedules WHERE name = ?", (name,)).rowcount)

    def pause_schedule(self, name: str, paused: bool, at: float) -> bool:
        with self._write("pause schedule") as conn:
            return bool(
                conn.execute(
                    "UPDATE schedules SET paused = ?, updated_at = ? WHERE name = ?",
                    (int(paused), at, name),
                ).rowcount
            )

    def advance_schedule(self, name: str, expected: float | None, tick: float, at: float) -> bool:
        with self._write("advance schedule") as conn:
            return bool(
                conn.execute(
                    "UPDATE schedules SET last_tick = ?, updated_at = ? "
                    "WHERE name = ? AND last_tick IS ?",
                    (tick, at, name, expected),
                ).rowcount
            )

    def schedules(self) -> list[ScheduleRecord]:
        rows = self._read("schedules", f"SELECT {_COLUMNS} FROM schedules ORDER BY name")
        return [_record(r) for r in rows]
