"""`jobfsm limits`: set, list (with the jobs holding a slot and waiting), clear, each
with --actor and --reason, `history` showing who changed what, `status` showing the
limits; bad input gets one clear line and stores nothing."""

from __future__ import annotations

from ._cli import ok_here, ok_json_here, one_line_error, run_cli

WHO = ("--actor", "ada", "--reason", "the mail vendor allows 2 at once")


def test_a_limit_is_set_listed_shown_by_status_and_cleared(sqlite_url: str) -> None:
    for _ in range(3):
        ok_here("submit", "email", "--store", sqlite_url)
    out = ok_here(
        *("limits", "set", "kind:email", "--concurrency", "2", "--rate", "50", "--period", "1"),
        *("--store", sqlite_url, *WHO),
    )
    assert "limit kind:email: 2 running, 50 per 1s" in out

    (listed,) = ok_json_here("limits", "list", "--store", sqlite_url)
    assert (listed["key"], listed["concurrency"], listed["rate"], listed["period"]) == (
        "kind:email",
        2,
        50,
        1.0,
    )
    assert (listed["holding"], listed["waiting"], listed["actor"]) == (0, 3, "ada")
    assert "kind:email" in ok_here("limits", "list", "--store", sqlite_url)
    status = ok_json_here("status", "--store", sqlite_url)
    assert status["limits"]["kind:email"]["concurrency"] == 2
    assert "limit kind:email: 2 running, 50 per 1s; 0 holding a slot, 3 waiting" in ok_here(
        "status", "--store", sqlite_url
    )

    ok_here(
        "limits", "clear", "kind:email", "--store", sqlite_url, "--actor", "bob", "--reason", "ok"
    )
    assert ok_json_here("limits", "list", "--store", sqlite_url) == []
    trail = ok_json_here("limits", "history", "--store", sqlite_url)
    assert [(c["actor"], c["before"], c["after"]) for c in trail] == [
        ("bob", "2 running, 50 per 1s", None),
        ("ada", None, "2 running, 50 per 1s"),
    ]


def test_bad_limits_get_one_line_and_store_nothing(sqlite_url: str) -> None:
    ok_here("submit", "email", "--store", sqlite_url)
    cases = [
        (("kind:email", "--concurrency", "0"), "positive integer"),
        (("kind:email", "--rate", "5", "--period", "0.0001"), "1 ms"),
        (("kind:email", "--rate", "5", "--period", "nan"), "finite"),
        (("kind:email", "--rate", "5"), "needs a period"),
        (("kind:nosuch", "--concurrency", "3"), "unknown kind 'nosuch'"),
        (("email", "--concurrency", "3"), "'kind:NAME' or 'queue:NAME'"),
    ]
    for args, words in cases:
        line = one_line_error(run_cli("limits", "set", *args, "--store", sqlite_url, *WHO))
        assert words in line, line
    assert ok_json_here("limits", "list", "--store", sqlite_url) == []
    assert ok_json_here("limits", "history", "--store", sqlite_url) == []
