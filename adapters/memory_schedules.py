"""`fsm.ports.HoldsSchedules` for the memory store: schedules in a dict behind its lock."""

from __future__ import annotations

import threading

import attrs

from fsm.ports import ScheduleRecord


class MemorySchedules:
    """Mixed into MemoryStore, which sets `_lock` and `_schedules`."""

    _lock: threading.RLock
    _schedules: dict[str, ScheduleRecord]

    def save_schedule(self, record: ScheduleRecord, *, replace: bool) -> bool:
        with self._lock:
            old = self._schedules.get(record.name)
            if old is None:
                self._schedules[record.name] = attrs.evolve(record, last_tick=None)
                return True
            if not replace:
                return False
            self._schedules[record.name] = attrs.evolve(
                old,
                definition=record.definition,
                origin=record.origin,
                updated_at=record.updated_at,
            )
            return True

    def delete_schedule(self, name: str) -> bool:
        with self._lock:
            return self._schedules.pop(name, None) is not None

    def pause_schedule(self, name: str, paused: bool, at: float) -> bool:
        with self._lock:
            old = self._schedules.get(name)
            if old is None:
                return False
            self._schedules[name] = attrs.evolve(old, paused=paused, updated_at=at)
            return True

    def advance_schedule(self, name: str, expected: float | None, tick: float, at: float) -> bool:
        with self._lock:
            old = self._schedules.get(name)
            if old is None or old.last_tick != expected:
                return False
            self._schedules[name] = attrs.evolve(old, last_tick=tick, updated_at=at)
            return True

    def schedules(self) -> list[ScheduleRecord]:
        with self._lock:
            return [self._schedules[n] for n in sorted(self._schedules)]
