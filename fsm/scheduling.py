"""Schedules in a store: declared in code or added by an operator, ticked by workers.

Each tick is submitted exactly once however many schedulers run (docs/schedules.md):

1. a pass reads each schedule's record and its `last_tick` (the newest tick submitted);
2. it submits the due ticks' jobs, each with the idempotency key
   `schedule:<name>:<tick in UTC ISO 8601>`, so a tick submitted twice (two schedulers,
   or one that died before step 3) is stored once;
3. it advances `last_tick` with compare-and-set from the value it read; a scheduler that
   lost the race writes nothing and the next pass starts from the winner's tick.

Submitting before advancing means a scheduler killed between the two loses no tick: the
next pass submits the same keys again (the store returns the jobs already there) and
advances. Work per pass is bounded: at most `PER_PASS` ticks per schedule.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import attrs

from . import jsonio
from .engine import Engine
from .errors import BadInput, JobFSMError
from .ports import HoldsSchedules, ScheduleRecord
from .schedules import Schedule, due, iso, next_tick, tick_key

log = logging.getLogger(__name__)

#: where a schedule was declared: in the application's code, or by `jobfsm schedules add`
ORIGINS = ("code", "cli")
#: most ticks one pass submits for one schedule (the rest go in the next passes)
PER_PASS = 100
#: compare-and-set writes one pass makes to move a schedule's last tick
ADVANCE_TRIES = 3


@attrs.frozen
class ScheduleView:
    """A stored schedule as `jobfsm schedules list` shows it: `schedule` is None (and
    `error` says why) if its stored definition is not valid."""

    record: ScheduleRecord
    schedule: Schedule | None
    next_tick: float | None
    error: str | None = None


@attrs.frozen
class PassReport:
    """One pass over every schedule: ticks submitted (a tick another scheduler submitted
    first counts too: its job is stored once), compare-and-set races lost to another
    scheduler, and schedules whose pass failed (logged)."""

    submitted: int = 0
    lost_races: int = 0
    failed: int = 0


class Schedules:
    """The schedules of an engine's store (`fsm.ports.HoldsSchedules`)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        #: the newest missed tick already logged, per schedule (logged once)
        self._warned: dict[str, float] = {}

    def _store(self) -> HoldsSchedules:
        store = self.engine.store
        if not isinstance(store, HoldsSchedules):
            raise BadInput(f"{type(store).__name__} cannot keep schedules")
        return store

    # --- operators ---------------------------------------------------------------------

    def add(self, s: Schedule, *, origin: str = "cli", replace: bool = False) -> bool:
        """Store `s`; False if its name is taken (and `replace` is not set)."""
        if origin not in ORIGINS:
            raise BadInput(f"schedule origin must be one of {', '.join(ORIGINS)}, got {origin!r}")
        now = self.engine.clock.now()
        record = ScheduleRecord(s.name, s.to_json(), origin, created_at=now, updated_at=now)
        return self._store().save_schedule(record, replace=replace)

    def declare(self, schedules: Iterable[Schedule]) -> None:
        """Store the schedules declared in code, replacing a stored definition that
        differs (its paused flag and last tick are kept)."""
        stored = {r.name: r for r in self._store().schedules()}
        for s in schedules:
            old = stored.get(s.name)
            if old is not None and old.definition == s.to_json() and old.origin == "code":
                continue
            if old is not None and old.origin != "code":
                log.warning("schedule %s: the definition in code replaces the one stored", s.name)
            self.add(s, origin="code", replace=True)

    def remove(self, name: str) -> bool:
        return self._store().delete_schedule(name)

    def pause(self, name: str) -> bool:
        return self._store().pause_schedule(name, True, self.engine.clock.now())

    def resume(self, name: str) -> bool:
        return self._store().pause_schedule(name, False, self.engine.clock.now())

    def list(self) -> list[ScheduleView]:
        now = self.engine.clock.now()
        out = []
        for record in self._store().schedules():
            try:
                s = Schedule.from_json(record.definition)
            except JobFSMError as err:
                out.append(ScheduleView(record, None, None, str(err)))
                continue
            after = max(now, record.last_tick if record.last_tick is not None else now)
            out.append(ScheduleView(record, s, None if record.paused else next_tick(s, after)))
        return out

    # --- the scheduler's pass ----------------------------------------------------------

    def run_pass(self, limit: int = PER_PASS) -> PassReport:
        """Submit every unpaused schedule's due ticks (at most `limit` each) and advance
        its last tick. One schedule's failure is logged and fails alone."""
        store = self._store()
        totals = [0, 0, 0]
        for record in store.schedules():
            if record.paused:
                continue
            try:
                counts = self._tick(store, record, limit)
            except Exception as err:
                totals[2] += 1
                log.warning("schedule %s: pass failed: %s", record.name, err)
                continue
            for i, n in enumerate(counts):
                totals[i] += n
        return PassReport(*totals)

    def _tick(self, store: HoldsSchedules, record: ScheduleRecord, limit: int) -> tuple[int, ...]:
        s = Schedule.from_json(record.definition)
        now = self.engine.clock.now()
        last = record.last_tick if record.last_tick is not None else record.created_at
        found = due(s, last, now, limit)
        if found.skipped is not None and self._warned.get(s.name) != found.skipped:
            self._warned[s.name] = found.skipped
            log.warning(
                "schedule %s: missed ticks up to %s skipped (missed=%s)",
                s.name,
                iso(found.skipped),
                s.missed,
            )
        if not found.ticks:
            return (0, 0)
        payload = jsonio.decode(s.payload_json, what=f"payload of schedule {s.name!r}")
        opts: dict[str, Any] = {}
        if s.queue is not None:
            opts["queue"] = s.queue
        if s.priority is not None:
            opts["priority"] = s.priority
        items = [
            (s.kind, payload, {**opts, "idempotency_key": tick_key(s.name, t)}) for t in found.ticks
        ]
        self.engine.submit_many(items)
        return (len(items), self._advance(store, s.name, record.last_tick, found.ticks[-1], now))

    @staticmethod
    def _advance(
        store: HoldsSchedules, name: str, expected: float | None, tick: float, now: float
    ) -> int:
        """Move the last tick up to `tick` by compare-and-set; after a lost race, again
        from the value read, while that is older (at most ADVANCE_TRIES writes), so the
        last tick is the newest one submitted. Returns the races lost."""
        lost = 0
        for _ in range(ADVANCE_TRIES):
            if store.advance_schedule(name, expected, tick, now):
                return lost
            lost += 1
            current = next((r for r in store.schedules() if r.name == name), None)
            if current is None or (current.last_tick is not None and current.last_tick >= tick):
                return lost  # removed, or another scheduler got as far or further
            expected = current.last_tick
        return lost
