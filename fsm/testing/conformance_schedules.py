"""Conformance of `fsm.ports.HoldsSchedules`: part of every `StoreConformance` suite.

A store that does not hold schedules must refuse them by name (BadInput); one that
does must keep definitions, paused flags, last ticks and pass times, write each change
with its audit record (and only then), advance a last tick only by compare-and-set (of
racing writers exactly one wins), let at most one scheduler lead, and, driven by
`fsm.service.maintenance.ticks.Ticks`, give exactly one job per tick however many
schedulers run, dropping none between healthy passes (docs/schedules.md).
"""

from __future__ import annotations

import threading

import attrs

from ..errors import BadInput
from ..ports import HoldsSchedules, ScanRequest, ScheduleChange, SchedulerBeat, ScheduleRecord
from ..service.maintenance.ticks import LEAD_FOR, Ticks
from ..service.schedules import LATE_GRACE, Schedules, schedule, tick_key, ticks_after
from .suite_part import SuitePart

#: the actor and reason of the suite's schedule changes
ACTOR, REASON = "conformance", "conformance suite"


def _change(name: str, action: str, at: float, definition: str | None = None) -> ScheduleChange:
    return ScheduleChange(name, action, "ada", f"{action} {name}", at, definition)


class ScheduleConformance(SuitePart):
    """Mixed into `fsm.testing.conformance.StoreConformance` (which gives `store`, `engine`)."""

    def _holding(self) -> HoldsSchedules | None:
        store = self.store
        if isinstance(store, HoldsSchedules):
            return store
        engine, _ = self.engine()
        refused: BadInput | None = None
        try:
            Schedules(engine).add(
                schedule("s", "conformance", every=1.0), actor=ACTOR, reason=REASON
            )
        except BadInput as err:
            refused = err
        assert refused is not None, "a store without HoldsSchedules must refuse a schedule"
        assert "cannot keep schedules" in str(refused)
        return None

    def _jobs(self) -> list[str]:
        found = self.store.scan(ScanRequest(states=("queued",), limit=100_000))
        return sorted(j.idempotency_key or "" for j in found)

    def test_schedules_are_saved_listed_paused_and_deleted_each_change_audited(self) -> None:
        store = self._holding()
        if store is None:
            return
        a = ScheduleRecord("a", '{"x":1}', "cli", created_at=10.0, updated_at=10.0)
        assert store.save_schedule(a, _change("a", "added", 10.0, '{"x":1}'), replace=False)
        assert store.schedules() == [a]
        # a taken name: nothing written without replace, not even the change
        other = attrs.evolve(a, definition='{"x":2}', updated_at=11.0)
        assert not store.save_schedule(other, _change("a", "added", 11.0), replace=False)
        assert store.schedules() == [a]
        # paused, ticked, then replaced: paused flag, last tick, pass time and creation kept
        assert store.pause_schedule(_change("a", "paused", 12.0), True) is True
        assert store.advance_schedule("a", None, 100.0, 13.0) is True
        replaced = _change("a", "replaced", 14.0, '{"x":2}')
        assert store.save_schedule(attrs.evolve(other, origin="code"), replaced, replace=True)
        (kept,) = store.schedules()
        assert (kept.definition, kept.origin, kept.paused, kept.last_tick) == (
            '{"x":2}',
            "code",
            True,
            100.0,
        )
        assert (kept.checked_at, kept.created_at) == (13.0, 10.0)
        assert store.pause_schedule(_change("a", "resumed", 15.0), False) is True
        assert store.schedules()[0].paused is False
        assert store.pause_schedule(_change("nope", "paused", 15.0), True) is False
        b = ScheduleRecord("b", "{}", "cli", created_at=1.0, updated_at=1.0)
        store.save_schedule(b, _change("b", "added", 16.0, "{}"), replace=False)
        assert [r.name for r in store.schedules()] == ["a", "b"]
        assert store.delete_schedule(_change("a", "removed", 17.0)) is True
        assert store.delete_schedule(_change("a", "removed", 18.0)) is False
        assert [r.name for r in store.schedules()] == ["b"]
        # the trail: every change written, newest first, kept after the removal
        trail = store.schedule_changes("a", 100)
        assert [(c.action, c.at) for c in trail] == [
            ("removed", 17.0),
            ("resumed", 15.0),
            ("replaced", 14.0),
            ("paused", 12.0),
            ("added", 10.0),
        ]
        assert trail[2] == replaced
        assert [c.name for c in store.schedule_changes(None, 2)] == ["a", "b"]
        assert store.schedule_changes("nope", 10) == []

    def test_a_last_tick_moves_only_by_compare_and_set_with_its_pass_time(self) -> None:
        store = self._holding()
        if store is None:
            return
        store.save_schedule(
            ScheduleRecord("a", "{}", "cli", 1.0, 1.0), _change("a", "added", 1.0), replace=False
        )
        assert store.advance_schedule("a", None, None, 1.5) is True  # a pass, no tick yet
        assert store.schedules()[0].checked_at == 1.5
        assert store.advance_schedule("a", None, 1000.25, 2.0) is True
        assert store.advance_schedule("a", None, 1001.0, 2.0) is False  # stale: never ticked
        assert store.advance_schedule("a", 1000.0, 1001.0, 2.0) is False  # stale value
        assert store.advance_schedule("a", 1000.25, 1001.5, 3.0) is True
        assert store.advance_schedule("gone", None, 1.0, 2.0) is False
        (record,) = store.schedules()
        assert (record.last_tick, record.checked_at) == (1001.5, 3.0)

    def test_a_pass_recorded_late_never_moves_checked_at_back(self) -> None:
        store = self._holding()
        if store is None:
            return
        store.save_schedule(
            ScheduleRecord("a", "{}", "cli", 1.0, 1.0), _change("a", "added", 1.0), replace=False
        )
        assert store.advance_schedule("a", None, 100.0, 50.0) is True
        # a pass that read the schedule at 20 records after the one at 50: its tick
        # goes in (the compare-and-set holds), its older time does not
        assert store.advance_schedule("a", 100.0, 101.0, 20.0) is True
        (record,) = store.schedules()
        assert (record.last_tick, record.checked_at) == (101.0, 50.0)
        assert store.advance_schedule("a", 101.0, 101.0, 60.0) is True  # a later pass
        assert store.schedules()[0].checked_at == 60.0

    def test_of_racing_compare_and_sets_exactly_one_wins(self) -> None:
        store = self._holding()
        if store is None:
            return
        store.save_schedule(
            ScheduleRecord("a", "{}", "cli", 1.0, 1.0), _change("a", "added", 1.0), replace=False
        )
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

    def test_one_scheduler_leads_until_its_lead_lapses_or_it_gives_it_up(self) -> None:
        store = self._holding()
        if store is None:
            return

        def beat(owner: str, at: float, lead: float | None) -> bool:
            b = SchedulerBeat(owner, (f"{owner}.kind",), at)
            return store.beat_scheduler(b, lead_until=lead, forget_before=at - 100.0)

        assert beat("a", 10.0, 20.0) is True
        assert beat("b", 11.0, 21.0) is False  # a leads until 20
        assert beat("a", 15.0, 25.0) is True  # renewed
        assert beat("b", 24.0, 34.0) is False
        assert beat("b", 25.5, 35.5) is True  # a's lead lapsed at 25
        assert beat("a", 26.0, 36.0) is False
        assert beat("b", 27.0, None) is False  # b gives it up
        assert beat("a", 27.5, 37.5) is True
        found = {b.owner: b for b in store.schedulers()}
        assert found["a"] == SchedulerBeat("a", ("a.kind",), 27.5, 37.5)
        assert found["b"] == SchedulerBeat("b", ("b.kind",), 27.0, None)
        assert beat("c", 200.0, None) is False  # a and b unseen for 100 s: forgotten
        assert [b.owner for b in store.schedulers()] == ["c"]

    def test_of_racing_schedulers_at_most_one_leads(self) -> None:
        store = self._holding()
        if store is None:
            return
        leads: list[str] = []
        start = threading.Barrier(self.concurrent_threads)

        def race(n: int) -> None:
            start.wait()
            b = SchedulerBeat(f"s{n}", (), 50.0)
            if store.beat_scheduler(b, lead_until=60.0, forget_before=0.0):
                leads.append(b.owner)

        threads = [threading.Thread(target=race, args=(n,)) for n in range(self.concurrent_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(leads) == 1
        assert [b.owner for b in store.schedulers() if b.lead_until is not None] == leads

    def test_each_tick_gives_one_job_however_many_schedulers_run(self) -> None:
        if self._holding() is None:
            return
        engine, clock = self.engine()
        created = clock.now()
        Schedules(engine).add(
            schedule("tick", "conformance", every=10.0), actor=ACTOR, reason=REASON
        )
        schedulers = [Ticks(engine) for _ in range(4)]
        submitted = 0
        for round_ in range(12):
            clock.advance(25.0 if round_ % 3 else LEAD_FOR + 1.0)  # leads lapse, now and then
            reports: list[int] = []

            def run(s: Ticks, into: list[int] = reports) -> None:
                into.append(s.run_once().submitted)

            threads = [threading.Thread(target=run, args=(s,)) for s in schedulers]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            submitted += sum(reports)
        ticks = ticks_after(schedule("tick", "k", every=10.0), created, clock.now(), 1000)
        assert self._jobs() == sorted(tick_key("tick", t) for t in ticks)
        assert submitted == len(ticks), "a follower submitted ticks the leader submitted"
        assert Schedules(engine).list()[0].record.last_tick == ticks[-1]

    def test_no_tick_is_dropped_between_healthy_passes_whatever_their_timing(self) -> None:
        # given catch_up=1 (the strictest policy) and passes 1.5 s apart on a 1 s
        # schedule, then 55 s apart (under LATE_GRACE) on a 10 s one
        if self._holding() is None:
            return
        engine, clock = self.engine()
        service = Schedules(engine)
        fast = schedule("fast", "conformance", every=1.0, missed="catch_up", catch_up=1)
        slow = schedule("slow", "conformance", every=10.0, missed="catch_up", catch_up=1)
        service.add(fast, actor=ACTOR, reason=REASON)
        service.add(slow, actor=ACTOR, reason=REASON)
        created = clock.now()
        ticks = Ticks(engine)
        for _ in range(20):
            clock.advance(1.5)
            ticks.run_once()
        for _ in range(4):
            clock.advance(LATE_GRACE - 5.0)
            assert ticks.run_once().skipped == 0
        # then every tick of both has its job
        expected = [
            tick_key(s.name, t)
            for s in (fast, slow)
            for t in ticks_after(s, created, clock.now(), 10_000)
        ]
        assert self._jobs() == sorted(expected)

    def test_ticks_missed_while_no_scheduler_ran_follow_the_policy(self) -> None:
        if self._holding() is None:
            return
        engine, clock = self.engine()
        service = Schedules(engine)
        skip = schedule("skip", "conformance", every=10.0)
        catch = schedule("catch", "conformance", every=10.0, missed="catch_up", catch_up=3)
        service.add(skip, actor=ACTOR, reason=REASON)
        service.add(catch, actor=ACTOR, reason=REASON)
        Ticks(engine).run_once()
        start = clock.now()
        # when no scheduler runs for an hour
        clock.advance(3600.0)
        now = clock.now()
        report = Ticks(engine).run_once()
        # then the ticks less than LATE_GRACE late run for both, and catch_up also runs
        # the newest 3 older ones; the rest are skipped and counted
        on_time = ticks_after(skip, now - LATE_GRACE, now, 100)
        older = ticks_after(skip, start, now - LATE_GRACE, 1000)
        expected = [tick_key("skip", t) for t in on_time]
        expected += [tick_key("catch", t) for t in older[-3:] + on_time]
        assert self._jobs() == sorted(expected)
        assert report.skipped == 2 * len(older) - 3
        # and nothing skipped comes back at the next passes
        clock.advance(1.0)
        Ticks(engine).run_once()
        assert self._jobs() == sorted(expected)

    def test_a_scheduler_that_died_between_submit_and_advance_loses_and_doubles_nothing(
        self,
    ) -> None:
        if self._holding() is None:
            return
        engine, clock = self.engine()
        created = clock.now()
        service = Schedules(engine)
        service.add(schedule("tick", "conformance", every=10.0), actor=ACTOR, reason=REASON)
        clock.advance(30.0)
        due = [t * 10.0 for t in range(int(created // 10) + 1, int(clock.now() // 10) + 1)]
        # given a scheduler that submitted the due ticks and died before advancing
        engine.submit_many(
            [("conformance", None, {"idempotency_key": tick_key("tick", t)}) for t in due]
        )
        assert service.list()[0].record.last_tick is None
        # when another scheduler makes its pass
        survivor = Ticks(engine)
        report = survivor.run_once()
        # then the same ticks are found stored, none doubled, and the last tick moved
        assert report.submitted == len(due)
        assert self._jobs() == sorted(tick_key("tick", t) for t in due)
        assert service.list()[0].record.last_tick == due[-1]
        assert survivor.run_once().submitted == 0

    def test_a_paused_schedule_submits_nothing_until_resumed(self) -> None:
        if self._holding() is None:
            return
        engine, clock = self.engine()
        service = Schedules(engine)
        s = schedule("tick", "conformance", every=10.0)
        service.add(s, actor=ACTOR, reason=REASON)
        assert service.pause("tick", actor=ACTOR, reason=REASON) is True
        clock.advance(100.0)
        ticks = Ticks(engine)
        assert ticks.run_once().submitted == 0
        assert service.list()[0].next_tick is None
        assert service.resume("tick", actor=ACTOR, reason=REASON) is True
        # missed=skip: the ticks less than LATE_GRACE (60 s) late run, the older are skipped
        now = clock.now()
        report = ticks.run_once()
        assert report.submitted == len(ticks_after(s, now - LATE_GRACE, now, 100))
        assert report.submitted + report.skipped == 10
        assert len(self._jobs()) == report.submitted
        assert [c.action for c in service.changes("tick")] == ["resumed", "paused", "added"]
