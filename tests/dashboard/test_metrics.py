"""Prometheus metrics: a real `jobfsm worker --metrics-port` runs real jobs; its /metrics
counters must match the audit trail the store kept."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fsm import Engine, open_store
from fsm.telemetry.metrics import CountingMetrics, MetricsBase
from fsm.telemetry.prometheus import PrometheusMetrics

from .browser import ROOT, free_port

#: seconds the jobs (and the counters) get to settle
SETTLE = 60.0
FINAL = {"succeeded", "failed", "investigate"}


def scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode("utf-8")
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def test_worker_metrics_match_the_audit_trail(sqlite_url: str, tmp_path: Path) -> None:
    # given jobs of every outcome and a worker serving metrics
    store = open_store(sqlite_url)
    engine = Engine(store)
    ids = [engine.submit("m.ok", {"n": i}).id for i in range(5)]
    ids += [engine.submit("m.bad").id for _ in range(2)]
    ids += [engine.submit("m.flaky").id for _ in range(2)]
    ids.append(engine.submit("m.unsure", retry_safe=False).id)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "JOBFSM_STORE"}
    argv = [sys.executable, "-m", "fsm.cli", "worker", "--app", "tests.dashboard.handlers:handlers"]
    argv += ["--store", sqlite_url, "--poll-interval", "0.05", "--metrics-port", str(port)]
    with (tmp_path / "worker.log").open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    try:
        # when they have all run
        deadline = time.monotonic() + SETTLE
        while any(engine.get(i).state not in FINAL for i in ids):
            assert proc.poll() is None, (tmp_path / "worker.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "jobs did not finish"
            time.sleep(0.1)
        audit: Counter[tuple[str, str]] = Counter()
        starts: Counter[str] = Counter()
        queue_starts: Counter[str] = Counter()
        for job_id in ids:
            job = engine.get(job_id)
            for e in engine.history(job_id):
                if e.outcome == "applied" and e.event != "submit":  # submits happen here
                    audit[(e.event, e.to_state)] += 1
                if e.outcome == "applied" and e.event == "start":
                    starts[job.kind] += 1
                    queue_starts[job.queue] += 1
        # then the worker's counters say exactly what the audit trail says
        while True:
            samples = scrape(port)
            counted: Counter[tuple[str, str]] = Counter()
            for labels, value in samples.get("jobfsm_transitions_total", []):
                counted[(labels["event"], labels["to_state"])] += int(value)
            attempts: Counter[str] = Counter()
            for labels, value in samples.get("jobfsm_attempt_seconds_count", []):
                attempts[labels["kind"]] += int(value)
            waits: Counter[str] = Counter()
            for labels, value in samples.get("jobfsm_queue_wait_seconds_count", []):
                waits[labels["queue"]] += int(value)
            seen = (counted, attempts, waits)
            if seen == (audit, starts, queue_starts) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert counted == audit
        assert attempts == starts
        assert waits == queue_starts  # one wait observed per start, by queue
        assert audit[("succeed", "succeeded")] == 7
        assert audit[("ambiguous", "investigate")] == 1
        jobs = {
            (labels["queue"], labels["state"]): value for labels, value in samples["jobfsm_jobs"]
        }
        assert jobs == {("default", "succeeded"): 7, ("default", "failed"): 2,
                        ("default", "investigate"): 1}  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        store.close()


def test_new_hooks_have_no_op_defaults_and_the_exporter_counts_them() -> None:
    # a Metrics written before the new hooks keeps working through the base class
    old = CountingMetrics()
    assert isinstance(old, MetricsBase)
    old.lease_renewals(3, 1)
    old.recovery("dead", "retry_wait")
    m = PrometheusMetrics()
    m.lease_renewals(5, 1)
    m.lease_lost("mail")
    m.recovery("dead", "investigate")
    m.rejected_report("mail", "succeed")
    m.delivery_recovery("rabbitmq", "reconnect")
    old.transition_code("mail", "expire", "retry_wait", "lease_lapsed")
    m.transition_code("mail", "expire", "retry_wait", "owner_dead_pid_gone")
    old.queue_wait("mail", 12.0)
    m.queue_wait("mail", 12.0)
    text = m.render()[0].decode()
    for line in (
        "jobfsm_lease_renewals_total 5.0",
        "jobfsm_lease_renewals_lost_total 1.0",
        'jobfsm_leases_lost_total{kind="mail"} 1.0',
        'jobfsm_recoveries_total{to_state="investigate",verdict="dead"} 1.0',
        'jobfsm_rejected_reports_total{event="succeed",kind="mail"} 1.0',
        'jobfsm_delivery_recoveries_total{delivery="rabbitmq",reason="reconnect"} 1.0',
        'jobfsm_transition_codes_total{code="owner_dead_pid_gone",event="expire",'
        'kind="mail",to_state="retry_wait"} 1.0',
        'jobfsm_queue_wait_seconds_bucket{le="10.0",queue="mail"} 0.0',
        'jobfsm_queue_wait_seconds_bucket{le="30.0",queue="mail"} 1.0',
        'jobfsm_queue_wait_seconds_sum{queue="mail"} 12.0',
    ):
        assert line in text


def test_store_counts_are_cached_for_the_ttl() -> None:
    calls = []

    def counts() -> dict[tuple[str, str], int]:
        calls.append(1)
        return {("q", "queued"): len(calls)}

    m = PrometheusMetrics()
    m.watch_store(counts, ttl=60.0)
    first, second = m.render()[0], m.render()[0]
    assert len(calls) == 1
    assert first == second


@pytest.mark.parametrize("port", [0, 70000])
def test_worker_refuses_a_bad_metrics_port(port: int) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fsm.cli", "worker", "--app", "x:y", "--metrics-port", str(port)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "--metrics-port" in done.stderr
