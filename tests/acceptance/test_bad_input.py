"""Bad input: one line on stderr naming the problem, a non-zero exit, nothing changed."""

from __future__ import annotations

from pathlib import Path

from ._cli import ok, ok_json, one_line_error, run_cli


def test_unknown_job_id_is_named(sqlite_url: str) -> None:
    ok("migrate", sqlite_url)

    line = one_line_error(run_cli("inspect", "NOSUCHJOB", "--store", sqlite_url))

    assert "no job with id 'NOSUCHJOB'" in line


def test_illegal_operator_action_names_the_state_and_the_event(sqlite_url: str) -> None:
    job_id = ok_json("submit", "report.build", "--store", sqlite_url)["job"]["id"]

    done = run_cli(
        "resolve",
        job_id,
        "--outcome",
        "succeeded",
        "--actor",
        "a",
        "--reason",
        "r",
        "--store",
        sqlite_url,
    )

    line = one_line_error(done)
    assert done.returncode == 2
    assert "'resolve' is not allowed in state 'queued'" in line
    assert ok_json("inspect", job_id, "--store", sqlite_url)["job"]["version"] == 1


def test_payload_that_is_not_json_is_refused_and_nothing_is_stored(sqlite_url: str) -> None:
    ok("migrate", sqlite_url)

    line = one_line_error(run_cli("submit", "k", "--payload", "{oops", "--store", sqlite_url))

    assert "--payload is not valid JSON" in line
    assert ok_json("status", "--store", sqlite_url)["counts"] == {}


def test_bad_store_urls_are_named() -> None:
    assert "bad store URL 'nonsense'" in one_line_error(run_cli("status", "--store", "nonsense"))
    assert "'mysql'" in one_line_error(run_cli("status", "--store", "mysql://x/y"))


def test_unreachable_store_is_one_line(tmp_path: Path) -> None:
    done = run_cli("status", "--store", "postgresql://postgres@127.0.0.1:1/nowhere", timeout=90)

    line = one_line_error(done)
    assert "127.0.0.1" in line or "connect" in line.lower()


def test_store_from_the_environment(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'env.db'}"

    ok("submit", "k", env={"JOBFSM_STORE": url})

    assert ok_json("status", "--store", url)["counts"]["default"]["queued"] == 1


def test_unknown_state_and_missing_actor_are_named(sqlite_url: str) -> None:
    assert "unknown state 'done'" in one_line_error(
        run_cli("list", "--state", "done", "--store", sqlite_url)
    )
    missing = run_cli("cancel", "X", "--reason", "r", "--store", sqlite_url)
    assert "Missing option '--actor'" in one_line_error(missing)
    assert missing.returncode == 2
    out_of_range = run_cli("demo", "--jobs", "0")
    assert "'--jobs'" in one_line_error(out_of_range)


def test_bad_spec_file_fails_spec_check_naming_the_key(tmp_path: Path) -> None:
    spec = tmp_path / "bad.toml"
    spec.write_text('[machine]\ninitial = "nowhere"\n', encoding="utf-8")

    done = run_cli("spec", "check", str(spec))

    assert done.returncode == 1
    assert "machine.initial" in done.stderr
    assert "ok:" in ok("spec", "check")
