"""Ticks: the maintenance service that submits the due ticks of every schedule.

Each tick is submitted exactly once however many schedulers run, and none is lost
while schedulers run (docs/schedules.md):

1. One scheduler leads the passes: each pass first reads the store's schedulers; a
   scheduler leads while no other holds an unexpired lead (`HoldsSchedules.
   beat_scheduler`, renewed every `lead_for / 2`, given up on `stop`). The others
   follow: they submit nothing, so the schedulers never all submit the same ticks; if
   the leader dies, another leads once its lead expires (`LEAD_FOR`, well under
   `LATE_GRACE`, so a takeover makes ticks late, never missed).
2. The leader reads each schedule's `last_tick` (newest tick handled) and `checked_at`
   (when a scheduler last handled it) and asks `fsm.service.timetable.due` which
   ticks to submit: all of them unless no scheduler ran for more than LATE_GRACE.
3. It submits them, each with the idempotency key `schedule:<name>:<tick in UTC ISO
   8601>`, so a tick submitted twice (a lead that overlapped, or a scheduler that died
   before step 4) is stored once.
4. It moves `last_tick` (and `checked_at := now`) with compare-and-set from the value
   it read; a scheduler that lost the race writes nothing older than the winner's.

Correctness rests on steps 3 and 4 alone: the lead only saves duplicate work. A pass
submits at most `limit` ticks per schedule; a schedule left with more is `behind`
(counted, logged) and the scheduler passes again at once, so a pass bound makes ticks
late, never dropped.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable

from ...ports import HoldsSchedules, SchedulerBeat, ScheduleRecord
from .. import plans
from ..kernel import KernelSource
from ..schedules import Schedule, holding, iso, live_kinds
from ..timetable import LATE_GRACE, Due, due
from ..writes import run
from .report import Report

log = logging.getLogger(__name__)

#: most ticks one pass submits for one schedule (the rest in the next pass, at once)
PER_PASS = 1000
#: compare-and-set writes one pass makes to move a schedule's last tick
ADVANCE_TRIES = 3
#: seconds a scheduler leads the passes after it took or renewed its lead
LEAD_FOR = 10.0
#: a follower tells the store it is alive (and its kinds) at least this often
BEAT_EVERY = 10.0
#: a pass that submits nothing still records `checked_at` once it is this old
REFRESH = LATE_GRACE / 4
#: schedulers not seen for this long are forgotten
FORGET_AFTER = 3600.0


class Ticks:
    """Submits the due ticks of the schedules of a kernel's store (one bounded pass).

    `owner` names this scheduler in the store (a fresh id if None); `kinds` are the
    kinds its worker handles (a schedule whose kind no live worker handles is logged)."""

    name = "ticks"

    def __init__(
        self,
        source: KernelSource,
        *,
        owner: str | None = None,
        kinds: Iterable[str] = (),
        lead_for: float = LEAD_FOR,
    ) -> None:
        if not lead_for > 0:
            raise ValueError(f"lead_for must be positive, got {lead_for!r}")
        self.source = source
        self.owner = owner or f"ticks-{uuid.uuid4().hex[:16]}"
        self.kinds = tuple(sorted(set(kinds)))
        self.lead_for = lead_for
        #: whether the last pass led
        self.leading = False
        #: per schedule: the newest skipped tick logged, whether it is behind, whether
        #: its kind had no live handler (each logged once per stretch)
        self._warned: dict[str, float] = {}
        self._behind: set[str] = set()
        self._unhandled: set[str] = set()

    def run_once(self, limit: int = PER_PASS) -> Report:
        """If this scheduler leads, submit every unpaused schedule's due ticks (at most
        `limit` each) and advance its last tick. One schedule's failure is logged and
        fails alone (`errors`). A follower's pass submits nothing."""
        kernel = self.source.kernel
        store = holding(kernel)
        now = kernel.clock.now()
        beats = store.schedulers()
        if not self._lead(store, beats, now):
            return Report()
        kinds = (live_kinds(beats, now) or frozenset()) | set(self.kinds)
        totals = [0, 0, 0, 0, 0]
        for record in store.schedules():
            if record.paused:
                continue
            try:
                counts = self._tick(store, record, limit, now, kinds)
            except Exception as err:
                totals[2] += 1
                log.warning("schedule %s: pass failed: %s", record.name, err)
                continue
            for i, n in enumerate(counts):
                totals[i] += n
        submitted, lost, errors, skipped, behind = totals
        return Report(
            submitted=submitted, lost_races=lost, errors=errors, skipped=skipped, behind=behind
        )

    def beat(self) -> None:
        """Tell the store this scheduler is alive and which kinds its worker handles,
        without leading (a worker that runs no passes)."""
        now = self.source.kernel.clock.now()
        self._beat(holding(self.source.kernel), now, None)

    def stop(self) -> None:
        """Give up the lead, so another scheduler leads at its next pass."""
        if self.leading:
            self.leading = False
            self.beat()

    # --- the lead ----------------------------------------------------------------------

    def _beat(self, store: HoldsSchedules, now: float, lead_until: float | None) -> bool:
        beat = SchedulerBeat(self.owner, self.kinds, now)
        return store.beat_scheduler(beat, lead_until=lead_until, forget_before=now - FORGET_AFTER)

    def _lead(self, store: HoldsSchedules, beats: list[SchedulerBeat], now: float) -> bool:
        mine = next((b for b in beats if b.owner == self.owner), None)
        led = any(
            b.owner != self.owner and b.lead_until is not None and b.lead_until > now for b in beats
        )
        if led:
            if (
                mine is None
                or now - mine.at >= BEAT_EVERY
                or mine.lead_until is not None
                or mine.kinds != self.kinds
            ):
                self._beat(store, now, None)
            self.leading = False
            return False
        if (
            mine is not None
            and mine.lead_until is not None
            and mine.lead_until - now > self.lead_for / 2
            and mine.kinds == self.kinds
        ):
            self.leading = True
            return True
        self.leading = self._beat(store, now, now + self.lead_for)
        return self.leading

    # --- one schedule ------------------------------------------------------------------

    def _tick(
        self,
        store: HoldsSchedules,
        record: ScheduleRecord,
        limit: int,
        now: float,
        kinds: set[str] | frozenset[str],
    ) -> tuple[int, int, int, int, int]:
        kernel = self.source.kernel
        s = Schedule.from_json(record.definition)
        last = record.last_tick if record.last_tick is not None else record.created_at
        checked = record.checked_at if record.checked_at is not None else record.created_at
        found = due(s, last, checked, now, limit)
        self._tell(s, found, kinds)
        if found.ticks:
            payload = s.payload()
            items = [(s.kind, payload, s.options(t)) for t in found.ticks]
            run(kernel, plans.submit_many(kernel, items))
        handled = found.handled
        if handled is None and now - checked < REFRESH:
            return (0, 0, 0, 0, 0)
        tick = handled if handled is not None else record.last_tick
        lost = self._advance(store, s.name, record.last_tick, tick, now)
        return (len(found.ticks), lost, 0, found.skipped, int(found.more))

    def _tell(self, s: Schedule, found: Due, kinds: set[str] | frozenset[str]) -> None:
        """Log what an operator must know, once per stretch: skipped missed ticks, a
        schedule behind its ticks, a kind that no live worker handles."""
        if found.last_skipped is not None and self._warned.get(s.name) != found.last_skipped:
            self._warned[s.name] = found.last_skipped
            log.warning(
                "schedule %s: %d tick(s) missed while no scheduler ran, from %s to %s, "
                "skipped (missed=%s)",
                s.name,
                found.skipped,
                iso(found.first_skipped if found.first_skipped is not None else 0.0),
                iso(found.last_skipped),
                s.missed if s.missed == "skip" else f"catch_up {s.catch_up}",
            )
        if found.more and s.name not in self._behind:
            self._behind.add(s.name)
            log.warning(
                "schedule %s: more ticks are due than a pass submits (%d); it is behind and "
                "the scheduler passes again at once (ticks are late, none dropped)",
                s.name,
                len(found.ticks),
            )
        elif not found.more and s.name in self._behind:
            self._behind.discard(s.name)
            log.info("schedule %s: caught up", s.name)
        if s.kind not in kinds and s.name not in self._unhandled:
            self._unhandled.add(s.name)
            log.warning(
                "schedule %s: no live worker handles kind %r; its jobs wait until one does",
                s.name,
                s.kind,
            )
        elif s.kind in kinds:
            self._unhandled.discard(s.name)

    @staticmethod
    def _advance(
        store: HoldsSchedules, name: str, expected: float | None, tick: float | None, now: float
    ) -> int:
        """Move the last tick up to `tick` (and `checked_at` to `now`) by compare-and-set;
        after a lost race, again from the value read, while that is older (at most
        ADVANCE_TRIES writes), so the last tick is the newest one handled. Returns the
        races lost."""
        lost = 0
        for _ in range(ADVANCE_TRIES):
            if store.advance_schedule(name, expected, tick, now):
                return lost
            lost += 1
            current = next((r for r in store.schedules() if r.name == name), None)
            if current is None or tick is None:
                return lost  # removed, or another scheduler recorded a pass
            if current.last_tick is not None and current.last_tick >= tick:
                return lost  # another scheduler got as far or further
            expected = current.last_tick
        return lost
