"""`fsm.ports.HoldsSchedules` for SQLite: the `schedules` table (migration 3), and the
`schedule_changes` and `schedulers` tables with `schedules.checked_at` (migration 10).
Every write is one `BEGIN IMMEDIATE` transaction, so racing writers are serialized."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from fsm.ports import ScheduleChange, SchedulerBeat, ScheduleRecord

#: the tables of migration 10 (drop_schema removes them too)
SCHEDULE_TABLES = ("schedule_changes", "schedulers")
_COLUMNS = "name, definition, origin, created_at, updated_at, paused, last_tick, checked_at"
_CHANGE = "name, action, actor, reason, at, definition"


def _record(row: Sequence[Any]) -> ScheduleRecord:
    name, definition, origin, created, updated, paused, last, checked = row
    return ScheduleRecord(name, definition, origin, created, updated, bool(paused), last, checked)


def _change_row(c: ScheduleChange) -> tuple[Any, ...]:
    return (c.name, c.action, c.actor, c.reason, c.at, c.definition)


def _beat(row: Sequence[Any]) -> SchedulerBeat:
    owner, kinds, at, lead = row
    return SchedulerBeat(owner, tuple(json.loads(kinds)), at, lead)


class SqliteSchedules:
    """Mixed into SqliteStore (it writes through the store's `_write`)."""

    def _write(self, what: str) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError  # provided by SqliteStore

    def _read(self, what: str, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        raise NotImplementedError  # provided by SqliteStore

    def save_schedule(
        self, record: ScheduleRecord, change: ScheduleChange, *, replace: bool
    ) -> bool:
        r = record
        row = (r.name, r.definition, r.origin, r.created_at, r.updated_at, int(r.paused))
        with self._write("save schedule") as conn:
            added = conn.execute(
                f"INSERT INTO schedules ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, NULL, NULL) "
                "ON CONFLICT (name) DO NOTHING",
                row,
            ).rowcount
            if not added:
                if not replace:
                    return False
                conn.execute(
                    "UPDATE schedules SET definition = ?, origin = ?, updated_at = ? "
                    "WHERE name = ?",
                    (r.definition, r.origin, r.updated_at, r.name),
                )
            conn.execute(
                f"INSERT INTO schedule_changes ({_CHANGE}) VALUES (?, ?, ?, ?, ?, ?)",
                _change_row(change),
            )
        return True

    def delete_schedule(self, change: ScheduleChange) -> bool:
        with self._write("delete schedule") as conn:
            gone = conn.execute("DELETE FROM schedules WHERE name = ?", (change.name,)).rowcount
            if gone:
                conn.execute(
                    f"INSERT INTO schedule_changes ({_CHANGE}) VALUES (?, ?, ?, ?, ?, ?)",
                    _change_row(change),
                )
        return bool(gone)

    def pause_schedule(self, change: ScheduleChange, paused: bool) -> bool:
        with self._write("pause schedule") as conn:
            found = conn.execute(
                "UPDATE schedules SET paused = ?, updated_at = ? WHERE name = ?",
                (int(paused), change.at, change.name),
            ).rowcount
            if found:
                conn.execute(
                    f"INSERT INTO schedule_changes ({_CHANGE}) VALUES (?, ?, ?, ?, ?, ?)",
                    _change_row(change),
                )
        return bool(found)

    def note_schedule_change(self, change: ScheduleChange) -> bool:
        with self._write("note schedule change") as conn:
            return bool(
                conn.execute(
                    f"INSERT INTO schedule_changes ({_CHANGE}) SELECT ?, ?, ?, ?, ?, ? "
                    "WHERE EXISTS (SELECT 1 FROM schedules WHERE name = ?)",
                    (*_change_row(change), change.name),
                ).rowcount
            )

    def advance_schedule(
        self, name: str, expected: float | None, tick: float | None, at: float
    ) -> bool:
        with self._write("advance schedule") as conn:
            return bool(
                conn.execute(
                    # max() of a NULL is NULL: a first pass sets it
                    "UPDATE schedules SET last_tick = ?, "
                    "checked_at = max(coalesce(checked_at, ?), ?) "
                    "WHERE name = ? AND last_tick IS ?",
                    (tick, at, at, name, expected),
                ).rowcount
            )

    def schedules(self) -> list[ScheduleRecord]:
        rows = self._read("schedules", f"SELECT {_COLUMNS} FROM schedules ORDER BY name")
        return [_record(r) for r in rows]

    def schedule_changes(self, name: str | None, limit: int) -> list[ScheduleChange]:
        where, params = ("WHERE name = ? ", [name]) if name is not None else ("", [])
        rows = self._read(
            "schedule changes",
            f"SELECT {_CHANGE} FROM schedule_changes {where}ORDER BY seq DESC LIMIT ?",
            [*params, max(limit, 0)],
        )
        return [ScheduleChange(*r) for r in rows]

    def beat_scheduler(
        self, beat: SchedulerBeat, *, lead_until: float | None, forget_before: float
    ) -> bool:
        kinds = json.dumps(list(beat.kinds))
        with self._write("scheduler beat") as conn:
            conn.execute(
                "DELETE FROM schedulers WHERE seen_at < ? AND owner <> ?",
                (forget_before, beat.owner),
            )
            others = conn.execute(
                "SELECT 1 FROM schedulers WHERE owner <> ? AND lead_until > ? LIMIT 1",
                (beat.owner, beat.at),
            ).fetchone()
            lead = None if lead_until is None or others else lead_until
            conn.execute(
                "INSERT INTO schedulers (owner, kinds_json, seen_at, lead_until) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (owner) DO UPDATE SET "
                "kinds_json = excluded.kinds_json, seen_at = excluded.seen_at, "
                "lead_until = excluded.lead_until",
                (beat.owner, kinds, beat.at, lead),
            )
        return lead is not None

    def schedulers(self) -> list[SchedulerBeat]:
        rows = self._read(
            "schedulers",
            "SELECT owner, kinds_json, seen_at, lead_until FROM schedulers ORDER BY owner",
        )
        return [_beat(r) for r in rows]
