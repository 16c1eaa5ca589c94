"""A real worker (its threads, the thread executor, a SQLite file or a PostgreSQL
database) observes each start's wait in `jobfsm_queue_wait_seconds{queue}`: from when
the job was due, on the engine's fake clock, so each wait is known to the second and
lands in a known bucket."""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client.utils import floatToGoString

from adapters.executors import ThreadExecutor
from fsm import Engine, open_store
from fsm.clock import FakeClock
from fsm.errors import Retry
from fsm.telemetry.prometheus import WAIT_BUCKETS, PrometheusMetrics
from fsm.worker import Worker
from fsm.worker.context import Context

from .helpers import wait_for

T0 = 1_700_000_000.0
NAME = "jobfsm_queue_wait_seconds"


def _bucket(metrics: PrometheusMetrics, queue: str, le: float) -> float | None:
    labels = {"queue": queue, "le": floatToGoString(le)}
    return metrics.registry.get_sample_value(f"{NAME}_bucket", labels)


def test_each_start_waits_from_when_the_job_was_due_and_a_retry_from_its_run_after(
    store_url: str,
) -> None:
    # given a worker of queue "mail" on a fresh store, its engine on a fake clock,
    clock = FakeClock(T0)
    metrics = PrometheusMetrics()
    store = open_store(store_url)
    engine = Engine(store, clock=clock, metrics=metrics)

    def flaky(ctx: Context) -> Any:
        if ctx.attempt == 1:
            raise Retry(after=100.0)
        return "done"

    worker = Worker(
        engine,
        {"w.flaky": flaky},
        executor=ThreadExecutor(stop_grace=0.2),
        queues=("mail",),
        poll_interval=0.02,
        install_signals=False,
        scheduler=False,
    )
    # and a job submitted at T0 to run at T0 + 60 (a default-queue job the worker never
    # serves beside it)
    job = engine.submit("w.flaky", {}, queue="mail", run_after=T0 + 60.0)
    engine.submit("w.flaky", {})
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert worker.wait_started(10.0)
        # when the clock reaches T0 + 67: its first attempt starts 7 s after it was due
        # (67 s after its submit), fails, and is due again 100 s later (T0 + 167)
        clock.advance(67.0)
        wait_for(lambda: engine.get(job.id).state == "retry_wait", 10.0, "the first attempt")
        assert engine.get(job.id).run_after == T0 + 167.0
        # and at T0 + 212 the retry starts 45 s after its run_after
        clock.advance(145.0)
        wait_for(lambda: engine.get(job.id).state == "succeeded", 10.0, "the retry")
        history = engine.history(job.id)
    finally:
        worker.stop()
        thread.join(timeout=10.0)
        store.close()

    # then two waits of queue mail: 7 s in (2.5, 10], 45 s in (30, 60]; from the submit
    # they would be 67 s and 212 s, both in (60, 300]
    starts = [e for e in history if e.event == "start" and e.outcome == "applied"]
    assert [e.at for e in starts] == [T0 + 67.0, T0 + 212.0]
    labels = {"queue": "mail"}
    assert metrics.registry.get_sample_value(f"{NAME}_count", labels) == 2
    assert metrics.registry.get_sample_value(f"{NAME}_sum", labels) == 52.0
    cumulative = {le: _bucket(metrics, "mail", le) for le in WAIT_BUCKETS}
    assert cumulative == {le: 0 if le < 10 else 1 if le < 60 else 2 for le in WAIT_BUCKETS}
    # and the default queue, never started, has no series
    assert metrics.registry.get_sample_value(f"{NAME}_count", {"queue": "default"}) is None
