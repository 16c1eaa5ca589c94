"""The schedules model lets passes of two schedulers overlap (specs/invariants.md T4)."""

from __future__ import annotations

import attrs
import pytest

from adapters.memory_schedules import MemorySchedules
from fsm.testing.faults import run_faults


def test_a_held_pass_meets_a_whole_pass_of_another_leading_scheduler() -> None:
    # when the schedules model runs at the default size (2 s) on the memory store
    report = run_faults("memory://", models=["schedules"], machine=False, seed=4)
    # then every promise held, and held passes met another scheduler's whole pass at
    # each seam, that scheduler leading once the held lead lapsed, so that a held pass
    # recorded its ticks against a record another pass had moved
    assert report.ok, report.failure
    assert report.checks[
        "T4 a held pass submits what it read, never moves last_tick or checked_at back"
    ]
    for seam in ("read", "submit (every)", "submit (cron)", "record (every)", "record (cron)"):
        assert report.faults[f"schedules: overlap: a pass held at {seam}, another passed"], seam
    assert report.faults["schedules: overlap: both led (the held lead lapsed)"]
    assert report.faults["schedules: overlap: the held pass lost its compare-and-set"]


def test_a_last_tick_advanced_without_its_compare_and_set_fails_t4(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given a memory store whose advance writes whatever last tick it is given (study
    # mutant 04: several workers' schedulers racing move the last tick back)
    def unchecked(
        self: MemorySchedules, name: str, expected: float | None, tick: float | None, at: float
    ) -> bool:
        with self._lock:
            old = self._schedules.get(name)
            if old is None:
                return False
            checked = at if old.checked_at is None else max(old.checked_at, at)
            self._schedules[name] = attrs.evolve(old, last_tick=tick, checked_at=checked)
            return True

    monkeypatch.setattr(MemorySchedules, "advance_schedule", unchecked)
    # when the schedules model runs
    report = run_faults("memory://", models=["schedules"], machine=False, shrink=False, seed=4)
    # then it fails: a held pass recorded what it read over a newer pass's last tick
    assert not report.ok
    assert "T4 schedule" in (report.failure or ""), report.failure
    assert "last_tick moved back" in (report.failure or ""), report.failure


def test_a_late_pass_that_writes_its_own_older_check_time_fails_t4(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given a memory store whose advance keeps its compare-and-set but writes the time
    # it is given: a held pass that records after a newer one moves checked_at back,
    # and the next pass takes the schedule as unattended since then (ticks a scheduler
    # was there to run are skipped as missed)
    def as_given(
        self: MemorySchedules, name: str, expected: float | None, tick: float | None, at: float
    ) -> bool:
        with self._lock:
            old = self._schedules.get(name)
            if old is None or old.last_tick != expected:
                return False
            self._schedules[name] = attrs.evolve(old, last_tick=tick, checked_at=at)
            return True

    monkeypatch.setattr(MemorySchedules, "advance_schedule", as_given)
    # when the schedules model runs
    report = run_faults("memory://", models=["schedules"], machine=False, shrink=False, seed=4)
    # then it fails on T4: checked_at moved back
    assert not report.ok
    assert "checked_at moved back" in (report.failure or ""), report.failure
