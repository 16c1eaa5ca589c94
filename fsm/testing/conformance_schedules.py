"""Conformance of `fsm.ports.HoldsSchedules`: part of every `StoreConformance` suite.

A store that does not hold schedules must refuse them by name (BadInput); one that
does must keep definitions, paused flags and last ticks, advance a last tick only by
compare-and-set (of racing writers exactly one wins), and, driven by
`fsm.scheduling.Schedules`, give exactly one job per tick however many schedulers run.
"""

from __future__ import annotations

import threading

import attrs

from ..errors import BadInput
from ..ports import HoldsSchedules, ScanRequest, ScheduleRecord
from ..schedules import schedule, tick_key
from ..scheduling import Schedules
from .suite_part import SuitePart


class ScheduleConformance(SuitePart):
    """Mixed into `fsm.testing.conformance.StoreConformance` (which gives `store`, `engine`)."""

    def _holding(self) -> HoldsSchedules | None:
        store = self.store
        if isinstance(store, HoldsSchedules):
            return store
        engine, _ = self.engine()
        refused: BadInput | None = None
        try:
            Schedules(engine).add(schedule("s", "conformance", every=1.0))
        except BadInput as err:
            refused = err
        assert refused is not None, "a store without HoldsSchedules must refuse a schedule"
        assert "cannot keep schedules" in str(refused)
        return None

    def _jobs(self) -> list[str]:
        found = self.store.scan(ScanRequest(states=("queued",), limit=100_000))
        return sorted(j.idempotency_key or "" for j in found)

    def test_schedules_are_saved_listed_paused_and_deleted(self) -> None:
        store = self._holding()
        if store is None:
            return
        a = ScheduleRecord("a", '{"x":1}', "cli", created_at=10.0, updated_at=10.0)
        assert store.save_schedule(a, replace=False) is True
        assert store.schedules() == [a]
        # a taken name: nothing written without replace
        other = attrs.evolve(a, definition='{"x":2}', updated_at=11.0)
        assert store.save_schedule(other, replace=False) is False
        assert store.schedules() == [a]
        # paused, ticked, then replaced: paused flag, last tick and creation time are kept
        assert store.pause_schedule("a", True, 12.0) is True
        assert store.advance_schedule("a", None, 100.0, 13.0) is True
        assert store.save_schedule(attrs.evolve(other, origin="code"), replace=True) is True
        (kept,) = store.schedules()
        assert (kept.definition, kept.origin, kept.paused, kept.last_tick, kept.created_at) == (
            '{"x":2}',
            "code",
            True,
            100.0,
            10.0,
        )
        assert store.pause_schedule("a", False, 14.0) is True
        assert store.schedules()[0].paused is False
        assert store.pause_schedule("nope", True, 14.0) is False
        b = ScheduleRecord("b", "{}", "cli", created_at=1.0, updated_at=1.0)
        store.save_schedule(b, replace=False)
        assert [r.name for r in store.schedules()] == ["a", "b"]
        assert store.delete_schedule("a") is True
        assert store.delete_schedule("a") is False
        assert [r.name for r in store.schedules()] == ["b"]

    def test_a_last_tick_moves_only_by_compare_and_set(self) -> None:
        store = self._holding()
        if store is None:
            return
        store.save_schedule(ScheduleRecord("a", "{}", "cli", 1.0, 1.0), replace=False)
        assert store.advance_schedule("a", None, 1000.25, 2.0) is True
        assert store.advance_schedule("a", None, 1001.0, 2.0) is False  # stale: never ticked
        assert store.advance_schedule("a", 1000.0, 1001.0, 2.0) is False  # stale value
        assert store.advance_schedule("a", 1000.25, 1001.5, 2.0) is True
        assert store.advance_schedule("gone", None, 1.0, 2.0) is False
        assert store.schedules()[0].last_tick == 1001.5

    def test_of_racing_compare_and_sets_exactly_one_wins(self) -> None:
        store = self._holding()
        if store is None:
            return
        store.save_schedule(ScheduleRecord("a", "{}", "cli", 1.0, 1.0), replace=False)
        wins: list[float] = []
        start = threading.Barrier(self.concurrent_threads)

        def race(n: int) -> None:
            start.wait()
            if store.advance_schedule("a", None, 100.0 + n, 2.0):
                wins.append(100.0 + n)

        threads = [threading.Thread(target=race, args=(n,)) for n in range(self.concurrent_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(wins) == 1
        assert store.schedules()[0].last_tick == wins[0]

    def test_each_tick_gives_one_job_however_many_schedulers_run(self) -> None:
        if self._holding() is None:
            return
        engine, clock = self.engine()
        created = clock.now()
        Schedules(engine).add(schedule("tick", "conformance", every=10.0, missed="catch_up"))
        schedulers = [Schedules(engine) for _ in range(4)]
        for _ in range(6):
            clock.advance(25.0)
            threads = [threading.Thread(target=s.run_pass) for s in schedulers]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        ticks = [t * 10.0 for t in range(int(created // 10) + 1, int(clock.now() // 10) + 1)]
        assert self._jobs() == sorted(tick_key("tick", t) for t in ticks)
        assert Schedules(engine).list()[0].record.last_tick == ticks[-1]

    def test_a_scheduler_that_died_between_submit_and_advance_loses_and_doubles_nothing(
        self,
    ) -> None:
        if self._holding() is None:
            return
        engine, clock = self.engine()
        created = clock.now()
        service = Schedules(engine)
        service.add(schedule("tick", "conformance", every=10.0))
        clock.advance(30.0)
        due = [t * 10.0 for t in range(int(created // 10) + 1, int(clock.now() // 10) + 1)]
        # given a scheduler that submitted the due ticks and died before advancing
        engine.submit_many(
            [("conformance", None, {"idempotency_key": tick_key("tick", t)}) for t in due]
        )
        assert service.list()[0].record.last_tick is None
        # when another scheduler makes its pass
        report = service.run_pass()
        # then the same ticks are found stored, none doubled, and the last tick moved
        assert report.submitted == len(due)
        assert self._jobs() == sorted(tick_key("tick", t) for t in due)
        assert service.list()[0].record.last_tick == due[-1]
        assert service.run_pass().submitted == 0

    def test_a_paused_schedule_submits_nothing_until_resumed(self) -> None:
        if self._holding() is None:
            return
        engine, clock = self.engine()
        service = Schedules(engine)
        service.add(schedule("tick", "conformance", every=10.0))
        assert service.pause("tick") is True
        clock.advance(100.0)
        assert service.run_pass().submitted == 0
        assert service.list()[0].next_tick is None
        assert service.resume("tick") is True
        # missed=skip: the 6 ticks at most LATE_GRACE (60 s) late run, the 4 older are skipped
        assert service.run_pass().submitted == 6
        assert len(self._jobs()) == 6
