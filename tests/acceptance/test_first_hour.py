"""The first hour of a new user: what the CLI does with typos, stored text, filters and logs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fsm import Engine, Owner
from fsm.registry import open_store

from ._cli import ROOT, ok_here, ok_json_here, one_line_error, run_cli, wait_for_state

HOSTILE = "boom \x1b[2J\x1b[31mred\x1b[0m\nTraceback (most recent call last):\n  File x\nValueError"


def _failed_job(url: str, error: str, payload: object = None) -> str:
    """A job that failed permanently with `error` (through the engine, as a worker would)."""
    store = open_store(url)
    try:
        engine = Engine(store)
        job = engine.submit("report.build", payload)
        owner = Owner(host="test-host", pid=1, incarnation="first-hour")
        (leased,) = engine.claim(owner, queues=["default"], limit=1)
        running = engine.start(leased.id, leased.fence)
        engine.fail(running.id, running.fence, error, permanent=True)
        return job.id
    finally:
        store.close()


@pytest.mark.parametrize(
    "args",
    [
        ("status",),
        ("list",),
        ("inspect", "SOMEJOB"),
        ("show", "SOMEJOB"),
        ("diagram", "--job", "SOMEJOB"),
    ],
)
def test_read_commands_on_a_mistyped_sqlite_path_say_so_and_create_nothing(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    typo = tmp_path / "jbos.db"

    done = run_cli(*args, "--store", f"sqlite:///{typo}")

    line = one_line_error(done)
    assert done.returncode == 2
    assert f"no SQLite store at '{typo}'" in line
    assert not typo.exists()
    assert list(tmp_path.iterdir()) == []


def test_read_commands_on_the_default_store_from_the_environment_do_not_create_it(
    tmp_path: Path,
) -> None:
    done = run_cli("status", cwd=tmp_path)  # no --store, no $JOBFSM_STORE: ./jobfsm.db

    assert "no SQLite store at" in one_line_error(done)
    assert not (tmp_path / "jobfsm.db").exists()


def test_list_without_state_lists_every_state_and_tables_show_first_lines_escaped(
    sqlite_url: str,
) -> None:
    failed = _failed_job(sqlite_url, HOSTILE)
    queued = ok_json_here("submit", "mail.send", "--store", sqlite_url)["job"]["id"]

    out = ok_here("list", "--store", sqlite_url)

    assert failed in out
    assert queued in out
    assert "\x1b" not in out
    assert "boom \\x1b[2J\\x1b[31mred\\x1b[0m …" in out
    assert "Traceback" not in out  # only the first line of the error
    assert len(out.strip().splitlines()) == 4  # header, rule, two rows
    assert [j["id"] for j in ok_json_here("list", "--state", "failed", "--store", sqlite_url)] == [
        failed
    ]


def test_inspect_prints_payload_and_result_as_json_and_escapes_stored_text(
    sqlite_url: str,
) -> None:
    job_id = _failed_job(sqlite_url, HOSTILE, payload={"to": "ada", "n": [1, None, True]})

    out = ok_here("inspect", job_id, "--store", sqlite_url)

    assert '{"n": [1, null, true], "to": "ada"}' in out
    assert "result: null" in out
    assert "None" not in out
    assert "True" not in out
    assert "\x1b" not in out
    assert "last error in full:" in out
    assert "ValueError" in out  # the whole error is in inspect, escaped, line by line


def test_show_and_history_are_inspect(sqlite_url: str) -> None:
    job_id = ok_json_here("submit", "k", "--store", sqlite_url)["job"]["id"]

    inspected = ok_json_here("inspect", job_id, "--store", sqlite_url)

    assert ok_json_here("show", job_id, "--store", sqlite_url) == inspected
    assert ok_json_here("history", job_id, "--store", sqlite_url) == inspected


@pytest.mark.parametrize(("option", "value"), [("--actor", ""), ("--reason", "  ")])
def test_cancel_with_an_empty_actor_or_reason_is_refused(
    sqlite_url: str, option: str, value: str
) -> None:
    job_id = ok_json_here("submit", "k", "--store", sqlite_url)["job"]["id"]
    args = {"--actor": "ann", "--reason": "r", option: value}

    done = run_cli("cancel", job_id, *(x for kv in args.items() for x in kv), "--store", sqlite_url)

    line = one_line_error(done)
    assert done.returncode == 2
    assert f"'{option}': must not be empty" in line
    assert ok_json_here("inspect", job_id, "--store", sqlite_url)["job"]["state"] == "queued"


def test_bulk_cancel_by_filter_is_bounded_and_has_a_dry_run(sqlite_url: str) -> None:
    ids = [
        ok_json_here("submit", "mail.send", "--queue", "mail", "--store", sqlite_url)["job"]["id"]
        for _ in range(4)
    ]
    other = ok_json_here("submit", "report.build", "--store", sqlite_url)["job"]["id"]
    who = ("--actor", "ann", "--reason", "mail outage")
    select = ("--state", "queued", "--queue", "mail", "--limit", "3", "--store", sqlite_url)

    dry = ok_here("cancel", *select, *who, "--dry-run")
    after_dry = {j["id"]: j["state"] for j in ok_json_here("list", "--store", sqlite_url)}
    done = ok_here("cancel", *select, *who)
    after = {j["id"]: j["state"] for j in ok_json_here("list", "--store", sqlite_url)}

    assert "dry run: would cancel 3 job(s)" in dry
    assert set(after_dry.values()) == {"queued"}
    assert "cancel: 3 changed, 0 refused, of 3 selected" in done
    assert [after[i] for i in ids] == ["cancelled", "cancelled", "cancelled", "queued"]
    assert after[other] == "queued"


def test_bulk_requeue_names_the_jobs_it_cannot_change_and_exits_1(sqlite_url: str) -> None:
    failed = _failed_job(sqlite_url, "permanent: bad address")
    who = ("--actor", "ann", "--reason", "address fixed")

    requeued = ok_here(
        "requeue", "--state", "failed", "--attempts", "2", *who, "--store", sqlite_url
    )
    again = run_cli("requeue", failed, "--attempts", "2", *who, "--store", sqlite_url)
    neither = run_cli("requeue", "--attempts", "2", *who, "--store", sqlite_url)

    assert "requeue: 1 changed, 0 refused, of 1 selected" in requeued
    assert ok_json_here("inspect", failed, "--store", sqlite_url)["job"]["state"] == "queued"
    assert again.returncode == 2
    assert neither.returncode == 2
    assert "give a JOB id, or --state" in neither.stderr


def test_faults_never_takes_the_store_from_the_environment(tmp_path: Path) -> None:
    env_store = tmp_path / "production.db"

    done = run_cli(
        "faults", "--examples", "1", env={"JOBFSM_STORE": f"sqlite:///{env_store}"}, timeout=120
    )

    assert done.returncode == 2
    assert "Missing option '--store'" in done.stderr
    assert not env_store.exists()


def test_faults_reports_a_truthful_step_count() -> None:
    # the step count is the machine's: the other fault models at their smoke size
    done = run_cli(
        "faults", "--store", "memory://", "--examples", "5", "--steps", "10", "--quick",
        timeout=180,
    )  # fmt: skip

    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert "examples of at most 10 steps" in first
    assert "55 steps" not in first


def test_a_worker_from_the_working_directory_serves_the_queues_its_handlers_name(
    tmp_path: Path, sqlite_url: str
) -> None:
    pkg = tmp_path / "mysvc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "jobs.py").write_text(
        "from fsm.worker.handlers import Handlers\n"
        "handlers = Handlers()\n"
        "@handlers.handler('mail.send', queue='mail')\n"
        "def send(ctx):\n"
        "    return {'sent': ctx.payload['to']}\n"
    )
    job = ok_json_here("submit", "mail.send", "--queue", "mail", "--payload", '{"to": "ada"}',
                       "--store", sqlite_url)["job"]  # fmt: skip
    script = Path(sys.executable).with_name("jobfsm")
    cmd = [str(script), "worker", "--app", "mysvc.jobs", "--store", sqlite_url]
    cmd += ["--poll-interval", "0.1", "--log-format", "json"]
    env = {k: v for k, v in os.environ.items() if k not in ("JOBFSM_STORE", "PYTHONPATH")}
    with (tmp_path / "worker.log").open("wb") as log:
        worker = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=log, stderr=log)
    try:
        wait_for_state(sqlite_url, job["id"], {"succeeded"}, timeout=30)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    text = (tmp_path / "worker.log").read_text()

    assert worker.returncode == 0, text
    records = [json.loads(ln) for ln in text.splitlines()]  # every line is one JSON object
    assert any("serving mail" in r["message"] for r in records)
    done = [r for r in records if r.get("job_id") == job["id"] and r.get("event") == "succeed"]
    assert len(done) == 1, text
    assert done[0]["kind"] == "mail.send"
    assert done[0]["fence"] == 1
    assert done[0]["attempt"] == 1
    assert "correlation_id" in done[0]


def test_a_worker_told_other_queues_warns_with_the_flag_to_add(
    tmp_path: Path, sqlite_url: str
) -> None:
    ready = tmp_path / "ready"
    cmd = [sys.executable, "-m", "fsm.cli", "worker", "--app", "examples.app:worker"]
    cmd += ["--store", sqlite_url, "--queues", "other", "--ready-file", str(ready)]
    env = {k: v for k, v in os.environ.items() if k != "JOBFSM_STORE"}
    env["EXAMPLE_OUTBOX"] = str(tmp_path / "outbox.db")
    with (tmp_path / "worker.log").open("wb") as log:
        worker = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=log)
    try:
        until = time.monotonic() + 30
        while not ready.exists():
            assert time.monotonic() < until, (tmp_path / "worker.log").read_text()
            assert worker.poll() is None, (tmp_path / "worker.log").read_text()
            time.sleep(0.05)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    text = (tmp_path / "worker.log").read_text()

    assert "handlers name queues this worker does not serve" in text
    assert "--queues other,default" in text
    assert not ready.exists()  # removed on exit


def test_a_deeply_nested_payload_on_the_command_line_is_bad_input(tmp_path: Path) -> None:
    store = tmp_path / "jobs.db"

    done = run_cli("submit", "k", "--payload", "[" * 100_000, "--store", f"sqlite:///{store}")

    assert done.returncode == 2
    assert "--payload nests deeper than 64 levels" in one_line_error(done)
    assert not store.exists()


def test_error_messages_quoting_input_escape_control_characters(sqlite_url: str) -> None:
    ok_here("migrate", sqlite_url)

    done = run_cli("inspect", "a\x1b[2Jb", "--store", sqlite_url)

    line = one_line_error(done)
    assert "\x1b" not in line
    assert "a\\x1b[2Jb" in line


@pytest.mark.postgres
def test_read_commands_on_a_mistyped_postgres_schema_create_nothing(pg_url: str) -> None:
    import psycopg

    typo = f"{pg_url}?schema=jbos"

    done = run_cli("status", "--store", typo)
    ok_here("migrate", f"{pg_url}?schema=jobs")
    fine = ok_here("status", "--store", f"{pg_url}?schema=jobs")

    assert done.returncode == 2
    assert "read-only commands neither create nor migrate a store" in one_line_error(done)
    with psycopg.connect(pg_url) as conn:
        found = conn.execute(
            "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'j%'"
        ).fetchall()
    assert found == [("jobs",)]
    assert fine.strip().splitlines() == ["no jobs", "retention lease: none"]


@pytest.mark.parametrize(
    "args",
    [
        ("demo", "--crash-every", "nan"),
        ("demo", "--timeout", "inf"),
        ("status", "--expiring-within", "nan"),
        ("faults", "--store", "memory://", "--log-format", "xml"),
    ],
)
def test_non_finite_times_and_unknown_choices_are_usage_errors(args: tuple[str, ...]) -> None:
    done = run_cli(*args)

    assert done.returncode == 2
    assert f"'{args[-2]}'" in one_line_error(done)
