"""Operator commands end to end: a killed retry-unsafe job is parked, resolved once, audited.

Runs against a SQLite file and a fresh PostgreSQL database, with real worker processes
(`jobfsm worker`) killed with SIGKILL.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from ._cli import ok_here, ok_json_here, one_line_error, run_cli, wait_for_state


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    url: str = request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url")
    ok_here("migrate", url)
    return url


def _worker(store: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:  # the child keeps its own copy of the descriptor
        return _spawn_worker(store, out)


def _spawn_worker(store: str, out: IO[bytes]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fsm.cli",
            "worker",
            "--app",
            "fsm.demo.app:handlers",
            "--store",
            store,
            "--poll-interval",
            "0.1",
            "--lease-ttl",
            "4",
            "--heartbeat",
            "1",
            "--log-level",
            "WARNING",
        ],
        stdout=out,
        stderr=subprocess.STDOUT,
    )


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)


def test_killed_retry_unsafe_job_is_parked_then_resolved_once_with_actor_and_reason(
    store: str, tmp_path: Path, workers: list[subprocess.Popen[bytes]]
) -> None:
    # given a retry-unsafe job running on a worker process
    payload = json.dumps({"ledger": str(tmp_path / "effects"), "ms": 5000, "cents": 500})
    job = ok_json_here(
        "submit", "demo.charge", "--payload", payload, "--not-retry-safe", "--store", store
    )
    job_id = job["job"]["id"]
    assert job["job"]["retry_safe"] is False
    workers.append(_worker(store, tmp_path / "w1.log"))
    wait_for_state(store, job_id, {"running"})

    # when that worker is killed and another one starts
    os.kill(workers[0].pid, signal.SIGKILL)
    workers[0].wait(timeout=10)
    workers.append(_worker(store, tmp_path / "w2.log"))

    # then the job is parked in investigate, not silently rerun
    wait_for_state(store, job_id, {"investigate"})
    parked = ok_json_here("inspect", job_id, "--store", store)
    assert parked["job"]["attempt"] == 1
    assert parked["history"][-1]["event"] == "expire"
    listed = ok_json_here("list", "--state", "investigate", "--store", store)
    assert [j["id"] for j in listed] == [job_id]

    # when an operator resolves it
    out = ok_here(
        "resolve",
        job_id,
        "--outcome",
        "failed",
        "--actor",
        "ann",
        "--reason",
        "no charge found",
        "--store",
        store,
    )
    assert "investigate -> failed" in out

    # then inspect shows who and why
    after = ok_json_here("inspect", job_id, "--store", store)
    assert after["job"]["state"] == "failed"
    last = after["history"][-1]
    assert (last["event"], last["actor"], last["reason"]) == ("resolve", "ann", "no charge found")

    # and the same resolve again changes nothing and says so
    again = ok_here(
        "resolve",
        job_id,
        "--outcome",
        "failed",
        "--actor",
        "ann",
        "--reason",
        "no charge found",
        "--store",
        store,
    )
    assert "already failed; nothing changed" in again
    assert len(ok_json_here("inspect", job_id, "--store", store)["history"]) == len(
        after["history"]
    )


def test_cancel_twice_is_idempotent_and_requeue_needs_an_explicit_budget(store: str) -> None:
    job_id = ok_json_here("submit", "report.build", "--store", store)["job"]["id"]
    args = ("--actor", "bob", "--reason", "duplicate order", "--store", store)

    first = ok_here("cancel", job_id, *args)
    second = ok_here("cancel", job_id, *args)
    missing_budget = run_cli("requeue", job_id, *args)
    requeued = ok_here("requeue", job_id, "--attempts", "2", *args)
    refused = run_cli("requeue", job_id, "--attempts", "2", *args)

    assert "queued -> cancelled" in first
    assert "already cancelled; nothing changed" in second
    assert "--attempts" in missing_budget.stderr
    assert missing_budget.returncode == 2
    assert "cancelled -> queued" in requeued
    assert "'requeue' is not allowed in state 'queued'" in one_line_error(refused)
    trail = ok_json_here("inspect", job_id, "--store", store)["history"]
    assert [e["event"] for e in trail] == ["submit", "cancel", "requeue"]
    assert trail[2]["data"]["attempts"] == 2


def test_read_commands_print_json(store: str) -> None:
    submitted = ok_json_here(
        "submit",
        "report.build",
        "--payload",
        '{"rows": 3}',
        "--queue",
        "reports",
        "--idempotency-key",
        "report:1",
        "--store",
        store,
    )
    again = ok_json_here(
        "submit", "report.build", "--idempotency-key", "report:1", "--store", store
    )

    status = ok_json_here("status", "--store", store)
    listed = ok_json_here("list", "--state", "queued", "--queue", "reports", "--store", store)
    inspected = ok_json_here("inspect", submitted["job"]["id"], "--store", store)

    assert submitted["existing"] is False
    assert again["existing"] is True
    assert again["job"]["id"] == submitted["job"]["id"]
    assert status["counts"]["reports"]["queued"] == 1
    assert status["oldest_queued_age"]["reports"] >= 0
    assert [j["id"] for j in listed] == [submitted["job"]["id"]]
    assert inspected["job"]["payload"] == {"rows": 3}
    assert inspected["history"][0]["event"] == "submit"
