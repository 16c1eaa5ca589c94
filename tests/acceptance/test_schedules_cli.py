"""`jobfsm schedules`: add, list (last and next tick), pause, resume, remove; bad input
gets one clear line and stores nothing."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from ._cli import ok, ok_json, one_line_error, run_cli


def test_a_schedule_is_added_listed_paused_resumed_and_removed(sqlite_url: str) -> None:
    out = ok(
        *("schedules", "add", "nightly", "--kind", "report.build", "--cron", "30 2 * * *"),
        *("--timezone", "Europe/Berlin", "--payload", '{"r": 1}', "--store", sqlite_url),
    )
    assert "cron 30 2 * * * (Europe/Berlin)" in out

    (listed,) = ok_json("schedules", "list", "--store", sqlite_url)
    assert listed["name"] == "nightly"
    assert listed["origin"] == "cli"
    assert listed["paused"] is False
    assert listed["last_tick"] is None
    nxt = datetime.fromisoformat(listed["next_tick_utc"])
    assert nxt.astimezone(ZoneInfo("Europe/Berlin")).strftime("%H:%M") in (
        "02:30",
        "03:00",  # the spring-forward day
    )
    table = ok("schedules", "list", "--store", sqlite_url)
    assert "nightly" in table
    assert "next tick (UTC)" in table

    ok("schedules", "pause", "nightly", "--store", sqlite_url)
    (paused,) = ok_json("schedules", "list", "--store", sqlite_url)
    assert paused["paused"] is True
    assert paused["next_tick"] is None
    ok("schedules", "resume", "nightly", "--store", sqlite_url)
    ok("schedules", "remove", "nightly", "--store", sqlite_url)
    assert ok_json("schedules", "list", "--store", sqlite_url) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cron", "61 * * * *"], "bad cron expression '61 * * * *'"),
        (["--cron", "* * * * *", "--timezone", "Mars/Olympus"], "unknown timezone"),
        (["--every", "0"], "every must be"),
        (["--cron", "* * * * *", "--every", "5"], "exactly one"),
        (["--every", "5", "--payload", "{nope"], "--payload"),
    ],
)
def test_bad_input_is_one_line_and_stores_nothing(
    sqlite_url: str, args: list[str], message: str
) -> None:
    ok("schedules", "add", "keep", "--kind", "k", "--every", "60", "--store", sqlite_url)

    done = run_cli("schedules", "add", "bad", "--kind", "k", *args, "--store", sqlite_url)

    assert done.returncode == 2
    assert message in one_line_error(done)
    assert [s["name"] for s in ok_json("schedules", "list", "--store", sqlite_url)] == ["keep"]


def test_a_bad_name_a_taken_name_and_an_unknown_name_are_refused(sqlite_url: str) -> None:
    ok("schedules", "add", "keep", "--kind", "k", "--every", "60", "--store", sqlite_url)
    bad = run_cli(
        "schedules", "add", "no spaces", "--kind", "k", "--every", "1", "--store", sqlite_url
    )
    assert "schedule name" in one_line_error(bad)
    taken = run_cli(
        "schedules", "add", "keep", "--kind", "k", "--every", "1", "--store", sqlite_url
    )
    assert "exists" in one_line_error(taken)
    gone = run_cli("schedules", "pause", "nope", "--store", sqlite_url)
    assert "no schedule named 'nope'" in one_line_error(gone)
    (kept,) = ok_json("schedules", "list", "--store", sqlite_url)
    assert kept["definition"]["every"] == 60.0
