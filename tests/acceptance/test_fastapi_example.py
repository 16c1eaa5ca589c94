"""examples/fastapi_app.py: FastAPI's TestClient in this process (the lifespan runs), a
real `jobfsm worker` process, a fresh PostgreSQL database."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from fastapi.testclient import TestClient

from fsm import Engine, open_store

ROOT = Path(__file__).resolve().parents[2]
#: how long the test waits for the worker to finish a job before it fails
JOB_BUDGET = 60.0


def start_worker(url: str, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != "JOBFSM_STORE"}
    with log.open("wb") as out:
        return subprocess.Popen(
            [
                *(sys.executable, "-m", "fsm.cli", "worker"),
                *("--app", "examples.fastapi_app:handlers", "--store", url),
                *("--poll-interval", "0.1", "--log-level", "WARNING"),
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def wait_until_finished(client: TestClient, job_id: str) -> dict[str, object]:
    deadline = time.monotonic() + JOB_BUDGET
    while True:
        job = client.get(f"/jobs/{job_id}").json()
        if job["state"] in ("succeeded", "failed", "cancelled", "investigate"):
            return job
        assert time.monotonic() < deadline, f"job {job_id} still {job['state']}"
        time.sleep(0.1)


def test_orders_commit_with_their_jobs_and_a_worker_process_runs_them(
    pg_url: str, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("DATABASE_URL", pg_url)
    from examples.fastapi_app import app

    with TestClient(app) as client:  # runs the lifespan: tables, AsyncEngine, pool
        # no worker yet: the order and its job commit; the request waits, then answers 202
        placed = client.post(
            "/orders", json={"id": "o-1", "sku": "widget", "quantity": 2, "wait": 0.2}
        )
        assert placed.status_code == 202, placed.text
        first = placed.json()["job"]
        assert client.get(f"/jobs/{first}").json()["state"] == "queued"

        # refused after its job was submitted: the order and the job are rolled back
        refused = client.post("/orders", json={"id": "o-2", "sku": "gadget", "quantity": 5})
        assert refused.status_code == 409
        assert "not enough gadget" in refused.json()["detail"]
        again = client.post("/orders", json={"id": "o-1", "sku": "widget", "quantity": 1})
        assert again.status_code == 409  # the order id is taken; no second job

        worker = start_worker(pg_url, tmp_path / "worker.log")
        try:
            assert wait_until_finished(client, first)["state"] == "succeeded"
            # the worker is serving: this request gets its job's outcome within its wait
            done = client.post(
                "/orders", json={"id": "o-3", "sku": "widget", "quantity": 1, "wait": 10}
            )
        finally:
            worker.terminate()
            worker.wait(timeout=60)

    log = (tmp_path / "worker.log").read_text(errors="replace")
    assert worker.returncode == 0, log
    assert done.status_code == 200, done.text
    body = done.json()
    assert body["state"] == "succeeded"
    assert body["result"] == {"order": "o-3", "confirmed": True, "idempotency_key": "confirm:o-3"}

    engine = Engine(open_store(pg_url))
    try:
        assert sum(engine.counts().values()) == 2  # o-1 and o-3: none for o-2
    finally:
        engine.store.close()
    import psycopg

    with psycopg.connect(pg_url) as conn:
        orders = conn.execute("SELECT id FROM orders ORDER BY id").fetchall()
        stock = dict(conn.execute("SELECT sku, available FROM stock").fetchall())
    assert orders == [("o-1",), ("o-3",)]
    assert stock == {"widget": 7, "gadget": 3}
