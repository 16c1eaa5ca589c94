"""Schedules, pure: cron and interval ticks, DST as cron users expect, missed-tick policies,
bad input (fsm.schedules)."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from fsm.errors import BadInput
from fsm.schedules import (
    LATE_GRACE,
    MAX_CATCH_UP,
    Schedule,
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
    s = schedule("fast", "ping", every=0.01)
    ticks = ticks_after(s, 1000.005, 1000.05, 100)
    assert len(ticks) == 5
    assert all(abs(t / 0.01 - round(t / 0.01)) < 1e-6 for t in ticks)
    assert ticks_after(s, 1000.0, 1000.05, 3) == [1000.01, 1000.02, 1000.03]


def test_skip_runs_ticks_within_the_grace_and_skips_older_ones() -> None:
    s = schedule("minutely", "ping", cron="* * * * *")
    last = 1_700_000_000.0 - (1_700_000_000.0 % 60)
    now = last + 3600 + 30  # an hour of downtime

    found = due(s, last, now, 100)

    assert found.ticks == [last + 3600]  # the one tick at most LATE_GRACE late
    assert found.skipped == last + 3540
    assert now - found.ticks[0] <= LATE_GRACE


def test_catch_up_runs_the_newest_n_missed_ticks_oldest_first() -> None:
    s = schedule("minutely", "ping", cron="* * * * *", missed="catch_up", catch_up=3)
    last = 1_700_000_000.0 - (1_700_000_000.0 % 60)
    now = last + 3600 + 30

    found = due(s, last, now, 100)

    assert found.ticks == [last + 3480, last + 3540, last + 3600]
    assert found.skipped == last + 3420


def test_catch_up_of_everything_missed_skips_nothing() -> None:
    s = schedule("minutely", "ping", cron="* * * * *", missed="catch_up", catch_up=100)
    last = 1_700_000_000.0 - (1_700_000_000.0 % 60)
    found = due(s, last, last + 600, 100)
    assert found.ticks == [last + 60 * i for i in range(1, 11)]
    assert found.skipped is None


def test_a_pass_submits_at_most_its_limit_oldest_first() -> None:
    s = schedule("fast", "ping", every=1.0, missed="catch_up", catch_up=MAX_CATCH_UP)
    found = due(s, 1000.0, 1500.0, 20)
    # all 500 missed ticks are within catch_up: they go 20 a pass, oldest first
    assert found.ticks == [1000.0 + i for i in range(1, 21)]
    assert found.skipped is None


def test_no_tick_is_due_before_the_first_one() -> None:
    s = schedule("hourly", "ping", cron="0 * * * *")
    assert due(s, 3600.0, 3600.0 + 59 * 60, 10).ticks == []


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
        ({"every": "5"}, "every must be a number"),
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
