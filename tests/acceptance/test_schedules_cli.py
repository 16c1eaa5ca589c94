"""`jobfsm schedules`: add, list (last and next tick), pause, resume, remove, each with
--actor and --reason, and `history` showing who changed what; bad input (including
options its jobs would be refused with at submit) gets one clear line and stores nothing."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from ._cli import ok_here, ok_json_here, one_line_error, run_cli

WHO = ("--actor", "ada", "--reason", "nightly report for ops")


def test_a_schedule_is_added_listed_paused_resumed_and_removed(sqlite_url: str) -> None:
    out = ok_here(
        *("schedules", "add", "nightly", "--kind", "report.build", "--cron", "30 2 * * *"),
        *("--timezone", "Europe/Berlin", "--payload", '{"r": 1}', "--store", sqlite_url, *WHO),
    )
    assert "cron 30 2 * * * (Europe/Berlin)" in out

    (listed,) = ok_json_here("schedules", "list", "--store", sqlite_url)
    assert listed["name"] == "nightly"
    assert listed["origin"] == "cli"
    assert listed["paused"] is False
    assert listed["last_tick"] is None
    nxt = datetime.fromisoformat(listed["next_tick_utc"])
    assert nxt.astimezone(ZoneInfo("Europe/Berlin")).strftime("%H:%M") in (
        "02:30",
        "03:00",  # the spring-forward day
    )
    table = ok_here("schedules", "list", "--store", sqlite_url)
    assert "nightly" in table
    assert "next tick (UTC)" in table

    ok_here(
        "schedules", "pause", "nightly", "--store", sqlite_url, "--actor", "bob", "--reason", "db"
    )
    (paused,) = ok_json_here("schedules", "list", "--store", sqlite_url)
    assert paused["paused"] is True
    assert paused["next_tick"] is None
    ok_here("schedules", "resume", "nightly", "--store", sqlite_url, *WHO)
    ok_here(
        "schedules", "remove", "nightly", "--store", sqlite_url, "--actor", "ada", "--reason", "old"
    )
    assert ok_json_here("schedules", "list", "--store", sqlite_url) == []

    # then the trail shows every change, newest first, after the schedule is gone
    trail = ok_json_here("schedules", "history", "nightly", "--store", sqlite_url)
    assert [(c["action"], c["actor"], c["reason"]) for c in trail] == [
        ("removed", "ada", "old"),
        ("resumed", "ada", "nightly report for ops"),
        ("paused", "bob", "db"),
        ("added", "ada", "nightly report for ops"),
    ]
    assert trail[-1]["definition"]["cron"] == "30 2 * * *"
    table = ok_here("schedules", "history", "--store", sqlite_url)
    assert "removed" in table
    assert "bob" in table


@pytest.mark.parametrize("command", ["add", "pause", "resume", "remove"])
def test_a_change_without_actor_or_reason_is_refused_and_changes_nothing(
    sqlite_url: str, command: str
) -> None:
    ok_here("schedules", "add", "keep", "--kind", "k", "--every", "60", "--store", sqlite_url, *WHO)
    args = ["--kind", "k", "--every", "5"] if command == "add" else []
    name = "new" if command == "add" else "keep"

    no_actor = run_cli("schedules", command, name, *args, "--reason", "r", "--store", sqlite_url)
    blank = run_cli(
        *("schedules", command, name, *args),
        *("--actor", "ada", "--reason", " ", "--store", sqlite_url),
    )

    assert no_actor.returncode == blank.returncode == 2
    assert "--actor" in one_line_error(no_actor)
    assert "--reason" in one_line_error(blank)
    (kept,) = ok_json_here("schedules", "list", "--store", sqlite_url)
    assert (kept["name"], kept["paused"]) == ("keep", False)
    assert len(ok_json_here("schedules", "history", "--store", sqlite_url)) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cron", "61 * * * *"], "bad cron expression '61 * * * *'"),
        (["--cron", "* * * * *", "--timezone", "Mars/Olympus"], "unknown timezone"),
        (["--every", "0"], "every must be"),
        (["--every", "0.5"], "under 1 s: subsecond=True, --subsecond"),
        (["--every", "0.001", "--subsecond"], "every must be 0.01.."),
        (["--every", "1e400"], "every must be a finite number"),
        (["--every", "1" + "0" * 400], "every must be a finite number"),
        (["--cron", "* * * * *", "--every", "5"], "exactly one"),
        (["--every", "5", "--payload", "{nope"], "--payload"),
        (
            ["--every", "5", "--priority", "99999999999999999999"],
            "its jobs could never be submitted: priority must be an integer",
        ),
        (["--every", "5", "--queue", "no spaces"], "its jobs could never be submitted: queue"),
    ],
)
def test_bad_input_is_one_line_and_stores_nothing(
    sqlite_url: str, args: list[str], message: str
) -> None:
    ok_here("schedules", "add", "keep", "--kind", "k", "--every", "60", "--store", sqlite_url, *WHO)

    done = run_cli("schedules", "add", "bad", "--kind", "k", *args, "--store", sqlite_url, *WHO)

    assert done.returncode == 2
    assert message in one_line_error(done)
    assert [s["name"] for s in ok_json_here("schedules", "list", "--store", sqlite_url)] == ["keep"]
    assert len(ok_json_here("schedules", "history", "--store", sqlite_url)) == 1


def test_a_subsecond_interval_is_allowed_when_asked_for_with_a_warning(sqlite_url: str) -> None:
    done = run_cli(
        *("schedules", "add", "fast", "--kind", "k", "--every", "0.25", "--subsecond"),
        *("--store", sqlite_url, *WHO),
    )
    assert done.returncode == 0, done.stderr
    assert "under the 1 s floor" in done.stderr
    (listed,) = ok_json_here("schedules", "list", "--store", sqlite_url)
    assert listed["definition"]["every"] == 0.25
    assert listed["definition"]["subsecond"] is True


def test_a_bad_name_a_taken_name_and_an_unknown_name_are_refused(sqlite_url: str) -> None:
    ok_here("schedules", "add", "keep", "--kind", "k", "--every", "60", "--store", sqlite_url, *WHO)
    bad = run_cli(
        "schedules", "add", "no spaces", "--kind", "k", "--every", "1", "--store", sqlite_url, *WHO
    )
    assert "schedule name" in one_line_error(bad)
    taken = run_cli(
        "schedules", "add", "keep", "--kind", "k", "--every", "1", "--store", sqlite_url, *WHO
    )
    assert "exists" in one_line_error(taken)
    gone = run_cli("schedules", "pause", "nope", "--store", sqlite_url, *WHO)
    assert "no schedule named 'nope'" in one_line_error(gone)
    (kept,) = ok_json_here("schedules", "list", "--store", sqlite_url)
    assert kept["definition"]["every"] == 60.0
    assert [c["action"] for c in ok_json_here("schedules", "history", "--store", sqlite_url)] == [
        "added"
    ]


def test_trigger_submits_the_tick_now_audited_once_per_instant(sqlite_url: str) -> None:
    # given a paused schedule whose next tick is a day away
    ok_here(
        *("schedules", "add", "report", "--kind", "report.build", "--every", "86400"),
        *("--payload", '{"r": 2}', "--queue", "reports", "--store", sqlite_url, *WHO),
    )
    ok_here(
        "schedules", "pause", "report", "--store", sqlite_url, "--actor", "bob", "--reason", "db"
    )

    # when an operator triggers it
    out = ok_json_here(
        *("schedules", "trigger", "report", "--store", sqlite_url),
        *("--actor", "carol", "--reason", "rerun after the fix"),
    )

    # then its job is submitted now, with the schedule's kind, payload and queue
    assert (out["name"], out["kind"], out["state"]) == ("report", "report.build", "queued")
    (job,) = ok_json_here("list", "--store", sqlite_url)
    assert (job["id"], job["kind"], job["queue"]) == (out["job"], "report.build", "reports")
    assert job["payload"] == {"r": 2}
    # and the trigger is in the schedule's trail, naming who, why and the job
    newest = ok_json_here("schedules", "history", "report", "--store", sqlite_url)[0]
    assert (newest["action"], newest["actor"], newest["reason"]) == (
        "triggered",
        "carol",
        "rerun after the fix",
    )
    assert newest["definition"] == {"job": out["job"]}
    # and the schedule stays paused, its ticks unmoved
    (listed,) = ok_json_here("schedules", "list", "--store", sqlite_url)
    assert (listed["paused"], listed["last_tick"]) == (True, None)


def test_trigger_needs_actor_reason_and_a_known_schedule(sqlite_url: str) -> None:
    ok_here("schedules", "add", "keep", "--kind", "k", "--every", "60", "--store", sqlite_url, *WHO)

    no_actor = run_cli("schedules", "trigger", "keep", "--reason", "r", "--store", sqlite_url)
    unknown = run_cli("schedules", "trigger", "nope", "--store", sqlite_url, *WHO)

    assert no_actor.returncode == unknown.returncode == 2
    assert "--actor" in one_line_error(no_actor)
    assert "no schedule named 'nope'" in one_line_error(unknown)
    assert ok_json_here("list", "--store", sqlite_url) == []
    assert [c["action"] for c in ok_json_here("schedules", "history", "--store", sqlite_url)] == [
        "added"
    ]
