"""The retention metrics (docs/metrics.md, docs/retention.md) moved by real retention
passes on a SQLite file and on PostgreSQL (a database of the test's own): jobs deleted
by queue and state, passes, and the time of the last pass; a pass that did not hold
the lease moves none of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from fsm import Engine, open_store
from fsm.clock import FakeClock
from fsm.records import Owner
from fsm.service.maintenance.retention import Retention, RetentionPlan
from fsm.telemetry.prometheus import PrometheusMetrics

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
