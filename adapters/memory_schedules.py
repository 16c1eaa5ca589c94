"""`fsm.ports.HoldsSchedules` for the memory store: schedules, their changes and the
schedulers in dicts and a list behind its lock."""

from __future__ import annotations

import threading

import attrs

from fsm.ports import ScheduleChange, SchedulerBeat, ScheduleRecord


class MemorySchedules:
    """Mixed into MemoryStore, which sets `_lock`, `_schedules`, `_schedule_changes`
    and `_schedulers`."""

    _lock: threading.RLock
    _schedules: dict[str, ScheduleRecord]
    _schedule_changes: list[ScheduleChange]
    _schedulers: dict[str, SchedulerBeat]

    def save_schedule(
        self, record: ScheduleRecord, change: ScheduleChange, *, replace: bool
    ) -> bool:
        with self._lock:
            old = self._schedules.get(record.name)
            if old is None:
                self._schedules[record.name] = attrs.evolve(record, last_tick=None, checked_at=None)
            elif not replace:
                return False
            else:
                self._schedules[record.name] = attrs.evolve(
                    old,
                    definition=record.definition,
                    origin=record.origin,
                    updated_at=record.updated_at,
                )
            self._schedule_changes.append(change)
            return True

    def delete_schedule(self, change: ScheduleChange) -> bool:
        with self._lock:
            if self._schedules.pop(change.name, None) is None:
                return False
            self._schedule_changes.append(change)
            return True

    def pause_schedule(self, change: ScheduleChange, paused: bool) -> bool:
        with self._lock:
            old = self._schedules.get(change.name)
            if old is None:
                return False
            self._schedules[change.name] = attrs.evolve(old, paused=paused, updated_at=change.at)
            self._schedule_changes.append(change)
            return True

    def note_schedule_change(self, change: ScheduleChange) -> bool:
        with self._lock:
            if change.name not in self._schedules:
                return False
            self._schedule_changes.append(change)
            return True

    def advance_schedule(
        self, name: str, expected: float | None, tick: float | None, at: float
    ) -> bool:
        with self._lock:
            old = self._schedules.get(name)
            if old is None or old.last_tick != expected:
                return False
            checked = at if old.checked_at is None else max(old.checked_at, at)
            self._schedules[name] = attrs.evolve(old, last_tick=tick, checked_at=checked)
            return True

    def schedules(self) -> list[ScheduleRecord]:
        with self._lock:
            return [self._schedules[n] for n in sorted(self._schedules)]

    def schedule_changes(self, name: str | None, limit: int) -> list[ScheduleChange]:
        with self._lock:
            found = [c for c in reversed(self._schedule_changes) if name in (None, c.name)]
            return found[: max(limit, 0)]

    def beat_scheduler(
        self, beat: SchedulerBeat, *, lead_until: float | None, forget_before: float
    ) -> bool:
        with self._lock:
            for owner, old in list(self._schedulers.items()):
                if owner != beat.owner and old.at < forget_before:
                    del self._schedulers[owner]
            others = any(
                b.owner != beat.owner and b.lead_until is not None and b.lead_until > beat.at
                for b in self._schedulers.values()
            )
            lead = None if lead_until is None or others else lead_until
            self._schedulers[beat.owner] = attrs.evolve(beat, lead_until=lead)
            return lead is not None

    def schedulers(self) -> list[SchedulerBeat]:
        with self._lock:
            return [self._schedulers[o] for o in sorted(self._schedulers)]
