"""The retention metrics (docs/metrics.md, docs/retention.md) moved by real retention
passes on a SQLite file and on PostgreSQL (a database of the test's own): jobs deleted
by queue and state, passes, and the time of the last pass; a pass that did not hold
the lease moves none of them; a `jobfsm worker --retain --metrics-port` serves them."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from fsm import Engine, open_store
from fsm.clock import FakeClock
from fsm.records import Owner
from fsm.service.maintenance.retention import Retention, RetentionPlan
from fsm.telemetry.prometheus import PrometheusMetrics

REPO = Path(__file__).resolve().parents[3]
DAY = 86400.0
OWNER = Owner(host="retention-metrics", pid=1, incarnation="retention-metrics-a")


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'jobs.db'}"
    return str(request.getfixturevalue("pg_url"))


def _finish(engine: Engine, queue: str, state: str, n: int) -> None:
    for _ in range(n):
        job = engine.submit("noop", {}, queue=queue)
        if state == "cancelled":
            engine.cancel(job.id, actor="test", reason="seed")
            continue
        (leased,) = engine.claim(OWNER, (queue,), 1, ids=[job.id])
        engine.start(job.id, leased.fence)
        engine.succeed(job.id, leased.fence)


def _value(metrics: PrometheusMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_a_retention_pass_counts_what_it_pruned_by_queue_and_state(url: str) -> None:
    # given jobs finished 10 days ago in two queues and two states, and young ones
    clock = FakeClock(1_000_000.0)
    metrics = PrometheusMetrics()
    store = open_store(url)
    try:
        engine = Engine(store, clock=clock, metrics=metrics)
        _finish(engine, "default", "succeeded", 5)
        _finish(engine, "default", "cancelled", 2)
        _finish(engine, "mail", "succeeded", 3)
        clock.advance(10 * DAY)
        _finish(engine, "mail", "succeeded", 4)  # young: kept
        plan = RetentionPlan(keep={"succeeded": "1d", "cancelled": "1d"}, batch=4)
        holder = Retention(engine, plan, owner="holder")
        other = Retention(engine, plan, owner="other")
        assert _value(metrics, "jobfsm_retention_passes_total") == 0.0
        # when the holder runs a pass
        report = holder.run_once()
        # then every job it deleted is counted by queue and state, with the pass and its time
        assert report.pruned == 10
        assert (
            _value(metrics, "jobfsm_retention_pruned_total", queue="default", state="succeeded")
            == 5
        )
        assert (
            _value(metrics, "jobfsm_retention_pruned_total", queue="default", state="cancelled")
            == 2
        )
        assert (
            _value(metrics, "jobfsm_retention_pruned_total", queue="mail", state="succeeded") == 3
        )
        assert _value(metrics, "jobfsm_retention_passes_total") == 1.0
        assert _value(metrics, "jobfsm_retention_last_pass_timestamp_seconds") == clock.now()
        # when another worker's pass finds the lease held, and later the holder passes again
        clock.advance(5.0)
        assert other.run_once().pruned == 0
        assert _value(metrics, "jobfsm_retention_passes_total") == 1.0
        assert holder.run_once().pruned == 0
        # then a pass that held the lease is counted even when it found nothing to delete
        assert _value(metrics, "jobfsm_retention_passes_total") == 2.0
        assert _value(metrics, "jobfsm_retention_last_pass_timestamp_seconds") == clock.now()
        assert (
            _value(metrics, "jobfsm_retention_pruned_total", queue="mail", state="succeeded") == 3
        )
    finally:
        store.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_worker_serves_its_retention_figures_on_its_metrics_endpoint(
    sqlite_url: str, tmp_path: Path
) -> None:
    # given 6 jobs that succeeded 10 days ago on a SQLite file
    store = open_store(sqlite_url)
    try:
        _finish(Engine(store, clock=FakeClock(time.time() - 10 * DAY)), "default", "succeeded", 6)
    finally:
        store.close()
    # when a worker with --retain and --metrics-port runs
    port, log = _free_port(), tmp_path / "worker.log"
    cmd = [
        *(sys.executable, "-m", "fsm.cli", "worker", "--store", sqlite_url),
        *("--app", "tests.integration.retention.app:handlers", "--no-scheduler"),
        *("--retain", "succeeded=1d", "--retain-every", "1", "--metrics-port", str(port)),
    ]
    env = {k: v for k, v in os.environ.items() if k != "JOBFSM_STORE"}
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    wanted = 'jobfsm_retention_pruned_total{queue="default",state="succeeded"} 6.0'
    text = ""
    try:
        deadline = time.monotonic() + 60
        while wanted not in text:
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, text[-3000:] + log.read_text()[-3000:]
            time.sleep(0.2)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    text = r.read().decode()
            except (urllib.error.URLError, ConnectionError):
                continue
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    # then its endpoint counts them, with at least one pass and the time it ended
    figures = dict(re.findall(r"^(jobfsm_retention_\w+) (\S+)$", text, re.M))
    assert float(figures["jobfsm_retention_passes_total"]) >= 1, text[-3000:]
    ended = float(figures["jobfsm_retention_last_pass_timestamp_seconds"])
    assert abs(ended - time.time()) < 120, text[-3000:]
