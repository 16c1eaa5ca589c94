"""The examples run: the embedded HTTP service, and the app module under `jobfsm worker`."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from ._cli import ROOT, ok_json, wait_for_state


def test_example_service_selftest_submits_dedupes_and_finishes_jobs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "examples.service", "--selftest"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    results = [line for line in done.stdout.splitlines() if "'state': 'succeeded'" in line]
    assert len(results) == 2  # three signups, one of them repeated: two jobs


def test_example_app_runs_under_jobfsm_worker_with_a_fenced_outbox(
    sqlite_url: str, tmp_path: Path
) -> None:
    outbox = tmp_path / "outbox.db"
    job = ok_json(
        "submit",
        "email.welcome",
        "--payload",
        '{"email": "ada@example.com"}',
        "--store",
        sqlite_url,
    )["job"]
    with (tmp_path / "worker.log").open("wb") as log:
        worker = subprocess.Popen(
            [
                *(sys.executable, "-m", "fsm.cli", "worker", "--app", "examples.app:worker"),
                *("--store", sqlite_url, "--poll-interval", "0.1", "--log-level", "WARNING"),
            ],
            cwd=ROOT,
            env={**_env(), "EXAMPLE_OUTBOX": str(outbox)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for_state(sqlite_url, job["id"], {"succeeded"})
    finally:
        worker.terminate()
        worker.wait(timeout=60)

    with sqlite3.connect(outbox) as conn:
        rows = conn.execute("SELECT job_id, fence, recipient FROM outbox").fetchall()
    assert rows == [(job["id"], 1, "ada@example.com")]
    assert worker.returncode == 0


def test_example_orders_commits_an_order_and_its_job_together_or_neither(
    sqlite_url: str, pg_url: str
) -> None:
    for store in (sqlite_url, pg_url):
        done = subprocess.run(
            [sys.executable, "-m", "examples.orders", "--store", store],
            cwd=ROOT,
            env=_env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.splitlines() == [
            "order o-1: committed, job succeeded",
            "order o-2: rolled back, no job",
        ]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "JOBFSM_STORE"}


def test_example_reconcile_charges_each_payment_once_through_two_sigkills(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "examples.reconcile", "--workdir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "ok: each payment charged exactly once" in out
    assert "running -> retry_wait  owner_dead_pid_gone" in out  # lost before the mark
    assert "reconciling -> succeeded   reconciled_done" in out  # lost after the charge
    with sqlite3.connect(tmp_path / "provider.db") as conn:
        assert conn.execute("SELECT COUNT(*) FROM charges").fetchone() == (2,)
