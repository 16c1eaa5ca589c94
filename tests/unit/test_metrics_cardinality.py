"""Metric series are bounded whatever kind and queue names submitters choose."""

from __future__ import annotations

import re

from adapters.memory import MemoryStore
from fsm import CountingMetrics, Engine, KindPolicy
from fsm.telemetry.observers import UNREGISTERED
from fsm.telemetry.prometheus import OTHER_QUEUES, TOP_QUEUES, PrometheusMetrics, top_queues


def test_kinds_the_engine_does_not_know_are_counted_as_unregistered() -> None:
    # given an engine that knows the kind "email"
    metrics = CountingMetrics()
    engine = Engine(MemoryStore(), metrics=metrics, kinds={"email": KindPolicy()})

    # when submitters use it and 500 kinds of their own
    engine.submit("email", {})
    for i in range(500):
        engine.submit(f"made-up-{i}", {})

    # then two kind labels, whatever the names
    assert metrics.transitions == {
        ("email", "submit", None, "queued"): 1,
        (UNREGISTERED, "submit", None, "queued"): 500,
    }


def test_a_kind_registered_later_gets_its_own_label() -> None:
    metrics = CountingMetrics()
    engine = Engine(MemoryStore(), metrics=metrics)
    engine.submit("report", {})

    engine.register_kind("report")
    engine.submit("report", {})

    assert metrics.transitions[(UNREGISTERED, "submit", None, "queued")] == 1
    assert metrics.transitions[("report", "submit", None, "queued")] == 1


def test_queues_beyond_the_top_n_are_one_series_named_other() -> None:
    # given a store with 10,000 queues (queue q0 the fullest)
    counts = {(f"q{i}", "queued"): 10_000 - i for i in range(10_000)}
    counts[("q0", "failed")] = 3
    metrics = PrometheusMetrics()
    metrics.watch_store(lambda: counts)

    # when scraped
    text = metrics.render()[0].decode()

    # then the top queues by name, the rest summed in one series per state
    series = re.findall(r'^jobfsm_jobs\{queue="([^"]+)",state="([^"]+)"\} (\S+)$', text, re.M)
    assert len(series) == TOP_QUEUES + 2  # + q0's failed + other's queued
    values = {(q, s): float(v) for q, s, v in series}
    assert values[("q0", "failed")] == 3
    assert values[(f"q{TOP_QUEUES - 1}", "queued")] == 10_000 - (TOP_QUEUES - 1)
    assert (f"q{TOP_QUEUES}", "queued") not in values
    assert values[(OTHER_QUEUES, "queued")] == sum(10_000 - i for i in range(TOP_QUEUES, 10_000))


def test_a_real_queue_named_other_is_summed_with_the_rest() -> None:
    counts = {("a", "queued"): 5, ("other", "queued"): 1, ("b", "queued"): 2}

    assert top_queues(counts, top=1) == {("a", "queued"): 5, (OTHER_QUEUES, "queued"): 3}
    assert top_queues(counts, top=3) == counts


def test_retention_counts_of_queues_beyond_the_top_n_are_one_series_named_other() -> None:
    # given retention passes that deleted jobs of 150 queues, 3 jobs each
    metrics = PrometheusMetrics()
    metrics.retention_pass({(f"q{i:03d}", "succeeded"): 3 for i in range(100)}, 1.0)
    metrics.retention_pass({(f"q{i:03d}", "succeeded"): 3 for i in range(50, 150)}, 2.0)

    # then the first 100 queues seen have a series each and the 50 later ones one more
    samples = [
        s
        for family in metrics.registry.collect()
        if family.name == "jobfsm_retention_pruned"
        for s in family.samples
        if s.name.endswith("_total")
    ]
    assert len(samples) == TOP_QUEUES + 1
    by_queue = {s.labels["queue"]: s.value for s in samples}
    assert by_queue["q000"] == 3
    assert by_queue["q099"] == 6  # in both passes
    assert by_queue[OTHER_QUEUES] == 50 * 3
    assert metrics.registry.get_sample_value("jobfsm_retention_passes_total") == 2
    assert metrics.registry.get_sample_value("jobfsm_retention_last_pass_timestamp_seconds") == 2.0


def test_queue_waits_of_queues_beyond_the_top_n_are_one_series_named_other() -> None:
    # given starts in 150 queues, 2 each, queue by queue
    metrics = PrometheusMetrics()
    for i in range(150):
        metrics.queue_wait(f"q{i:03d}", 1.5)
        metrics.queue_wait(f"q{i:03d}", 1.5)
    metrics.queue_wait("q000", 0.5)  # a queue named before stays named

    # then the first 100 queues seen have a histogram each and the 50 later ones one more
    counts = {
        s.labels["queue"]: s.value
        for family in metrics.registry.collect()
        if family.name == "jobfsm_queue_wait_seconds"
        for s in family.samples
        if s.name.endswith("_count")
    }
    assert len(counts) == TOP_QUEUES + 1
    assert counts["q000"] == 3
    assert counts["q099"] == 2
    assert counts[OTHER_QUEUES] == 50 * 2
