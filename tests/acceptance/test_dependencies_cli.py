"""`jobfsm submit --after` and `jobfsm inspect` on dependent jobs, as a user runs them."""

from __future__ import annotations

from ._cli import ok_here, ok_json_here, one_line_error, run_cli


def test_submit_after_waits_and_inspect_shows_both_sides_of_the_dependency(
    sqlite_url: str,
) -> None:
    # given: a job, and a second one submitted to run after it
    first = ok_json_here("submit", "extract", "--store", sqlite_url)["job"]
    second = ok_json_here(
        "submit",
        "report",
        "--store",
        sqlite_url,
        "--after",
        first["id"],
        "--on-failed-dependency",
        "investigate",
    )["job"]
    assert second["state"] == "waiting"
    assert second["on_failed_dependency"] == "investigate"

    # when: each is inspected
    waiter = ok_json_here("inspect", second["id"], "--store", sqlite_url)
    awaited = ok_json_here("inspect", first["id"], "--store", sqlite_url)
    text = ok_here("inspect", second["id"], "--store", sqlite_url)

    # then: the dependent lists its prerequisite, the prerequisite its dependent
    assert waiter["prerequisites"] == {first["id"]: "queued"}
    assert waiter["dependents"] == {}
    assert awaited["dependents"] == {second["id"]: "waiting"}
    assert "prerequisites (after)" in text
    assert first["id"] in text


def test_submit_after_an_unknown_job_is_one_clear_line_and_stores_nothing(
    sqlite_url: str,
) -> None:
    ok_here("migrate", sqlite_url)
    done = run_cli("submit", "report", "--store", sqlite_url, "--after", "NO-SUCH-JOB")
    line = one_line_error(done)
    assert "NO-SUCH-JOB" in line
    assert "nothing was written" in line
    assert ok_json_here("status", "--store", sqlite_url)["counts"] == {}
