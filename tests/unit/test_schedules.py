"""Schedules: cron and interval ticks, DST as cron users expect, the missed-tick policy,
bad input (fsm.service.schedules, pure); and passes of `Ticks` on a fake clock over the
memory store: no tick dropped between healthy passes, fast intervals that keep up, one
leading scheduler, audited changes."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import attrs
import pytest

from adapters.memory import MemoryStore
from fsm import Engine
from fsm.clock import FakeClock
from fsm.errors import BadInput, OperatorError
from fsm.inputs import KindPolicy
from fsm.policies import Limits, Policy
from fsm.ports import ScanRequest
from fsm.service.maintenance.report import Report
from fsm.service.maintenance.ticks import LEAD_FOR, Ticks
from fsm.service.schedules import (
    LATE_GRACE,
    MAX_CATCH_UP,
    MAX_SCHEDULES,
    Schedule,
    Schedules,
    due,
    next_tick,
    schedule,
    tick_key,
    ticks_after,
)

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")


def at(tz: ZoneInfo, *parts: int, fold: int = 0) -> float:
    return datetime(*parts, tzinfo=tz, fold=fold).timestamp()  # type: ignore[misc]


def local(tz: ZoneInfo, ts: float) -> str:
    return datetime.fromtimestamp(ts, tz).strftime("%Y-%m-%d %H:%M %Z")


def test_a_daily_0230_job_runs_once_at_0300_on_the_spring_forward_day() -> None:
    # given 02:30 daily in Berlin; on 2026-03-29 the clock jumps 02:00 -> 03:00
    s = schedule("daily", "report", cron="30 2 * * *", timezone="Europe/Berlin")

    ticks = ticks_after(s, at(BERLIN, 2026, 3, 27, 12), at(BERLIN, 2026, 3, 31, 12), 10)

    assert [local(BERLIN, t) for t in ticks] == [
        "2026-03-28 02:30 CET",
        "2026-03-29 03:00 CEST",  # the first instant after the gap, once
        "2026-03-30 02:30 CEST",
        "2026-03-31 02:30 CEST",
    ]


def test_a_daily_0230_job_runs_once_on_the_fall_back_day_in_the_first_0230() -> None:
    # given 02:30 daily in Berlin; on 2026-10-25 the clock goes 03:00 -> 02:00
    s = schedule("daily", "report", cron="30 2 * * *", timezone="Europe/Berlin")

    ticks = ticks_after(s, at(BERLIN, 2026, 10, 24, 12), at(BERLIN, 2026, 10, 26, 12), 10)

    assert [local(BERLIN, t) for t in ticks] == [
        "2026-10-25 02:30 CEST",  # the first 02:30 (summer time) only
        "2026-10-26 02:30 CET",
    ]


def test_an_hourly_job_runs_in_both_0200_hours_on_the_fall_back_day() -> None:
    s = schedule("hourly", "report", cron="0 * * * *", timezone="Europe/Berlin")

    start = at(BERLIN, 2026, 10, 25, 0, 30)
    ticks = ticks_after(s, start, start + 5 * 3600, 10)

    assert [local(BERLIN, t) for t in ticks] == [
        "2026-10-25 01:00 CEST",
        "2026-10-25 02:00 CEST",
        "2026-10-25 02:00 CET",
        "2026-10-25 03:00 CET",
        "2026-10-25 04:00 CET",
    ]
    assert ticks == sorted(set(ticks))


def test_a_walk_that_starts_inside_the_repeated_hour_never_goes_back() -> None:
    # given 02:15 CET (the second 02:15) on the fall-back day: 02:30 CEST is already past
    s = schedule("daily", "report", cron="30 2 * * *", timezone="Europe/Berlin")
    start = at(BERLIN, 2026, 10, 25, 2, 15, fold=1)

    first = next_tick(s, start)

    assert first is not None
    assert first > start
    assert local(BERLIN, first) == "2026-10-26 02:30 CET"


def test_new_york_spring_forward_moves_a_0230_job_to_0300() -> None:
    s = schedule("ny", "report", cron="30 2 * * *", timezone="America/New_York")
    first = next_tick(s, at(NEW_YORK, 2026, 3, 8, 0))
    assert first is not None
    assert local(NEW_YORK, first) == "2026-03-08 03:00 EDT"


def test_interval_ticks_are_whole_multiples_of_the_interval_since_the_epoch() -> None:
    s = schedule("fast", "ping", every=0.01, subsecond=True)
    ticks = ticks_after(s, 1000.005, 1000.05, 100)
    assert len(ticks) == 5
    assert all(abs(t / 0.01 - round(t / 0.01)) < 1e-6 for t in ticks)
    assert ticks_after(s, 1000.0, 1000.05, 3) == [1000.01, 1000.02, 1000.03]


MINUTE = 1_700_000_000.0 - (1_700_000_000.0 % 60)


def test_between_healthy_passes_every_due_tick_runs_whatever_the_policy() -> None:
    # given catch_up=1 and a pass 59 s after the last one, with 59 ticks due
    s = schedule("fast", "ping", every=1.0, missed="catch_up", catch_up=1)
    found = due(s, MINUTE, MINUTE, MINUTE + 59.5, 100)
    assert found.ticks == [MINUTE + i for i in range(1, 60)]
    assert (found.skipped, found.more) == (0, False)


def test_skip_after_an_outage_runs_the_ticks_less_than_the_grace_late() -> None:
    s = schedule("minutely", "ping", cron="* * * * *")
    now = MINUTE + 3600 + 30  # an hour of downtime: no pass since MINUTE

    found = due(s, MINUTE, MINUTE, now, 100)

    assert found.ticks == [MINUTE + 3600]  # the one tick less than LATE_GRACE late
    assert now - found.ticks[0] < LATE_GRACE
    assert (found.skipped, found.first_skipped, found.last_skipped) == (
        59,
        MINUTE + 60,
        MINUTE + 3540,
    )
    assert found.handled == MINUTE + 3600


def test_skip_after_an_outage_with_nothing_on_time_still_moves_past_the_skipped() -> None:
    s = schedule("hourly", "ping", cron="0 * * * *")
    found = due(s, 0.0, 0.0, 5 * 3600 + 1800, 100)
    assert found.ticks == []
    assert found.skipped == 5
    assert found.handled == 5 * 3600  # the next pass starts after the skipped ticks


def test_skip_found_in_the_repeated_hour_moves_past_the_days_first_0230() -> None:
    # given 02:30 daily in Berlin, and an outage found at 02:18 CET on the fall-back day,
    # after the day's tick (02:30 CEST, 48 minutes earlier) but before 02:30 on the wall
    s = schedule("daily", "report", cron="30 2 * * *", timezone="Europe/Berlin")
    tick = at(BERLIN, 2026, 10, 25, 2, 30)
    now = at(BERLIN, 2026, 10, 25, 2, 18, fold=1)
    assert now - tick == 48 * 60

    found = due(s, tick - 3 * 86400, tick - 3 * 86400, now, 10)

    # then it skips three ticks and records the newest, the day's, as handled: a
    # skipped tick never comes back on the next (on-time) pass
    assert found.ticks == []
    assert found.skipped == 3
    assert found.last_skipped == tick
    assert found.handled == tick
    assert due(s, tick, now, now + 60, 10).ticks == []


def test_catch_up_after_an_outage_runs_the_newest_n_missed_ticks_oldest_first() -> None:
    s = schedule("minutely", "ping", cron="* * * * *", missed="catch_up", catch_up=3)
    now = MINUTE + 3600 + 30

    found = due(s, MINUTE, MINUTE, now, 100)

    # 3 missed (> LATE_GRACE late) and the one on time
    assert found.ticks == [MINUTE + 3420, MINUTE + 3480, MINUTE + 3540, MINUTE + 3600]
    assert (found.skipped, found.last_skipped) == (56, MINUTE + 3360)


def test_catch_up_of_everything_missed_skips_nothing() -> None:
    s = schedule("minutely", "ping", cron="* * * * *", missed="catch_up", catch_up=100)
    found = due(s, MINUTE, MINUTE, MINUTE + 600, 100)
    assert found.ticks == [MINUTE + 60 * i for i in range(1, 11)]
    assert found.skipped == 0
    assert found.last_skipped is None


def test_a_pass_submits_at_most_its_limit_oldest_first_and_says_more_are_due() -> None:
    s = schedule("fast", "ping", every=1.0, missed="catch_up", catch_up=MAX_CATCH_UP)
    found = due(s, 1000.0, 1000.0, 1500.0, 20)
    # all 500 missed ticks are within catch_up: they go 20 a pass, oldest first
    assert found.ticks == [1000.0 + i for i in range(1, 21)]
    assert (found.skipped, found.more) == (0, True)


def test_no_tick_is_due_before_the_first_one() -> None:
    s = schedule("hourly", "ping", cron="0 * * * *")
    assert due(s, 3600.0, 3600.0, 3600.0 + 59 * 60, 10).ticks == []


def test_the_tick_key_names_the_schedule_and_the_utc_instant() -> None:
    t = datetime(2026, 3, 29, 1, 0, tzinfo=UTC).timestamp()
    assert tick_key("daily", t) == "schedule:daily:2026-03-29T01:00:00+00:00"


def test_a_schedule_round_trips_through_json() -> None:
    s = schedule(
        "daily",
        "report",
        cron="0  3 * * MON",
        timezone="Europe/Berlin",
        payload={"to": "ops"},
        queue="reports",
        priority=5,
        missed="catch_up",
        catch_up=4,
    )
    assert s.cron == "0 3 * * MON"
    assert Schedule.from_json(s.to_json()) == s


@pytest.mark.parametrize(
    "s",
    [
        schedule("daily", "report", cron="0 3 * * MON", timezone="Europe/Berlin"),
        schedule("fast", "ping", every=0.25, subsecond=True, payload={"n": [1, 2.5]}),
        schedule("mail", "send", every=60, payload={"to": "Zoë ✉", "b": None, "a": True}),
        schedule("q", "x", every=3600, queue="reports", priority=-3, missed="catch_up"),
    ],
    ids=["cron", "subsecond", "unicode-payload", "options"],
)
def test_a_schedule_is_stored_as_the_same_text_as_before_fsm_jsonio(s: Schedule) -> None:
    # given the encoding definitions were stored with before fsm.jsonio.canonical
    before = json.dumps(attrs.asdict(s), sort_keys=True, separators=(",", ":"))
    # then the text is byte for byte the same (declare compares stored text: a change
    # would rewrite and audit every schedule declared in code at the next start)
    assert s.to_json() == before


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cron": "61 * * * *"}, "bad cron expression '61 \\* \\* \\* \\*': Bad minute"),
        ({"cron": "* * *"}, "bad cron expression"),
        ({"cron": "0 0 30 2 *"}, "bad cron expression"),
        ({"cron": "0 * * * *", "timezone": "Mars/Olympus"}, "unknown timezone 'Mars/Olympus'"),
        ({"cron": "0 * * * *", "every": 5}, "exactly one"),
        ({}, "exactly one"),
        ({"every": 0}, "every must be"),
        ({"every": float("nan")}, "every must be"),
        ({"every": "5"}, "every must be a finite number"),
        ({"every": 10**400}, "every must be a finite number"),
        ({"every": 0.5}, "every must be 1\\.\\..* seconds \\(under 1 s: subsecond=True"),
        ({"every": 0.005, "subsecond": True}, "every must be 0\\.01\\.\\."),
        ({"every": 5, "subsecond": "yes"}, "subsecond must be true or false"),
        ({"every": 5, "priority": 2**70}, "could never be submitted: priority must be"),
        ({"every": 5, "priority": True}, "could never be submitted: priority must be"),
        ({"every": 5, "queue": ""}, "could never be submitted: queue must be"),
        ({"every": 5, "missed": "later"}, "missed must be one of skip, catch_up"),
        ({"every": 5, "missed": "catch_up", "catch_up": 0}, "catch_up must be 1..1000"),
        ({"every": 5, "payload": object()}, "payload of schedule 'nightly'"),
        ({"every": 5, "queue": "bad queue"}, "queue"),
    ],
)
def test_bad_schedules_are_refused_by_name(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(BadInput, match=message):
        schedule("nightly", "report", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["", "has space", "a:b", "x" * 101, None])
def test_bad_schedule_names_are_refused(name: object) -> None:
    with pytest.raises(BadInput, match="schedule name"):
        schedule(name, "report", every=5)  # type: ignore[arg-type]


def test_a_stored_definition_from_before_the_floor_keeps_its_interval() -> None:
    legacy = schedule("fast", "ping", every=0.25, subsecond=True).to_json()
    legacy = legacy.replace(',"subsecond":true', "")
    assert "subsecond" not in legacy
    assert Schedule.from_json(legacy).every == 0.25


def test_an_interval_under_the_floor_is_logged_as_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="fsm.service.schedules"):
        schedule("fast", "ping", every=0.25, subsecond=True)
        schedule("slow", "ping", every=1.0)
    (record,) = caplog.records
    assert "schedule 'fast': every 0.25 s is under the 1 s floor" in record.getMessage()
    assert "up to 4 jobs a second" in record.getMessage()


# --- passes of `Ticks` on a fake clock (memory store): the reproductions ---------

ALL = ("queued",)
ACTOR = {"actor": "test", "reason": "unit test"}


def _engine(**kw: Any) -> tuple[Engine, FakeClock]:
    clock = FakeClock(start=1_700_000_000.0)
    return Engine(MemoryStore(), clock=clock, **kw), clock


def _keys(engine: Engine) -> list[str]:
    return sorted(j.idempotency_key or "" for j in engine.scan(ScanRequest(ALL, limit=100_000)))


def _expected(engine: Engine, s: Schedule) -> list[str]:
    created = Schedules(engine).list()[0].record.created_at
    last = Schedules(engine).list()[0].record.last_tick
    assert last is not None
    return sorted(tick_key(s.name, t) for t in ticks_after(s, created, last, 1_000_000))


def _passes(schedulers: list[Ticks], clock: FakeClock, gaps: list[float]) -> list[Report]:
    """Each scheduler passes in turn, `gap` seconds after the one before (as jittered
    passes of several workers fall)."""
    reports = []
    for gap in gaps:
        clock.advance(gap)
        reports.append(schedulers[len(reports) % len(schedulers)].run_once())
    return reports


@pytest.mark.parametrize(
    ("every", "catch_up", "gaps", "schedulers"),
    [
        # 0.25 s, catch_up=2, four healthy workers passing about every 1 s each, together
        (0.25, 2, [0.02, 0.03, 0.05, 0.9] * 100, 4),
        # 0.05 s, the default catch_up=10, no faults, one worker every 1 s
        (0.05, 10, [1.0, 0.9, 1.1] * 60, 1),
        # 1 s, catch_up=1, passes 1.5 s apart
        (1.0, 1, [1.5] * 8, 1),
    ],
)
def test_catch_up_drops_no_tick_between_healthy_passes(
    every: float, catch_up: int, gaps: list[float], schedulers: int
) -> None:
    engine, clock = _engine()
    s = schedule("s", "ping", every=every, missed="catch_up", catch_up=catch_up, subsecond=True)
    Schedules(engine).add(s, **ACTOR)
    reports = _passes([Ticks(engine) for _ in range(schedulers)], clock, gaps)
    assert sum(r.skipped for r in reports) == 0
    assert _keys(engine) == _expected(engine, s)
    # the leader passes about once a second (the followers submit nothing)
    assert len(_keys(engine)) >= (sum(gaps) - 1.5) / every


def test_the_fastest_interval_keeps_up_and_schedulers_do_not_submit_the_same_ticks() -> None:
    # given the floor, 0.01 s, and four schedulers passing every ~1 s for 2 minutes
    engine, clock = _engine()
    s = schedule("fastest", "ping", every=0.01, subsecond=True)
    Schedules(engine).add(s, **ACTOR)
    schedulers = [Ticks(engine) for _ in range(4)]
    reports = _passes(schedulers, clock, [0.24, 0.26, 0.25, 0.25] * 120)
    # then every tick has one job, none was skipped, and the submits were not repeated
    keys = _keys(engine)
    assert keys == _expected(engine, s)
    assert len(keys) >= 11_900
    assert sum(r.skipped for r in reports) == 0
    assert sum(r.submitted for r in reports) == len(keys)


def test_a_pass_bound_makes_a_schedule_late_never_dropped_and_it_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine, clock = _engine()
    s = schedule("fast", "ping", every=0.01, subsecond=True)
    Schedules(engine).add(s, **ACTOR)
    ticks = Ticks(engine)
    clock.advance(5.0)  # 500 ticks due
    with caplog.at_level(logging.WARNING, logger="fsm.service.maintenance.ticks"):
        first = ticks.run_once(limit=100)
        rest = [ticks.run_once(limit=100) for _ in range(4)]  # passes again at once
    assert (first.submitted, first.behind) == (100, 1)
    assert [r.behind for r in rest] == [1, 1, 1, 0]
    assert _keys(engine) == _expected(engine, s)
    assert len(_keys(engine)) == 500
    assert any("it is behind" in r.getMessage() for r in caplog.records)


def test_a_follower_submits_nothing_and_takes_over_when_the_lead_lapses() -> None:
    engine, clock = _engine()
    s = schedule("s", "ping", every=1.0)
    Schedules(engine).add(s, **ACTOR)
    leader, follower = Ticks(engine), Ticks(engine)
    clock.advance(3.0)
    assert leader.run_once().submitted == 3
    clock.advance(3.0)
    assert follower.run_once().submitted == 0  # the leader leads
    assert not follower.leading
    clock.advance(LEAD_FOR)  # the leader died: its lead lapses
    assert follower.run_once().submitted == 3 + int(LEAD_FOR)
    assert follower.leading
    assert _keys(engine) == _expected(engine, s)
    follower.stop()  # a clean stop gives the lead up at once
    assert leader.run_once().submitted == 0
    assert leader.leading


def test_a_schedule_whose_kind_no_live_worker_handles_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    engine, clock = _engine()
    Schedules(engine).add(schedule("s", "report.build", every=1.0), **ACTOR)
    ticks = Ticks(engine, kinds=["email.send"])
    with caplog.at_level(logging.WARNING, logger="fsm.service.maintenance.ticks"):
        for _ in range(3):
            clock.advance(1.0)
            ticks.run_once()
    found = [r.getMessage() for r in caplog.records if "no live worker" in r.getMessage()]
    assert found == [
        "schedule s: no live worker handles kind 'report.build'; its jobs wait until one does"
    ]
    assert Schedules(engine).list()[0].handled is False
    # a worker that handles it (scheduler or not) is seen
    Ticks(engine, owner="other", kinds=["report.build"]).beat()
    assert Schedules(engine).list()[0].handled is True


def test_a_schedule_the_engine_would_refuse_at_submit_is_refused_at_add() -> None:
    small = Policy(limits=Limits(max_payload_bytes=1000))
    engine, _ = _engine(kinds={"known": KindPolicy()}, strict_kinds=True, policy=small)
    service = Schedules(engine)
    with pytest.raises(BadInput, match="could never be submitted"):
        service.add(schedule("s", "unknown", every=5), **ACTOR)
    big = schedule("big", "known", every=5, payload="x" * 2000)
    with pytest.raises(BadInput, match="schedule 'big': its jobs could never be submitted"):
        service.add(big, **ACTOR)
    assert service.list() == []
    assert service.changes() == []


def test_schedule_changes_need_an_actor_and_a_reason_and_are_audited() -> None:
    engine, clock = _engine()
    service = Schedules(engine)
    s = schedule("s", "ping", every=5)
    with pytest.raises(OperatorError, match="needs a non-empty actor"):
        service.add(s, actor="", reason="r")
    with pytest.raises(OperatorError, match="needs a non-empty reason"):
        service.pause("s", actor="ada", reason=" ")
    assert service.list() == []
    service.add(s, actor="ada", reason="nightly report")
    clock.advance(1.0)
    service.pause("s", actor="bob", reason="maintenance window")
    service.remove("s", actor="ada", reason="retired")
    trail = service.changes("s")
    assert [(c.action, c.actor, c.reason) for c in trail] == [
        ("removed", "ada", "retired"),
        ("paused", "bob", "maintenance window"),
        ("added", "ada", "nightly report"),
    ]
    assert trail[-1].definition == s.to_json()


def test_a_store_keeps_at_most_max_schedules() -> None:
    engine, _ = _engine()
    service = Schedules(engine)
    for n in range(MAX_SCHEDULES):
        service.add(schedule(f"s{n}", "ping", cron="0 0 * * *"), **ACTOR)
    with pytest.raises(BadInput, match=f"at most {MAX_SCHEDULES} schedules"):
        service.add(schedule("one-more", "ping", cron="0 0 * * *"), **ACTOR)
    # replacing one that is stored is not adding
    assert service.add(schedule("s0", "ping", every=60), replace=True, **ACTOR)
